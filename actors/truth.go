package actors

import (
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llbproject/llb/ladder"
)

// Cache truth in the router: every admitted request of a KV-exact rule
// carries llb's prediction of the cached tokens its prefill (or single-pool)
// endpoint will report; when that leg reports the engine's usage, the
// endpoint's ladder.TruthTracker compares the two, the metrics count the
// outcome, and a verdict that turns sets or clears the endpoint's
// KVDistrusted view (LLB_KV_PREDICTION_DEMOTE) and is logged once.

// ticketPrediction is a ticket's prediction, completed by the report.
type ticketPrediction struct {
	ok bool
	s  ladder.TruthSample
	// chain is the prompt's block chain (shared, read-only), to confirm a
	// wrong prediction against the mirror once the engine answered.
	chain []uint64
	// since is the endpoint's Removals mark when llb predicted.
	since uint64
}

// truthCheck is a wrong prediction waiting for the mirror's confirmation
// that it was late, not wrong. An under-prediction was late when the mirror
// holds the blocks the engine reused once the engine answered (their
// BlockStored events were on the way when llb decided); an over-prediction
// when the mirror removed one of the blocks the engine did not reuse after
// llb decided (the engine had evicted it; its BlockRemoved was on the way —
// and the engine may have stored it again since, for this very request, so
// whether the mirror holds it now says nothing). The mirror is asked right
// after the engine answered and, while it does not confirm, again after
// pauses that double, until until: on a loaded host the events can reach
// the mirror well after the engine's answer reached the router, and one
// look would count that lag as a wrong prediction.
type truthCheck struct {
	ep int
	s  ladder.TruthSample
	// chain is the blocks the engine reused (an under), or those it did
	// not reuse of the ones llb predicted (an over).
	chain []uint64
	// over marks an over-prediction; since is the Removals mark to ask
	// about.
	over  bool
	since uint64
	until time.Time
	// pause is the wait before the next look; asking is set while a look
	// is out (its deadline is until), clear while the check waits.
	pause  time.Duration
	asking bool
	stop   func() bool
}

// Confirmation tuning.
const (
	// truthCheckWait bounds the wait for a confirming score; past it the
	// sample counts unconfirmed.
	truthCheckWait = 250 * time.Millisecond
	// truthCheckPause is the wait before the second look at the mirror;
	// each later one is twice the one before.
	truthCheckPause = 5 * time.Millisecond
	// maxTruthChecks bounds the confirmations in flight; past it a sample
	// counts unconfirmed at once.
	maxTruthChecks = 4096
	// truthCheckIDBit marks confirmation ids (decision ids never set it).
	truthCheckIDBit = 1 << 63
)

// predict returns the prediction for endpoint ep when the decision scored
// it (the chain was hashed and ep mirrors KV events). An endpoint with
// several DP ranks gets none: its inventory is the union of the ranks', and
// the engine's own DP dispatch picks the rank, whose cache alone is what it
// reports.
func (c *routerCore) predict(m *routeMsg, ep int) ticketPrediction {
	if ep < 0 || !m.scored.Has(ep) || len(c.cfg.Rule.Endpoints[ep].Feeds) > 1 {
		return ticketPrediction{}
	}
	kv := &m.rr.Req.KV
	return ticketPrediction{ok: true, chain: m.rr.Chain, since: c.removals[ep], s: ladder.TruthSample{
		Predicted:    ladder.PredictedCachedTokens(m.overlaps[ep], kv.PromptTokens, c.cfg.Rule.Spec.KVBlockSize),
		PromptTokens: kv.PromptTokens,
		Chat:         m.rr.Chat,
		ExtraKeys:    m.rr.ExtraKeys,
	}}
}

