package tokenizer

import (
	"fmt"

	"github.com/dlclark/regexp2"
)

// finder yields the non-overlapping matches of a pattern in s, left to
// right, as byte offsets.
type finder interface {
	find(s string, fn func(start, end int))
}

// stepFinder is a finder that can also be stepped without a callback
// (no closure to allocate per word).
type stepFinder interface {
	// findNext returns the first match at or after from; ok is false
	// when there is none.
	findNext(s string, from int) (start, end int, ok bool)
}

// scanFinder runs a hand-written matcher as a regex's find_iter would:
// try at each position, skip one rune when nothing matches there.
type scanFinder struct{ m matcher }

func (f scanFinder) find(s string, fn func(start, end int)) {
	for i := 0; i < len(s); {
		start, end, ok := f.findNext(s, i)
		if !ok {
			return
		}
		fn(start, end)
		i = end
	}
}

func (f scanFinder) findNext(s string, i int) (int, int, bool) {
	for i < len(s) {
		if n := f.m.matchAt(s, i); n > 0 {
			return i, i + n, true
		}
		_, w := classAt(s, i)
		i += w
	}
	return 0, 0, false
}

// literalFinder finds a literal string (Split with a String pattern).
type literalFinder struct{ lit string }

func (f literalFinder) find(s string, fn func(start, end int)) {
	if f.lit == "" {
		return
	}
	for i := 0; i+len(f.lit) <= len(s); {
		if s[i:i+len(f.lit)] == f.lit {
			fn(i, i+len(f.lit))
			i += len(f.lit)
			continue
		}
		i++
	}
}

// regexFinder runs any other pattern on regexp2 (look-arounds included),
// converting its rune offsets to byte offsets.
type regexFinder struct{ re *regexp2.Regexp }

func newRegexFinder(pattern string) (regexFinder, error) {
	re, err := regexp2.Compile(pattern, regexp2.Unicode)
	if err != nil {
		return regexFinder{}, fmt.Errorf("split pattern %q: %w", pattern, err)
	}
	return regexFinder{re: re}, nil
}

func (f regexFinder) find(s string, fn func(start, end int)) {
	m, err := f.re.FindStringMatch(s)
	runeIdx, byteIdx := 0, 0
	toByte := func(r int) int {
		for runeIdx < r {
			_, w := classAt(s, byteIdx)
			byteIdx += w
			runeIdx++
		}
		return byteIdx
	}
	for err == nil && m != nil {
		if m.Length > 0 {
			start := toByte(m.Index)
			fn(start, toByte(m.Index+m.Length))
		}
		m, err = f.re.FindNextMatch(m)
	}
}

// newFinder picks the scanner for a known pattern, regexp2 otherwise.
func newFinder(pattern string, literal bool) (finder, error) {
	if literal {
		return literalFinder{lit: pattern}, nil
	}
	if m := knownMatcher(pattern); m != nil {
		return scanFinder{m: m}, nil
	}
	return newRegexFinder(pattern)
}

// splitBehavior is a Split pre-tokenizer's "behavior".
type splitBehavior uint8

const (
	behaviorIsolated splitBehavior = iota
	behaviorRemoved
	behaviorMergedWithPrevious
	behaviorMergedWithNext
	behaviorContiguous
)

func parseBehavior(s string) (splitBehavior, error) {
	switch s {
	case "Isolated":
		return behaviorIsolated, nil
	case "Removed":
		return behaviorRemoved, nil
	case "MergedWithPrevious":
		return behaviorMergedWithPrevious, nil
	case "MergedWithNext":
		return behaviorMergedWithNext, nil
	case "Contiguous":
		return behaviorContiguous, nil
	}
	return 0, fmt.Errorf("split behavior %q: %w", s, ErrUnsupported)
}

// segment is a piece of a split: [start, end) and whether it matched.
type segment struct {
	start, end int
	match      bool
}

// segments covers s with matches and the gaps between them, as
// tokenizers' find_matches does; invert swaps the two roles.
func segments(f finder, s string, invert bool, dst []segment) []segment {
	last := 0
	f.find(s, func(start, end int) {
		if start > last {
			dst = append(dst, segment{last, start, invert})
		}
		dst = append(dst, segment{start, end, !invert})
		last = end
	})
	if last < len(s) {
		dst = append(dst, segment{last, len(s), invert})
	}
	return dst
}

// applyBehavior merges or drops segments as tokenizers' Split does; the
// result's match flags are meaningless except for Removed's filter.
func applyBehavior(b splitBehavior, segs []segment) []segment {
	switch b {
	case behaviorRemoved:
		out := segs[:0]
		for _, g := range segs {
			if !g.match {
				out = append(out, g)
			}
		}
		return out
	case behaviorMergedWithPrevious, behaviorContiguous:
		out := segs[:0]
		prev := false
		for _, g := range segs {
			merge := g.match && !prev
			if b == behaviorContiguous {
				merge = g.match == prev
			}
			if merge && len(out) > 0 {
				out[len(out)-1].end = g.end
			} else {
				out = append(out, g)
			}
			prev = g.match
		}
		return out
	case behaviorMergedWithNext:
		// Walk right to left, writing from the back.
		w := len(segs)
		prev := false
		for i := len(segs) - 1; i >= 0; i-- {
			g := segs[i]
			if g.match && !prev && w < len(segs) {
				segs[w].start = g.start
			} else {
				w--
				segs[w] = g
			}
			prev = g.match
		}
		return segs[w:]
	}
	return segs
}
