package harness

import (
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/llbproject/llb/simulate/workload"
)

// SaturationConfig tunes FindSaturation. Zero fields take defaults.
type SaturationConfig struct {
	// Start is the first rate probed (requests per model second); 0
	// estimates it from the fleet (CapacityEstimate).
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

// CapacityEstimate is a rough fleet capacity (requests per model second)
// to start a search from: per worker, as many requests as fit both the
// batch limit and the cache without any sharing, each held for an
// uncached prefill plus its decode at the unloaded inter-token latency
// (simulate/des starts its search the same way).
func CapacityEstimate(t *workload.Trace, f *FleetConfig) float64 {
	n := float64(len(t.Requests))
	if n == 0 {
		return 1
	}
	var prompt, out float64
	for i := range t.Requests {
		prompt += float64(t.Requests[i].PromptTokens)
		out += float64(t.Requests[i].OutputTokens)
	}
	prompt, out = prompt/n, out/n
	lat := f.Engine.Latency
	service := lat.PrefillOverhead.Seconds() + prompt*lat.PrefillPerToken.Seconds() + out*lat.InterTokenLatency.Seconds()
	perWorker := min(float64(f.Engine.MaxNumSeqs), float64(f.Engine.NumBlocks)/math.Ceil((prompt+out)/float64(t.BlockSize)))
	if service <= 0 || perWorker < 1 {
		return 1
	}
	return float64(f.Workers) * perWorker / service
}

// FindSaturation searches for the highest rate at which base's strategy
// keeps the fleet stable: geometric steps of Step from Start until a probe
// on each side of the boundary, then geometric bisection until the
// bracket is narrower than Precision or MaxProbes ran out. Every probe is a
// full Run (fresh fleet, fresh llbd) at that rate; base.Rate is ignored.
// onProbe, when set, sees each probe as it finishes.
func FindSaturation(ctx context.Context, base RunConfig, cfg SaturationConfig, onProbe func(Probe)) (Saturation, error) {
	return findSaturation(ctx, base, cfg, onProbe, Run)
}

// runFunc is Run's signature; tests search over a synthetic fleet.
type runFunc func(ctx context.Context, cfg RunConfig) (*Result, error)

func findSaturation(ctx context.Context, base RunConfig, cfg SaturationConfig, onProbe func(Probe), run runFunc) (Saturation, error) {
	c := cfg.withDefaults()
	if c.Start < 0 || !(c.Step > 1) || !(c.Precision > 0) || c.MaxProbes < 2 || c.MaxQueueWait < 0 || c.Requests < 0 {
		return Saturation{}, fmt.Errorf("saturation config %+v: %w", cfg, ErrConfig)
	}
	if c.Requests > 0 && c.Requests < len(base.Trace.Requests) {
		base.Trace = base.Trace.Prefix(c.Requests)
		base.Warmup = min(base.Warmup, c.Requests/5)
	}
	start := c.Start
	if start == 0 {
		start = CapacityEstimate(base.Trace, &base.Fleet)
	}
	sat := Saturation{
		Strategy:  base.Strategy.Name,
		Criterion: fmt.Sprintf("stable = engines' mean queue wait (Little's law over %v samples) ≤ %v model time, every request completed", base.withDefaults().SampleEvery, c.MaxQueueWait),
	}
	probe := func(rate float64) (bool, error) {
		rc := base
		rc.Rate = rate
		res, err := run(ctx, rc)
		if err != nil {
			return false, fmt.Errorf("saturation probe at %.3g req/s: %w", rate, err)
		}
		failed := res.Requests - res.Completed
		p := Probe{Rate: rate, QueueWait: res.QueueWait, Throughput: res.Throughput, Failed: failed}
		p.Stable = failed == 0 && !res.Health.DrainTimeout && res.QueueWait <= c.MaxQueueWait.Seconds()
		sat.Probes = append(sat.Probes, p)
		if onProbe != nil {
			onProbe(p)
		}
		return p.Stable, nil
	}
	lo, hi := 0.0, math.Inf(1)
	r := start
	for len(sat.Probes) < c.MaxProbes && (lo == 0 || math.IsInf(hi, 1)) {
		stable, err := probe(r)
		if err != nil {
			return sat, err
		}
		if stable {
			lo = max(lo, r)
			r *= c.Step
		} else {
			hi = min(hi, r)
			r /= c.Step
		}
		if lo > 0 && !math.IsInf(hi, 1) {
			break
		}
	}
	if lo == 0 || math.IsInf(hi, 1) {
		return sat, fmt.Errorf("saturation search for %s: no bracket in %d probes (stable up to %.3g, unstable from %.3g req/s): %w",
			base.Strategy.Name, len(sat.Probes), lo, hi, ErrRun)
	}
	for len(sat.Probes) < c.MaxProbes && hi/lo-1 > c.Precision {
		mid := math.Sqrt(lo * hi)
		stable, err := probe(mid)
		if err != nil {
			return sat, err
		}
		if stable {
			lo = mid
		} else {
			hi = mid
		}
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