// checkPrediction compares a successful leg's reported cached tokens with
// its ticket's prediction, once.
func (c *routerCore) checkPrediction(now time.Time, ep int, p *ticketPrediction, o Outcome) {
	if !p.ok || !o.Usage.Reported || o.Status/100 != 2 || ep >= len(c.truth) {
		return
	}
	p.ok = false
	s := p.s
	s.Actual, s.EnginePromptTokens = o.Usage.CachedTokens, o.Usage.PromptTokens
	bs := c.cfg.Rule.Spec.KVBlockSize
	out, _ := ladder.ClassifyPrediction(s.Predicted, s.Actual, bs)
	if out != ladder.PredictionMatch && len(c.checks) < maxTruthChecks {
		// Ask the mirror again now that the engine answered: it may show
		// that the prediction was late, not wrong.
		tc := &truthCheck{ep: ep, s: s, until: now.Add(truthCheckWait), pause: truthCheckPause}
		if out == ladder.PredictionUnder {
			tc.chain = p.chain[:min(int(s.Actual)/bs, len(p.chain))]
		} else {
			reused := min(int(s.Actual)/bs, len(p.chain))
			tc.chain, tc.over, tc.since = p.chain[reused:min((int(s.Predicted)+bs-1)/bs, len(p.chain))], true, p.since
		}
		if len(tc.chain) > 0 {
			c.askMirror(now, tc)
			return
		}
	}
	c.observeTruth(now, ep, s)
}

// nextCheckID files tc under a fresh id: each look and each pause has its
// own, so a reply or a timer of an earlier step finds nothing.
func (c *routerCore) nextCheckID(tc *truthCheck) uint64 {
	c.checkSeq++
	id := truthCheckIDBit | c.checkSeq
	c.checks[id] = tc
	return id
}

// askMirror asks the mirror about the check's blocks: whether it holds them
// (an under) or removed one since the decision's mark (an over).
func (c *routerCore) askMirror(now time.Time, tc *truthCheck) {
	id := c.nextCheckID(tc)
	tc.asking, tc.stop = true, c.ports.deadline(id, tc.until.Sub(now))
	if tc.over {
		c.ports.checkRemoved(tc.ep, id, tc.chain, tc.since)
		return
	}
	c.ports.score(tc.ep, id, tc.chain)
}

// truthConfirmed takes the mirror's answer to a look: for an under, r's
// overlap is what it holds of the blocks the engine reused; for an over,
// r.removed says whether it removed one of the others since llb decided.
// A confirming answer ends the check as late; any other is asked again
// after a pause while the wait allows.
func (c *routerCore) truthConfirmed(now time.Time, id uint64, r scoreReply) bool {
	tc := c.checks[id]
	if tc == nil {
		return false
	}
	delete(c.checks, id)
	tc.stop()
	bs := c.cfg.Rule.Spec.KVBlockSize
	if tc.over {
		tc.s.Confirmed = r.removed
	} else {
		tc.s.Confirmed = uint64(r.overlap+1)*uint64(bs) >= uint64(tc.s.Actual)
	}
	if left := tc.until.Sub(now); !tc.s.Confirmed && left > 0 {
		id := c.nextCheckID(tc)
		tc.asking, tc.stop = false, c.ports.deadline(id, min(tc.pause, left))
		tc.pause *= 2
		return true
	}
	c.observeTruth(now, tc.ep, tc.s)
	return true
}

// truthTimer handles a check's timer: a pause is over (look again, or end
// unconfirmed past the wait), or a look got no answer by the end of the
// wait (unconfirmed).
func (c *routerCore) truthTimer(now time.Time, id uint64) bool {
	tc := c.checks[id]
	if tc == nil {
		return false
	}
	delete(c.checks, id)
	if !tc.asking && now.Before(tc.until) {
		c.askMirror(now, tc)
		return true
	}
	c.observeTruth(now, tc.ep, tc.s)
	return true
}

// observeTruth records a completed sample of endpoint ep.
func (c *routerCore) observeTruth(now time.Time, ep int, s ladder.TruthSample) {
	step := c.truth[ep].Observe(now, s, c.cfg.Rule.Spec.KVBlockSize)
	c.m.prediction(ep, step.Outcome, step.Diff)
	if !step.Changed {
		return
	}
	demote := c.cfg.Env.PredictionDemote
	if demote || !step.Verdict.Distrusted {
		c.views[ep].KVDistrusted = demote && step.Verdict.Distrusted
	}
	c.ports.truthChanged(ep, step.Verdict, demote)
}

