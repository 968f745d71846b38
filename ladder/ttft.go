package ladder

import (
	"math"
	"time"
)

// TTFT prediction. For every request it routes, llb predicts the time to
// first token on the endpoint it picked from what it knows at the
// decision — the request's uncached prompt blocks there, the prefill work
// it sent the endpoint that has not answered yet, and its requests in
// flight there — through a linear model of each endpoint learned online
// from the TTFTs the data plane measures. The prediction is checked as
// cache truth checks cached tokens (TTFTCheck): an endpoint whose
// predictions keep missing is demoted, and decisions stop relying on its
// predictions until they agree again.
//
// The model, per endpoint, with u = the request's uncached blocks, q = the
// queued prefill blocks ahead of it, n = llb's requests in flight there:
//
//	TTFT = θ0 + θ1·u + θ2·q + θ3·n + θ4·n·u + θ5·n·q       every θ ≥ 0
//
// (u and q in units of TTFTBlockUnit blocks, n in units of TTFTBatchUnit
// requests, θ in seconds). It covers both ways engines spend a prefill:
// vLLM's step scheduler computes the queued prefill chunks ahead of a
// request first (θ2, with the decodes of the batch in every step: θ5),
// while an engine that runs each request on its own clock
// (llm-d-inference-sim) costs only the request's own tokens slowed by the
// batch (θ1, θ4). θ is fitted by least squares on the relative error —
// each sample weighted by 1/TTFT², so a 20 ms hit weighs as much as a 2 s
// miss — with exponential forgetting (TTFTMemory) so the model follows an
// engine whose speed changes, non-negative because no work makes a first
// token come sooner, and pulled weakly towards a prior (TTFTPrior) so a
// coefficient the traffic never exercises keeps a plausible value.
//
// That model is the base. An engine with no room for one more request —
// its KV cache full, or its batch — admits no new prefill until running
// requests finish, and a request waits for their remaining decodes, which
// llb does not see. A second model, the wait, learns that from what llb
// does see, fitted the same way to what the base leaves (actual − base):
//
//	wait = φ0·[d > 0] + φ1·d + φ2·[w > 0] + φ3·w                every φ ≥ 0
//
// with d the blocks the request lacks beyond the engine's free ones (its
// uncached blocks plus the engine's blocks in use, minus its capacity; in
// units of TTFTBlockUnit) and w the requests the engine reported waiting
// at the last scrape (in units of TTFTQueueUnit). The prediction that is
// checked (TTFTPrediction.Predicted, llb_ttft_prediction_error) is base +
// wait. Decisions (TTFT objectives) read the base alone, which the wait
// does not change: the blocks in use and the waiting requests are the
// last scrape's, 250 ms old, and a prediction that read them moved every
// request off an engine that had shown a full cache or a queue onto the
// few predicted to meet, which then filled in turn (measured in
// docs/performance.md).

// TTFTInput is what llb knows, at a decision, of the prefill work a
// request joins on one endpoint.
type TTFTInput struct {
	// Uncached is the request's uncached prompt blocks there: its prompt
	// blocks minus the endpoint's overlap.
	Uncached uint32
	// Queued is the endpoint's PrefillBlocks before the request: the
	// uncached blocks of the requests llb sent it that have not answered a
	// first byte.
	Queued uint32
	// Running is llb's requests in flight on the endpoint before the
	// request (ActiveConns).
	Running uint32
	// Waiting is the requests the endpoint's engine reported waiting at
	// the last scrape (EndpointView.QueuedRequests). It is not a feature
	// of the model: with it (θ·[w>0] + θ·w) predictions through the daemon
	// were about as close, and objectives herded requests off an engine
	// whose last scrape showed a queue (docs/performance.md). It is
	// recorded so that a prediction can be read against it.
	Waiting uint32
	// KVUsed and KVCapacity are the endpoint's KV blocks in use (llb's
	// estimate, EndpointView.KVUsedBlocks) and its capacity; both 0 when
	// unknown.
	KVUsed, KVCapacity uint32
}

