package des

import (
	"errors"
	"fmt"
	"math"

	"github.com/llbproject/llb/simulate/saturation"
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
	// fleet (saturation.CapacityEstimate, in the engines' clock).
	Start float64
	// Criterion decides a probe's stability: the p90 of the measured
	// requests' engine queue wait (admission − arrival) within
	// Criterion.MaxWaitP90 (default saturation.DefaultMaxWaitP90, 1 s). In
	// an unstable run the queue grows for the whole run, so the wait
	// reaches many service times. A simulated run never fails a request.
	Criterion saturation.Criterion
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
	c.Criterion = c.Criterion.WithDefaults()
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

// FindSaturation searches for the highest rate at which base's strategy
// keeps the fleet stable on trace t: a geometric bracket (×2 steps from
// the start, Points+1 rates a round), then rounds of Points evenly spaced
// probes inside the bracket until it is narrower than Precision
// (simulate/saturation). Every probe is a full run at that rate (base.Rate
// is ignored), judged by cfg.Criterion. Deterministic for a trace and
// config, whatever the executor's parallelism.
func FindSaturation(t *Trace, base RunConfig, cfg SaturationConfig, exec Executor) (saturation.Outcome, error) {
	c := cfg.withDefaults()
	if c.Points < 1 || c.Criterion.Validate() != nil {
		return saturation.Outcome{}, fmt.Errorf("saturation config %+v: %w", cfg, ErrConfig)
	}
	start := c.Start
	if start == 0 {
		start = saturation.CapacityEstimate(&t.Trace, base.Fleet.Workers, &base.Fleet.Engine, base.Fleet.Engine.Latency.TimeScale)
	}
	search := saturation.Search{
		Start: start, Step: 2, Width: c.Points + 1, Refine: saturation.Evenly(c.Points),
		Precision: c.Precision, MaxRounds: c.MaxRounds,
	}
	sat := saturation.Outcome{Strategy: base.Strategy.Name, Criterion: c.Criterion}
	b, err := search.Run(func(rates []float64) ([]bool, error) {
		specs := make([]RunSpec, len(rates))
		for i, r := range rates {
			rc := base
			rc.Rate = r
			specs[i] = RunSpec{Trace: t, Config: rc, Scenario: t.Config.Name, Group: GroupSaturation}
		}
		res, err := exec(specs)
		if err != nil {
			return nil, fmt.Errorf("saturation search: %w", err)
		}
		stable := make([]bool, len(res))
		for i, r := range res {
			p := c.Criterion.Judge(rates[i], saturation.Measured{QueueWaitP90: r.QueueWait.P90}, r.Throughput)
			sat.Probes = append(sat.Probes, p)
			stable[i] = p.Stable
		}
		return stable, nil
	})
	switch {
	case errors.Is(err, saturation.ErrConfig):
		return saturation.Outcome{}, fmt.Errorf("saturation config %+v: %w: %w", cfg, ErrConfig, err)
	case errors.Is(err, saturation.ErrNoBracket) && math.IsInf(b.Unstable, 1):
		return sat, fmt.Errorf("saturation search for %s on %s: still stable at %.3g req/s after %d rounds; %d requests may be too few to fill the fleet: %w",
			base.Strategy.Name, t.Config.Name, b.Stable, c.MaxRounds, len(t.Requests), ErrConfig)
	case errors.Is(err, saturation.ErrNoBracket):
		return sat, fmt.Errorf("saturation search for %s on %s: unstable even at %.3g req/s after %d rounds: %w",
			base.Strategy.Name, t.Config.Name, b.Unstable, c.MaxRounds, ErrConfig)
	case err != nil:
		return sat, err
	}
	sat.Settle(b)
	return sat, nil
}
