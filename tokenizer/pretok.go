package tokenizer

import (
	"strings"
	"sync"
)

// yieldFunc receives one pre-tokenized word. first is true when the word
// starts at offset 0 of the original text (Metaspace's "first" scheme).
type yieldFunc func(word string, first bool)

// preTokenizer cuts a normalized piece into words.
type preTokenizer interface {
	preTokenize(s string, first bool, yield yieldFunc)
}

// segPool recycles segment scratch for the merging split behaviors.
var segPool = sync.Pool{New: func() any { s := make([]segment, 0, 64); return &s }}

// splitPre is the Split pre-tokenizer (and ByteLevel's use_regex split).
type splitPre struct {
	f        finder
	behavior splitBehavior
	invert   bool
}

func (p splitPre) preTokenize(s string, first bool, yield yieldFunc) {
	if s == "" {
		return
	}
	if sf, ok := p.f.(stepFinder); ok && p.behavior == behaviorIsolated && !p.invert {
		last := 0
		for {
			start, end, ok := sf.findNext(s, last)
			if !ok {
				break
			}
			if start > last {
				yield(s[last:start], first && last == 0)
			}
			yield(s[start:end], first && start == 0)
			last = end
		}
		if last < len(s) {
			yield(s[last:], first && last == 0)
		}
		return
	}
	if p.behavior == behaviorIsolated && !p.invert {
		last := 0
		p.f.find(s, func(start, end int) {
			if start > last {
				yield(s[last:start], first && last == 0)
			}
			yield(s[start:end], first && start == 0)
			last = end
		})
		if last < len(s) {
			yield(s[last:], first && last == 0)
		}
		return
	}
	bp := segPool.Get().(*[]segment)
	segs := applyBehavior(p.behavior, segments(p.f, s, p.invert, (*bp)[:0]))
	for _, g := range segs {
		if g.end > g.start {
			yield(s[g.start:g.end], first && g.start == 0)
		}
	}
	*bp = segs[:0]
	segPool.Put(bp)
}

// sequencePre runs pre-tokenizers in order, each on every word of the
// previous one.
type sequencePre struct{ steps []preTokenizer }

// preTokenize chains the steps with one closure per step and call (not
// one per word and step).
func (p sequencePre) preTokenize(s string, first bool, yield yieldFunc) {
	next := yield
	for k := len(p.steps) - 1; k > 0; k-- {
		step, then := p.steps[k], next
		next = func(w string, f bool) { step.preTokenize(w, f, then) }
	}
	p.steps[0].preTokenize(s, first, next)
}

// byteLevelPre is the ByteLevel pre-tokenizer. The byte-to-unicode mapping
// itself is implicit: the BPE model works on raw bytes.
type byteLevelPre struct {
	addPrefixSpace bool
	split          *splitPre // the GPT-2 pattern when use_regex
}

func (p byteLevelPre) preTokenize(s string, first bool, yield yieldFunc) {
	if p.addPrefixSpace && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	if p.split != nil {
		p.split.preTokenize(s, first, yield)
		return
	}
	if s != "" {
		yield(s, first)
	}
}

// prependScheme is Metaspace's prepend_scheme.
type prependScheme uint8

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

// metaspacePre is the Metaspace pre-tokenizer (sentencepiece style):
// spaces become the replacement (▁), a replacement is prepended as the
// scheme says, and split cuts before every replacement.
type metaspacePre struct {
	replacement string
	scheme      prependScheme
	split       bool
}

func (p metaspacePre) preTokenize(s string, first bool, yield yieldFunc) {
	if s == "" {
		return
	}
	s = strings.ReplaceAll(s, " ", p.replacement)
	if !strings.HasPrefix(s, p.replacement) && (p.scheme == prependAlways || (p.scheme == prependFirst && first)) {
		s = p.replacement + s
	}
	if !p.split {
		yield(s, first)
		return
	}
	splitPre{f: literalFinder{lit: p.replacement}, behavior: behaviorMergedWithNext}.preTokenize(s, first, yield)
}

// digitsPre is the Digits pre-tokenizer.
type digitsPre struct{ individual bool }

func (p digitsPre) preTokenize(s string, first bool, yield yieldFunc) {
	m := digitRun{individual: p.individual}
	splitPre{f: scanFinder{m: m}, behavior: behaviorIsolated}.preTokenize(s, first, yield)
}

// digitRun matches \p{N}+ (or one \p{N} when individual).
type digitRun struct{ individual bool }

func (d digitRun) matchAt(s string, i int) int {
	c, w := classAt(s, i)
	if c&clN == 0 {
		return 0
	}
	if d.individual {
		return w
	}
	return runWhile(s, i+w, clN) - i
}
