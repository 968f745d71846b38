package harness

import (
	"context"
	"errors"
	"fmt"

	"github.com/llbproject/llb/simulate/saturation"
)

// SaturationConfig tunes FindSaturation. Zero fields take defaults.
type SaturationConfig struct {
	// Start is the first rate probed (requests per model second); 0
	// estimates it from the fleet (saturation.CapacityEstimate, in model
	// time).
	Start float64
	// Criterion decides a probe's stability (simulate/saturation, the
	// simulator's too): the p90 of the queue wait the workers report for
	// each completed measured request (Result.QueueWait, model time) within
	// Criterion.MaxWaitP90 (default 1 s), no measured request failed and
	// none was cut by the drain timeout.
	Criterion saturation.Criterion
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
	c.Criterion = c.Criterion.WithDefaults()
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

// FindSaturation searches for the highest rate at which base's strategy
// keeps the fleet stable: geometric steps of Step from Start until a probe
// on each side of the boundary, then geometric bisection until the
// bracket is narrower than Precision or MaxProbes ran out
// (simulate/saturation). Every probe is a full Run (fresh fleet, fresh
// llbd) at that rate, judged by cfg.Criterion; base.Rate is ignored.
// onProbe, when set, sees each probe as it finishes.
func FindSaturation(ctx context.Context, base RunConfig, cfg SaturationConfig, onProbe func(saturation.Probe)) (saturation.Outcome, error) {
	return findSaturation(ctx, base, cfg, onProbe, Run)
}

// runFunc is Run's signature; tests search over a synthetic fleet.
type runFunc func(ctx context.Context, cfg RunConfig) (*Result, error)

func findSaturation(ctx context.Context, base RunConfig, cfg SaturationConfig, onProbe func(saturation.Probe), run runFunc) (saturation.Outcome, error) {
	c := cfg.withDefaults()
	if c.MaxProbes < 2 || c.Criterion.Validate() != nil || c.Requests < 0 {
		return saturation.Outcome{}, fmt.Errorf("saturation config %+v: %w", cfg, ErrConfig)
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
	sat := saturation.Outcome{Strategy: base.Strategy.Name, Criterion: c.Criterion}
	b, err := search.Run(func(rates []float64) ([]bool, error) {
		stable := make([]bool, len(rates))
		for i, rate := range rates {
			rc := base
			rc.Rate = rate
			res, err := run(ctx, rc)
			if err != nil {
				return nil, fmt.Errorf("saturation probe at %.3g req/s: %w", rate, err)
			}
			if res.QueueWaitMissing > 0 {
				return nil, fmt.Errorf("saturation probe at %.3g req/s: %d completed requests reported no queue wait (workers without ReportQueueWait?): %w",
					rate, res.QueueWaitMissing, ErrRun)
			}
			p := c.Criterion.Judge(rate, saturation.Measured{
				QueueWaitP90: res.QueueWait.P90, Failed: res.Requests - res.Completed, Cut: res.Health.DrainTimeout,
			}, res.Throughput)
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
		return saturation.Outcome{}, fmt.Errorf("saturation config %+v: %w: %w", cfg, ErrConfig, err)
	case errors.Is(err, saturation.ErrNoBracket):
		return sat, fmt.Errorf("saturation search for %s: no bracket in %d probes (stable up to %.3g, unstable from %.3g req/s): %w",
			base.Strategy.Name, len(sat.Probes), b.Stable, b.Unstable, ErrRun)
	case err != nil:
		return sat, err
	}
	sat.Settle(b)
	return sat, nil
}
