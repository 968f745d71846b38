package tokenizer

import "unicode/utf8"

// deepSeekPre is DeepSeek V3's pre-tokenizer sequence — Split(\p{N}{1,3}),
// Split(CJK run), Split(patDeepSeek3), each Isolated — in one pass over
// the text instead of three nested ones.
//
// The three splits compose into this: the first cuts the text into digit
// chunks (1–3 \p{N}) and the gaps between them, which hold no \p{N}; the
// second cuts each gap into maximal runs of patCJK's characters and runs
// of the others (no CJK character is a \p{N}, so the runs are the text's
// own maximal runs, bounded by digits); the third scans each piece alone
// with patDeepSeek3, yielding its matches and the gaps between them. A
// digit chunk goes through the second and third splits whole: patCJK does
// not match a digit, and no branch of patDeepSeek3 matches a run of \p{N}
// (its letter branch needs a \p{L} or \p{M} after at most one other
// character; digits are neither punctuation, symbol nor space). So each
// piece is classified by its first rune and scanned once, and a word's
// "first" flag is first && its offset in s is 0, as the nested splits
// compute it. pretok_deepseek_test.go checks it against the nested
// sequence on random and adversarial text.
type deepSeekPre struct{}

func (deepSeekPre) preTokenize(s string, first bool, yield yieldFunc) {
	for i := 0; i < len(s); {
		c, w := classAt(s, i)
		if c&clN != 0 {
			j := i + w
			for k := 1; k < 3 && j < len(s); k++ {
				c2, w2 := classAt(s, j)
				if c2&clN == 0 {
					break
				}
				j += w2
			}
			yield(s[i:j], first && i == 0)
			i = j
			continue
		}
		cjk := cjkAt(s, i)
		j := i + w
		for j < len(s) {
			c2, w2 := classAt(s, j)
			if c2&clN != 0 || cjkAt(s, j) != cjk {
				break
			}
			j += w2
		}
		deepSeekPiece(s[i:j], first && i == 0, yield)
		i = j
	}
}

// cjkAt reports whether the rune at s[i] is one of patCJK's.
func cjkAt(s string, i int) bool {
	if s[i] < 0xE3 || s[i] > 0xE9 { // U+3040–U+30FF and U+4E00–U+9FA5 are E3..E9 xx xx
		return false
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	return isCJK(r)
}

// deepSeekPiece is Split(patDeepSeek3, Isolated) on one piece: its matches
// and the text between them, in order. first is the piece's own flag (its
// offset in the text is 0).
func deepSeekPiece(p string, first bool, yield yieldFunc) {
	last := 0
	for i := 0; i < len(p); {
		n := deepSeekScanner{}.matchAt(p, i)
		if n == 0 {
			_, w := classAt(p, i)
			i += w
			continue
		}
		if i > last {
			yield(p[last:i], first && last == 0)
		}
		yield(p[i:i+n], first && i == 0)
		i += n
		last = i
	}
	if last < len(p) {
		yield(p[last:], first && last == 0)
	}
}

// fuseDeepSeek replaces DeepSeek V3's three Split steps, when steps holds
// them in order, by deepSeekPre.
func fuseDeepSeek(steps []preTokenizer) []preTokenizer {
	want := [3]matcher{digitsScanner{max: 3}, cjkScanner{}, deepSeekScanner{}}
	for k := 0; k+len(want) <= len(steps); k++ {
		match := true
		for d, m := range want {
			sp, ok := steps[k+d].(splitPre)
			if !ok || sp.behavior != behaviorIsolated || sp.invert {
				match = false
				break
			}
			if f, ok := sp.f.(scanFinder); !ok || f.m != m {
				match = false
				break
			}
		}
		if match {
			out := append([]preTokenizer(nil), steps[:k]...)
			out = append(out, deepSeekPre{})
			return append(out, steps[k+len(want):]...)
		}
	}
	return steps
}
