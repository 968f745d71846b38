package saturation

import (
	"errors"
	"math"
	"slices"
	"testing"
)

// threshold is a probe of a system stable at or below limit. It records
// every batch it is asked for.
type threshold struct {
	limit   float64
	batches [][]float64
}

func (p *threshold) probe(rates []float64) ([]bool, error) {
	p.batches = append(p.batches, rates)
	out := make([]bool, len(rates))
	for i, r := range rates {
		out[i] = r <= p.limit
	}
	return out, nil
}

func TestRun_BracketsTheThresholdWithinPrecision(t *testing.T) {
	tests := []struct {
		name  string
		limit float64
		give  Search
	}{
		{"batches above the start", 37, Search{Start: 5, Step: 2, Width: 3, Refine: Evenly(2), Precision: 0.03, MaxRounds: 12}},
		{"batches far above the start", 5000, Search{Start: 1, Step: 2, Width: 3, Refine: Evenly(2), Precision: 0.03, MaxRounds: 12}},
		{"batches below the start", 0.8, Search{Start: 100, Step: 2, Width: 3, Refine: Evenly(2), Precision: 0.03, MaxRounds: 12}},
		{"bisection above the start", 17.3, Search{Start: 10, Step: 1.4, Width: 1, Refine: Midpoint, Precision: 0.05, MaxProbes: 20}},
		{"bisection below the start", 17.3, Search{Start: 40, Step: 1.4, Width: 1, Refine: Midpoint, Precision: 0.05, MaxProbes: 20}},
		{"bisection from the threshold", 17.3, Search{Start: 17.3, Step: 1.4, Width: 1, Refine: Midpoint, Precision: 0.05, MaxProbes: 20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &threshold{limit: tt.limit}
			got, err := tt.give.Run(p.probe)
			if err != nil {
				t.Fatal(err)
			}
			if !(got.Stable <= tt.limit && tt.limit < got.Unstable) || got.Unstable/got.Stable-1 > tt.give.Precision {
				t.Fatalf("bracket [%g, %g) for a limit of %g; want it to hold the limit within %g", got.Stable, got.Unstable, tt.limit, tt.give.Precision)
			}
			n := 0
			for _, b := range p.batches {
				n += len(b)
			}
			if got.Probes != n {
				t.Fatalf("%d probes reported, %d run", got.Probes, n)
			}
		})
	}
}

func TestRun_BracketsWithWholeWindowsAndRefinesInsideTheBracket(t *testing.T) {
	p := &threshold{limit: 37}
	s := Search{Start: 5, Step: 2, Width: 3, Refine: Evenly(2), Precision: 0.03, MaxRounds: 12}
	if _, err := s.Run(p.probe); err != nil {
		t.Fatal(err)
	}
	// 5·2^k is exact, so the windows are exactly these rates.
	want := [][]float64{{5, 10, 20}, {40, 80, 160}, {20 + 20.0/3, 20 + 40.0/3}}
	for i, w := range want {
		if !slices.Equal(p.batches[i], w) {
			t.Fatalf("batch %d is %v; want %v (all batches %v)", i, p.batches[i], w, p.batches)
		}
	}
}

func TestRun_TrustsTheLowestUnstableRate(t *testing.T) {
	// Stable up to 20, unstable in (20, 30], "stable" again above 30 (the
	// noise a finite run can show near the boundary). The first batch (12,
	// 24, 48) sees stable, unstable, stable: the bracket must stay below
	// the lowest unstable rate.
	noisy := func(rates []float64) ([]bool, error) {
		out := make([]bool, len(rates))
		for i, r := range rates {
			out[i] = r <= 20 || r > 30
		}
		return out, nil
	}
	s := Search{Start: 12, Step: 2, Width: 3, Refine: Evenly(2), Precision: 0.03, MaxRounds: 12}
	got, err := s.Run(noisy)
	if err != nil {
		t.Fatal(err)
	}
	if got.Stable > 20 || got.Unstable > 24 || got.Unstable <= 20 {
		t.Fatalf("bracket [%g, %g); want it inside (.., 20] / (20, 24]", got.Stable, got.Unstable)
	}
}

