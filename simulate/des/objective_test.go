package des

import (
	"slices"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
)

// A strategy named <law>+objective puts the run's goodput objective on
// every request (ladder/objective.go): with an objective no endpoint can
// meet a request keeps the law's pick (flagged objective_miss), with one
// every endpoint meets nothing changes, and in between some picks move
// (objective). SLOKept is the share of measured requests within it.
func TestObjective_RequestsCarryTheRunsObjective(t *testing.T) {
	tr := sharedTrace(t, 400, 3)
	at := func(name string, slo time.Duration) *Result {
		return run(t, tr, name, 3, 24, 40, func(c *RunConfig) { c.TTFTSLO = slo })
	}
	flagged := func(res *Result, f ladder.Flags) int {
		n := 0
		for _, r := range res.Routes {
			if r.Flags.Has(f) {
				n++
			}
		}
		return n
	}
	kept := func(res *Result, slo time.Duration) float64 {
		in := 0
		for _, r := range res.Routes[res.Warmup:] {
			if r.TTFT <= slo {
				in++
			}
		}
		return float64(in) / float64(len(res.Routes)-res.Warmup)
	}
	plain := at("headroom", time.Hour)
	for _, tt := range []struct {
		name     string
		slo      time.Duration
		wantSame bool
		wantMiss bool // with wantSame: flagged objective_miss
	}{
		{name: "unreachable", slo: time.Microsecond, wantSame: true, wantMiss: true},
		{name: "generous", slo: time.Hour, wantSame: true},
		{name: "tight", slo: 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			slo := tt.slo
			if slo == 0 {
				slo = time.Duration(plain.TTFT.P50 * float64(time.Second)) // half the requests meet it: some picks are predicted to miss
			}
			res := at("headroom+objective", slo)
			if same := slices.Equal(workersOf(res.Routes), workersOf(plain.Routes)); same != tt.wantSame {
				t.Fatalf("same routes as without an objective: %v; want %v", same, tt.wantSame)
			}
			miss, moved := flagged(res, ladder.FlagObjectiveMiss), flagged(res, ladder.FlagObjective)
			if tt.wantSame && ((miss > 0) != tt.wantMiss || moved > 0) {
				t.Fatalf("%d objective_miss, %d objective flags", miss, moved)
			}
			if !tt.wantSame && moved == 0 {
				t.Fatalf("objective %v: no pick moved (%d objective_miss)", slo, miss)
			}
			if got, want := res.SLOKept, kept(res, slo); got != want || plain.SLOKept != 1 {
				t.Fatalf("slo kept %v; want %v (and 1 for an hour: %v)", got, want, plain.SLOKept)
			}
			t.Logf("objective %v: kept %.3f (%d moved, %d objective_miss); without llb reading it %.3f", slo, res.SLOKept, moved, miss, kept(plain, slo))
		})
	}
}
