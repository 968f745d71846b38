package harness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/llbproject/llb/simulate/saturation"
)

// SaturationConfig tunes FindSaturation. Zero fields take defaults.
type SaturationConfig struct {
	// Start is the first rate probed (requests per model second); 0
	// estimates it from the fleet (saturation.CapacityEstimate, in model
	// time).
	Start float64
	// MaxQueueWait is the stability criterion: a rate is sustainable when
	// the engines' mean queue wait over the measured window (Little's law
	// on the sampled waiting queues, model time) is at most this, no
	// request failed and none was cut by the drain timeout. In an unstable
	// run the waiting queue grows for the whole run. Default 500ms.
	MaxQueueWait time.Duration
	// Step is the bracketing factor (> 1). Default 1.4.
	Step float64
	// Precision is the relative bracket width the search stops at
	// (unstable/stable − 1). Default 0.1.
	Precision float64
	// MaxProbes bounds the number of probe runs. Default 8.
	MaxProbes int
	// Requests is the length of each probe's trace (a prefix of the
	// run's); 0 uses the whole trace.
	Requests int
}

func (c SaturationConfig) withDefaults() SaturationConfig {
	if c.MaxQueueWait == 0 {
		c.MaxQueueWait = 500 * time.Millisecond
	}
	if c.Step == 0 {
		c.Step = 1.4
	}
	if c.Precision == 0 {
		c.Precision = 0.1
	}
	if c.MaxProbes == 0 {
		c.MaxProbes = 8
	}
	return c
}

// Probe is one rate a saturation search tried.
type Probe struct {
	// Rate is the offered load (requests per model second).
	Rate float64
	// Stable is the verdict.
	Stable bool
	// QueueWait is the measured mean queue wait (model seconds),
	// Throughput the completed requests per model second, Failed the
	// measured requests that did not complete.
	QueueWait, Throughput float64
	Failed                int
}

// Saturation is a saturation search's outcome.
type Saturation struct {
	// Strategy is the strategy searched with.
	Strategy string
	// Rate is the highest stable rate probed: load 1.0.
	Rate float64
	// Unstable is the lowest unstable rate probed (Rate < Unstable).
	Unstable float64
	// Criterion says what "stable" meant.
	Criterion string
	// Probes lists every probe in ascending rate order.
	Probes []Probe
}

// FindSaturation searches for the highest rate at which base's strategy
// keeps the fleet stable: geometric steps of Step from Start until a probe
// on each side of the boundary, then geometric bisection until the
// bracket is narrower than Precision or MaxProbes ran out
// (simulate/saturation). Every probe is a full Run (fresh fleet, fresh
// llbd) at that rate; base.Rate is ignored. onProbe, when set, sees each
// probe as it finishes.
func FindSaturation(ctx context.Context, base RunConfig, cfg SaturationConfig, onProbe func(Probe)) (Saturation, error) {
	return findSaturation(ctx, base, cfg, onProbe, Run)
}

// runFunc is Run's signature; tests search over a synthetic fleet.
type runFunc func(ctx context.Context, cfg RunConfig) (*Result, error)

func findSaturation(ctx context.Context, base RunConfig, cfg SaturationConfig, onProbe func(Probe), run runFunc) (Saturation, error) {
	c := cfg.withDefaults()
	if c.MaxProbes < 2 || c.MaxQueueWait < 0 || c.Requests < 0 {
		return Saturation{}, fmt.Errorf("saturation config %+v: %w", cfg, ErrConfig)
	}
	if c.Requests > 0 && c.Requests < len(base.Trace.Requests) {
		base.Trace = base.Trace.Prefix(c.Requests)
		base.Warmup = min(base.Warmup, c.Requests/5)
	}
	start := c.Start
	if start == 0 {
		start = saturation.CapacityEstimate(base.Trace, base.Fleet.Workers, &base.Fleet.Engine, 1)
	}
	search := saturation.Search{
		Start: start, Step: c.Step, Width: 1, Refine: saturation.Midpoint,
		Precision: c.Precision, MaxProbes: c.MaxProbes,
	}
	sat := Saturation{
		Strategy:  base.Strategy.Name,
		Criterion: fmt.Sprintf("stable = engines' mean queue wait (Little's law over %v samples) ≤ %v model time, every request completed", base.withDefaults().SampleEvery, c.MaxQueueWait),
	}
	b, err := search.Run(func(rates []float64) ([]bool, error) {
		stable := make([]bool, len(rates))
		for i, rate := range rates {
			rc := base
			rc.Rate = rate
			res, err := run(ctx, rc)
			if err != nil {
				return nil, fmt.Errorf("saturation probe at %.3g req/s: %w", rate, err)
			}
			failed := res.Requests - res.Completed
			p := Probe{Rate: rate, QueueWait: res.QueueWait, Throughput: res.Throughput, Failed: failed}
			p.Stable = failed == 0 && !res.Health.DrainTimeout && res.QueueWait <= c.MaxQueueWait.Seconds()
			sat.Probes = append(sat.Probes, p)
			if onProbe != nil {
				onProbe(p)
			}
			stable[i] = p.Stable
		}
		return stable, nil
	})
	switch {
	case errors.Is(err, saturation.ErrConfig):
		return Saturation{}, fmt.Errorf("saturation config %+v: %w: %w", cfg, ErrConfig, err)
	case errors.Is(err, saturation.ErrNoBracket):
		return sat, fmt.Errorf("saturation search for %s: no bracket in %d probes (stable up to %.3g, unstable from %.3g req/s): %w",
			base.Strategy.Name, len(sat.Probes), b.Stable, b.Unstable, ErrRun)
	case err != nil:
		return sat, err
	}
	sat.Rate, sat.Unstable = b.Stable, b.Unstable
	slices.SortFunc(sat.Probes, func(a, b Probe) int { return cmp.Compare(a.Rate, b.Rate) })
	return sat, nil
}