// PredictionStatus is one endpoint's cache-truth record.
type PredictionStatus struct {
	// Match, Over and Under count the requests compared, by outcome; Late
	// counts the unders and overs the mirror confirmed within
	// truthCheckWait of the engine's answer (its events were still on the
	// way; included in Under and Over).
	Match, Over, Under, Late uint64
	// LastPredicted and LastActual are the latest comparison's cached
	// tokens; HaveLast is false before the first.
	LastPredicted, LastActual uint32
	HaveLast                  bool
	// Distrusted is true while predictions stay wrong; Demoted when Tier
	// 1.5 ignores the endpoint's overlap meanwhile
	// (LLB_KV_PREDICTION_DEMOTE).
	Distrusted, Demoted bool
	// Cause and Detail name the likely cause while distrusted.
	Cause  string
	Detail string
}

// predictionStatus snapshots endpoint i's record.
func (c *routerCore) predictionStatus(i int) PredictionStatus {
	t, v := c.truth[i].Totals(), c.truth[i].Verdict()
	st := PredictionStatus{
		Match: t.Match, Over: t.Over, Under: t.Under, Late: t.Late,
		LastPredicted: t.Last.Predicted, LastActual: t.Last.Actual, HaveLast: t.HaveLast,
		Distrusted: v.Distrusted, Demoted: c.views[i].KVDistrusted,
	}
	if v.Distrusted {
		st.Cause, st.Detail = v.Cause.String(), v.Detail
	}
	return st
}

// Cache-truth metric names.
const (
	// mPrediction counts compared requests by outcome (match, over, under).
	mPrediction = "llb_kv_prediction_total"
	// mPredictionError is the histogram of actual − predicted cached tokens.
	mPredictionError = "llb_kv_prediction_error_tokens"
)

// predictionErrorBuckets are the upper bounds of mPredictionError, in
// tokens: ±16·2^k up to ±8192 around 0.
var predictionErrorBuckets = []float64{-8192, -4096, -2048, -1024, -512, -256, -128, -64, -32, -16, 0, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192}

// signedHistogram is a Prometheus histogram that accepts negative values
// (VictoriaMetrics' PrometheusHistogram drops them): cumulative _bucket
// counters, a _sum and a _count, with the owner's labels.
type signedHistogram struct {
	bounds  []float64
	buckets []*metrics.Counter // one per bound, then +Inf
	sum     *metrics.FloatCounter
	count   *metrics.Counter
}

func (m *svcMetrics) signedHistogram(base, labels string, bounds []float64) *signedHistogram {
	h := &signedHistogram{bounds: bounds, buckets: make([]*metrics.Counter, 0, len(bounds)+1)}
	for _, ub := range bounds {
		h.buckets = append(h.buckets, m.counter(base+"_bucket", labels+`,le="`+strconv.FormatFloat(ub, 'g', -1, 64)+`"`))
	}
	h.buckets = append(h.buckets, m.counter(base+"_bucket", labels+`,le="+Inf"`))
	n := m.name(base+"_sum", labels)
	h.sum = m.set.GetOrCreateFloatCounter(n)
	h.count = m.counter(base+"_count", labels)
	return h
}

func (h *signedHistogram) update(v float64) {
	for i, ub := range h.bounds {
		if v <= ub {
			h.buckets[i].Inc()
		}
	}
	h.buckets[len(h.bounds)].Inc()
	h.sum.Add(v)
	h.count.Inc()
}

// truthMetrics are one endpoint's cache-truth series.
type truthMetrics struct {
	outcomes [3]*metrics.Counter // by ladder.PredictionOutcome
	errs     *signedHistogram
}

func (m *svcMetrics) newTruthMetrics(i int, addr string) truthMetrics {
	labels := `ep_idx="` + strconv.Itoa(i) + `",endpoint="` + addr + `"`
	var t truthMetrics
	for o := ladder.PredictionMatch; o <= ladder.PredictionUnder; o++ {
		t.outcomes[o] = m.counter(mPrediction, labels+`,outcome="`+o.String()+`"`)
	}
	t.errs = m.signedHistogram(mPredictionError, labels, predictionErrorBuckets)
	return t
}

// prediction counts one compared request of endpoint ep.
func (m *svcMetrics) prediction(ep int, o ladder.PredictionOutcome, diff int64) {
	if m == nil || ep >= len(m.truth) || m.truth[ep].errs == nil || int(o) >= len(m.truth[ep].outcomes) {
		return
	}
	m.truth[ep].outcomes[o].Inc()
	m.truth[ep].errs.update(float64(diff))
}