// Lacking is the blocks the request needs beyond the engine's free ones:
// its uncached blocks plus the blocks in use, minus the capacity (0 when
// they fit or the usage is unknown).
func (in TTFTInput) Lacking() uint32 {
	need := uint64(in.KVUsed) + uint64(in.Uncached)
	if in.KVCapacity == 0 || need <= uint64(in.KVCapacity) {
		return 0
	}
	return uint32(min(need-uint64(in.KVCapacity), math.MaxUint32))
}

// TTFTInputFor is the TTFTInput of a request of promptBlocks blocks that
// holds overlap of them on the endpoint of view v.
func TTFTInputFor(v *EndpointView, promptBlocks, overlap uint32) TTFTInput {
	in := TTFTInput{Uncached: promptBlocks - min(overlap, promptBlocks), Queued: v.PrefillBlocks, Running: v.ActiveConns,
		Waiting: v.QueuedRequests}
	if v.KVUsageKnown {
		in.KVUsed, in.KVCapacity = v.KVUsedBlocks, v.KVCapacityBlocks
	}
	return in
}

// Model tuning.
const (
	// TTFTBlockUnit and TTFTBatchUnit scale the features to about 1 (256
	// blocks: 4096 tokens at vLLM's block size; 32 requests), which keeps
	// the normal equations well conditioned.
	TTFTBlockUnit = 256
	TTFTBatchUnit = 32
	// TTFTQueueUnit scales the engine's waiting requests (the wait model).
	TTFTQueueUnit = 8
	// TTFTMemory is the number of samples whose weight halves: each sample
	// decays the earlier ones by 2^(−1/TTFTMemory).
	TTFTMemory = 128
	// TTFTTrained is how many samples an endpoint's model needs before
	// decisions rely on its predictions (they are made and checked from
	// the first request).
	TTFTTrained = 16
	// ttftFloor bounds a prediction and a sample's weight from below: a
	// first token in less than 0.1 ms is measurement noise.
	ttftFloor = 100 * time.Microsecond
	// ttftRidge damps each coefficient towards the prior in proportion to
	// the information the samples hold about it; ttftPriorWeight is the
	// prior's own weight, what pins a coefficient no sample exercised.
	ttftRidge       = 1e-3
	ttftPriorWeight = 1e-2
	// ttftSweeps is the projected Gauss–Seidel sweeps per sample (warm
	// started from the previous fit).
	ttftSweeps = 8
)

// ttftFeatures is the base model's dimension, ttftWaitFeatures the wait
// model's; ttftMaxFeatures bounds both.
const (
	ttftFeatures     = 6
	ttftWaitFeatures = 4
	ttftMaxFeatures  = ttftFeatures
)

// TTFTPrior is the model an endpoint starts from, in seconds: 20 ms of
// overhead and 0.3 ms per uncached or queued block (17 µs a token: an 8B
// model on an H100), nothing for the batch. The first measured TTFTs
// replace it.
var TTFTPrior = [ttftFeatures]float64{0.020, 0.3e-3 * TTFTBlockUnit, 0.3e-3 * TTFTBlockUnit, 0, 0, 0}

// features are the base model's regressors of in.
func (in TTFTInput) features() [ttftFeatures]float64 {
	u := float64(in.Uncached) / TTFTBlockUnit
	q := float64(in.Queued) / TTFTBlockUnit
	n := float64(in.Running) / TTFTBatchUnit
	return [ttftFeatures]float64{1, u, q, n, n * u, n * q}
}

// waitFeatures are the wait model's regressors of in: all 0 while the
// request fits in the engine's free blocks and nothing waits there.
func (in TTFTInput) waitFeatures() [ttftWaitFeatures]float64 {
	var x [ttftWaitFeatures]float64
	if d := in.Lacking(); d > 0 {
		x[0], x[1] = 1, float64(d)/TTFTBlockUnit
	}
	if in.Waiting > 0 {
		x[2], x[3] = 1, float64(in.Waiting)/TTFTQueueUnit
	}
	return x
}

