package report

import (
	"fmt"
	"io"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// EngineFile is the engine calibration page Write's caller adds with
// WriteCalibration.
const EngineFile = "ENGINE.md"

// Series is one line of a calibration figure.
type Series struct {
	Name string
	X, Y []float64
	// Reference draws it dashed: a published or derived reference, not a
	// model.
	Reference bool
}

// CalibrationFigure is an engine calibration figure: the engine models'
// curves against their references, on log–log axes.
type CalibrationFigure struct {
	File, Title, XLabel, YLabel, Note string
	Series                            []Series
}

// WriteCalibration writes each figure's SVG and EngineFile, a page with the
// figures and their values, into dir. It returns the files written.
func WriteCalibration(dir string, figs []CalibrationFigure) ([]string, error) {
	var files []string
	for i := range figs {
		f := &figs[i]
		p, err := calibrationPlot(f)
		if err != nil {
			return files, err
		}
		path := filepath.Join(dir, f.File)
		fig := Figure{File: f.File, Title: f.Title, plot: p}
		if err := writeFile(path, fig.WriteSVG); err != nil {
			return files, err
		}
		files = append(files, path)
	}
	path := filepath.Join(dir, EngineFile)
	if err := writeFile(path, func(w io.Writer) error { return writeEngineMarkdown(w, figs) }); err != nil {
		return files, err
	}
	return append(files, path), nil
}

func calibrationPlot(f *CalibrationFigure) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = f.Title
	p.X.Label.Text, p.Y.Label.Text = f.XLabel, f.YLabel
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	for i, s := range f.Series {
		xys := make(plotter.XYs, 0, len(s.X))
		for j := range s.X {
			if s.X[j] > 0 && s.Y[j] > 0 {
				xys = append(xys, plotter.XY{X: s.X[j], Y: s.Y[j]})
			}
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("calibration %s: %w", s.Name, err)
		}
		line.Color, points.Color = plotutil.Color(i), plotutil.Color(i)
		points.Shape = plotutil.Shape(i)
		if s.Reference {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(line, points)
		p.Legend.Add(s.Name, line, points)
	}
	return p, nil
}

func writeEngineMarkdown(w io.Writer, figs []CalibrationFigure) error {
	m := &mdWriter{w: w}
	m.printf("# Engine models: calibration\n\n")
	m.printf("`simulate/engine` runs either model; `llbsim sweep` regenerates this page. The step model (vLLM V1's step loop with chunked prefill) is calibrated to Llama-3.1-8B-Instruct on one H100 under vLLM; `engine.StepLatency` cites every coefficient. The load-factor model is llm-d-inference-sim's. Values are seconds, measured by running each model on an idle engine.\n\n")
	for _, f := range figs {
		m.printf("## %s\n\n![%s](%s)\n\n%s\n\n", f.Title, f.Title, f.File, f.Note)
		if len(f.Series) == 0 {
			continue
		}
		head := []string{f.XLabel}
		for _, s := range f.Series {
			head = append(head, s.Name)
		}
		var rows [][]string
		for j, x := range f.Series[0].X {
			row := []string{strconv.FormatFloat(x, 'f', -1, 64)}
			for _, s := range f.Series {
				v := "–"
				if j < len(s.Y) {
					v = fmt.Sprintf("%.4f", s.Y[j])
				}
				row = append(row, v)
			}
			rows = append(rows, row)
		}
		m.table(head, rows)
	}
	return m.err
}
