// Package saturation finds the highest offered rate a system sustains: a
// geometric bracket from a starting rate, then refinement inside it, over a
// caller's probe ("run at these rates; which were stable?"). The
// discrete-event simulator (simulate/des) probes with simulated runs, a
// batch of rates at a time, and refines with evenly spaced rates; the load
// harness (simulate/harness) probes with real runs, one rate at a time, and
// bisects. CapacityEstimate gives both their starting rate.
package saturation

import (
	"errors"
	"fmt"
	"math"
)

// Sentinel errors (test with errors.Is).
var (
	// ErrConfig reports an invalid Search or a probe that broke its
	// contract.
	ErrConfig = errors.New("saturation: invalid search")
	// ErrNoBracket reports a search whose budget ran out before it found
	// both a stable and an unstable rate.
	ErrNoBracket = errors.New("saturation: no bracket")
)

// ProbeFunc runs the system at each of rates and reports, in the same order,
// whether it was stable there. An error stops the search and is returned
// unchanged.
type ProbeFunc func(rates []float64) ([]bool, error)

// Search is one search's configuration.
type Search struct {
	// Start is the first rate probed (> 0).
	Start float64
	// Step is the bracketing factor between consecutive rates (> 1).
	Step float64
	// Width is how many consecutive rates of the geometric ladder
	// (Start·Step^k, Start·Step^(k+1), ...) a bracketing round probes at
	// once (>= 1). While every rate probed is stable the window moves up
	// past its last rate, once one is unstable down below its first, until
	// the probes straddle the boundary.
	Width int
	// Refine returns the rates a refinement round probes strictly inside
	// the bracket (lo, hi): Evenly(n) or Midpoint. Required.
	Refine func(lo, hi float64) []float64
	// Precision is the relative bracket width the search stops at
	// (Unstable/Stable − 1 <= Precision; > 0).
	Precision float64
	// MaxRounds bounds the rounds of each phase (bracketing, then
	// refinement); 0 means no bound.
	MaxRounds int
	// MaxProbes bounds the rates probed in all, a round getting at most
	// those left; 0 means no bound. MaxRounds or MaxProbes must be set.
	MaxProbes int
}

// Bracket is what a search found.
type Bracket struct {
	// Stable is the highest stable rate below Unstable (0 when none): load
	// 1.0.
	Stable float64
	// Unstable is the lowest unstable rate probed (+Inf when none). A
	// stable probe above it is noise near the boundary; the lowest
	// unstable rate is trusted.
	Unstable float64
	// Probes is how many rates were probed.
	Probes int
}

// bracketed reports whether the search holds a stable and an unstable rate.
func (b *Bracket) bracketed() bool { return b.Stable > 0 && !math.IsInf(b.Unstable, 1) }

// Evenly returns a Refine that probes n evenly spaced rates inside the
// bracket (n parallel probes shrink it n+1 times a round).
func Evenly(n int) func(lo, hi float64) []float64 {
	return func(lo, hi float64) []float64 {
		rates := make([]float64, n)
		for i := range rates {
			rates[i] = lo + (hi-lo)*float64(i+1)/float64(n+1)
		}
		return rates
	}
}

// Midpoint is a Refine that probes the bracket's geometric midpoint
// √(lo·hi): bisection on a log scale.
func Midpoint(lo, hi float64) []float64 { return []float64{math.Sqrt(lo * hi)} }

func (s *Search) validate() error {
	if !(s.Start > 0) || math.IsInf(s.Start, 0) || !(s.Step > 1) || math.IsInf(s.Step, 0) || s.Width < 1 || s.Refine == nil ||
		!(s.Precision > 0) || s.MaxRounds < 0 || s.MaxProbes < 0 || s.MaxRounds == 0 && s.MaxProbes == 0 {
		return fmt.Errorf("search %+v: %w", *s, ErrConfig)
	}
	return nil
}

// Run searches: bracketing rounds until a stable and an unstable rate are
// known, then refinement rounds until the bracket is within Precision, each
// phase within the budget. It returns ErrNoBracket (with what it found)
// when the bracketing budget runs out, ErrConfig for a bad Search, and a
// probe's error unchanged. The search is deterministic for the probe's
// answers.
func (s *Search) Run(probe ProbeFunc) (Bracket, error) {
	if err := s.validate(); err != nil {
		return Bracket{}, err
	}
	var rates []float64
	var stable []bool
	b := Bracket{Unstable: math.Inf(1)}
	try := func(next []float64) error {
		if s.MaxProbes > 0 {
			next = next[:min(len(next), s.MaxProbes-len(rates))]
		}
		got, err := probe(next)
		if err != nil {
			return err
		}
		if len(got) != len(next) {
			return fmt.Errorf("probe answered %d of %d rates: %w", len(got), len(next), ErrConfig)
		}
		rates, stable = append(rates, next...), append(stable, got...)
		b = bounds(rates, stable)
		return nil
	}
	budget := func(round int) bool {
		return (s.MaxRounds == 0 || round < s.MaxRounds) && (s.MaxProbes == 0 || len(rates) < s.MaxProbes)
	}

	// Bracket. Consecutive rates are products (and the window moves by
	// products and quotients) so that a power-of-two Step stays exact.
	anchor := s.Start
	for round := 0; budget(round) && !b.bracketed(); round++ {
		window := make([]float64, s.Width)
		r := anchor
		for i := range window {
			window[i] = r
			r *= s.Step
		}
		if err := try(window); err != nil {
			return b, err
		}
		if math.IsInf(b.Unstable, 1) {
			anchor = r
		} else {
			for range s.Width {
				anchor /= s.Step
			}
		}
	}
	if !b.bracketed() {
		return b, fmt.Errorf("%w after %d probes (stable up to %.3g, unstable from %.3g)", ErrNoBracket, b.Probes, b.Stable, b.Unstable)
	}
	// Refine.
	for round := 0; budget(round) && b.Unstable/b.Stable-1 > s.Precision; round++ {
		if err := try(s.Refine(b.Stable, b.Unstable)); err != nil {
			return b, err
		}
	}
	return b, nil
}

// bounds is the bracket the probes so far give: the lowest unstable rate,
// and the highest stable rate below it.
func bounds(rates []float64, stable []bool) Bracket {
	b := Bracket{Unstable: math.Inf(1), Probes: len(rates)}
	for i, r := range rates {
		if !stable[i] {
			b.Unstable = min(b.Unstable, r)
		}
	}
	for i, r := range rates {
		if stable[i] && r < b.Unstable {
			b.Stable = max(b.Stable, r)
		}
	}
	return b
}
