package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// Hand-written scanners for the split patterns of the known models. Each
// matchAt returns the length in bytes of the pattern's match starting at
// s[i] (leftmost-first alternation, as the regex engine tries it), or 0
// when no branch matches there. scan_test.go checks every scanner against
// regexp2 running the original pattern on random and adversarial text.

// Known split patterns, exactly as tokenizer.json spells them.
const (
	// patQwen2 is Qwen2, 2.5 and 3's pattern (single digits).
	patQwen2 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patLlama3 is Llama 3.x's (tiktoken cl100k) pattern (1–3 digits).
	patLlama3 = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	// patGPT2 is the ByteLevel pre-tokenizer's own pattern (use_regex).
	patGPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	// patDigits3 is DeepSeek V3's first split.
	patDigits3 = `\p{N}{1,3}`
	// patCJK is DeepSeek V3's second split (Han, Hiragana, Katakana).
	patCJK = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
	// patDeepSeek3 is DeepSeek V3's third split.
	patDeepSeek3 = `[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_` + "`" + `{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// matcher finds the match of one pattern at a position.
type matcher interface {
	// matchAt returns the byte length of the match at s[i] (0: none).
	matchAt(s string, i int) int
}

// crlfEscapes spells a literal CR or LF the way the patterns above do;
// tokenizer.json files write either (DeepSeek V3's has the characters).
var crlfEscapes = strings.NewReplacer("\r", `\r`, "\n", `\n`)

// knownMatcher returns the hand-written scanner for pattern, or nil.
func knownMatcher(pattern string) matcher {
	switch crlfEscapes.Replace(pattern) {
	case patQwen2:
		return tiktokenScanner{maxDigits: 1, foldContractions: true}
	case patLlama3:
		return tiktokenScanner{maxDigits: 3, foldContractions: true}
	case patGPT2:
		return gpt2Scanner{}
	case patDigits3:
		return digitsScanner{max: 3}
	case patCJK:
		return cjkScanner{}
	case patDeepSeek3:
		return deepSeekScanner{}
	case patO200k:
		return o200kScanner{maxDigits: 3, contractions: true}
	case patTekken:
		return o200kScanner{maxDigits: 1}
	}
	return nil
}

// contraction matches 's 't 're 've 'm 'll 'd at s[i]. fold makes it
// case-insensitive with Unicode simple case folding (the only non-ASCII
// fold of these letters is ſ U+017F ↔ s).
func contraction(s string, i int, fold bool) int {
	if s[i] != '\'' || i+1 >= len(s) {
		return 0
	}
	lower := func(j int) (byte, int) {
		if j >= len(s) {
			return 0, 0
		}
		c := s[j]
		if fold {
			if c >= 'A' && c <= 'Z' {
				return c + 'a' - 'A', 1
			}
			if c == 0xC5 && j+1 < len(s) && s[j+1] == 0xBF { // ſ
				return 's', 2
			}
		}
		return c, 1
	}
	c1, w1 := lower(i + 1)
	switch c1 {
	case 's', 't', 'm', 'd':
		return 1 + w1
	case 'r', 'v', 'l':
		c2, w2 := lower(i + 1 + w1)
		if (c1 == 'l' && c2 == 'l') || (c1 != 'l' && c2 == 'e') {
			return 1 + w1 + w2
		}
	}
	return 0
}

// runWhile returns the end of the run of runes at s[i:] whose class has
// any bit of want.
func runWhile(s string, i int, want class) int {
	for i < len(s) {
		c, w := classAt(s, i)
		if c&want == 0 {
			break
		}
		i += w
	}
	return i
}

// spaceTail matches the three whitespace branches shared by every known
// pattern, in order: \s*[\r\n]+ (when withNL), \s+(?!\S), \s+.
func spaceTail(s string, i int, withNL bool) int {
	j, lastNL, prev := i, -1, i
	for j < len(s) {
		c, w := classAt(s, j)
		if c&clSpace == 0 {
			break
		}
		if c&clNL != 0 {
			lastNL = j
		}
		prev = j
		j += w
	}
	if j == i {
		return 0
	}
	if withNL && lastNL >= 0 {
		return lastNL + 1 - i
	}
	if j == len(s) || prev == i {
		return j - i
	}
	return prev - i
}

// tiktokenScanner is patQwen2 (maxDigits 1) and patLlama3 (maxDigits 3).
type tiktokenScanner struct {
	maxDigits        int
	foldContractions bool
}

func (t tiktokenScanner) matchAt(s string, i int) int {
	if n := contraction(s, i, t.foldContractions); n > 0 {
		return n
	}
	c, w := classAt(s, i)
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if c&clL != 0 {
		return runWhile(s, i+w, clL) - i
	}
	if c&(clNL|clN) == 0 && i+w < len(s) {
		if c2, w2 := classAt(s, i+w); c2&clL != 0 {
			return runWhile(s, i+w+w2, clL) - i
		}
	}
	// \p{N}{1,maxDigits}
	if c&clN != 0 {
		j := i + w
		for k := 1; k < t.maxDigits && j < len(s); k++ {
			c2, w2 := classAt(s, j)
			if c2&clN == 0 {
				break
			}
			j += w2
		}
		return j - i
	}
	// ' ?[^\s\p{L}\p{N}]+[\r\n]*'
	if n := punctRun(s, i, c, w, clSpace|clL|clN, 0, "\r\n"); n > 0 {
		return n
	}
	return spaceTail(s, i, true)
}

// punctRun matches ' ?[^excl]+[tail]*' at s[i] (c, w: the rune at i). A
// rune is in the class when its classes miss every bit of excl and, when
// incl is set, hit one of incl.
func punctRun(s string, i int, c class, w int, excl, incl class, tail string) int {
	in := func(c class) bool { return c&excl == 0 && (incl == 0 || c&incl != 0) }
	j := i
	if s[i] == ' ' {
		if i+1 >= len(s) {
			return 0
		}
		c2, _ := classAt(s, i+1)
		if !in(c2) {
			return 0
		}
		j = i + 1
	} else if !in(c) {
		return 0
	}
	for j < len(s) {
		c2, w2 := classAt(s, j)
		if !in(c2) {
			break
		}
		j += w2
	}
	for j < len(s) && strings.IndexByte(tail, s[j]) >= 0 {
		j++
	}
	return j - i
}

// gpt2Scanner is patGPT2 (the ByteLevel pre-tokenizer with use_regex).
type gpt2Scanner struct{}

func (gpt2Scanner) matchAt(s string, i int) int {
	if n := contraction(s, i, false); n > 0 {
		return n
	}
	j := i
	if s[i] == ' ' {
		j++
	}
	if j < len(s) {
		c, w := classAt(s, j)
		switch {
		case c&clL != 0:
			return runWhile(s, j+w, clL) - i
		case c&clN != 0:
			return runWhile(s, j+w, clN) - i
		case c&(clSpace|clL|clN) == 0:
			for j < len(s) {
				c2, w2 := classAt(s, j)
				if c2&(clSpace|clL|clN) != 0 {
					break
				}
				j += w2
			}
			return j - i
		}
	}
	return spaceTail(s, i, false)
}

// digitsScanner is \p{N}{1,max}.
type digitsScanner struct{ max int }

func (d digitsScanner) matchAt(s string, i int) int {
	j := i
	for k := 0; k < d.max && j < len(s); k++ {
		c, w := classAt(s, j)
		if c&clN == 0 {
			break
		}
		j += w
	}
	return j - i
}

// cjkScanner is patCJK.
type cjkScanner struct{}

func isCJK(r rune) bool {
	return (r >= 0x4e00 && r <= 0x9fa5) || (r >= 0x3040 && r <= 0x309f) || (r >= 0x30a0 && r <= 0x30ff)
}

func (cjkScanner) matchAt(s string, i int) int {
	j := i
	for j < len(s) && s[j] >= utf8.RuneSelf {
		r, w := utf8.DecodeRuneInString(s[j:])
		if !isCJK(r) {
			break
		}
		j += w
	}
	return j - i
}

// deepSeekScanner is patDeepSeek3.
type deepSeekScanner struct{}

func isASCIIPunct(b byte) bool {
	return (b >= '!' && b <= '/') || (b >= ':' && b <= '@') || (b >= '[' && b <= '`') || (b >= '{' && b <= '~')
}

func isASCIILetter(b byte) bool { return (b|0x20) >= 'a' && (b|0x20) <= 'z' }

func (deepSeekScanner) matchAt(s string, i int) int {
	// [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
	if isASCIIPunct(s[i]) && i+1 < len(s) && isASCIILetter(s[i+1]) {
		j := i + 2
		for j < len(s) && isASCIILetter(s[j]) {
			j++
		}
		return j - i
	}
	c, w := classAt(s, i)
	// [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
	if c&(clNL|clL|clP|clS) == 0 && i+w < len(s) {
		if c2, w2 := classAt(s, i+w); c2&(clL|clM) != 0 {
			return runWhile(s, i+w+w2, clL|clM) - i
		}
	}
	if c&(clL|clM) != 0 {
		return runWhile(s, i+w, clL|clM) - i
	}
	// ' ?[\p{P}\p{S}]+[\r\n]*'
	if n := punctRun(s, i, c, w, 0, clP|clS, "\r\n"); n > 0 {
		return n
	}
	return spaceTail(s, i, true)
}
