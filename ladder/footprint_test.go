package ladder

import (
	"math"
	"testing"
	"time"
)

func TestOverflows_WorkedValues(t *testing.T) {
	tests := []struct {
		name                string
		footprint, capacity uint64
		blocks, overlap     uint32
		want                bool
	}{
		// Issue 16's long-document Q&A: a 1240-block document with 915
		// blocks left on a 2370-block worker that also serves two
		// documents of 800 blocks each.
		{"three documents on a cache for two", 1600, 2370, 1240, 915, true},
		{"the same documents fit a bigger cache", 1600, 2840, 1240, 915, false}, // 1600+1240 = 2840
		{"a tail under the margin is a new suffix, not an eviction", 1600, 2370, 1240, 1240 - SpillMarginBlocks + 1, false},
		{"a tail of exactly the margin counts", 1600, 2370, 1240, 1240 - SpillMarginBlocks, true},
		{"a full miss on an overfull cache", 3000, 2370, 100, 0, true},
		{"overlap above the prompt is a full hit", 9000, 100, 50, 70, false},
		{"no saturation at the top", math.MaxUint64 - 10, math.MaxUint64, 1000, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Overflows(tt.footprint, tt.capacity, tt.blocks, tt.overlap); got != tt.want {
				t.Fatalf("Overflows(%d, %d, %d, %d) = %v; want %v", tt.footprint, tt.capacity, tt.blocks, tt.overlap, got, tt.want)
			}
		})
	}
}

func TestFits_WorkedValues(t *testing.T) {
	tests := []struct {
		name                string
		footprint, capacity uint64
		blocks              uint32
		want                bool
	}{
		{"room to spare", 1000, 2370, 1240, true},
		{"exactly full fits", 1130, 2370, 1240, true},
		{"one block over", 1131, 2370, 1240, false},
		{"an empty endpoint too small for the prompt", 0, 100, 101, false},
		{"no wrap at the top", math.MaxUint64, math.MaxUint64, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Fits(tt.footprint, tt.capacity, tt.blocks); got != tt.want {
				t.Fatalf("Fits(%d, %d, %d) = %v; want %v", tt.footprint, tt.capacity, tt.blocks, got, tt.want)
			}
		})
	}
}

func TestRefitPays_WorkedValues(t *testing.T) {
	tests := []struct {
		name                 string
		returns              float64
		blocks, pick, target uint32
		want                 bool
	}{
		// The Mooncake synthetic trace at 70 % (load-factor model): a
		// conversation's 2214-block prompt seen once before, 134 blocks
		// short on its pick, to an endpoint holding none of it.
		{"a one-off prompt gives up more than it saves", 2.9, 2214, 2080, 0, false},
		// Long-document Q&A: an 805-block document asked about every few
		// seconds, 105 blocks short on its pick.
		{"a document that keeps coming back pays at once", 200, 805, 700, 0, true},
		{"saved equal to given up pays", 2, 300, 200, 0, true},         // 100 × 2 = 200
		{"one block short does not", 2, 300, 201, 0, false},            // 99 × 2 < 201
		{"the target's overlap is not given up", 2, 300, 201, 3, true}, // 198 given up
		{"a target holding as much gives up nothing", 0, 300, 200, 200, true},
		{"a target holding more gives up nothing", 0, 300, 200, 250, true},
		{"a key never seen does not pay", 0, 300, 200, 0, false},
		{"a full hit has no tail to save", 0, 50, 70, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := RefitPays(tt.returns, tt.blocks, tt.pick, tt.target); got != tt.want {
				t.Fatalf("RefitPays(%v, %d, %d, %d) = %v; want %v", tt.returns, tt.blocks, tt.pick, tt.target, got, tt.want)
			}
		})
	}
}

func TestFootprintReturns_ScalesTheDecayedHits(t *testing.T) {
	var ft footprintTable
	now := time.Unix(1_000, 0)
	if _, ok := ft.returns(now, 7); ok {
		t.Fatal("returns of a key never placed is known; want unknown")
	}
	ft.note(now, 7, 1, 100)
	perHit := math.Ln2 / SettleHalfLife.Seconds() * RefitHorizon.Seconds()
	if got, ok := ft.returns(now, 7); !ok || math.Abs(got-perHit) > 1e-6 {
		t.Fatalf("returns after one placement = %v, %v; want %v, true", got, ok, perHit)
	}
	ft.note(now, 7, 1, 100)
	later := now.Add(SettleHalfLife)
	if got, ok := ft.returns(later, 7); !ok || math.Abs(got-perHit) > 1e-6 { // two hits, halved
		t.Fatalf("returns of two hits a half-life later = %v, %v; want %v, true", got, ok, perHit)
	}
	if _, ok := ft.returns(later, 7+footprintSlots); ok {
		t.Fatal("returns of a key whose slot holds another is known; want unknown")
	}
	if _, ok := ft.returns(now.Add(SettleHorizon+time.Second), 7); ok {
		t.Fatal("returns past SettleHorizon is known; want unknown")
	}
}

