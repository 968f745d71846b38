package saturation

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// DefaultMaxWaitP90 is Criterion.MaxWaitP90's default: a run is stable
// while nine in ten of its requests waited at most a second for an engine's
// batch. Below saturation the wait is a few step times (milliseconds to
// tens of milliseconds); past it the waiting queue grows for the whole run
// and the p90 reaches many service times, so the verdict is not sensitive
// to the exact bound.
const DefaultMaxWaitP90 = time.Second

// Criterion is the one definition of a stable probe, shared by the
// discrete-event simulator (simulate/des) and the load harness
// (simulate/harness): over the run's measured requests, the p90 of the
// engine queue wait — admission into a batch minus arrival at the engine,
// summed over a P/D request's legs — is at most MaxWaitP90, and every
// measured request completed (none failed, none was cut off when the run
// ended). The simulator's runs never fail; the harness's can.
type Criterion struct {
	// MaxWaitP90 bounds the queue-wait p90 (model time). Zero takes
	// DefaultMaxWaitP90; negative is invalid.
	MaxWaitP90 time.Duration
}

// Measured is what a probe run reports to the criterion.
type Measured struct {
	// QueueWaitP90 is the p90 of the measured requests' engine queue wait,
	// in model seconds.
	QueueWaitP90 float64
	// Failed counts measured requests that did not complete.
	Failed int
	// Cut is set when the run ended with requests still outstanding (the
	// harness's drain timeout).
	Cut bool
}

// WithDefaults fills the zero fields.
func (c Criterion) WithDefaults() Criterion {
	if c.MaxWaitP90 == 0 {
		c.MaxWaitP90 = DefaultMaxWaitP90
	}
	return c
}

// Validate reports a negative bound (wrapping ErrConfig).
func (c Criterion) Validate() error {
	if c.MaxWaitP90 < 0 {
		return fmt.Errorf("criterion: max wait p90 %v (want >= 0): %w", c.MaxWaitP90, ErrConfig)
	}
	return nil
}

// Stable is the verdict on one probe run.
func (c Criterion) Stable(m Measured) bool {
	c = c.WithDefaults()
	return m.Failed == 0 && !m.Cut && m.QueueWaitP90 <= c.MaxWaitP90.Seconds()
}

// String says what stable meant, for reports: "stable = engine queue-wait
// p90 ≤ 1 s, every request completed".
func (c Criterion) String() string {
	return fmt.Sprintf("stable = engine queue-wait p90 ≤ %g s, every request completed", c.WithDefaults().MaxWaitP90.Seconds())
}

// Probe is one rate a search tried: what the run measured and the verdict.
type Probe struct {
	// Rate is the offered load (requests per model second).
	Rate float64
	// Stable is Criterion.Stable(Measured).
	Stable bool
	// Measured is what the verdict judged.
	Measured
	// Throughput is the completed requests per model second.
	Throughput float64
}

// Judge runs the criterion on one probe run at rate.
func (c Criterion) Judge(rate float64, m Measured, throughput float64) Probe {
	return Probe{Rate: rate, Stable: c.Stable(m), Measured: m, Throughput: throughput}
}

// Outcome is a saturation search's result, as the simulator and the
// harness report it.
type Outcome struct {
	// Strategy is the strategy searched with.
	Strategy string
	// Rate is the highest stable rate below Unstable: load 1.0.
	Rate float64
	// Unstable is the lowest unstable rate probed (Rate < Unstable).
	Unstable float64
	// Criterion is what stable meant (its defaults filled in).
	Criterion Criterion
	// Probes lists every probe in ascending rate order.
	Probes []Probe
}

// Settle records the bracket a successful search found and sorts the
// probes by rate.
func (o *Outcome) Settle(b Bracket) {
	o.Rate, o.Unstable = b.Stable, b.Unstable
	slices.SortFunc(o.Probes, func(a, b Probe) int { return cmp.Compare(a.Rate, b.Rate) })
}
