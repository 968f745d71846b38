package tokenizer

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// scanAlphabet covers every class the patterns distinguish. ſ is left out
// of the differential run: regexp2 (.NET) folds case by lowercasing, so its
// (?i:'s) misses 'ſ, which Oniguruma and the scanner match
// (TestContraction_FoldsLongS).
var scanAlphabet = []string{
	"a", "Z", "s", "S", "t", "T", "r", "R", "e", "E", "v", "V", "m", "M", "l", "L", "d", "D", "x", "'", "\"",
	" ", "\t", "\n", "\r", "\v", "\f", "\u00a0", "\u3000", "\u2028", "\u0085", "\u200b", "\ufeff",
	"0", "7", "٣", "²", "Ⅻ", "１", ".", ",", "!", "-", "_", "(", "[", "{", "<", "|", "/", "\\", "#", "$", "^", "`", "~", "+", "=",
	"é", "\u0301", "\u0308", "中", "文", "ア", "ん", "한", "ع", "א", "д", "€", "©", "→", "😀", "\u200d", "\uFE0F",
	"Д", "É", "ǅ", "ʰ", "ー", "ª", "\u0903", "\u20dd", "A", "B", "ab", "AB", "Ab", "aB",
}

func randomText(r *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteString(scanAlphabet[r.IntN(len(scanAlphabet))])
	}
	return b.String()
}

func collect(f finder, s string) [][2]int {
	var out [][2]int
	f.find(s, func(a, b int) { out = append(out, [2]int{a, b}) })
	return out
}

func TestScanners_MatchRegexp2(t *testing.T) {
	patterns := []struct{ name, pattern string }{
		{"qwen2", patQwen2}, {"llama3", patLlama3}, {"gpt2", patGPT2},
		{"digits3", patDigits3}, {"cjk", patCJK}, {"deepseek3", patDeepSeek3},
		{"o200k", patO200k}, {"tekken", patTekken},
	}
	fixed := []string{
		"", "a", " ", "  ", "   x", "x   ", "\n", " \n ", "  \n  \n  x", "\r\n\r\n  y", "it's I'M we'll THEY'VE 'd 'S", "' s", "''s",
		"12345678", "a1b22c333d4444", "  !!  ??\n\n", " (foo)\n", "é\u0301e\u0301", "中文abc日本語", "😀👍 x", "\t\tfoo\t",
		"[A-Za-z] -x .y /z", "$HOME @user #tag", "a\u0301b", " \u0301x",
		"HelloWorld JSONParser iOS ABCdef aBC ǅungla Dʰa 中文Ab", "\u0301A\u0301", " \u0301ABC", "THE'S it'll", "x//\n\n/", "ʰʰA", "AʰB", "Aʰ", "ǅǅa",
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, p := range patterns {
		t.Run(p.name, func(t *testing.T) {
			scan := scanFinder{m: knownMatcher(p.pattern)}
			re, err := newRegexFinder(p.pattern)
			if err != nil {
				t.Fatal(err)
			}
			texts := slices.Clone(fixed)
			for range 3000 {
				texts = append(texts, randomText(r, 1+r.IntN(30)))
			}
			for _, s := range texts {
				if got, want := collect(scan, s), collect(re, s); !slices.Equal(got, want) {
					t.Fatalf("%q: got %v; want %v", s, got, want)
				}
			}
		})
	}
}

func TestContraction_FoldsLongS(t *testing.T) {
	tests := []struct {
		give string
		want int
	}{
		{"'s", 2}, {"'S", 2}, {"'ſ", 3}, {"'LL", 3}, {"'lL", 3}, {"'Re", 3}, {"'x", 0}, {"'", 0}, {"s", 0},
	}
	for _, tt := range tests {
		if got := contraction(tt.give, 0, true); got != tt.want {
			t.Errorf("contraction(%q) = %d; want %d", tt.give, got, tt.want)
		}
	}
	if got := contraction("'S", 0, false); got != 0 {
		t.Errorf("case-sensitive contraction('S) = %d; want 0", got)
	}
}

func TestApplyBehavior(t *testing.T) {
	// "the-final--countdown" split on "-", as in tokenizers' own tests.
	s := "the-final--countdown"
	tests := []struct {
		give splitBehavior
		want []string
	}{
		{behaviorIsolated, []string{"the", "-", "final", "-", "-", "countdown"}},
		{behaviorRemoved, []string{"the", "final", "countdown"}},
		{behaviorMergedWithPrevious, []string{"the-", "final-", "-", "countdown"}},
		{behaviorMergedWithNext, []string{"the", "-final", "-", "-countdown"}},
		{behaviorContiguous, []string{"the", "-", "final", "--", "countdown"}},
	}
	for _, tt := range tests {
		var got []string
		splitPre{f: literalFinder{lit: "-"}, behavior: tt.give}.preTokenize(s, true, func(w string, _ bool) { got = append(got, w) })
		if !slices.Equal(got, tt.want) {
			t.Errorf("behavior %d: got %q; want %q", tt.give, got, tt.want)
		}
	}
}
