package report

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Plot sizes.
const (
	plotW = 16 * vg.Centimeter
	plotH = 10 * vg.Centimeter
)

// Figure is one SVG plot the report embeds.
type Figure struct {
	// File is the file name (no directory), e.g. "shared-prefix-ttft.svg".
	File string
	// Title is the caption.
	Title string
	// Scenario is the scenario it belongs to.
	Scenario string
	plot     *plot.Plot
}

// WriteSVG renders the figure as SVG to w.
func (f *Figure) WriteSVG(w io.Writer) error {
	wt, err := f.plot.WriterTo(plotW, plotH, "svg")
	if err != nil {
		return fmt.Errorf("figure %s: %w", f.File, err)
	}
	if _, err := wt.WriteTo(w); err != nil {
		return fmt.Errorf("figure %s: %w", f.File, err)
	}
	return nil
}

// Figures builds every figure the dataset supports, per scenario: TTFT
// p90, hit rate and throughput against load per strategy; and for the ε
// and λ sweeps a heat map (knob × load → TTFT p90) with the best setting
// per load and the adaptive law's effective knob drawn on top.
func Figures(d *Dataset) ([]Figure, error) {
	var out []Figure
	for _, sc := range d.Scenarios {
		if runs := d.Select(sc.Name, GroupStrategies); len(runs) > 0 {
			g := NewGrid(runs)
			for _, m := range []struct {
				suffix, title, ylabel string
				log                   bool
				value                 func(*Run) float64
			}{
				{"ttft", "TTFT p90 vs " + g.Axis(), "TTFT p90 (s, log)", true, func(r *Run) float64 { return r.TTFT.P90 }},
				{"hit", "Prefix-cache hit rate vs " + g.Axis(), "hit rate (tokens)", false, func(r *Run) float64 { return r.HitRate }},
				{"throughput", "Throughput vs " + g.Axis(), "completed requests/s", false, func(r *Run) float64 { return r.Throughput }},
			} {
				p, err := linePlot(g, sc, m.title, m.ylabel, m.log, m.value)
				if err != nil {
					return nil, err
				}
				if m.suffix == "hit" && len(g.Loads) > 0 {
					if err := addOracle(p, g); err != nil {
						return nil, err
					}
				}
				out = append(out, Figure{File: sc.Name + "-" + m.suffix + ".svg", Title: m.title, Scenario: sc.Name, plot: p})
			}
		}
		for _, sw := range []struct {
			group, adaptive, knobName, suffix string
			knob                              func(*Run) float64
		}{
			{GroupEpsilon, "adaptive", "(1+ε)·100", "epsilon", func(r *Run) float64 { return float64(r.FactorPct) }},
			{GroupLambda, "adaptive-soft", "λ", "lambda", func(r *Run) float64 { return float64(r.Lambda) }},
		} {
			runs := d.Select(sc.Name, sw.group)
			if len(runs) == 0 {
				continue
			}
			p, err := heatMap(NewGrid(runs), sc, sw.adaptive, sw.knobName, sw.knob)
			if err != nil {
				return nil, err
			}
			out = append(out, Figure{File: sc.Name + "-" + sw.suffix + "-heat.svg", Title: sw.suffix + " sweep: TTFT p90 by " + sw.knobName + " and load", Scenario: sc.Name, plot: p})
		}
	}
	return out, nil
}

// loadTicks labels the grid's columns (load fractions as percentages,
// client counts as numbers).
func loadTicks(g *Grid) plot.ConstantTicks {
	t := make(plot.ConstantTicks, len(g.Loads))
	for i, l := range g.Loads {
		label := g.Label(l)
		if g.Closed {
			label = strconv.FormatFloat(l, 'f', -1, 64)
		}
		t[i] = plot.Tick{Value: l, Label: label}
	}
	return t
}

