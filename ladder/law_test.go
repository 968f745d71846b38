package ladder

import (
	"math"
	"math/big"
	"testing"

	"pgregory.net/rapid"
)

func TestCapFor_WorkedValues(t *testing.T) {
	tests := []struct {
		name              string
		load, capI, total uint64
		factor            uint32
		want              uint64
	}{
		{"idle fleet floors at one", 0, 100, 300, 175, 1},
		{"equal share", 6, 100, 300, 175, 4},     // ceil(1.75·6/3) = ceil(3.5)
		{"exact multiple", 4, 100, 100, 175, 7},  // 1.75·4 = 7
		{"double capacity", 6, 200, 300, 175, 7}, // ceil(1.75·6·2/3) = 7
		{"factor 100", 3, 100, 300, 100, 1},      // ceil(1) = 1
		{"factor 300", 26, 100, 400, 300, 20},    // ceil(3·26/4) = ceil(19.5)
		{"zero total cap", 5, 0, 0, 175, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CapFor(tt.load, tt.capI, tt.total, tt.factor); got != tt.want {
				t.Fatalf("CapFor(%d,%d,%d,%d) = %d; want %d", tt.load, tt.capI, tt.total, tt.factor, got, tt.want)
			}
		})
	}
}

func TestCapFor_SaturatesInsteadOfOverflowing(t *testing.T) {
	if got := CapFor(math.MaxUint64, math.MaxUint64, 1, 1000); got != math.MaxUint64 {
		t.Fatalf("got %d; want MaxUint64", got)
	}
	if got := CapFor(10, 1, math.MaxUint64, 175); got != 1 {
		t.Fatalf("huge total cap: got %d; want 1", got)
	}
	// 128-bit intermediate: 1000 · 2^40 · 2^30 overflows 64 bits but the quotient does not.
	if got, want := CapFor(1<<40, 1<<30, 1<<30, 1000), uint64(10)<<40; got != want {
		t.Fatalf("got %d; want %d", got, want)
	}
}

func TestAdaptiveLaws_Anchors(t *testing.T) {
	tests := []struct {
		load       uint64
		wantFactor uint32
		wantLambda uint32
	}{
		{0, 175, 50000},
		{16, 175, 50000},
		{17, 187, 55000}, // 175 + 12.5 → 187 (integer division)
		{21, 237, 75000}, // 175 + 62.5 → 237
		{25, 287, 95000},
		{26, 300, 100000},
		{1000, 300, 100000},
	}
	for _, tt := range tests {
		if got := AdaptiveFactor(tt.load); got != tt.wantFactor {
			t.Errorf("AdaptiveFactor(%d) = %d; want %d", tt.load, got, tt.wantFactor)
		}
		if got := AdaptiveLambda(tt.load); got != tt.wantLambda {
			t.Errorf("AdaptiveLambda(%d) = %d; want %d", tt.load, got, tt.wantLambda)
		}
	}
}

func cands(spec ...[3]uint32) []Candidate {
	out := make([]Candidate, len(spec))
	for i, s := range spec {
		out[i] = Candidate{Endpoint: i, Overlap: s[0], Load: s[1], Capacity: uint64(s[2])}
	}
	return out
}

