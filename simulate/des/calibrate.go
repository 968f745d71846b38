package des

import (
	"fmt"
	"time"

	"github.com/llbproject/llb/simulate/engine"
)

// CurvePoint is one point of an engine calibration curve.
type CurvePoint struct {
	X, Y float64
}

// Curve is a named series of an engine calibration figure.
type Curve struct {
	Name   string
	Points []CurvePoint
	// Reference marks a published or derived reference, drawn dashed.
	Reference bool
}

// Calibration is one engine calibration figure: the model's curves and
// the references they are calibrated against.
type Calibration struct {
	File, Title, XLabel, YLabel string
	Curves                      []Curve
	// Note explains the references.
	Note string
}

// CalibrationPrompts and CalibrationBatches are the x axes of the
// calibration figures.
var (
	CalibrationPrompts = []int{128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768}
	CalibrationBatches = []int{1, 2, 4, 8, 16, 32, 64, 128, 256}
)

// EngineCalibration measures both engine models on an idle engine — the
// TTFT of one prompt of each length, and the inter-token latency of a
// batch of decoding requests (1000-token contexts) of each size — next to
// the references engine.StepLatency is calibrated from: BLIS's fitted
// linear step model for Llama-3.1-8B on one H100 under vLLM 0.8.4
// (β0 + β1·prefill tokens, β0 + β2·batch; its α API-server overheads
// added to TTFT), and the hardware's bounds (the weights read once per
// step at 3.35 TB/s; prefill at 989 dense BF16 TFLOPS).
func EngineCalibration() ([]Calibration, error) {
	lf, step := engine.DefaultConfig(), engine.DefaultConfig()
	step.Scheduler = engine.SchedStep
	for _, c := range []*engine.Config{&lf, &step} {
		c.NumBlocks, c.MaxModelLen, c.MaxNumSeqs = 40000, 40960, 256
	}
	sl := engine.DefaultStepLatency()
	const (
		blisAlpha0Us      = 232.6 // BLIS α0: API-server overhead per request (µs)
		blisAlphaPerToken = 1.75  // BLIS α1: µs per input token before scheduling
		weightsReadUs     = 4800  // 16 GB of BF16 weights at 3.35 TB/s
		prefillFlopUs     = 16.2  // 2 · 8.03e9 FLOPs per token at 989 TFLOPS
		kvReadUs          = 0.039 // 128 KiB of KV per context token at 3.35 TB/s
	)
	ttft := Calibration{
		File: "engine-ttft.svg", Title: "Engine models: TTFT of one prompt on an idle engine",
		XLabel: "prompt tokens (log)", YLabel: "TTFT (s, log)",
		Note: "BLIS: β0 + β1·P + α0 + α1·P with inference-sim's coefficients for Llama-3.1-8B, H100, TP 1, vLLM 0.8.4 (coefficients.yaml). Roofline: one weight read (4.8 ms) + 2·8e9 FLOPs per token at 989 TFLOPS. The step model adds the attention term (quadratic in the prompt) that the linear fit lacks; the load-factor model is llm-d-inference-sim's defaults (30 ms + 0.2 ms per token).",
	}
	itl := Calibration{
		File: "engine-itl.svg", Title: "Engine models: inter-token latency by batch size (1000-token contexts)",
		XLabel: "decoding requests in the batch (log)", YLabel: "ITL (s, log)",
		Note: "BLIS: β0 + β2·B. Roofline: the weights plus the batch's KV cache (128 KiB per context token) read once per step at 3.35 TB/s. The step model adds the context term; the load-factor model is llm-d-inference-sim's 12 ms, ×2 at a full batch.",
	}
	var blisT, roofT, lfT, stepT Curve
	blisT.Name, roofT.Name, lfT.Name, stepT.Name = "BLIS fit (reference)", "roofline bound", "load-factor model", "step model"
	blisT.Reference, roofT.Reference = true, true
	for _, p := range CalibrationPrompts {
		x := float64(p)
		blisT.Points = append(blisT.Points, CurvePoint{x, (sl.FixedUs + sl.PrefillTokenUs*x + blisAlpha0Us + blisAlphaPerToken*x) / 1e6})
		roofT.Points = append(roofT.Points, CurvePoint{x, (weightsReadUs + prefillFlopUs*x) / 1e6})
		for _, m := range []struct {
			cfg engine.Config
			c   *Curve
		}{{lf, &lfT}, {step, &stepT}} {
			d, err := firstToken(m.cfg, p)
			if err != nil {
				return nil, err
			}
			m.c.Points = append(m.c.Points, CurvePoint{x, d.Seconds()})
		}
	}
	ttft.Curves = []Curve{stepT, lfT, blisT, roofT}
	var blisI, roofI, lfI, stepI Curve
	blisI.Name, roofI.Name, lfI.Name, stepI.Name = "BLIS fit (reference)", "roofline bound", "load-factor model", "step model"
	blisI.Reference, roofI.Reference = true, true
	for _, b := range CalibrationBatches {
		x := float64(b)
		blisI.Points = append(blisI.Points, CurvePoint{x, (sl.FixedUs + sl.DecodeTokenUs*x) / 1e6})
		roofI.Points = append(roofI.Points, CurvePoint{x, (weightsReadUs + x*1000*kvReadUs) / 1e6})
		for _, m := range []struct {
			cfg engine.Config
			c   *Curve
		}{{lf, &lfI}, {step, &stepI}} {
			d, err := interToken(m.cfg, b, 1000)
			if err != nil {
				return nil, err
			}
			m.c.Points = append(m.c.Points, CurvePoint{x, d.Seconds()})
		}
	}
	itl.Curves = []Curve{stepI, lfI, blisI, roofI}
	return []Calibration{ttft, itl}, nil
}

