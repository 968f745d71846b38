package report

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// ReadmeFile is the report's markdown file name.
const ReadmeFile = "README.md"

// Write renders the whole report into dir: README.md and every figure's
// SVG. It returns the files written (relative to dir).
func Write(dir string, d *Dataset, t Targets) ([]string, error) {
	if err := d.Validate(); err != nil {
		return nil, err
	}
	figs, err := Figures(d)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("report dir: %w", err)
	}
	var files []string
	for i := range figs {
		if err := writeFile(filepath.Join(dir, figs[i].File), figs[i].WriteSVG); err != nil {
			return files, err
		}
		files = append(files, figs[i].File)
	}
	err = writeFile(filepath.Join(dir, ReadmeFile), func(w io.Writer) error { return WriteMarkdown(w, d, figs, t) })
	if err != nil {
		return files, err
	}
	return append(files, ReadmeFile), nil
}

// writeFile writes a file through fn, reporting close errors too.
func writeFile(path string, fn func(io.Writer) error) (err error) {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close %s: %w", path, cerr)
		}
	}()
	bw := bufio.NewWriter(f)
	if err := fn(bw); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// mdWriter accumulates markdown and remembers the first write error.
type mdWriter struct {
	w   io.Writer
	err error
}

func (m *mdWriter) printf(format string, args ...any) {
	if m.err == nil {
		_, m.err = fmt.Fprintf(m.w, format, args...)
	}
}

// table writes a markdown table.
func (m *mdWriter) table(head []string, rows [][]string) {
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	cells := make([]string, len(head))
	for i, h := range head {
		cells[i] = esc(h)
	}
	m.printf("| %s |\n|%s\n", strings.Join(cells, " | "), strings.Repeat(" --- |", len(head)))
	for _, r := range rows {
		for i := range r {
			r[i] = esc(r[i])
		}
		m.printf("| %s |\n", strings.Join(r, " | "))
	}
	m.printf("\n")
}

// WriteMarkdown renders the report's markdown: header and method, the
// targets, a section per scenario (strategy tables at the target load and
// across loads, the figures, the ε and λ sweeps with their best settings
// and where the adaptive laws sit). figs are the figures to link (as
// written next to the markdown).
func WriteMarkdown(w io.Writer, d *Dataset, figs []Figure, t Targets) error {
	m := &mdWriter{w: w}
	meta := d.Meta
	m.printf("# llb routing report\n\n")
	m.printf("Source: **%s** (`%s`), results schema %d", meta.Source, meta.Generator, meta.Schema)
	if meta.Module != "" {
		m.printf(" · %s", meta.Module)
	}
	if meta.Commit != "" {
		m.printf(" @ `%s`", meta.Commit)
	}
	if meta.GoVersion != "" {
		m.printf(" · %s", meta.GoVersion)
	}
	m.printf(" · workload seed %d. The raw numbers are in `results.jsonl` next to this file; `llbsim report` rebuilds this page from them.\n\n", meta.Seed)
	if meta.Method != "" {
		m.printf("## Method\n\n%s\n\n", meta.Method)
	}
	if len(meta.Notes) > 0 {
		m.printf("### Caveats\n\n")
		for _, n := range meta.Notes {
			m.printf("- %s\n", n)
		}
		m.printf("\n")
	}

	m.printf("## Targets (issues 7, 16 and 18)\n\n")
	var rows [][]string
	for _, r := range t.Evaluate(d) {
		verdict := "**pass**"
		switch {
		case r.Missing:
			verdict = "not measured"
		case !r.Pass:
			verdict = "**MISS**"
		}
		rows = append(rows, []string{r.Target, r.Scenario, r.Measured, verdict})
	}
	m.table([]string{"target", "scenario", "measured", "verdict"}, rows)

	writePeers(m, d, t)

	if f := Findings(d, t); len(f) > 0 {
		m.printf("## Findings (computed from the runs below)\n\n")
		for _, line := range f {
			m.printf("- %s\n", line)
		}
		m.printf("\n")
	}

	m.printf("## Scenarios\n\n")
	rows = rows[:0]
	for _, s := range d.Scenarios {
		sat := fmt.Sprintf("%.3g req/s", s.SaturationRate)
		if len(s.Concurrency) > 0 {
			sat = fmt.Sprintf("closed loop, %d–%d in flight", s.Concurrency[0], s.Concurrency[len(s.Concurrency)-1])
		}
		rows = append(rows, []string{s.Name, s.Workload, fmt.Sprint(s.Workers), fmt.Sprint(s.CacheBlocksPerWorker),
			fmt.Sprintf("%d blocks (%.2f× fleet cache)", s.WorkingSetBlocks, s.Pressure),
			sat, fmt.Sprintf("%.3f", s.OracleHitRate)})
	}
	m.table([]string{"scenario", "workload", "workers", "cache blocks / worker", "working set", "saturation (load 100%)", "oracle hit rate"}, rows)

	for _, s := range d.Scenarios {
		writeScenario(m, d, s, figs, t.Load)
	}
	return m.err
}