func TestLessFootprint_ComparesShares(t *testing.T) {
	tests := []struct {
		name         string
		a, ca, b, cb uint64
		want         bool
	}{
		{"smaller on equal caches", 10, 100, 20, 100, true},
		{"equal is not less", 20, 100, 20, 100, false},
		{"a bigger cache holds a bigger footprint as a smaller share", 30, 200, 20, 100, true}, // 15 % < 20 %
		{"a smaller cache makes it a bigger share", 15, 50, 20, 100, false},                    // 30 % > 20 %
		{"no overflow at the top", math.MaxUint64, math.MaxUint64, math.MaxUint64 - 1, math.MaxUint64, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := lessFootprint(tt.a, tt.ca, tt.b, tt.cb); got != tt.want {
				t.Fatalf("lessFootprint(%d, %d, %d, %d) = %v; want %v", tt.a, tt.ca, tt.b, tt.cb, got, tt.want)
			}
		})
	}
}

func TestFootprintTable_SumsRecentPlacementsPerEndpoint(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var f footprintTable
	f.note(t0, 1, 0, 100)
	f.note(t0, 2, 0, 50)
	f.note(t0, 3, 1, 70)
	f.note(t0.Add(-FootprintTTL), 4, 2, 30)                 // at the TTL at t0
	f.note(t0.Add(-FootprintTTL-time.Nanosecond), 5, 3, 40) // past it
	f.note(t0, 6, MaxEndpoints, 999)                        // out of range: ignored
	f.note(t0, 7+footprintSlots, 1, 11)                     // collides with nothing placed
	tests := []struct {
		name string
		at   time.Time
		skip uint64
		want [4]uint64
	}{
		{"every live key", t0, 0, [4]uint64{150, 81, 30, 0}},
		{"the key being placed counts wherever it goes", t0, 1, [4]uint64{50, 81, 30, 0}},
		{"a second later the oldest has expired", t0.Add(time.Second), 0, [4]uint64{150, 81, 0, 0}},
		{"a clock before an entry ignores it", t0.Add(-time.Second), 0, [4]uint64{0, 0, 30, 40}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out [MaxEndpoints]uint64
			out[5] = 77 // overwritten
			f.sums(tt.at, tt.skip, &out)
			if [4]uint64(out[:4]) != tt.want || out[5] != 0 {
				t.Fatalf("sums = %v; want %v", out[:6], tt.want)
			}
		})
	}

	// A key placed again moves its blocks: the table keeps its latest
	// placement, and a colliding key replaces it.
	f.note(t0, 1, 3, 120)
	var out [MaxEndpoints]uint64
	f.sums(t0, 0, &out)
	if out[0] != 50 || out[3] != 120 {
		t.Fatalf("after moving key 1: %v; want ep0 50, ep3 120", out[:4])
	}
	f.note(t0, 1+footprintSlots, 2, 5)
	f.sums(t0, 0, &out)
	if out[3] != 0 || out[2] != 35 {
		t.Fatalf("after a colliding key: %v; want ep2 35, ep3 0", out[:4])
	}
}

func TestFootprintTable_RemoveEndpointForgetsItsKeys(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var f footprintTable
	f.note(t0, 1, 0, 100)
	f.note(t0, 2, 1, 50)
	f.note(t0, 3, 1, 20)
	f.removeEndpoint(1)
	f.removeEndpoint(MaxEndpoints) // out of range: nothing
	var out [MaxEndpoints]uint64
	f.sums(t0, 0, &out)
	if out[0] != 100 || out[1] != 0 {
		t.Fatalf("after removing ep1: %v; want ep0 100, ep1 0", out[:2])
	}
}

func TestFootprintTable_WeightedSumsCountHotPromptsWhole(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var f footprintTable
	// Key 1 is asked for every 5 s for a minute: hot, it counts whole
	// however long ago its last request (within SettleHorizon). Key 2 was
	// asked for once: it counts ln2/60 s · 20 s ≈ 23 % of its blocks at
	// once, half that a half-life later.
	for i := range 13 {
		f.note(t0.Add(time.Duration(i)*5*time.Second), 1, 0, 100)
	}
	last := t0.Add(60 * time.Second)
	f.note(last, 2, 1, 100)
	f.note(last, 3, 2, 100)
	tests := []struct {
		name string
		at   time.Time
		skip uint64
		want [3]uint64
	}{
		{"at the last requests", last, 0, [3]uint64{100, 23, 23}},
		{"a half-life later", last.Add(SettleHalfLife), 0, [3]uint64{100, 12, 12}},
		{"the key being placed is skipped", last, 3, [3]uint64{100, 23, 0}},
		{"past the horizon nothing counts", last.Add(SettleHorizon + time.Nanosecond), 0, [3]uint64{0, 0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out [MaxEndpoints]uint64
			f.weightedSums(tt.at, tt.skip, &out)
			if [3]uint64(out[:3]) != tt.want {
				t.Fatalf("weightedSums = %v; want %v", out[:3], tt.want)
			}
		})
	}
	homes := []struct {
		name string
		at   time.Time
		key  uint64
		want int // -1: not hot
	}{
		{"a prompt asked for every 5 s is hot", last, 1, 0},
		{"a prompt asked for once is not", last, 2, -1},
		{"a hot prompt no longer asked for cools in two half-lives", last.Add(2 * SettleHalfLife), 1, -1},
		{"a key never placed has no home", last, 4, -1},
	}
	for _, tt := range homes {
		t.Run(tt.name, func(t *testing.T) {
			h, ok := f.hotHome(tt.at, tt.key)
			if !ok {
				h = -1
			}
			if h != tt.want {
				t.Fatalf("hotHome = %d, %v; want %d", h, ok, tt.want)
			}
		})
	}
}
