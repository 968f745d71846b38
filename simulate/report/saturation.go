package report

import "github.com/llbproject/llb/simulate/saturation"

// SetSaturation records a saturation search's outcome on s, the same way
// for the simulator's sweeps and the harness's bench: load 1.0, the lowest
// unstable rate, the strategy searched with, what stable meant
// (saturation.Criterion) and every probe.
func (s *Scenario) SetSaturation(o *saturation.Outcome) {
	s.SaturationRate, s.SaturationUnstable, s.SaturationStrategy = o.Rate, o.Unstable, o.Strategy
	s.SaturationCriterion = o.Criterion.String()
	s.Probes = make([]Probe, len(o.Probes))
	for i, p := range o.Probes {
		s.Probes[i] = Probe{Rate: p.Rate, Stable: p.Stable, QueueWaitP90: p.QueueWaitP90, Throughput: p.Throughput}
	}
}