// writeScenario writes one scenario's section.
func writeScenario(m *mdWriter, d *Dataset, s Scenario, figs []Figure, load float64) {
	if len(s.Concurrency) > 0 {
		writeClosedScenario(m, d, s, figs)
		return
	}
	m.printf("## %s\n\n", s.Name)
	if s.Description != "" {
		m.printf("%s\n\n", s.Description)
	}
	m.printf("- Workload: %s; %d requests, the first %d are warm-up.\n", s.Workload, s.Requests, s.Warmup)
	m.printf("- Fleet: %d workers; %s.\n", s.Workers, s.Worker)
	m.printf("- Working set: %d distinct blocks = %.2f× the fleet's %d cache blocks; oracle hit rate %.3f.\n",
		s.WorkingSetBlocks, s.Pressure, s.Workers*s.CacheBlocksPerWorker, s.OracleHitRate)
	if s.PooledHitRate > 0 {
		m.printf("- Pooled-cache bound: one worker holding the whole fleet's cache and batch, serving the same trace at %s load, hits **%.3f** (%s of the oracle): what LRU caching keeps of this working set when no routing decision can lose locality.\n",
			pct(s.PooledLoad), s.PooledHitRate, RatioPct(s.PooledHitRate, s.OracleHitRate))
	}
	m.printf("- Saturation (load 100%%): **%.3g req/s** with `%s` (%s); the lowest unstable rate probed was %.3g req/s. At that rate the trace's arrivals last %.0f s.\n",
		s.SaturationRate, s.SaturationStrategy, s.SaturationCriterion, s.SaturationUnstable, s.ArrivalSpan)
	if s.NativeRate > 0 {
		var parts []string
		for _, l := range NewGrid(d.Select(s.Name, GroupStrategies)).Loads {
			parts = append(parts, fmt.Sprintf("%s: ×%.2f", pct(l), l*s.SaturationRate/s.NativeRate))
		}
		m.printf("- Recorded arrivals at %.3g req/s, replayed with time compressed to each load (the trace's gaps divided by load × saturation / %.3g): %s.\n",
			s.NativeRate, s.NativeRate, strings.Join(parts, ", "))
	}
	if len(s.Probes) > 0 {
		parts := make([]string, len(s.Probes))
		for i, p := range s.Probes {
			v := "unstable"
			if p.Stable {
				v = "stable"
			}
			parts[i] = fmt.Sprintf("%.3g (%s, wait p90 %s s)", p.Rate, v, secs(p.QueueWaitP90))
		}
		m.printf("- Probes: %s.\n", strings.Join(parts, "; "))
	}
	m.printf("\n")

	runs := d.Select(s.Name, GroupStrategies)
	if len(runs) > 0 {
		g := NewGrid(runs)
		m.printf("### Strategies at %s load\n\n", pct(load))
		var rows [][]string
		oracle := math.NaN()
		for _, st := range g.Strategies {
			r := g.At(st, load)
			if r == nil {
				continue
			}
			oracle = r.OracleHitRate
			rows = append(rows, []string{st, secs(r.TTFT.P50), secs(r.TTFT.P90), secs(r.TTFT.P99), secs(r.E2E.P90),
				fmt.Sprintf("%.1f", r.Throughput), fmt.Sprintf("%.1f", r.Goodput),
				fmt.Sprintf("%.3f", r.HitRate), RatioPct(r.HitRate, r.OracleHitRate), tierMix(r.TierMix),
				fmt.Sprint(r.Spills), fmt.Sprint(r.Reliefs), fmt.Sprint(r.ColdSeeds),
				fmt.Sprintf("%.2f", r.LoadSkew), secs(r.HottestTTFTP90)})
		}
		if len(rows) > 0 {
			if s.PooledHitRate > 0 {
				rows = append(rows, []string{"pooled cache (bound)", "", "", "", "", "", "", fmt.Sprintf("%.3f", s.PooledHitRate), RatioPct(s.PooledHitRate, oracle), "", "", "", "", "", ""})
			}
			rows = append(rows, []string{"oracle (bound)", "", "", "", "", "", "", fmt.Sprintf("%.3f", oracle), "100%", "", "", "", "", "", ""})
			m.table([]string{"strategy", "TTFT p50 s", "TTFT p90 s", "TTFT p99 s", "E2E p90 s", "req/s", "goodput req/s",
				"hit rate", "of oracle", "tier mix", "spills", "reliefs", "cold seeds", "load skew", "hottest TTFT p90 s"}, rows)
			m.printf("Goodput counts requests with TTFT ≤ %g s. Load skew is max/mean of the workers' time-averaged in-flight requests; the hottest worker is the one with the most.\n\n", runs[0].TTFTSLO)
		}
		byLoad(m, g, "TTFT p90 (s) by load", func(r *Run) string { return secs(r.TTFT.P90) })
		byLoad(m, g, "TTFT p50 (s) by load", func(r *Run) string { return secs(r.TTFT.P50) })
		if s.NativeRate > 0 {
			byLoad(m, g, "TTFT p99 (s) by load", func(r *Run) string { return secs(r.TTFT.P99) })
		}
		byLoad(m, g, fmt.Sprintf("Goodput (req/s within TTFT %g s) by load", runs[0].TTFTSLO), func(r *Run) string { return fmt.Sprintf("%.1f", r.Goodput) })
		byLoad(m, g, "Hit rate by load", func(r *Run) string { return fmt.Sprintf("%.3f", r.HitRate) })
		byLoad(m, g, "Throughput (req/s) by load", func(r *Run) string { return fmt.Sprintf("%.1f", r.Throughput) })
	}
	for _, f := range figs {
		if f.Scenario == s.Name && !strings.Contains(f.File, "-heat") {
			m.printf("![%s](%s)\n\n", f.Title, f.File)
		}
	}
	writeSweep(m, d, s, figs, GroupEpsilon, "adaptive", "ε sweep (hard law, LOXILB_KV_MEAN_LOAD_FACTOR = (1+ε)·100)", "factor",
		func(r *Run) float64 { return float64(r.FactorPct) })
	writeSweep(m, d, s, figs, GroupLambda, "adaptive-soft", "λ sweep (soft law, LOXILB_KV_LOAD_PENALTY)", "λ",
		func(r *Run) float64 { return float64(r.Lambda) })
}

