package ladder

import "time"

// TTFT objectives. A request may carry an objective for its time to first
// token (Request.TTFTObjective: the budget left when the router decides).
// After the ladder has picked, the pick stands when its trusted prediction
// meets the budget and its engine reported no waiting request at the last
// scrape, or when llb cannot tell (no trusted prediction there: an
// untrained or drifting model). Otherwise:
//
//   - a pick predicted to meet the budget whose engine reported waiting
//     requests moves to another eligible endpoint that runs the request at
//     once and is predicted to meet it (flag objective): the prediction
//     does not see the wait for a batch slot or for KV blocks on a
//     queueing engine, which is what made most requests that carried an
//     objective miss it at 90 % load. With no such endpoint the pick
//     stands;
//   - a pick predicted to miss moves to an eligible endpoint that runs the
//     request at once and is predicted to meet it (flag objective);
//   - an endpoint runs the request at once when its engine reported no
//     waiting request and llb's requests in flight there are below its
//     ConcurrencyEstimate for this prompt (RunsAtOnce): a move onto a
//     queue gains nothing, and llb's own count moves with every decision,
//     so the requests moved spread instead of following one another
//     (reading the learned wait, built from the same 250 ms-old scrape,
//     herded them: measured in docs/performance.md). Among those the one
//     holding the most of the prompt (effective overlap) is taken, then
//     the lowest prediction, then the lowest index;
//   - with none predicted to meet (wherever it would run), a sheddable request (Class.Sheddable)
//     is refused at once with 429 (admission shed, reason ttft_objective)
//     instead of queueing for a first token that would come too late —
//     when every eligible endpoint's prediction is trusted, so that llb
//     knows none meets it;
//   - any other request keeps the pick (flag objective_miss): it misses
//     its objective wherever it goes, and moving it to the lowest
//     prediction instead would only move the prefill work the law placed
//     (measured in the simulator, shared-prefix at 90 % load with a
//     100 ms objective every miss can only miss: objective kept for 78.5 %
//     of requests when moved, 84.2 % when kept, TTFT p99 2.32 s against
//     0.75 s).
//
// The predictions are Router.PredictTTFT's: each endpoint's learned model
// of the request's uncached blocks there, the prefill work queued ahead
// and the requests in flight.

// meetsObjective reports whether a prediction d meets budget b.
func meetsObjective(d, b time.Duration) bool { return d <= b }

// ObjectiveMove is what the objective does with a pick, from the pick's
// prediction and its engine's queue.
type ObjectiveMove uint8

const (
	// ObjectiveKeep: the pick stands.
	ObjectiveKeep ObjectiveMove = iota
	// ObjectiveQueued: the pick is predicted to meet the budget but its
	// engine is queueing; move to an endpoint predicted to meet it that
	// runs the request at once, else keep the pick.
	ObjectiveQueued
	// ObjectiveMissed: the pick is predicted to miss; move to an endpoint
	// predicted to meet it, else shed a sheddable request or keep.
	ObjectiveMissed
)

// ObjectiveFor decides what the objective does with a pick whose
// prediction is pred (trusted when ok) for a request with budget left,
// the pick's engine having reported waiting requests at its last scrape.
// An untrusted prediction keeps the pick: llb cannot tell.
func ObjectiveFor(pred time.Duration, ok bool, budget time.Duration, waiting uint32) ObjectiveMove {
	switch {
	case !ok:
		return ObjectiveKeep
	case !meetsObjective(pred, budget):
		return ObjectiveMissed
	case waiting > 0:
		return ObjectiveQueued
	}
	return ObjectiveKeep
}

// RunsAtOnce reports whether an engine starts a request as it arrives: it
// reported no waiting request at its last scrape and the requests in
// flight there are below k, its ConcurrencyEstimate for the request.
func RunsAtOnce(waiting, inflight uint32, k uint64) bool {
	return waiting == 0 && uint64(inflight) < k
}

// objective applies req's TTFT objective to pick, an endpoint of set (the
// decision's eligible endpoints). It returns the endpoint to use, or shed
// true after marking d shed.
func (r *Router) objective(req *Request, views []EndpointView, set EndpointSet, pick int, d *Decision) (int, bool) {
	budget := req.TTFTObjective
	if budget <= 0 || pick < 0 || pick >= len(views) {
		return pick, false
	}
	pb := r.PromptBlocks(req)
	predict := func(i int) (time.Duration, bool) {
		return r.PredictTTFT(i, TTFTInputFor(&views[i], pb, views[i].Overlap))
	}
	p, ok := predict(pick)
	move := ObjectiveFor(p, ok, budget, views[pick].QueuedRequests)
	if move == ObjectiveKeep {
		return pick, false
	}
	r.effectiveCapacities(views, set)
	meet := -1
	var meetOverlap uint32
	var meetPred time.Duration
	allTrusted, anyMeets := true, false
	for i := set.next(0); i >= 0; i = set.next(i + 1) {
		p, ok := predict(i)
		if !ok {
			allTrusted = false
			continue
		}
		if !meetsObjective(p, budget) {
			continue
		}
		anyMeets = true
		v := &views[i]
		o := effectiveOverlap(v, pb, r.offloadPct)
		if i == pick || !RunsAtOnce(v.QueuedRequests, v.ActiveConns, ConcurrencyEstimate(r.caps[i], pb, o, r.maxNumSeqs)) {
			continue
		}
		if meet < 0 || o > meetOverlap || o == meetOverlap && p < meetPred {
			meet, meetOverlap, meetPred = i, o, p
		}
	}
	switch {
	case meet >= 0:
		d.Flags |= FlagObjective
		return meet, false
	case move == ObjectiveQueued:
		return pick, false
	case req.Class.Sheddable() && allTrusted && !anyMeets:
		d.Prefill, d.Tier, d.Flags = -1, TierNone, 0
		d.Admission = Shed
		d.Trace.add(TierAdmission, ReasonTTFTObjective)
		return -1, true
	}
	d.Flags |= FlagObjectiveMiss
	return pick, false
}
