package harness

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/saturation"
	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/workload"
)

// fakeFleet answers a probe as a fleet that saturates at capacity: the
// queue wait is tiny below it and grows without bound above it.
func fakeFleet(capacity float64, rates *[]float64) runFunc {
	return func(_ context.Context, c RunConfig) (*Result, error) {
		*rates = append(*rates, c.Rate)
		res := &Result{Rate: c.Rate, Requests: 100, Completed: 100, Throughput: math.Min(c.Rate, capacity)}
		if c.Rate > capacity {
			res.QueueWait.P90 = 5 * (c.Rate/capacity - 1) * 100
		} else {
			res.QueueWait.P90 = 0.01
		}
		return res, nil
	}
}

func satBase() RunConfig {
	tr := &workload.Trace{BlockSize: 16, Requests: make([]workload.TraceRequest, 10)}
	return RunConfig{Trace: tr, Strategy: strategy.Strategy{Name: "hard"}, Fleet: FleetConfig{Workers: 8, Engine: engine.DefaultConfig()}}
}

func TestFindSaturation_BracketsThenBisectsToThePrecision(t *testing.T) {
	tests := []struct {
		name     string
		start    float64
		capacity float64
	}{
		{"start below capacity", 10, 17.3},
		{"start above capacity", 40, 17.3},
		{"start right at capacity", 17.3, 17.3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rates []float64
			var seen []saturation.Probe
			sat, err := findSaturation(context.Background(), satBase(), SaturationConfig{Start: tt.start, Precision: 0.05, MaxProbes: 20},
				func(p saturation.Probe) { seen = append(seen, p) }, fakeFleet(tt.capacity, &rates))
			if err != nil {
				t.Fatal(err)
			}
			if !(sat.Rate <= tt.capacity && tt.capacity < sat.Unstable && sat.Unstable/sat.Rate-1 <= 0.05) {
				t.Fatalf("bracket [%v, %v]; want it around %v and within 5%%", sat.Rate, sat.Unstable, tt.capacity)
			}
			if len(sat.Probes) != len(rates) || len(seen) != len(rates) {
				t.Fatalf("%d probes recorded, %d reported, %d run", len(sat.Probes), len(seen), len(rates))
			}
			for i := 1; i < len(sat.Probes); i++ {
				if sat.Probes[i-1].Rate > sat.Probes[i].Rate {
					t.Fatalf("probes not sorted: %+v", sat.Probes)
				}
			}
			for _, p := range sat.Probes {
				if p.Stable != (p.Rate <= tt.capacity) {
					t.Fatalf("probe %+v: stable should be rate <= %v", p, tt.capacity)
				}
			}
		})
	}
}

func TestFindSaturation_FailuresAndDrainTimeoutsMakeAProbeUnstable(t *testing.T) {
	tests := []struct {
		name  string
		above func(res *Result) // what goes wrong above 12 req/s, the queue looking fine
	}{
		{"a failed request", func(res *Result) { res.Completed = 99 }},
		{"a drain timeout", func(res *Result) { res.Health.DrainTimeout = true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := func(_ context.Context, c RunConfig) (*Result, error) {
				res := &Result{Rate: c.Rate, Requests: 100, Completed: 100, QueueWait: Latency{P90: 0.01}}
				if c.Rate > 12 {
					tt.above(res)
				}
				return res, nil
			}
			sat, err := findSaturation(context.Background(), satBase(), SaturationConfig{Start: 10, Criterion: saturation.Criterion{MaxWaitP90: time.Second}}, nil, run)
			if err != nil {
				t.Fatal(err)
			}
			if sat.Rate > 12 || sat.Unstable <= 12 {
				t.Fatalf("bracket [%v, %v]; want it around 12", sat.Rate, sat.Unstable)
			}
		})
	}
}

func TestFindSaturation_AProbeWithoutQueueWaitsIsAnError(t *testing.T) {
	run := func(_ context.Context, c RunConfig) (*Result, error) {
		return &Result{Rate: c.Rate, Requests: 100, Completed: 100, QueueWaitMissing: 100}, nil
	}
	if _, err := findSaturation(context.Background(), satBase(), SaturationConfig{Start: 10}, nil, run); !errors.Is(err, ErrRun) {
		t.Fatalf("got %v; want ErrRun (no verdict without the workers' queue waits)", err)
	}
}

func TestFindSaturation_NoBracketIsAnError(t *testing.T) {
	var rates []float64
	_, err := findSaturation(context.Background(), satBase(), SaturationConfig{Start: 1, MaxProbes: 3}, nil, fakeFleet(1e9, &rates))
	if !errors.Is(err, ErrRun) || len(rates) != 3 {
		t.Fatalf("err %v after %d probes; want ErrRun after 3", err, len(rates))
	}
}

func TestFindSaturation_ProbesUseAPrefixOfTheTrace(t *testing.T) {
	base := satBase()
	base.Trace.Requests = make([]workload.TraceRequest, 1000)
	base.Warmup = 200
	var lens, warms []int
	run := func(_ context.Context, c RunConfig) (*Result, error) {
		lens, warms = append(lens, len(c.Trace.Requests)), append(warms, c.Warmup)
		return &Result{Requests: 1, Completed: 1, QueueWait: Latency{P90: map[bool]float64{true: 0, false: 9}[c.Rate <= 5]}}, nil
	}
	if _, err := findSaturation(context.Background(), base, SaturationConfig{Start: 4, Requests: 300}, nil, run); err != nil {
		t.Fatal(err)
	}
	for i := range lens {
		if lens[i] != 300 || warms[i] != 60 {
			t.Fatalf("probe %d: %d requests, %d warm-up; want 300 and 60", i, lens[i], warms[i])
		}
	}
	if len(base.Trace.Requests) != 1000 {
		t.Fatalf("the base trace was cut to %d", len(base.Trace.Requests))
	}
}