func TestSelectUnified_Modes(t *testing.T) {
	hard := LawParams{Mode: LBHard, FactorPct: 175, Lambda: 32}
	tests := []struct {
		name        string
		give        []Candidate
		blocks      uint32
		params      LawParams
		wantPos     int
		wantSpilled bool
	}{
		{"hard keeps the winner under cap", cands([3]uint32{10, 1, 100}, [3]uint32{5, 1, 100}), 10, hard, 0, false},
		{"hard spills an over-cap winner", cands([3]uint32{10, 5, 100}, [3]uint32{5, 0, 100}), 10, hard, 1, true},
		{"hard tie on overlap goes to least load", cands([3]uint32{8, 2, 100}, [3]uint32{8, 1, 100}), 8, hard, 1, false},
		{"hard tie on overlap and load goes to lowest index", cands([3]uint32{8, 1, 100}, [3]uint32{8, 1, 100}), 8, hard, 0, false},
		{"hard idle set: every cap is 1", cands([3]uint32{3, 0, 100}, [3]uint32{9, 0, 100}), 9, hard, 1, false},
		// Σcap ≥ factor·L, so saturation needs ε = 0 and loads exactly at their shares.
		{"hard saturated picks least loaded positive", cands([3]uint32{9, 3, 3}, [3]uint32{2, 1, 1}), 9, LawParams{Mode: LBHard, FactorPct: 100}, 1, true},
		{"off is pure argmax", cands([3]uint32{10, 90, 100}, [3]uint32{9, 0, 100}), 10, LawParams{Mode: LBOff}, 0, false},
		{"off ties to lowest index regardless of load", cands([3]uint32{5, 9, 100}, [3]uint32{5, 0, 100}), 5, LawParams{Mode: LBOff}, 0, false},
		{"soft at zero load is argmax", cands([3]uint32{3, 0, 100}, [3]uint32{7, 0, 100}, [3]uint32{5, 0, 100}), 8, LawParams{Mode: LBSoft, Lambda: 100000}, 1, false},
		{"soft trades one block for load", cands([3]uint32{7, 1, 100}, [3]uint32{6, 0, 100}), 8, LawParams{Mode: LBSoft, Lambda: 2000}, 1, true},
		{"soft keeps affinity when the penalty is small", cands([3]uint32{7, 1, 100}, [3]uint32{6, 0, 100}), 8, LawParams{Mode: LBSoft, Lambda: 32}, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := SelectUnified(tt.give, tt.blocks, tt.params)
			if got.Pos != tt.wantPos || got.Spilled != tt.wantSpilled {
				t.Fatalf("got pos %d spilled %v; want pos %d spilled %v (%+v)", got.Pos, got.Spilled, tt.wantPos, tt.wantSpilled, got)
			}
		})
	}
}

func TestSelectUnified_NegligibleOverlapPicksLeastLoadedUnderCap(t *testing.T) {
	// The only positive-overlap candidate is over its cap; the under-cap ones
	// have no overlap, so affinity is worthless: least-loaded under-cap wins.
	give := cands([3]uint32{4, 9, 100}, [3]uint32{0, 3, 100}, [3]uint32{0, 1, 100})
	got := SelectUnified(give, 4, LawParams{Mode: LBHard, FactorPct: 175})
	if got.Pos != 2 || !got.Negligible || !got.Spilled {
		t.Fatalf("got %+v; want pos 2, negligible, spilled", got)
	}
}

func TestSelectUnified_EmptyReturnsMinusOne(t *testing.T) {
	if got := SelectUnified(nil, 0, LawParams{}); got.Pos != -1 {
		t.Fatalf("got %+v; want Pos -1", got)
	}
}

func TestSoftCost_NormalisesCapacityByTheMean(t *testing.T) {
	// λ=1000, load 2: a mean-capacity endpoint pays 2000, a double one 1000.
	mean := uint64(200)
	small := Candidate{Overlap: 3, Load: 2, Capacity: 200}
	big := Candidate{Overlap: 3, Load: 2, Capacity: 400}
	if got := SoftCost(&small, 5, 1000, mean); got != 2*1000+2000 {
		t.Fatalf("small cost %d; want 4000", got)
	}
	if got := SoftCost(&big, 5, 1000, mean); got != 2*1000+1000 {
		t.Fatalf("big cost %d; want 3000", got)
	}
}