// linePlot draws one line per strategy of value against load.
func linePlot(g *Grid, sc Scenario, title, ylabel string, logY bool, value func(*Run) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s — %s", sc.Name, title)
	p.X.Label.Text = fmt.Sprintf("offered load (fraction of saturation = %.3g req/s)", sc.SaturationRate)
	if g.Closed {
		// Client counts double along the ladder: a log axis spaces them.
		p.X.Label.Text = "requests in flight (closed-loop clients, log)"
		p.X.Scale = plot.LogScale{}
	}
	p.Y.Label.Text = ylabel
	p.X.Tick.Marker = loadTicks(g)
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Legend.Top = true
	p.Legend.Left = true
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, s := range g.Strategies {
		var xys plotter.XYs
		for _, l := range g.Loads {
			r := g.At(s, l)
			if r == nil {
				continue
			}
			v := value(r)
			if logY {
				v = max(v, 1e-3) // a log axis cannot show 0
			}
			lo, hi = min(lo, v), max(hi, v)
			xys = append(xys, plotter.XY{X: l, Y: v})
		}
		if len(xys) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("plot %s: %w", s, err)
		}
		line.Color = plotutil.Color(i)
		line.Dashes = plotutil.Dashes(i / 7)
		points.Color = plotutil.Color(i)
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		p.Legend.Add(s, line, points)
	}
	if logY && lo <= hi {
		// Pin a positive range: with a single value the automatic range is
		// padded around it and can reach 0, which a log axis cannot show.
		p.Y.Min, p.Y.Max = lo/1.5, hi*1.5
	}
	return p, nil
}

// addOracle draws the oracle hit-rate bound as a dashed black line.
func addOracle(p *plot.Plot, g *Grid) error {
	var xys plotter.XYs
	for _, l := range g.Loads {
		for _, s := range g.Strategies {
			if r := g.At(s, l); r != nil && r.OracleHitRate > 0 {
				xys = append(xys, plotter.XY{X: l, Y: r.OracleHitRate})
				break
			}
		}
	}
	if len(xys) == 0 {
		return nil
	}
	line, err := plotter.NewLine(xys)
	if err != nil {
		return fmt.Errorf("oracle line: %w", err)
	}
	line.Color = color.Black
	line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(line)
	p.Legend.Add("oracle", line)
	return nil
}

// heatGrid is a sweep's TTFT p90 on index coordinates: column = load step,
// row = static knob setting.
type heatGrid struct {
	z        [][]float64 // [col][row], log10 seconds (NaN when missing)
	min, max float64
}

func (h *heatGrid) Dims() (c, r int) {
	if len(h.z) == 0 {
		return 0, 0
	}
	return len(h.z), len(h.z[0])
}
func (h *heatGrid) Z(c, r int) float64 { return h.z[c][r] }
func (h *heatGrid) X(c int) float64    { return float64(c) }
func (h *heatGrid) Y(r int) float64    { return float64(r) }
func (h *heatGrid) Min() float64       { return h.min }
func (h *heatGrid) Max() float64       { return h.max }