// ttftFit is a non-negative least-squares fit with forgetting, of up to
// ttftMaxFeatures coefficients.
//
// Invariant: a and b are the decayed weighted normal equations of the
// samples (a = Σ γ^k·w·x·xᵀ, b = Σ γ^k·w·x·y), theta their non-negative
// damped solution, every theta[j] ≥ 0.
type ttftFit struct {
	a     [ttftMaxFeatures][ttftMaxFeatures]float64
	b     [ttftMaxFeatures]float64
	theta [ttftMaxFeatures]float64
}

// learn adds sample (x, y) of weight w and refits towards prior.
func (f *ttftFit) learn(x []float64, y, w float64, prior []float64) {
	for i := range x {
		f.b[i] = f.b[i]*ttftDecay + w*x[i]*y
		for j := range x {
			f.a[i][j] = f.a[i][j]*ttftDecay + w*x[i]*x[j]
		}
	}
	f.solve(len(x), prior)
}

// dot is θ·x.
func (f *ttftFit) dot(x []float64) float64 {
	var s float64
	for j := range x {
		s += f.theta[j] * x[j]
	}
	return s
}

// TTFTModel is one endpoint's learned model: the base and the wait. The
// zero value predicts with TTFTPrior and no wait. Single owner; no
// clocks, no I/O.
//
// Invariant: base is fitted to the samples (y, weight 1/y²), wait to what
// base predicted short of them (y − base's prediction before the sample,
// same weight); theta of both ≥ 0.
type TTFTModel struct {
	base, wait ttftFit
	samples    uint64
	fitted     bool
}

// ttftDecay is γ = 2^(−1/TTFTMemory).
var ttftDecay = math.Exp2(-1.0 / TTFTMemory)

// Predict is the model's base TTFT for in, at least 0.1 ms: what
// decisions read.
func (m *TTFTModel) Predict(in TTFTInput) time.Duration {
	return ttftDuration(m.baseSeconds(in))
}

// PredictWait is the model's full-cache or full-batch wait for in (0 when
// none is foreseen): the prediction that is checked is Predict + this.
func (m *TTFTModel) PredictWait(in TTFTInput) time.Duration {
	x := in.waitFeatures()
	return time.Duration(math.Min(m.wait.dot(x[:]), 3600) * float64(time.Second))
}

// baseSeconds is the base prediction for in, in seconds.
func (m *TTFTModel) baseSeconds(in TTFTInput) float64 {
	x := in.features()
	if !m.fitted {
		var s float64
		for j := range x {
			s += TTFTPrior[j] * x[j]
		}
		return s
	}
	return m.base.dot(x[:])
}

// ttftDuration is s seconds bounded to [0.1 ms, 1 h].
func ttftDuration(s float64) time.Duration {
	return max(time.Duration(math.Min(s, 3600)*float64(time.Second)), ttftFloor)
}

// Trained reports whether the model has learned from at least
// TTFTTrained samples.
func (m *TTFTModel) Trained() bool { return m.samples >= TTFTTrained }

// Samples is how many samples the model has learned from.
func (m *TTFTModel) Samples() uint64 { return m.samples }

// Coefficients returns θ in seconds (per TTFTBlockUnit blocks and
// TTFTBatchUnit requests): overhead, uncached, queued, running,
// running×uncached, running×queued.
func (m *TTFTModel) Coefficients() [ttftFeatures]float64 {
	if !m.fitted {
		return TTFTPrior
	}
	return [ttftFeatures]float64(m.base.theta[:ttftFeatures])
}

// WaitCoefficients returns φ in seconds (per TTFTBlockUnit blocks and
// TTFTQueueUnit requests): cache full, blocks lacking, engine queueing,
// requests waiting.
func (m *TTFTModel) WaitCoefficients() [ttftWaitFeatures]float64 {
	return [ttftWaitFeatures]float64(m.wait.theta[:ttftWaitFeatures])
}