// calibrationTokens is a prompt of n distinct tokens.
func calibrationTokens(seed, n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(seed*100003 + i + 1)
	}
	return t
}

// firstToken is one prompt's TTFT on an idle engine.
func firstToken(cfg engine.Config, prompt int) (time.Duration, error) {
	e, err := engine.New(cfg)
	if err != nil {
		return 0, err
	}
	if _, err := e.Submit(epoch, engine.Request{ID: "p", Tokens: calibrationTokens(1, prompt), MaxTokens: 2}); err != nil {
		return 0, fmt.Errorf("calibration prompt %d: %w", prompt, err)
	}
	var prog []engine.Progress
	for {
		t, ok := e.NextEventTime()
		if !ok {
			return 0, fmt.Errorf("calibration prompt %d: no first token", prompt)
		}
		prog = e.Advance(t, prog[:0])
		for _, p := range prog {
			if !p.FirstTokenAt.IsZero() {
				return p.FirstTokenAt.Sub(epoch), nil
			}
		}
	}
}

// interToken is the mean time between tokens of a batch of b requests of
// context ctx tokens once all are decoding.
func interToken(cfg engine.Config, b, ctx int) (time.Duration, error) {
	e, err := engine.New(cfg)
	if err != nil {
		return 0, err
	}
	const out = 200 // nobody finishes before the last one has 30 tokens
	for i := range b {
		if _, err := e.Submit(epoch, engine.Request{ID: fmt.Sprint(i), Tokens: calibrationTokens(i+2, ctx), MaxTokens: out}); err != nil {
			return 0, fmt.Errorf("calibration batch %d: %w", b, err)
		}
	}
	// The last request's tokens 10 to 30: every prefill is over by then.
	var at10, at30 time.Time
	var prog []engine.Progress
	for at30.IsZero() {
		t, ok := e.NextEventTime()
		if !ok {
			return 0, fmt.Errorf("calibration batch %d: stalled", b)
		}
		prog = e.Advance(t, prog[:0])
		for _, p := range prog {
			if p.Ticket != engine.Ticket(b) {
				continue
			}
			switch p.Generated {
			case 10:
				at10 = t
			case 30:
				at30 = t
			}
		}
	}
	return at30.Sub(at10) / 20, nil
}