// writeClosedScenario writes a closed-loop scenario's section: the
// strategies at every client count.
func writeClosedScenario(m *mdWriter, d *Dataset, s Scenario, figs []Figure) {
	m.printf("## %s\n\n", s.Name)
	if s.Description != "" {
		m.printf("%s\n\n", s.Description)
	}
	m.printf("- Workload: %s; %d requests, the first %d are warm-up.\n", s.Workload, s.Requests, s.Warmup)
	m.printf("- Fleet: %d workers; %s.\n", s.Workers, s.Worker)
	m.printf("- Working set: %d distinct blocks = %.2f× the fleet's %d cache blocks; oracle hit rate %.3f.\n",
		s.WorkingSetBlocks, s.Pressure, s.Workers*s.CacheBlocksPerWorker, s.OracleHitRate)
	levels := make([]string, len(s.Concurrency))
	for i, c := range s.Concurrency {
		levels[i] = fmt.Sprint(c)
	}
	m.printf("- Closed loop: %s clients, each sending its next request when the previous one completes; saturation is where throughput stops growing.\n\n", strings.Join(levels, ", "))
	runs := d.Select(s.Name, GroupStrategies)
	if len(runs) == 0 {
		return
	}
	g := NewGrid(runs)
	byLoad(m, g, "TTFT p90 (s) by concurrency", func(r *Run) string { return secs(r.TTFT.P90) })
	byLoad(m, g, "TTFT p50 (s) by concurrency", func(r *Run) string { return secs(r.TTFT.P50) })
	byLoad(m, g, "Hit rate by concurrency", func(r *Run) string { return fmt.Sprintf("%.3f", r.HitRate) })
	byLoad(m, g, "Throughput (req/s) by concurrency", func(r *Run) string { return fmt.Sprintf("%.1f", r.Throughput) })
	byLoad(m, g, "Spills by concurrency", func(r *Run) string { return fmt.Sprint(r.Spills) })
	for _, f := range figs {
		if f.Scenario == s.Name {
			m.printf("![%s](%s)\n\n", f.Title, f.File)
		}
	}
}