// Learn adds one measured TTFT of a request whose input at its decision
// was in, and refits.
func (m *TTFTModel) Learn(in TTFTInput, actual time.Duration) {
	y := max(actual, ttftFloor).Seconds()
	w := 1 / (y * y)
	xw := in.waitFeatures()
	m.wait.learn(xw[:], y-m.baseSeconds(in), w, ttftWaitPrior[:])
	x := in.features()
	if !m.fitted {
		copy(m.base.theta[:], TTFTPrior[:])
		m.fitted = true
	}
	m.samples++
	m.base.learn(x[:], y, w, TTFTPrior[:])
}

// ttftWaitPrior is the wait model's prior: no wait.
var ttftWaitPrior [ttftWaitFeatures]float64

// Forget drops what the model learned and starts again from the prior:
// its predictions drifted, so the samples behind them describe an engine
// that is no longer there.
func (m *TTFTModel) Forget() { *m = TTFTModel{} }

// solve refits the first n coefficients: projected Gauss–Seidel on the
// damped normal equations (a + R)·θ = b + R·prior, θ ≥ 0, with R =
// diag(ttftRidge·a_jj + ttftPriorWeight).
func (f *ttftFit) solve(n int, prior []float64) {
	var r [ttftMaxFeatures]float64
	for j := range n {
		r[j] = ttftRidge*f.a[j][j] + ttftPriorWeight
	}
	for range ttftSweeps {
		for j := range n {
			s := f.b[j] + r[j]*prior[j]
			for k := range n {
				if k != j {
					s -= f.a[j][k] * f.theta[k]
				}
			}
			f.theta[j] = max(s/(f.a[j][j]+r[j]), 0)
		}
	}
}

// TTFTPrediction is a decision's prediction of the time to first token
// on its prefill (single-pool: its) endpoint.
type TTFTPrediction struct {
	// OK is false when the decision chose no endpoint.
	OK bool
	// Input is what the prediction was made from; the runtime hands it
	// back with the measured TTFT (Router.ObserveTTFT).
	Input TTFTInput
	// Predicted is the endpoint model's TTFT for Input, the one checked:
	// the base and the wait.
	Predicted time.Duration
	// Wait is Predicted's wait (TTFTModel.PredictWait); Predicted − Wait
	// is what decisions read.
	Wait time.Duration
	// Trusted is true when the endpoint's model is trained (TTFTTrained)
	// and its predictions are not drifting: decisions rely only on
	// trusted predictions.
	Trusted bool
}

// ttftEndpoint is one endpoint's model and check.
type ttftEndpoint struct {
	model TTFTModel
	check TTFTCheck
}

// PredictTTFT is endpoint ep's predicted TTFT for in as decisions read it
// — the base, without the wait — and whether decisions may rely on it
// (trained, not drifting).
func (r *Router) PredictTTFT(ep int, in TTFTInput) (time.Duration, bool) {
	m, ok := r.ttftModel(ep)
	if m == nil {
		return 0, false
	}
	return m.Predict(in), ok
}

// ttftModel is the model that predicts for endpoint ep and whether
// decisions may rely on it; nil for no endpoint.
func (r *Router) ttftModel(ep int) (*TTFTModel, bool) {
	if ep < 0 || ep >= len(r.ttft) {
		return nil, false
	}
	e := &r.ttft[ep]
	if !e.model.Trained() && r.ttftFleet.Trained() {
		// Endpoints of one rule mostly serve one model on one kind of
		// engine: until an endpoint has learned its own, the fleet's
		// model is a better guess than the prior. Decisions still wait
		// for the endpoint's own.
		return &r.ttftFleet, false
	}
	return &e.model, e.model.Trained() && !e.check.verdict.Drifting
}

