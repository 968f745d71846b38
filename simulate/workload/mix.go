package workload

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
)

// Mix interleaves other workloads: each request comes from part i with
// probability Weight_i / sum(Weight).
type Mix struct {
	// Parts are the mixed workloads (at least one).
	Parts []Part
}

// Part is one workload of a Mix.
type Part struct {
	// Weight (> 0) is the part's relative share of requests.
	Weight float64
	// Spec is the part's workload.
	Spec Spec
}

// Validate reports every problem at once (the parts' own specs are
// validated when the source is built).
func (m Mix) Validate() error {
	var errs []error
	if len(m.Parts) == 0 {
		errs = append(errs, errors.New("a mix needs at least one part"))
	}
	for i, p := range m.Parts {
		if !(p.Weight > 0) || math.IsInf(p.Weight, 0) {
			errs = append(errs, fmt.Errorf("part %d weight %v (want > 0)", i, p.Weight))
		}
		if p.Spec == nil {
			errs = append(errs, fmt.Errorf("part %d has no spec", i))
		}
	}
	return joinConfig("mix", errs)
}

// Source implements Spec.
func (m Mix) Source(r *rand.Rand) (Source, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	src := &mixSource{}
	total := 0.0
	for i, p := range m.Parts {
		s, err := p.Spec.Source(r)
		if err != nil {
			return nil, fmt.Errorf("mix part %d: %w", i, err)
		}
		total += p.Weight
		src.srcs = append(src.srcs, s)
		src.cum = append(src.cum, total)
	}
	for i := range src.cum {
		src.cum[i] /= total
	}
	return src, nil
}

type mixSource struct {
	srcs []Source
	cum  []float64
}

// Next implements Source.
func (m *mixSource) Next(r *rand.Rand) (Item, error) {
	u := r.Float64()
	i := 0
	for i < len(m.cum)-1 && u >= m.cum[i] {
		i++
	}
	return m.srcs[i].Next(r)
}
