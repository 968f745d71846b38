package main

import (
	"strings"
	"testing"
)

func TestTable_AlignsColumnsAndNeutralizesControlCharacters(t *testing.T) {
	tb := newTable("NAME", "VALUE")
	tb.add("a", "1")
	tb.add("naïve", "x\x1b[31mred")
	tb.add("short") // a missing cell is empty
	var b strings.Builder
	if err := tb.render(&b); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"| NAME  | VALUE     |\n" +
		"|-------|-----------|\n" +
		"| a     | 1         |\n" +
		"| naïve | x?[31mred |\n" +
		"| short |           |\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestClip_CutsOnARuneBoundary(t *testing.T) {
	tests := []struct {
		give string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"abcdef", 3, "abc…"},
		{"aé", 2, "a…"}, // é is two bytes; cutting inside it backs off
	}
	for _, tt := range tests {
		if got := clip(tt.give, tt.n); got != tt.want {
			t.Errorf("clip(%q, %d) = %q; want %q", tt.give, tt.n, got, tt.want)
		}
	}
}