// byLoad writes a strategy × load (or × concurrency) table of one metric.
func byLoad(m *mdWriter, g *Grid, title string, cell func(*Run) string) {
	m.printf("### %s\n\n", title)
	head := []string{"strategy"}
	for _, l := range g.Loads {
		head = append(head, g.Label(l))
	}
	var rows [][]string
	for _, st := range g.Strategies {
		row := []string{st}
		for _, l := range g.Loads {
			if r := g.At(st, l); r != nil {
				row = append(row, cell(r))
			} else {
				row = append(row, "–")
			}
		}
		rows = append(rows, row)
	}
	m.table(head, rows)
}

// writeSweep writes one sweep's table, best settings and verdict.
func writeSweep(m *mdWriter, d *Dataset, s Scenario, figs []Figure, group, adaptive, title, knobName string, knob func(*Run) float64) {
	runs := d.Select(s.Name, group)
	if len(runs) == 0 {
		return
	}
	g := NewGrid(runs)
	m.printf("### %s\n\n", title)
	byLoad(m, g, "TTFT p90 (s), "+knobName+" × load", func(r *Run) string { return secs(r.TTFT.P90) })
	bests := SweepBest(g, adaptive, knob)
	var rows [][]string
	for _, b := range bests {
		ad, ratio, eff := "–", "–", "–"
		if !math.IsNaN(b.Adaptive) {
			ad, ratio = secs(b.Adaptive), fmt.Sprintf("%.2f×", b.Adaptive/b.Value)
		}
		if !math.IsNaN(b.AdaptiveKnob) && b.AdaptiveKnob > 0 {
			eff = fmt.Sprintf("%.0f", b.AdaptiveKnob)
		}
		rows = append(rows, []string{pct(b.Load), knobList(b), secs(b.Value), ad, ratio, eff})
	}
	m.table([]string{"load", "best static " + knobName + " (tied within 2%)", "best TTFT p90 s", adaptive + " TTFT p90 s", adaptive + " / best", adaptive + " mean effective " + knobName}, rows)
	m.printf("Best setting per load: the lowest TTFT p90, ties within %.0f%% broken by the lowest mean TTFT (bold). Across the loads the best %s **%s**.", 100*BestTolerance, knobName, BestTrend(bests))
	if group == GroupEpsilon {
		m.printf(" The seed page claims the best ε grows with load (tight at moderate rates, loose at saturation): %s here.", claimVerdict(BestTrend(bests)))
	}
	m.printf("\n\n")
	for _, f := range figs {
		if f.Scenario == s.Name && strings.HasPrefix(f.File, s.Name+"-"+map[string]string{GroupEpsilon: "epsilon", GroupLambda: "lambda"}[group]+"-heat") {
			m.printf("![%s](%s)\n\n", f.Title, f.File)
		}
	}
}

// claimVerdict says whether a trend reproduces "the best ε grows with load".
func claimVerdict(tr Trend) string {
	if tr == TrendGrows {
		return "**reproduced**"
	}
	return "**not reproduced**"
}

// Findings are one-line statements computed from the dataset: per
// scenario, how close the target strategy's hit rate comes to the pooled-
// cache bound and the oracle at the target load, how the best ε and λ move
// with load, and how far the adaptive laws sit from the best static
// setting.
func Findings(d *Dataset, t Targets) []string {
	var out []string
	for _, s := range d.Scenarios {
		if r := t.find(d, s.Name, t.Strategy); r != nil && s.PooledHitRate > 0 && r.OracleHitRate > 0 {
			out = append(out, fmt.Sprintf("%s: at %s load %s hits %.3f, %s of the pooled-cache bound (%.3f) and %s of the oracle (%.3f).",
				s.Name, pct(t.Load), t.Strategy, r.HitRate, RatioPct(r.HitRate, s.PooledHitRate), s.PooledHitRate,
				RatioPct(r.HitRate, r.OracleHitRate), r.OracleHitRate))
		}
		for _, sw := range []struct {
			group, adaptive, name string
			knob                  func(*Run) float64
		}{
			{GroupEpsilon, "adaptive", "factor (1+ε)·100", func(r *Run) float64 { return float64(r.FactorPct) }},
			{GroupLambda, "adaptive-soft", "λ", func(r *Run) float64 { return float64(r.Lambda) }},
		} {
			runs := d.Select(s.Name, sw.group)
			if len(runs) == 0 {
				continue
			}
			bests := SweepBest(NewGrid(runs), sw.adaptive, sw.knob)
			parts := make([]string, len(bests))
			lo, hi := math.Inf(1), math.Inf(-1)
			for i, b := range bests {
				parts[i] = fmt.Sprintf("%s→%g", pct(b.Load), b.Knob)
				if !math.IsNaN(b.Adaptive) && b.Value > 0 {
					lo, hi = min(lo, b.Adaptive/b.Value), max(hi, b.Adaptive/b.Value)
				}
			}
			line := fmt.Sprintf("%s: the best %s by load is %s — it %s", s.Name, sw.name, strings.Join(parts, ", "), BestTrend(bests))
			if sw.group == GroupEpsilon {
				line += fmt.Sprintf(" (the seed page's claim that it grows with load is %s)", strings.Trim(claimVerdict(BestTrend(bests)), "*"))
			}
			if !math.IsInf(lo, 1) {
				line += fmt.Sprintf("; %s's TTFT p90 is %.2f×–%.2f× the best static setting's", sw.adaptive, lo, hi)
			}
			out = append(out, line+".")
		}
	}
	return out
}