func TestReliefTarget(t *testing.T) {
	tests := []struct {
		name   string
		fleet  []Candidate
		sel    int
		want   int
		wantOK bool
	}{
		{"over fleet cap spills to least loaded", cands([3]uint32{8, 6, 1}, [3]uint32{0, 0, 1}, [3]uint32{0, 1, 1}), 0, 1, true},
		{"under fleet cap keeps the pick", cands([3]uint32{8, 2, 1}, [3]uint32{0, 1, 1}, [3]uint32{0, 1, 1}), 0, 0, false},
		{"single endpoint cannot relieve", cands([3]uint32{8, 50, 1}), 0, 0, false},
		{"no under-cap target keeps the pick", cands([3]uint32{8, 1, 1}, [3]uint32{0, 1, 1}), 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := ReliefTarget(tt.fleet, tt.sel, 175)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("got (%d,%v); want (%d,%v)", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestCHWBLBound_CountsTheIncomingRequest(t *testing.T) {
	tests := []struct {
		load, share, total, want uint64
	}{
		{0, 1, 2, 1},   // ceil(1.75·1/2)
		{3, 1, 2, 4},   // ceil(1.75·4/2) = ceil(3.5)
		{7, 1, 4, 4},   // ceil(1.75·8/4) = 3.5 → 4
		{0, 3, 4, 2},   // weighted share 3/4: ceil(1.75·3/4) = ceil(1.3125)
		{10, 1, 1, 20}, // ceil(1.75·11)
	}
	for _, tt := range tests {
		if got := CHWBLBound(tt.load, tt.share, tt.total); got != tt.want {
			t.Errorf("CHWBLBound(%d,%d,%d) = %d; want %d", tt.load, tt.share, tt.total, got, tt.want)
		}
	}
}

func TestMulDiv_MatchesBigIntArithmetic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		gen := rapid.OneOf(rapid.Uint64Range(0, 1<<20), rapid.Uint64Range(0, 1<<40), rapid.Uint64())
		a, b, c := gen.Draw(t, "a"), gen.Draw(t, "b"), gen.Draw(t, "c")
		d := rapid.OneOf(rapid.Uint64Range(1, 1<<20), rapid.Uint64Range(1, math.MaxUint64)).Draw(t, "d")
		num := new(big.Int).Mul(new(big.Int).SetUint64(a), new(big.Int).SetUint64(b))
		num.Mul(num, new(big.Int).SetUint64(c))
		den := new(big.Int).SetUint64(d)
		floor := new(big.Int).Quo(num, den)
		ceil := new(big.Int).Quo(new(big.Int).Add(num, new(big.Int).Sub(den, big.NewInt(1))), den)
		sat := func(x *big.Int) uint64 {
			if x.IsUint64() {
				return x.Uint64()
			}
			return math.MaxUint64
		}
		if got, want := mulDivFloor(a, b, c, d), sat(floor); got != want {
			t.Fatalf("mulDivFloor(%d,%d,%d,%d) = %d; want %d", a, b, c, d, got, want)
		}
		if got, want := mulDivCeil(a, b, c, d), sat(ceil); got != want {
			t.Fatalf("mulDivCeil(%d,%d,%d,%d) = %d; want %d", a, b, c, d, got, want)
		}
	})
}

func TestUnderCap_AgreesWithCapFor(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		small := rapid.Uint64Range(0, 1<<24)
		wide := rapid.OneOf(small, rapid.Uint64())
		load := uint32(rapid.Uint64Range(0, 1<<32-1).Draw(t, "load"))
		if rapid.Bool().Draw(t, "smallLoad") {
			load = uint32(rapid.IntRange(0, 40).Draw(t, "load"))
		}
		capI, totalLoad, totalCap := wide.Draw(t, "capI"), wide.Draw(t, "totalLoad"), wide.Draw(t, "totalCap")
		factor := uint32(rapid.IntRange(0, 2000).Draw(t, "factor"))
		want := uint64(load) < CapFor(totalLoad, capI, totalCap, factor)
		if got := underCap(load, capI, totalLoad, totalCap, factor); got != want {
			t.Fatalf("underCap(%d,%d,%d,%d,%d) = %v; CapFor says %v", load, capI, totalLoad, totalCap, factor, got, want)
		}
	})
}
