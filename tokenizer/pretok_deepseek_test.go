package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// word is one pre-tokenized word and its "first" flag.
type word struct {
	w     string
	first bool
}

func words(p preTokenizer, s string, first bool) []word {
	var out []word
	p.preTokenize(s, first, func(w string, f bool) { out = append(out, word{w, f}) })
	return out
}

// The fused DeepSeek pre-tokenizer yields exactly what the three nested
// Splits yield, with regexp2 running the original patterns as the
// reference (and the scanners too), words and first flags alike.
func TestDeepSeekPre_MatchesTheNestedSplits(t *testing.T) {
	nested := func(fs ...finder) preTokenizer {
		var steps []preTokenizer
		for _, f := range fs {
			steps = append(steps, splitPre{f: f, behavior: behaviorIsolated})
		}
		return sequencePre{steps: steps}
	}
	var res []finder
	for _, p := range []string{patDigits3, patCJK, patDeepSeek3} {
		f, err := newRegexFinder(p)
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, f)
	}
	refs := map[string]preTokenizer{
		"regexp2":  nested(res...),
		"scanners": nested(scanFinder{m: digitsScanner{max: 3}}, scanFinder{m: cjkScanner{}}, scanFinder{m: deepSeekScanner{}}),
	}
	alphabet := append(slices.Clone(scanAlphabet), "日", "本", "ひ", "カ", "・", "゠", "ゝ", "ー", "\u3099", "゛", "〇", "一", "龥", "龦", "4", "56", "٤", "\u3040")
	fixed := []string{
		"", "1", "1234567", "a1b22c333d4444", "中文123日本語abc", " 中文", "ア・イ", "カー゛゠x", "x中1文 2", "\n\n123\n",
		"It's 2024: 中文 (test) 12345 €99.5!", "  \u0301中", "a\u3099b", "١٢٣٤ ٥",
	}
	r := rand.New(rand.NewPCG(3, 4))
	texts := slices.Clone(fixed)
	for range 4000 {
		var b strings.Builder
		for range 1 + r.IntN(40) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		texts = append(texts, b.String())
	}
	for name, ref := range refs {
		t.Run(name, func(t *testing.T) {
			for _, s := range texts {
				for _, first := range []bool{true, false} {
					if got, want := words(deepSeekPre{}, s, first), words(ref, s, first); !slices.Equal(got, want) {
						t.Fatalf("%q (first %v): got %+v; want %+v", s, first, got, want)
					}
				}
			}
		})
	}
}

func TestFuseDeepSeek_ReplacesOnlyTheExactSequence(t *testing.T) {
	split := func(m matcher) preTokenizer { return splitPre{f: scanFinder{m: m}, behavior: behaviorIsolated} }
	ds := []preTokenizer{split(digitsScanner{max: 3}), split(cjkScanner{}), split(deepSeekScanner{})}
	tests := []struct {
		name string
		give []preTokenizer
		want int // steps after fusion
	}{
		{"deepseek", ds, 1},
		{"deepseek then metaspace", append(slices.Clone(ds), metaspacePre{}), 2},
		{"digits of one", []preTokenizer{split(digitsScanner{max: 1}), ds[1], ds[2]}, 3},
		{"merged behavior", []preTokenizer{ds[0], ds[1], splitPre{f: scanFinder{m: deepSeekScanner{}}, behavior: behaviorMergedWithNext}}, 3},
		{"inverted", []preTokenizer{ds[0], splitPre{f: scanFinder{m: cjkScanner{}}, behavior: behaviorIsolated, invert: true}, ds[2]}, 3},
		{"other order", []preTokenizer{ds[1], ds[0], ds[2]}, 3},
	}
	for _, tt := range tests {
		if got := fuseDeepSeek(tt.give); len(got) != tt.want {
			t.Errorf("%s: %d steps; want %d", tt.name, len(got), tt.want)
		}
	}
}

// BenchmarkDeepSeekPre compares the fused pass with the nested Splits it
// replaces on mixed prose, code and numbers.
func BenchmarkDeepSeekPre(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	var sb strings.Builder
	for sb.Len() < 32<<10 {
		sb.WriteString(scanAlphabet[r.IntN(len(scanAlphabet))])
		if r.IntN(3) == 0 {
			sb.WriteString(" the routing of 12345 tokens, (x+y)/2;\n\tfmt.Println(\"ok\") 中文 ")
		}
	}
	text := sb.String()
	split := func(m matcher) preTokenizer { return splitPre{f: scanFinder{m: m}, behavior: behaviorIsolated} }
	for _, bc := range []struct {
		name string
		p    preTokenizer
	}{
		{"nested", sequencePre{steps: []preTokenizer{split(digitsScanner{max: 3}), split(cjkScanner{}), split(deepSeekScanner{})}}},
		{"fused", deepSeekPre{}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			n := 0
			c0 := cpuTime()
			for b.Loop() {
				bc.p.preTokenize(text, true, func(string, bool) { n++ })
			}
			// CPU time per byte: what a loaded machine inflates least.
			b.ReportMetric(float64(cpuTime()-c0)/float64(b.N)/float64(len(text)), "cpu-ns/B")
		})
	}
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
