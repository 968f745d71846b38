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

// Saturation is the inverse of SetSaturation: the scenario's recorded
// search outcome under criterion c (the report keeps only the criterion's
// text), and false when the scenario has no saturation rate.
func (s *Scenario) Saturation(c saturation.Criterion) (saturation.Outcome, bool) {
	if !(s.SaturationRate > 0) {
		return saturation.Outcome{}, false
	}
	o := saturation.Outcome{Strategy: s.SaturationStrategy, Rate: s.SaturationRate, Unstable: s.SaturationUnstable, Criterion: c}
	for _, p := range s.Probes {
		o.Probes = append(o.Probes, saturation.Probe{Rate: p.Rate, Stable: p.Stable, Measured: saturation.Measured{QueueWaitP90: p.QueueWaitP90}, Throughput: p.Throughput})
	}
	return o, true
}