// RatioPct renders a/b as a percentage with one decimal ("88.8%"), or "–"
// when b is not positive.
func RatioPct(a, b float64) string {
	if b <= 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*a/b)
}

// WriteSummary writes the plain-text summary `make sim` prints: per
// scenario the strategies at the target load, the targets, and the sweeps'
// verdicts.
func WriteSummary(w io.Writer, d *Dataset, t Targets) error {
	m := &mdWriter{w: w}
	for _, s := range d.Scenarios {
		runs := d.Select(s.Name, GroupStrategies)
		if len(runs) == 0 {
			continue
		}
		g := NewGrid(runs)
		if g.Closed {
			m.printf("\n%s (closed loop): TTFT p90 s / hit rate by requests in flight\n  %-14s", s.Name, "strategy")
			for _, c := range g.Loads {
				m.printf(" %13s", g.Label(c))
			}
			m.printf("\n")
			for _, st := range g.Strategies {
				m.printf("  %-14s", st)
				for _, c := range g.Loads {
					if r := g.At(st, c); r != nil {
						m.printf(" %7s/%.3f", secs(r.TTFT.P90), r.HitRate)
					} else {
						m.printf(" %13s", "–")
					}
				}
				m.printf("\n")
			}
			continue
		}
		m.printf("\n%s at %s load (%.3g req/s of %.3g saturation; oracle hit rate %.3f, pooled-cache bound %.3f)\n",
			s.Name, pct(t.Load), t.Load*s.SaturationRate, s.SaturationRate, s.OracleHitRate, s.PooledHitRate)
		m.printf("  %-14s %9s %9s %9s %7s %8s %8s %6s %9s\n", "strategy", "ttft p50", "ttft p90", "ttft p99", "hit", "of orac", "req/s", "skew", "hot p90")
		for _, st := range g.Strategies {
			r := g.At(st, t.Load)
			if r == nil {
				continue
			}
			m.printf("  %-14s %9s %9s %9s %7.3f %8s %8.1f %6.2f %9s\n", st, secs(r.TTFT.P50), secs(r.TTFT.P90), secs(r.TTFT.P99),
				r.HitRate, RatioPct(r.HitRate, r.OracleHitRate), r.Throughput, r.LoadSkew, secs(r.HottestTTFTP90))
		}
		for _, sw := range []struct {
			group, adaptive, name string
			knob                  func(*Run) float64
		}{
			{GroupEpsilon, "adaptive", "factor", func(r *Run) float64 { return float64(r.FactorPct) }},
			{GroupLambda, "adaptive-soft", "λ", func(r *Run) float64 { return float64(r.Lambda) }},
		} {
			sr := d.Select(s.Name, sw.group)
			if len(sr) == 0 {
				continue
			}
			bests := SweepBest(NewGrid(sr), sw.adaptive, sw.knob)
			parts := make([]string, len(bests))
			for i, b := range bests {
				parts[i] = fmt.Sprintf("%s→%g", pct(b.Load), b.Knob)
			}
			m.printf("  best %s by load: %s; the best %s %s\n", sw.name, strings.Join(parts, ", "), sw.name, BestTrend(bests))
		}
	}
	m.printf("\ntargets (issues 7, 16 and 18):\n")
	for _, r := range t.Evaluate(d) {
		m.printf("  %s\n", r)
	}
	return m.err
}
