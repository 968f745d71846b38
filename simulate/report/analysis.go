package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// loadEq reports whether two load fractions are the same ladder step.
func loadEq(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// Grid is a group's runs arranged strategy × load (or, for a closed-loop
// scenario, strategy × concurrency).
type Grid struct {
	// Strategies in order of first appearance.
	Strategies []string
	// Loads ascending: the load fractions, or the client counts when
	// Closed.
	Loads []float64
	// Closed is true when the runs are closed-loop (Run.Concurrency).
	Closed bool
	runs   map[string]map[float64]*Run
}

// NewGrid arranges runs (one scenario, one group) by strategy and load —
// by concurrency for closed-loop runs. A later run for the same cell
// replaces an earlier one.
func NewGrid(runs []Run) *Grid {
	g := &Grid{runs: map[string]map[float64]*Run{}}
	for i := range runs {
		r := &runs[i]
		row, ok := g.runs[r.Strategy]
		if !ok {
			row = map[float64]*Run{}
			g.runs[r.Strategy] = row
			g.Strategies = append(g.Strategies, r.Strategy)
		}
		x := r.Load
		if r.Concurrency > 0 {
			x, g.Closed = float64(r.Concurrency), true
		}
		row[x] = r
		if !slices.ContainsFunc(g.Loads, func(l float64) bool { return loadEq(l, x) }) {
			g.Loads = append(g.Loads, x)
		}
	}
	slices.Sort(g.Loads)
	return g
}

// Label names a column: "70%" for a load, "c=8" for a client count.
func (g *Grid) Label(x float64) string {
	if g.Closed {
		return "c=" + strconv.FormatFloat(x, 'f', -1, 64)
	}
	return pct(x)
}

// Axis names the columns' dimension: "load" or "concurrency".
func (g *Grid) Axis() string {
	if g.Closed {
		return "concurrency"
	}
	return "load"
}

// At returns the run of strategy at load, or nil.
func (g *Grid) At(strategy string, load float64) *Run {
	for l, r := range g.runs[strategy] {
		if loadEq(l, load) {
			return r
		}
	}
	return nil
}

// Best is the outcome of one load step of a sweep.
type Best struct {
	// Load is the fraction of saturation.
	Load float64
	// Value is the best (lowest) TTFT p90 at this load (s).
	Value float64
	// Strategies are the static settings within Tolerance of Value, in
	// sweep order.
	Strategies []string
	// Knobs are their knob values (factor % or λ), same order.
	Knobs []float64
	// Strategy and Knob are the single best setting: among the tied ones,
	// the lowest mean TTFT (then the smallest knob).
	Strategy string
	Knob     float64
	// Adaptive is the adaptive law's TTFT p90 at this load (NaN when
	// absent) and AdaptiveKnob its mean effective factor or λ.
	Adaptive, AdaptiveKnob float64
}

// BestTolerance is the relative slack within which settings count as tied
// for best: the sweep's runs share one trace, so smaller differences are
// mostly the noise of individual placements.
const BestTolerance = 0.02

// SweepBest finds, per load, the static settings of a sweep group with the
// lowest TTFT p90 (within BestTolerance; the single best among them has
// the lowest mean TTFT), and where the adaptive law sits.
// knob extracts a run's static knob (FactorPct or Lambda); adaptive names
// the adaptive strategy of the group.
func SweepBest(g *Grid, adaptive string, knob func(*Run) float64) []Best {
	var out []Best
	for _, l := range g.Loads {
		b := Best{Load: l, Value: math.Inf(1), Adaptive: math.NaN(), AdaptiveKnob: math.NaN()}
		for _, s := range g.Strategies {
			r := g.At(s, l)
			if r == nil || s == adaptive {
				continue
			}
			b.Value = min(b.Value, r.TTFT.P90)
		}
		bestMean := math.Inf(1)
		for _, s := range g.Strategies {
			r := g.At(s, l)
			if r == nil || s == adaptive {
				continue
			}
			if r.TTFT.P90 <= b.Value*(1+BestTolerance) {
				k := knob(r)
				b.Strategies = append(b.Strategies, s)
				b.Knobs = append(b.Knobs, k)
				if r.TTFT.Mean < bestMean || (r.TTFT.Mean == bestMean && k < b.Knob) {
					bestMean, b.Strategy, b.Knob = r.TTFT.Mean, s, k
				}
			}
		}
		if r := g.At(adaptive, l); r != nil {
			b.Adaptive = r.TTFT.P90
			if r.Group == GroupLambda {
				b.AdaptiveKnob = r.MeanLambda
			} else {
				b.AdaptiveKnob = r.MeanFactorPct
			}
		}
		if len(b.Strategies) > 0 {
			out = append(out, b)
		}
	}
	return out
}

// Groups of runs (des.GroupStrategies and friends; kept in step).
const (
	GroupStrategies = "strategies"
	GroupEpsilon    = "epsilon"
	GroupLambda     = "lambda"
)

// Trend classifies how the best knob moves with load.
type Trend string

// Trends.
const (
	TrendGrows   Trend = "grows with load"
	TrendShrinks Trend = "shrinks with load"
	TrendFlat    Trend = "stays flat"
	TrendMixed   Trend = "has no monotone trend"
)

// BestTrend says how the single best knob (Best.Knob) moves with load: a
// sequence that never falls and rises at least once grows, one that never
// rises and falls at least once shrinks.
func BestTrend(bs []Best) Trend {
	if len(bs) < 2 {
		return TrendFlat
	}
	seq := make([]float64, len(bs))
	for i, b := range bs {
		seq[i] = b.Knob
	}
	up, down := false, false
	for i := 1; i < len(seq); i++ {
		switch {
		case seq[i] > seq[i-1]:
			up = true
		case seq[i] < seq[i-1]:
			down = true
		}
	}
	switch {
	case up && !down:
		return TrendGrows
	case down && !up:
		return TrendShrinks
	case !up && !down:
		return TrendFlat
	}
	return TrendMixed
}

// knobList renders the tied best settings of one load with the single
// best in bold, e.g. "150, **175**".
func knobList(b Best) string {
	parts := make([]string, len(b.Knobs))
	for i, k := range b.Knobs {
		parts[i] = strconv.FormatFloat(k, 'f', -1, 64)
		if b.Strategies[i] == b.Strategy {
			parts[i] = "**" + parts[i] + "**"
		}
	}
	return strings.Join(parts, ", ")
}

// pct renders a fraction as a percentage with at most one decimal
// ("70%", "110%", "12.5%").
func pct(f float64) string { return strconv.FormatFloat(math.Round(f*1000)/10, 'f', -1, 64) + "%" }

// secs renders seconds with three significant figures ("0.452", "12.3").
func secs(s float64) string {
	switch {
	case math.IsNaN(s):
		return "–"
	case s < 10:
		return fmt.Sprintf("%.3f", s)
	case s < 100:
		return fmt.Sprintf("%.1f", s)
	}
	return fmt.Sprintf("%.0f", s)
}

// TierShare is one deciding stage's share of a run's measured requests.
type TierShare struct {
	// Tier is the stage ("1.5", "sel:rr", "none").
	Tier string
	// Pct is its share of the requests, in percent.
	Pct float64
}

// TierShares turns a tier mix (requests by deciding stage) into shares,
// largest first, ties by name; nil for an empty mix.
func TierShares(m map[string]int) []TierShare {
	total := 0
	keys := make([]string, 0, len(m))
	for k, v := range m {
		total += v
		keys = append(keys, k)
	}
	if total == 0 {
		return nil
	}
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			return m[b] - m[a]
		}
		return strings.Compare(a, b)
	})
	out := make([]TierShare, len(keys))
	for i, k := range keys {
		out[i] = TierShare{Tier: k, Pct: 100 * float64(m[k]) / float64(total)}
	}
	return out
}

// tierMix renders a tier mix as shares, largest first ("1.5 92%, sel:rr 8%").
func tierMix(m map[string]int) string {
	shares := TierShares(m)
	if len(shares) == 0 {
		return "–"
	}
	parts := make([]string, len(shares))
	for i, s := range shares {
		parts[i] = fmt.Sprintf("%s %.0f%%", s.Tier, s.Pct)
	}
	return strings.Join(parts, ", ")
}
