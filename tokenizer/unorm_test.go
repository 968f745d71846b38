package tokenizer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/text/unicode/norm"
)

var normForms = map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}

// normAlphabet mixes starters, precomposed letters, combining marks of
// several classes (including ones that compose), Hangul syllables and
// jamo, compatibility characters and singletons.
var normAlphabet = []rune{
	'a', 'e', 'o', 'u', 'A', 'C', 's', 'q', ' ', '1',
	'é', 'Å', 'ç', 'ǫ', 'ự', 'ḉ', 'ᾄ', 'ά', 'ǭ', 'ṩ',
	0x0300, 0x0301, 0x0302, 0x0303, 0x0304, 0x0307, 0x0308, 0x030A, 0x0323, 0x0327, 0x0328, 0x0345, 0x05B0, 0x0653, 0x093C, 0x0F71, 0x0F72, 0x1DCE, 0x031B,
	0x0344, 0x0F73, 0x212B, 0x2126, 0x0958, 0x2ADC, // excluded, singleton and non-starter decompositions
	'한', '각', 0x1100, 0x1161, 0x11A8, 0x3131,
	'ﬁ', '①', '²', 'ｶ', 'ﾞ', 0x3099, 'か', 0x1E9B, 'Ⅻ', '㎏',
	0x0B47, 0x0B56, 0x0B3E, 0x0CC6, 0x0CD5,
}

func randomNormText(r *rand.Rand, n int) string {
	var b strings.Builder
	for range n {
		b.WriteRune(normAlphabet[r.IntN(len(normAlphabet))])
	}
	return b.String()
}

func TestNormalize_MatchesNormWhereNormIsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 15))
	for i := range 20000 {
		s := randomNormText(r, 1+r.IntN(12)) // runs far below 30 non-starters
		for name, f := range normForms {
			if got, want := (unicodeNorm{form: f}).normalize(s), f.String(s); got != want {
				t.Fatalf("case %d %s(%+q) = %+q; norm says %+q", i, name, s, got, want)
			}
		}
	}
}

func TestNormalize_LongRunsOfMarksGetNoStreamSafeInsertion(t *testing.T) {
	long := "e" + strings.Repeat("\u0301", 1999)
	if got, want := (unicodeNorm{form: norm.NFC}).normalize(long), "é"+strings.Repeat("\u0301", 1998); got != want {
		t.Errorf("NFC(e + 1999 × U+0301) has %d runes, %d U+034F; want é + 1998 × U+0301", len([]rune(got)), strings.Count(got, "\u034f"))
	}
	// 40 marks of two classes: one stable ordering over the whole run.
	mixed := "a" + strings.Repeat("\u0301\u0323", 20)
	want := "ạ" + strings.Repeat("\u0323", 19) + "\u0301" + strings.Repeat("\u0301", 19)
	if got := (unicodeNorm{form: norm.NFC}).normalize(mixed); got != want {
		t.Errorf("NFC(a + 20 × (U+0301 U+0323)) = %+q; want %+q", got, want)
	}
}

func BenchmarkNormalize_LongRun(b *testing.B) {
	s := "e" + strings.Repeat("\u0301", 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		_ = unicodeNorm{form: norm.NFC}.normalize(s)
	}
}

// TestParity_NormalizationMatchesPython compares the four forms with
// Python's unicodedata on text with long runs of marks (make
// tokenizer-parity; python3 only).
func TestParity_NormalizationMatchesPython(t *testing.T) {
	root := os.Getenv("LLB_TOKENIZER_PARITY")
	if root == "" {
		t.Skip("LLB_TOKENIZER_PARITY not set (run make tokenizer-parity)")
	}
	r := rand.New(rand.NewPCG(5, 15))
	type req struct {
		Normalize string `json:"normalize"`
		Text      string `json:"text"`
	}
	var reqs []req
	for i := range 3000 {
		n := 1 + r.IntN(20)
		if i%3 == 0 {
			n = 30 + r.IntN(200) // long enough for runs past 30 non-starters
		}
		s := randomNormText(r, n)
		if i%5 == 0 {
			s = string(normAlphabet[r.IntN(20)]) + strings.Repeat(string(normAlphabet[20+r.IntN(19)]), 25+r.IntN(60)) + s
		}
		for name := range normForms {
			reqs = append(reqs, req{Normalize: name, Text: s})
		}
	}
	var in bytes.Buffer
	enc := json.NewEncoder(&in)
	for _, q := range reqs {
		if err := enc.Encode(q); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("/usr/bin/python3", filepath.Join(root, "render.py"))
	cmd.Stdin, cmd.Stderr = &in, os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	i, bad := 0, 0
	for sc.Scan() {
		var ans struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ans); err != nil {
			t.Fatal(err)
		}
		q := reqs[i]
		if got := (unicodeNorm{form: normForms[q.Normalize]}).normalize(q.Text); got != ans.Text {
			bad++
			if bad <= 5 {
				t.Errorf("%s(%+q):\n  go: %+q\n  py: %+q", q.Normalize, q.Text, got, ans.Text)
			}
		}
		i++
	}
	if i != len(reqs) {
		t.Fatalf("%d answers for %d requests", i, len(reqs))
	}
	t.Logf("parity normalization %d/%d identical to Python's unicodedata", len(reqs)-bad, len(reqs))
}
