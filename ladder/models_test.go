package ladder

import "testing"

func TestServedModels_EligibleEndpoints(t *testing.T) {
	s := NewServedModels([][]ModelCard{
		{{ID: "base"}, {ID: "alias"}, {ID: "sql", Root: "/a/sql", Parent: "base"}},
		nil, // never read
		{{ID: "other"}},
		{{ID: "base"}, {ID: "self", Parent: "self"}},
	})
	tests := []struct {
		model      string
		want       EndpointSet
		wantServed bool
	}{
		{"base", 0b1011, true},
		{"alias", 0b0011, true},
		{"sql", 0b0011, true},
		{"other", 0b0110, true},
		{"nowhere", 0b0010, true}, // only the unknown endpoint may serve it
		{"", 0b1111, true},
	}
	for _, tt := range tests {
		got, served := s.Eligible(tt.model, 4)
		if got != tt.want || served != tt.wantServed {
			t.Errorf("Eligible(%q) = %04b %v; want %04b %v", tt.model, got, served, tt.want, tt.wantServed)
		}
	}
	if a, ok := s.Adapter("sql"); !ok || a.Root != "/a/sql" || a.Parent != "base" {
		t.Errorf("Adapter(sql) = %+v %v", a, ok)
	}
	if _, ok := s.Adapter("self"); ok {
		t.Errorf("a card that is its own parent is not an adapter")
	}
	known := NewServedModels([][]ModelCard{{{ID: "a"}}, {{ID: "b"}}})
	if set, served := known.Eligible("c", 2); served || set != 0 {
		t.Errorf("every list known, none serves c: %b %v; want 0 false", set, served)
	}
	var none *ServedModels
	if set, served := none.Eligible("x", 3); set != 0b111 || !served {
		t.Errorf("nil table: %b %v; want every endpoint", set, served)
	}
}
