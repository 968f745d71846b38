package peers

import "testing"

func TestAIBrixLoRA_EachAdapterOnThePodWithTheFewestAdaptersAndOnlyThere(t *testing.T) {
	p := mustNew(t, AIBrixLoRA, 3)
	eps := make([]Endpoint, 3)
	tests := []struct {
		adapter string
		want    int
	}{
		{"a", 0}, // every pod empty: the first
		{"b", 1},
		{"a", 0}, // placed: stays, whatever its load
		{"c", 2},
		{"a", 0},
		{"d", 0}, // one adapter each: the first again
		{"b", 1},
		{"e", 1},
		{"d", 0},
	}
	for i, tt := range tests {
		if got := p.Pick(t0, &Request{ID: i, Text: text(i%3, i), Adapter: tt.adapter}, eps); got != tt.want {
			t.Fatalf("request %d for %s went to %d; want %d", i, tt.adapter, got, tt.want)
		}
	}
	// Adapter requests count as the pods' running requests: the base
	// model's request goes to the least loaded pod once they imbalance.
	a := p.(*aibrixLoRA)
	if l := a.base.load.load; l[0] != 5 || l[1] != 3 || l[2] != 1 {
		t.Fatalf("in flight %v; want [5 3 1]", l)
	}
	for id := range 9 {
		p.Done(t0, id)
	}
	if l := a.base.load.load; l[0]+l[1]+l[2] != 0 {
		t.Fatalf("in flight after every Done %v", l)
	}
	if got := p.Pick(t0, &Request{ID: 100, Text: text(0, 1)}, eps); got < 0 || got > 2 {
		t.Fatalf("base-model request went to %d", got)
	}
}