// heatMap draws a sweep: cells coloured by log TTFT p90 and labelled with
// it, a ring on each load's best settings, and the adaptive law's mean
// effective knob as a line (mapped onto the rows by linear interpolation).
func heatMap(g *Grid, sc Scenario, adaptive, knobName string, knob func(*Run) float64) (*plot.Plot, error) {
	type row struct {
		name string
		knob float64
	}
	var rows []row
	for _, s := range g.Strategies {
		if s == adaptive {
			continue
		}
		for _, l := range g.Loads {
			if r := g.At(s, l); r != nil {
				rows = append(rows, row{s, knob(r)})
				break
			}
		}
	}
	if len(rows) == 0 || len(g.Loads) == 0 {
		return nil, fmt.Errorf("heat map %s: no static settings: %w", sc.Name, ErrSchema)
	}
	slices.SortStableFunc(rows, func(a, b row) int {
		switch {
		case a.knob < b.knob:
			return -1
		case a.knob > b.knob:
			return 1
		}
		return 0
	})
	h := &heatGrid{z: make([][]float64, len(g.Loads)), min: math.Inf(1), max: math.Inf(-1)}
	var labels plotter.XYLabels
	for c, l := range g.Loads {
		h.z[c] = make([]float64, len(rows))
		for ri, rw := range rows {
			h.z[c][ri] = math.NaN()
			r := g.At(rw.name, l)
			if r == nil {
				continue
			}
			v := math.Log10(max(r.TTFT.P90, 1e-3))
			h.z[c][ri] = v
			h.min, h.max = min(h.min, v), max(h.max, v)
			labels.XYs = append(labels.XYs, plotter.XY{X: float64(c), Y: float64(ri)})
			labels.Labels = append(labels.Labels, secs(r.TTFT.P90))
		}
	}
	if h.max <= h.min {
		h.max = h.min + 1
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("%s — TTFT p90 (s) by %s and load", sc.Name, knobName)
	// One empty row of headroom above the grid keeps the legend off the
	// cells.
	p.Y.Min, p.Y.Max = -0.5, float64(len(rows))+0.5
	p.X.Label.Text = fmt.Sprintf("offered load (fraction of saturation = %.3g req/s)", sc.SaturationRate)
	p.Y.Label.Text = knobName
	xt := make(plot.ConstantTicks, len(g.Loads))
	for c, l := range g.Loads {
		xt[c] = plot.Tick{Value: float64(c), Label: pct(l)}
	}
	yt := make(plot.ConstantTicks, len(rows))
	for ri, rw := range rows {
		yt[ri] = plot.Tick{Value: float64(ri), Label: strconv.FormatFloat(rw.knob, 'f', -1, 64)}
	}
	p.X.Tick.Marker, p.Y.Tick.Marker = xt, yt
	// Light is fast, dark red is slow.
	hm := plotter.NewHeatMap(h, reversed(palette.Heat(64, 1)))
	hm.NaN = color.Gray{Y: 200}
	p.Add(hm)
	lbl, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, fmt.Errorf("heat map labels: %w", err)
	}
	for i := range lbl.TextStyle {
		lbl.TextStyle[i].Font.Size = vg.Points(7)
		lbl.TextStyle[i].XAlign = draw.XCenter
		lbl.TextStyle[i].YAlign = draw.YCenter
	}
	p.Add(lbl)

	// Best settings per load: rings.
	var best plotter.XYs
	for _, b := range SweepBest(g, adaptive, knob) {
		col := slices.IndexFunc(g.Loads, func(l float64) bool { return loadEq(l, b.Load) })
		for _, s := range b.Strategies {
			ri := slices.IndexFunc(rows, func(rw row) bool { return rw.name == s })
			best = append(best, plotter.XY{X: float64(col), Y: float64(ri)})
		}
	}
	if len(best) > 0 {
		marks, err := plotter.NewScatter(best)
		if err != nil {
			return nil, fmt.Errorf("best markers: %w", err)
		}
		marks.Shape = draw.RingGlyph{}
		marks.Radius = vg.Points(9)
		marks.Color = color.RGBA{B: 200, A: 255}
		p.Add(marks)
		p.Legend.Add("best static setting (tied within 2%)", marks)
	}

	// The adaptive law's mean effective knob, on the row scale.
	var ad plotter.XYs
	for c, l := range g.Loads {
		r := g.At(adaptive, l)
		if r == nil {
			continue
		}
		k := r.MeanFactorPct
		if r.Group == GroupLambda {
			k = r.MeanLambda
		}
		if k == 0 {
			continue
		}
		ad = append(ad, plotter.XY{X: float64(c), Y: rowPosition(rows, k, func(rw row) float64 { return rw.knob })})
	}
	if len(ad) > 0 {
		line, points, err := plotter.NewLinePoints(ad)
		if err != nil {
			return nil, fmt.Errorf("adaptive line: %w", err)
		}
		line.Color = color.RGBA{G: 120, B: 60, A: 255}
		line.Width = vg.Points(2)
		points.Color = line.Color
		points.Shape = draw.CrossGlyph{}
		p.Add(line, points)
		p.Legend.Add(adaptive+": mean effective value", line, points)
	}
	p.Legend.Top = true
	return p, nil
}

// colors is a fixed palette.
type colors []color.Color

// Colors implements palette.Palette.
func (c colors) Colors() []color.Color { return c }

// reversed returns p's colours in reverse order.
func reversed(p palette.Palette) palette.Palette {
	cs := slices.Clone(p.Colors())
	slices.Reverse(cs)
	return colors(cs)
}

// rowPosition maps a knob value onto the fractional row index of the
// (ascending) rows by linear interpolation, clamped to the first and last
// row.
func rowPosition[T any](rows []T, v float64, knob func(T) float64) float64 {
	n := len(rows)
	if n == 0 {
		return 0
	}
	if v <= knob(rows[0]) {
		return 0
	}
	for i := 1; i < n; i++ {
		lo, hi := knob(rows[i-1]), knob(rows[i])
		if v <= hi {
			if hi == lo {
				return float64(i)
			}
			return float64(i-1) + (v-lo)/(hi-lo)
		}
	}
	return float64(n - 1)
}
