package tokenizer

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// randomMerges builds a merge table over symbols 0..base-1: n rules, each
// joining two existing symbols into a new one, ranked in creation order
// (as BPE training writes them).
func randomMerges(r *rand.Rand, base, n int) map[uint64]merge {
	m := make(map[uint64]merge, n)
	next := uint32(base)
	for rank := 0; len(m) < n; rank++ {
		a, b := uint32(r.IntN(int(next))), uint32(r.IntN(int(next)))
		if _, dup := m[pairKey(a, b)]; dup {
			continue
		}
		m[pairKey(a, b)] = merge{rank: uint32(len(m)), id: next}
		next++
	}
	return m
}

func TestMergeHeap_AgreesWithNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for trial := range 50 {
		m := &bpe{merges: randomMerges(r, 4, 40)}
		sc := &mergeScratch{}
		for range 200 {
			word := make([]uint32, 1+r.IntN(300))
			for i := range word {
				word[i] = uint32(r.IntN(4))
			}
			want := m.mergeNaive(slices.Clone(word))
			got := m.mergeHeap(slices.Clone(word), sc)
			if !slices.Equal(got, want) {
				t.Fatalf("trial %d word %v:\n got %v\nwant %v", trial, word, got, want)
			}
		}
	}
}

func TestMergeNaive_LowestRankThenLeftmost(t *testing.T) {
	// a=0 b=1; rules: (a,a)→2 rank 0, (2,a)→3 rank 1, (a,b)→4 rank 2.
	m := &bpe{merges: map[uint64]merge{
		pairKey(0, 0): {rank: 0, id: 2},
		pairKey(2, 0): {rank: 1, id: 3},
		pairKey(0, 1): {rank: 2, id: 4},
	}}
	tests := []struct {
		give, want []uint32
	}{
		{give: []uint32{0, 0, 0}, want: []uint32{3}},          // aa first (leftmost), then (aa)a
		{give: []uint32{0, 0, 0, 0}, want: []uint32{2, 2}},    // aa aa: both rank 0 before rank 1
		{give: []uint32{0, 1}, want: []uint32{4}},             // ab
		{give: []uint32{0, 0, 1}, want: []uint32{2, 1}},       // aa beats ab
		{give: []uint32{1, 0, 1, 0}, want: []uint32{1, 4, 0}}, // single rule applies
		{give: []uint32{0, 0, 0, 1}, want: []uint32{3, 1}},    // aa, then (aa)a before ab
		{give: []uint32{}, want: []uint32{}},                  // empty word
		{give: []uint32{1}, want: []uint32{1}},                // one symbol
	}
	for _, tt := range tests {
		if got := m.mergeNaive(slices.Clone(tt.give)); !slices.Equal(got, tt.want) {
			t.Errorf("mergeNaive(%v) = %v; want %v", tt.give, got, tt.want)
		}
	}
}
