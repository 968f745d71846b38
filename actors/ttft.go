package actors

import (
	"strconv"
	"time"

	"github.com/llbproject/llb/ladder"
)

// TTFT prediction in the router: every admitted request carries the
// ladder's prediction of its time to first token on its prefill (or
// single-pool) endpoint (Decision.TTFT); when that leg reports a measured
// TTFT (Outcome.TTFT: a streamed answer's first token, a P/D prefill
// leg's answer), the ladder's model of the endpoint learns it and its
// check compares it with the prediction (ladder.Router.ObserveTTFT). The
// relative error is exported per endpoint; a verdict that turns is logged
// once. Demotion is the ladder's: a drifting endpoint's predictions stop
// counting as trusted.

// ttftErrorBuckets are the upper bounds of mTTFTPredictionError, the
// relative error (predicted − actual) / actual.
var ttftErrorBuckets = []float64{-0.75, -0.5, -0.2, -0.1, -0.05, 0, 0.05, 0.1, 0.2, 0.5, 1, 2, 4}

// mTTFTPredictionError is the histogram of TTFT prediction errors.
const mTTFTPredictionError = "llb_ttft_prediction_error_ratio"

// checkTTFT hands a leg's measured TTFT to the ladder with its ticket's
// prediction, once: only a successful single or prefill leg that measured
// one.
func (c *routerCore) checkTTFT(now time.Time, ep int, p *ladder.TTFTPrediction, o Outcome) {
	if !p.OK || o.TTFT <= 0 || o.Status/100 != 2 {
		return
	}
	pred := *p
	p.OK = false
	step := c.lad.ObserveTTFT(now, ep, pred, o.TTFT)
	c.m.ttftPrediction(ep, step.RelError)
	if step.Changed {
		c.ports.ttftChanged(ep, step.Verdict)
	}
}

// TTFTPredictionStatus is one endpoint's TTFT prediction record.
type TTFTPredictionStatus struct {
	// Compared counts the requests whose measured TTFT was compared with
	// the prediction; Wrong those off by more than half of it.
	Compared, Wrong uint64
	// Drifting is true while the endpoint's predictions stay wrong
	// (ladder.TTFTCheck); decisions do not rely on them meanwhile.
	Drifting bool
	// Bias is the median relative error of the last comparisons
	// (positive: llb predicted later first tokens than came).
	Bias float64
	// Samples is how many TTFTs the endpoint's model learned from since it
	// last started again; Trained once ladder.TTFTTrained.
	Samples uint64
	Trained bool
	// OverheadMs, UncachedMs and QueuedMs are the model's fixed cost and
	// its cost of 1000 uncached and of 1000 queued prompt blocks, at an
	// empty batch, in milliseconds.
	OverheadMs, UncachedMs, QueuedMs float64
	// FullCacheMs, LackingMs, QueueingMs and PerWaitingMs are its wait
	// model, in milliseconds: the wait of a request whose blocks do not fit
	// in the engine's free ones and per 1000 blocks lacking; of one sent to
	// an engine that reported waiting requests, and per waiting request.
	FullCacheMs, LackingMs, QueueingMs, PerWaitingMs float64
}

// ttftStatus snapshots endpoint i's record.
func (c *routerCore) ttftStatus(i int) TTFTPredictionStatus {
	s := c.lad.TTFTStatus(i)
	k := 1000.0 / ladder.TTFTBlockUnit * 1000
	return TTFTPredictionStatus{
		Compared: s.Compared, Wrong: s.Wrong, Drifting: s.Verdict.Drifting, Bias: s.Verdict.Bias,
		Samples: s.Samples, Trained: s.Samples >= ladder.TTFTTrained,
		OverheadMs: s.Coefficients[0] * 1000, UncachedMs: s.Coefficients[1] * k, QueuedMs: s.Coefficients[2] * k,
		FullCacheMs: s.WaitCoefficients[0] * 1000, LackingMs: s.WaitCoefficients[1] * k,
		QueueingMs: s.WaitCoefficients[2] * 1000, PerWaitingMs: s.WaitCoefficients[3] * 1000 / ladder.TTFTQueueUnit,
	}
}

// newTTFTMetrics makes endpoint i's TTFT prediction histogram.
func (m *svcMetrics) newTTFTMetrics(i int, addr string) *signedHistogram {
	return m.signedHistogram(mTTFTPredictionError, `ep_idx="`+strconv.Itoa(i)+`",endpoint="`+addr+`"`, ttftErrorBuckets)
}

// ttftPrediction counts one compared TTFT of endpoint ep.
func (m *svcMetrics) ttftPrediction(ep int, relErr float64) {
	if m == nil || ep >= len(m.ttft) || m.ttft[ep] == nil {
		return
	}
	m.ttft[ep].update(relErr)
}