func TestRun_NoBracketWithinTheBudgetIsAnError(t *testing.T) {
	tests := []struct {
		name         string
		limit        float64
		give         Search
		wantProbes   int
		wantStable   float64
		wantUnstable float64
	}{
		{"always stable, rounds", 1e9, Search{Start: 1, Step: 2, Width: 3, Refine: Evenly(2), Precision: 0.03, MaxRounds: 2}, 6, 32, math.Inf(1)},
		{"never stable, rounds", 0, Search{Start: 1, Step: 2, Width: 1, Refine: Midpoint, Precision: 0.03, MaxRounds: 3}, 3, 0, 0.25},
		{"always stable, probes", 1e9, Search{Start: 1, Step: 2, Width: 1, Refine: Midpoint, Precision: 0.03, MaxProbes: 3}, 3, 4, math.Inf(1)},
		{"a window cut to the probes left", 1e9, Search{Start: 1, Step: 2, Width: 3, Refine: Evenly(2), Precision: 0.03, MaxProbes: 4}, 4, 8, math.Inf(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &threshold{limit: tt.limit}
			got, err := tt.give.Run(p.probe)
			if !errors.Is(err, ErrNoBracket) || got.Probes != tt.wantProbes || got.Stable != tt.wantStable || got.Unstable != tt.wantUnstable {
				t.Fatalf("got %+v, %v; want ErrNoBracket after %d probes with [%g, %g)", got, err, tt.wantProbes, tt.wantStable, tt.wantUnstable)
			}
		})
	}
}

func TestRun_StopsAtTheProbeBudgetWhileRefining(t *testing.T) {
	p := &threshold{limit: 17.3}
	s := Search{Start: 10, Step: 1.4, Width: 1, Refine: Midpoint, Precision: 1e-9, MaxProbes: 5}
	got, err := s.Run(p.probe)
	if err != nil || got.Probes != 5 || len(p.batches) != 5 || !(got.Stable <= 17.3 && 17.3 < got.Unstable) {
		t.Fatalf("got %+v, %v after %d batches; want the bracket after 5 probes", got, err, len(p.batches))
	}
}

func TestRun_ReturnsTheProbesErrorAndRejectsBadSearches(t *testing.T) {
	boom := errors.New("boom")
	ok := Search{Start: 1, Step: 2, Width: 1, Refine: Midpoint, Precision: 0.1, MaxRounds: 5}
	if _, err := ok.Run(func([]float64) ([]bool, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("probe failure: got %v; want it returned", err)
	}
	if _, err := ok.Run(func([]float64) ([]bool, error) { return nil, nil }); !errors.Is(err, ErrConfig) {
		t.Fatalf("a probe that answers nothing: got %v; want ErrConfig", err)
	}
	for name, mutate := range map[string]func(*Search){
		"zero start":  func(s *Search) { s.Start = 0 },
		"NaN start":   func(s *Search) { s.Start = math.NaN() },
		"step 1":      func(s *Search) { s.Step = 1 },
		"no width":    func(s *Search) { s.Width = 0 },
		"no refine":   func(s *Search) { s.Refine = nil },
		"precision 0": func(s *Search) { s.Precision = 0 },
		"no budget":   func(s *Search) { s.MaxRounds = 0 },
		"negative":    func(s *Search) { s.MaxProbes = -1 },
	} {
		s := ok
		mutate(&s)
		if _, err := s.Run(func(r []float64) ([]bool, error) { return make([]bool, len(r)), nil }); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: got %v; want ErrConfig", name, err)
		}
	}
}

func TestRefine_EvenlyAndMidpointProbeInsideTheBracket(t *testing.T) {
	if got, want := Evenly(3)(10, 18), []float64{12, 14, 16}; !slices.Equal(got, want) {
		t.Fatalf("Evenly(3) = %v; want %v", got, want)
	}
	if got := Midpoint(4, 9); !slices.Equal(got, []float64{6}) {
		t.Fatalf("Midpoint(4, 9) = %v; want [6]", got)
	}
}
