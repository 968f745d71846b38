package des

import (
	"cmp"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/saturation"
	"github.com/llbproject/llb/simulate/strategy"
)

// thresholdExec is a fake executor: a run is stable (queue wait 0) at or
// below limit req/s and unstable (queue wait 10 s) above it. It records
// every rate it is asked for.
type thresholdExec struct {
	limit float64
	rates []float64
}

func (e *thresholdExec) exec(specs []RunSpec) ([]*Result, error) {
	out := make([]*Result, len(specs))
	for i, s := range specs {
		e.rates = append(e.rates, s.Config.Rate)
		wait := 0.0
		if s.Config.Rate > e.limit {
			wait = 10
		}
		out[i] = &Result{Rate: s.Config.Rate, QueueWait: Latency{P90: wait}, Throughput: min(s.Config.Rate, e.limit)}
	}
	return out, nil
}

func TestFindSaturation_BracketsTheThresholdWithinPrecision(t *testing.T) {
	tr := hotTrace(t, 4, 2)
	base := RunConfig{Fleet: FleetFor(tr, 2, 64), Strategy: mustStrategy(t, strategy.NameHard)}
	for _, tc := range []struct {
		name  string
		limit float64
		cfg   SaturationConfig
	}{
		{"above the start", 37, SaturationConfig{Start: 5}},
		{"far above the start", 5000, SaturationConfig{Start: 1}},
		{"below the start", 0.8, SaturationConfig{Start: 100}},
		{"one probe per round", 37, SaturationConfig{Start: 5, Points: 1, Precision: 0.01}},
		{"four probes per round", 37, SaturationConfig{Start: 5, Points: 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &thresholdExec{limit: tc.limit}
			sat, err := FindSaturation(tr, base, tc.cfg, e.exec)
			if err != nil {
				t.Fatal(err)
			}
			prec := tc.cfg.withDefaults().Precision
			if !(sat.Rate <= tc.limit && tc.limit < sat.Unstable) || sat.Unstable/sat.Rate-1 > prec {
				t.Fatalf("bracket [%g, %g) for a limit of %g; want it to hold the limit within %g", sat.Rate, sat.Unstable, tc.limit, prec)
			}
			if len(sat.Probes) != len(e.rates) || !slices.IsSortedFunc(sat.Probes, func(a, b saturation.Probe) int { return cmp.Compare(a.Rate, b.Rate) }) {
				t.Fatalf("probes %v are not every rate tried in order", sat.Probes)
			}
			for _, p := range sat.Probes {
				if p.Stable != (p.Rate <= tc.limit) {
					t.Fatalf("probe %+v misjudged", p)
				}
			}
		})
	}
}

func TestFindSaturation_ReportsAFailedSearchAndBadConfig(t *testing.T) {
	tr := hotTrace(t, 4, 2)
	base := RunConfig{Fleet: FleetFor(tr, 2, 64), Strategy: mustStrategy(t, strategy.NameHard)}
	never := &thresholdExec{limit: 0}
	if _, err := FindSaturation(tr, base, SaturationConfig{Start: 1, MaxRounds: 2}, never.exec); !errors.Is(err, ErrConfig) {
		t.Fatalf("never stable: got %v; want ErrConfig", err)
	}
	boom := errors.New("boom")
	failing := func([]RunSpec) ([]*Result, error) { return nil, boom }
	if _, err := FindSaturation(tr, base, SaturationConfig{Start: 1}, failing); !errors.Is(err, boom) {
		t.Fatalf("executor failure: got %v; want it wrapped", err)
	}
	if _, err := FindSaturation(tr, base, SaturationConfig{Start: -1}, never.exec); !errors.Is(err, ErrConfig) {
		t.Fatalf("negative start: got %v; want ErrConfig", err)
	}
}

func TestFindSaturation_OnTheSimulatorIsDeterministic(t *testing.T) {
	tr := sharedTrace(t, 200, 2)
	base := RunConfig{Fleet: FleetFor(tr, 2, 64), Strategy: mustStrategy(t, strategy.NameHard), Warmup: 40}
	cfg := SaturationConfig{Precision: 0.2, Criterion: saturation.Criterion{MaxWaitP90: 500 * time.Millisecond}}
	a, err := FindSaturation(tr, base, cfg, SerialExecutor)
	if err != nil {
		t.Fatal(err)
	}
	b, err := FindSaturation(tr, base, cfg, SerialExecutor)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) || a.Rate <= 0 {
		t.Fatalf("two searches differ or found nothing: %+v vs %+v", a, b)
	}
	// Just below saturation the queue stays short; at the unstable rate it
	// does not.
	for _, p := range a.Probes {
		if p.Stable != (p.QueueWaitP90 <= 0.5) {
			t.Fatalf("probe %+v misjudged", p)
		}
	}
}
