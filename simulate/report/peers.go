package report

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// PeerNames are the strategies that are other routers' policies
// (simulate/peers, named by their kind), in report order.
var PeerNames = []string{"dynamo", "llm-d", "sglang", "aibrix", "kubeai"}

// IsPeer reports whether a strategy is another router's policy.
func IsPeer(strategy string) bool { return slices.Contains(PeerNames, strategy) }

// PeerTie is the relative slack within which llb's TTFT p90 counts as tied
// with a peer's rather than lost: as with BestTolerance, smaller
// differences are the noise of individual placements.
const PeerTie = 0.02

// PeerRow is llb's default law against the best peer on one scenario at
// one load.
type PeerRow struct {
	Scenario string
	Load     float64
	// Mine is the default law's run; BestP90 and BestGoodput the peers'
	// runs with the lowest TTFT p90 and the highest goodput.
	Mine, BestP90, BestGoodput *Run
	// Lost names the peers whose TTFT p90 is lower than Mine's by more
	// than PeerTie, with their p90s; empty when llb wins or ties.
	Lost []string
}

// Verdict is "win", "tie" (within PeerTie of the best peer) or "lose".
func (r *PeerRow) Verdict() string {
	switch {
	case len(r.Lost) > 0:
		return "lose"
	case r.Mine.TTFT.P90 > r.BestP90.TTFT.P90:
		return "tie"
	}
	return "win"
}

// PeerComparison compares strategy (llb's default law) with every peer on
// each open-loop scenario holding peer runs, at each of loads.
func PeerComparison(d *Dataset, strategy string, loads []float64) []PeerRow {
	var out []PeerRow
	for _, sc := range d.Scenarios {
		if len(sc.Concurrency) > 0 {
			continue
		}
		g := NewGrid(d.Select(sc.Name, GroupStrategies))
		for _, l := range loads {
			mine := g.At(strategy, l)
			if mine == nil {
				continue
			}
			row := PeerRow{Scenario: sc.Name, Load: l, Mine: mine}
			for _, p := range PeerNames {
				r := g.At(p, l)
				if r == nil {
					continue
				}
				if row.BestP90 == nil || r.TTFT.P90 < row.BestP90.TTFT.P90 {
					row.BestP90 = r
				}
				if row.BestGoodput == nil || r.Goodput > row.BestGoodput.Goodput {
					row.BestGoodput = r
				}
				if r.TTFT.P90*(1+PeerTie) < mine.TTFT.P90 {
					row.Lost = append(row.Lost, fmt.Sprintf("%s %s s", p, secs(r.TTFT.P90)))
				}
			}
			if row.BestP90 != nil {
				out = append(out, row)
			}
		}
	}
	return out
}

// AutoRow is the self-tuning law against the best static setting of the ε
// sweep at one load.
type AutoRow struct {
	Scenario string
	Load     float64
	// Auto is the self-tuning law's TTFT p90; Best the lowest static
	// setting's, BestName its strategy; Ratio is Auto / Best.
	Auto, Best, Ratio float64
	BestName          string
}

// AutoVsStatic compares strategy auto (a strategies-group run) with the
// best static hard@<factor> of the scenario's ε sweep at every load.
func AutoVsStatic(d *Dataset, scenario, auto string) []AutoRow {
	sweep := NewGrid(d.Select(scenario, GroupEpsilon))
	own := NewGrid(d.Select(scenario, GroupStrategies))
	var out []AutoRow
	for _, l := range sweep.Loads {
		a := own.At(auto, l)
		if a == nil {
			continue
		}
		row := AutoRow{Scenario: scenario, Load: l, Auto: a.TTFT.P90, Best: math.Inf(1)}
		for _, s := range sweep.Strategies {
			if !strings.HasPrefix(s, "hard@") {
				continue
			}
			if r := sweep.At(s, l); r != nil && r.TTFT.P90 < row.Best {
				row.Best, row.BestName = r.TTFT.P90, s
			}
		}
		if math.IsInf(row.Best, 1) || row.Best <= 0 {
			continue
		}
		row.Ratio = row.Auto / row.Best
		out = append(out, row)
	}
	return out
}

// writePeers writes the section comparing llb's default law with the
// peers: per scenario and load, its TTFT p90 and goodput against the best
// peer's, and a tally per engine model.
func writePeers(m *mdWriter, d *Dataset, t Targets) {
	rows := PeerComparison(d, t.Strategy, t.PeerLoads)
	if len(rows) == 0 {
		return
	}
	m.printf("## llb against the peers\n\n")
	m.printf("`%s` (llb's default law) against the other routers' policies (`simulate/peers`: %s, each with its project's shipped defaults) at %s of saturation. A loss is a peer's TTFT p90 lower than llb's by more than %.0f%%; a tie is within it. Goodput counts requests within the scenario's TTFT SLO.\n\n",
		t.Strategy, strings.Join(PeerNames, ", "), pcts(t.PeerLoads), 100*PeerTie)
	tally := map[string]map[string]int{}
	var table [][]string
	for i := range rows {
		r := &rows[i]
		model := "load-factor"
		if strings.HasSuffix(r.Scenario, "-step") {
			model = "step"
		}
		if tally[model] == nil {
			tally[model] = map[string]int{}
		}
		v := r.Verdict()
		tally[model][v]++
		verdict := v
		if v == "lose" {
			verdict = "**lose** to " + strings.Join(r.Lost, ", ")
		}
		table = append(table, []string{r.Scenario, pct(r.Load),
			secs(r.Mine.TTFT.P90), fmt.Sprintf("%s %s", r.BestP90.Strategy, secs(r.BestP90.TTFT.P90)),
			fmt.Sprintf("%.1f", r.Mine.Goodput), fmt.Sprintf("%s %.1f", r.BestGoodput.Strategy, r.BestGoodput.Goodput),
			fmt.Sprintf("%.3f", r.Mine.HitRate), verdict})
	}
	for _, model := range []string{"load-factor", "step"} {
		if c := tally[model]; c != nil {
			m.printf("- %s engine model: **%d wins, %d ties, %d losses** of %d scenario-loads.\n", model, c["win"], c["tie"], c["lose"], c["win"]+c["tie"]+c["lose"])
		}
	}
	m.printf("\n")
	m.table([]string{"scenario", "load", t.Strategy + " TTFT p90 s", "best peer TTFT p90 s", t.Strategy + " goodput", "best peer goodput", t.Strategy + " hit", "verdict"}, table)
}

func pcts(ls []float64) string {
	s := make([]string, len(ls))
	for i, l := range ls {
		s[i] = pct(l)
	}
	return strings.Join(s, ", ")
}
