package des

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// RunSpec is one run of a sweep: a trace, a config, and the labels the
// report groups it by.
type RunSpec struct {
	// Trace is shared read-only between runs.
	Trace *Trace
	// Config is the run's configuration.
	Config RunConfig
	// Scenario names the scenario; Group the comparison it belongs to
	// (GroupStrategies, GroupEpsilon, GroupLambda, GroupSaturation).
	Scenario, Group string
	// Load is the offered rate as a fraction of the scenario's saturation
	// rate (0 for saturation probes).
	Load float64
}

// Executor runs a batch of independent runs and returns their results in
// the same order. Runs share nothing mutable, so an executor may run them
// in parallel; the results do not depend on how it schedules them.
type Executor func(specs []RunSpec) ([]*Result, error)

// SerialExecutor runs specs one after another in the calling goroutine.
func SerialExecutor(specs []RunSpec) ([]*Result, error) {
	out := make([]*Result, len(specs))
	for i := range specs {
		r, err := Run(specs[i].Trace, specs[i].Config)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// SaturationConfig tunes FindSaturation. Zero fields take defaults.
type SaturationConfig struct {
	// Start is the first rate probed (requests/s); 0 estimates it from the
	// fleet (see capacityEstimate).
	Start float64
	// MaxWaitP90 is the stability criterion: a rate is sustainable when
	// the p90 of the engines' queue wait (admission − arrival) over the
	// measured requests is at most this. In an unstable run the queue
	// grows for the whole run, so the wait reaches many service times.
	// Default 1 s.
	MaxWaitP90 time.Duration
	// Precision is the relative bracket width the search stops at
	// (unstable/stable − 1). Default 0.03.
	Precision float64
	// Points is how many rates each refinement round probes at once (an
	// executor may run them in parallel). Default 2.
	Points int
	// MaxRounds bounds the search. Default 12.
	MaxRounds int
}

func (c SaturationConfig) withDefaults() SaturationConfig {
	if c.MaxWaitP90 == 0 {
		c.MaxWaitP90 = time.Second
	}
	if c.Precision == 0 {
		c.Precision = 0.03
	}
	if c.Points == 0 {
		c.Points = 2
	}
	if c.MaxRounds == 0 {
		c.MaxRounds = 12
	}
	return c
}

// Probe is one rate a saturation search tried.
type Probe struct {
	// Rate is the offered load (requests/s).
	Rate float64
	// Stable is the verdict: QueueWaitP90 within the criterion.
	Stable bool
	// QueueWaitP90 (s) and Throughput (requests/s) as measured.
	QueueWaitP90, Throughput float64
}

// Saturation is a saturation search's outcome.
type Saturation struct {
	// Strategy is the strategy searched with.
	Strategy string
	// Rate is the highest sustainable rate found: load 1.0 of the ladder.
	Rate float64
	// Unstable is the lowest unsustainable rate found (Rate < Unstable).
	Unstable float64
	// Criterion is the MaxWaitP90 used (seconds).
	Criterion float64
	// Probes lists every rate tried, in ascending rate order.
	Probes []Probe
}

// FindSaturation searches for the highest rate at which base's strategy
// keeps the fleet stable on trace t: a geometric bracket (×2 steps from
// the start), then rounds of Points evenly spaced probes inside the
// bracket until it is narrower than Precision. Every probe is a full run
// at that rate (base.Rate is ignored). Deterministic for a trace and
// config, whatever the executor's parallelism.
func FindSaturation(t *Trace, base RunConfig, cfg SaturationConfig, exec Executor) (Saturation, error) {
	c := cfg.withDefaults()
	if c.Start < 0 || c.Precision <= 0 || c.Points < 1 || c.MaxRounds < 1 || c.MaxWaitP90 < 0 {
		return Saturation{}, fmt.Errorf("saturation config %+v: %w", cfg, ErrConfig)
	}
	start := c.Start
	if start == 0 {
		start = capacityEstimate(t, base.Fleet)
	}
	sat := Saturation{Strategy: base.Strategy.Name, Criterion: c.MaxWaitP90.Seconds()}
	probe := func(rates []float64) error {
		specs := make([]RunSpec, len(rates))
		for i, r := range rates {
			rc := base
			rc.Rate = r
			specs[i] = RunSpec{Trace: t, Config: rc, Scenario: t.Config.Name, Group: GroupSaturation}
		}
		res, err := exec(specs)
		if err != nil {
			return fmt.Errorf("saturation search: %w", err)
		}
		for i, r := range res {
			stable := r.QueueWait.P90 <= c.MaxWaitP90.Seconds()
			sat.Probes = append(sat.Probes, Probe{Rate: rates[i], Stable: stable, QueueWaitP90: r.QueueWait.P90, Throughput: r.Throughput})
		}
		return nil
	}

	// bounds: hi is the lowest unstable rate, lo the highest stable rate
	// below it (a stable probe above an unstable one is noise near the
	// boundary; the lowest unstable rate is trusted).
	bounds := func() (lo, hi float64) {
		hi = math.Inf(1)
		for _, p := range sat.Probes {
			if !p.Stable {
				hi = min(hi, p.Rate)
			}
		}
		for _, p := range sat.Probes {
			if p.Stable && p.Rate < hi {
				lo = max(lo, p.Rate)
			}
		}
		return lo, hi
	}
	// Bracket: probe start·2^k for Points+1 consecutive exponents, moving
	// the window up or down until the probes straddle the boundary.
	lo, hi := 0.0, math.Inf(1)
	k := 0
	for round := 0; round < c.MaxRounds && (lo == 0 || math.IsInf(hi, 1)); round++ {
		rates := make([]float64, c.Points+1)
		for i := range rates {
			rates[i] = start * math.Pow(2, float64(k+i))
		}
		if err := probe(rates); err != nil {
			return sat, err
		}
		lo, hi = bounds()
		if math.IsInf(hi, 1) {
			k += len(rates)
		} else {
			k -= len(rates)
		}
	}
	switch {
	case math.IsInf(hi, 1):
		return sat, fmt.Errorf("saturation search for %s on %s: still stable at %.3g req/s after %d rounds; %d requests may be too few to fill the fleet: %w",
			base.Strategy.Name, t.Config.Name, lo, c.MaxRounds, len(t.Requests), ErrConfig)
	case lo == 0:
		return sat, fmt.Errorf("saturation search for %s on %s: unstable even at %.3g req/s after %d rounds: %w",
			base.Strategy.Name, t.Config.Name, hi, c.MaxRounds, ErrConfig)
	}
	// Refine: Points evenly spaced probes strictly inside (lo, hi).
	for round := 0; round < c.MaxRounds && hi/lo-1 > c.Precision; round++ {
		rates := make([]float64, c.Points)
		for i := range rates {
			rates[i] = lo + (hi-lo)*float64(i+1)/float64(c.Points+1)
		}
		if err := probe(rates); err != nil {
			return sat, err
		}
		lo, hi = bounds()
	}
	sat.Rate, sat.Unstable = lo, hi
	slices.SortFunc(sat.Probes, func(a, b Probe) int {
		switch {
		case a.Rate < b.Rate:
			return -1
		case a.Rate > b.Rate:
			return 1
		}
		return 0
	})
	return sat, nil
}

// capacityEstimate is a rough fleet capacity (requests/s) to start the
// search from: per worker, as many requests as fit both the batch limit
// and the cache without any sharing, each held for an uncached prefill
// plus its decode at the unloaded inter-token latency.
func capacityEstimate(t *Trace, f Fleet) float64 {
	n := float64(len(t.Requests))
	if n == 0 {
		return 1
	}
	bs := float64(t.Config.BlockSize)
	prompt, out := float64(t.PromptTokens)/n, float64(t.OutputTokens)/n
	lat := f.Engine.Latency
	service := (lat.PrefillOverhead.Seconds() + prompt*lat.PrefillPerToken.Seconds() + out*lat.InterTokenLatency.Seconds()) * lat.TimeScale
	perWorker := min(float64(f.Engine.MaxNumSeqs), float64(f.Engine.NumBlocks)/math.Ceil((prompt+out)/bs))
	if service <= 0 || perWorker < 1 {
		return 1
	}
	return float64(f.Workers) * perWorker / service
}
