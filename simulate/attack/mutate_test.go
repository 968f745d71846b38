package attack

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestTemplates_AreValidJSON(t *testing.T) {
	spot := ruleSpot{vip: "127.200.1.2", port: 20000, eps: []string{"127.200.1.100", "127.200.1.101", "127.200.1.102", "127.200.1.103"}}
	for _, tp := range templates {
		b := []byte(tp.json(spot))
		if !json.Valid(b) {
			t.Errorf("template %s is not JSON: %s", tp.name, b)
		}
		doc, err := parseJSON(b)
		if err != nil {
			t.Fatalf("template %s: %v", tp.name, err)
		}
		if got := doc.encode(); !bytes.Equal(got, b) {
			t.Errorf("template %s: parse+encode changed it:\n got %s\nwant %s", tp.name, got, b)
		}
	}
}

func TestMutateRule_IsAFunctionOfTheSeedAndBounded(t *testing.T) {
	n := loopNet{200, 1}
	biggest := 0
	for i := range 300 {
		gen := func() ([]byte, string) {
			rng := caseRand(7, FamilyREST, i)
			m := &mutContext{spot: newRuleSpot(rng, n), net: n, rest: "127.0.0.1:11111"}
			return mutateRule(rng, m)
		}
		a, opsA := gen()
		b, opsB := gen()
		if !bytes.Equal(a, b) || opsA != opsB {
			t.Fatalf("case %d: two runs gave different bodies (%s, %s)", i, opsA, opsB)
		}
		biggest = max(biggest, len(a))
	}
	if biggest > 16<<20 {
		t.Fatalf("a mutated rule of %d bytes; want them bounded by maxDocBytes", biggest)
	}
	t.Logf("largest mutated rule: %d bytes", biggest)
}

func TestAppendJSONString_EscapesOrKeepsControlBytes(t *testing.T) {
	tests := []struct {
		give   string
		rawCtl bool
		want   string
	}{
		{give: "a\r\nb", want: `"a\u000d\u000ab"`},
		{give: "a\r\nb", rawCtl: true, want: "\"a\r\nb\""},
		{give: `q"\`, want: `"q\"\\"`},
		{give: "\xff", want: "\"\xff\""},
	}
	for _, tt := range tests {
		if got := string(appendJSONString(nil, tt.give, tt.rawCtl)); got != tt.want {
			t.Errorf("appendJSONString(%q, %v) = %q; want %q", tt.give, tt.rawCtl, got, tt.want)
		}
	}
}
