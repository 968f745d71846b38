package report

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// SeedCell is one law on one scenario at one load, measured on several
// seeds against the best peer of each seed.
type SeedCell struct {
	Scenario string
	Load     float64
	// Ratios are the law's TTFT p90 over the best peer's, one per seed
	// that holds both (in the datasets' order); Geomean is their geometric
	// mean.
	Ratios  []float64
	Geomean float64
	// Law and Best are the mean TTFT p90 (s) over those seeds of the law
	// and of each seed's best peer.
	Law, Best float64
}

// Verdict is "win" (Geomean below 1 − PeerTie), "tie" (within PeerTie)
// or "lose".
func (c *SeedCell) Verdict() string {
	switch {
	case c.Geomean < 1-PeerTie:
		return "win"
	case c.Geomean <= 1+PeerTie:
		return "tie"
	}
	return "lose"
}

// SeedComparison compares law with the best peer of every seed (each
// dataset one seed of the same sweep) on every open-loop scenario and load
// that some dataset holds both for. Cells come in scenario order of the
// first dataset that has them, then by load.
func SeedComparison(ds []*Dataset, law string) []SeedCell {
	type key struct {
		scenario string
		load     float64
	}
	cells := map[key]*SeedCell{}
	var order []key
	for _, d := range ds {
		for _, sc := range d.Scenarios {
			if len(sc.Concurrency) > 0 {
				continue
			}
			g := NewGrid(d.Select(sc.Name, GroupStrategies))
			for _, l := range g.Loads {
				mine := g.At(law, l)
				if mine == nil {
					continue
				}
				var best *Run
				for _, p := range PeerNames {
					if r := g.At(p, l); r != nil && (best == nil || r.TTFT.P90 < best.TTFT.P90) {
						best = r
					}
				}
				if best == nil || best.TTFT.P90 <= 0 {
					continue
				}
				k := key{sc.Name, l}
				c := cells[k]
				if c == nil {
					c = &SeedCell{Scenario: sc.Name, Load: l}
					cells[k] = c
					order = append(order, k)
				}
				c.Ratios = append(c.Ratios, mine.TTFT.P90/best.TTFT.P90)
				c.Law += mine.TTFT.P90
				c.Best += best.TTFT.P90
			}
		}
	}
	out := make([]SeedCell, 0, len(order))
	for _, k := range order {
		c := cells[k]
		n := float64(len(c.Ratios))
		c.Geomean = geomean(c.Ratios)
		c.Law /= n
		c.Best /= n
		out = append(out, *c)
	}
	return out
}

// geomean is the geometric mean of positive xs (1 when empty).
func geomean(xs []float64) float64 {
	if len(xs) == 0 {
		return 1
	}
	s := 0.0
	for _, x := range xs {
		s += math.Log(x)
	}
	return math.Exp(s / float64(len(xs)))
}

// engineModel is a scenario's engine model as the report names it.
func engineModel(scenario string) string {
	if strings.HasSuffix(scenario, "-step") {
		return "step"
	}
	return "load-factor"
}

// WriteSeedComparison prints, for each law, the tally of wins, ties and
// losses against the best peer per engine model with the geometric mean
// of the cells, then the cells of the first law worst first (at most
// worst of them; all with worst < 0).
func WriteSeedComparison(w io.Writer, ds []*Dataset, laws []string, worst int) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d seeds; a cell is one scenario at one load, its ratio the geometric mean over the seeds of the law's TTFT p90 / the best peer's (win < %.2f, tie ≤ %.2f)\n\n",
		len(ds), 1-PeerTie, 1+PeerTie)
	fmt.Fprintf(&sb, "%-12s %-12s %5s %5s %6s %8s %8s\n", "law", "model", "wins", "ties", "losses", "geomean", "worst")
	var first []SeedCell
	for i, law := range laws {
		cells := SeedComparison(ds, law)
		if i == 0 {
			first = cells
		}
		for _, model := range []string{"load-factor", "step"} {
			var rs []float64
			tally := map[string]int{}
			worstCell := 0.0
			for j := range cells {
				if engineModel(cells[j].Scenario) != model {
					continue
				}
				rs = append(rs, cells[j].Geomean)
				tally[cells[j].Verdict()]++
				worstCell = max(worstCell, cells[j].Geomean)
			}
			if len(rs) == 0 {
				continue
			}
			fmt.Fprintf(&sb, "%-12s %-12s %5d %5d %6d %7.3f× %7.2f×\n", law, model, tally["win"], tally["tie"], tally["lose"], geomean(rs), worstCell)
		}
	}
	if len(first) > 0 && len(laws) > 0 {
		slices.SortStableFunc(first, func(a, b SeedCell) int { return cmp.Compare(b.Geomean, a.Geomean) })
		if worst >= 0 && worst < len(first) {
			first = first[:worst]
		}
		fmt.Fprintf(&sb, "\n%s, cells worst first:\n%-32s %5s %8s %9s %9s  %s\n", laws[0], "scenario", "load", "geomean", "law p90", "best p90", "per seed")
		for _, c := range first {
			per := make([]string, len(c.Ratios))
			for i, r := range c.Ratios {
				per[i] = fmt.Sprintf("%.2f", r)
			}
			fmt.Fprintf(&sb, "%-32s %5s %7.3f× %9s %9s  %s\n", c.Scenario, pct(c.Load), c.Geomean, secs(c.Law), secs(c.Best), strings.Join(per, " "))
		}
	}
	_, err := io.WriteString(w, sb.String())
	return err
}