// SpillPredictionFactor is how much slower than at the pick a spill's
// target may be predicted to start a request before rebalancing refuses
// the move (startsSooner). The models are linear fits of engines that
// are not: on vLLM's step scheduler they learn a small weight for queued
// blocks on long prompts, and a strict comparison refused moves that
// paid off there (the Mooncake synthetic trace on the step model, 50 and
// 90 %: 1.027× the best peer against 0.99× and 1.02×); what the test is
// for, a spill that computes again thousands of blocks the pick holds on
// an engine where the queue ahead delays nobody, is predicted many times
// slower (docs/performance.md, Mooncake).
const SpillPredictionFactor = 2

// startsSooner reports whether a request of promptBlocks blocks is
// predicted to see its first token on endpoint t, holding ot of them,
// within SpillPredictionFactor times its prediction on p, holding op: the
// full predictions, base and wait (a pick whose KV cache cannot take the
// request makes it wait, and a move off it is worth more), compared when
// both endpoints' predictions are trusted. When either is not, llb
// cannot tell and it reports true: the caller's own rule stands.
func (r *Router) startsSooner(views []EndpointView, t, p int, promptBlocks, ot, op uint32) bool {
	mt, okT := r.ttftModel(t)
	mp, okP := r.ttftModel(p)
	if mt == nil || mp == nil || !okT || !okP {
		return true
	}
	inT := TTFTInputFor(&views[t], promptBlocks, ot)
	inP := TTFTInputFor(&views[p], promptBlocks, op)
	return mt.Predict(inT)+mt.PredictWait(inT) < SpillPredictionFactor*(mp.Predict(inP)+mp.PredictWait(inP))
}

// predictFor is the prediction for a request of promptBlocks blocks sent
// to ep.
func (r *Router) predictFor(views []EndpointView, ep int, promptBlocks uint32) TTFTPrediction {
	if ep < 0 || ep >= len(views) {
		return TTFTPrediction{}
	}
	in := TTFTInputFor(&views[ep], promptBlocks, views[ep].Overlap)
	m, ok := r.ttftModel(ep)
	if m == nil {
		return TTFTPrediction{}
	}
	base, wait := m.Predict(in), m.PredictWait(in)
	return TTFTPrediction{OK: true, Input: in, Predicted: min(base+wait, time.Hour), Wait: wait, Trusted: ok}
}

// ObserveTTFT takes the TTFT measured at now for a request whose decision
// predicted p on endpoint ep: the endpoint's model learns it and its check
// compares it with the prediction. When the check turns drifting the
// model forgets what it learned and starts again from the prior.
func (r *Router) ObserveTTFT(now time.Time, ep int, p TTFTPrediction, actual time.Duration) TTFTStep {
	if !p.OK || ep < 0 || ep >= len(r.ttft) {
		return TTFTStep{}
	}
	e := &r.ttft[ep]
	step := e.check.Observe(now, p.Predicted, actual)
	if step.Changed && step.Verdict.Drifting {
		e.model.Forget()
	}
	e.model.Learn(p.Input, actual)
	r.ttftFleet.Learn(p.Input, actual)
	return step
}

// TTFTStatus is one endpoint's TTFT prediction record.
type TTFTStatus struct {
	// Verdict is the check's standing.
	Verdict TTFTVerdict
	// Compared and Wrong count the predictions compared and those off by
	// more than TTFTWrongPct.
	Compared, Wrong uint64
	// Samples is how many TTFTs the model learned from since it last
	// started again; Coefficients its fit (TTFTModel.Coefficients).
	Samples      uint64
	Coefficients [ttftFeatures]float64
	// WaitCoefficients is the wait model's fit
	// (TTFTModel.WaitCoefficients).
	WaitCoefficients [ttftWaitFeatures]float64
}

// TTFTStatus returns endpoint ep's record.
func (r *Router) TTFTStatus(ep int) TTFTStatus {
	if ep < 0 || ep >= len(r.ttft) {
		return TTFTStatus{}
	}
	e := &r.ttft[ep]
	c, w := e.check.Totals()
	return TTFTStatus{Verdict: e.check.Verdict(), Compared: c, Wrong: w, Samples: e.model.Samples(), Coefficients: e.model.Coefficients(),
		WaitCoefficients: e.model.WaitCoefficients()}
}
