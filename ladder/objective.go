package ladder

import "time"

// TTFT objectives. A request may carry an objective for its time to first
// token (Request.TTFTObjective: the budget left when the router decides).
// After the ladder has picked, the pick stands when its trusted prediction
// meets the budget, or when llb cannot tell (no trusted prediction there:
// an untrained or drifting model). When the pick is predicted to miss:
//
//   - the request moves to an eligible endpoint that runs it at once and
//     is predicted to meet the budget (flag objective). An endpoint runs
//     it at once when llb's requests in flight there are below its
//     ConcurrencyEstimate for this prompt (RunsAtOnce): the prediction
//     does not see the wait for a batch slot or KV blocks on a full
//     engine, so a move onto one was often a miss all the same, and llb's
//     count moves with every decision, so the requests moved spread
//     instead of following one another. Among those the one holding the
//     most of the prompt (effective overlap) is taken, then the lowest
//     prediction, then the lowest index. (Also refusing engines that
//     reported waiting requests at the last scrape, and moving a pick
//     predicted to meet the budget off such an engine, the queue most
//     misses waited in, were measured and not adopted: on the step model
//     they emptied the prefix holders of long conversations and
//     documents, docs/performance.md);
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

// RunsAtOnce reports whether an engine starts a request as it arrives:
// llb's requests in flight there are below k, its ConcurrencyEstimate for
// the request.
func RunsAtOnce(inflight uint32, k uint64) bool {
	return uint64(inflight) < k
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
	if p, ok := predict(pick); !ok || meetsObjective(p, budget) {
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
		if i == pick || !RunsAtOnce(v.ActiveConns, ConcurrencyEstimate(r.caps[i], pb, o, r.maxNumSeqs)) {
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
	case req.Class.Sheddable() && allTrusted && !anyMeets:
		d.Prefill, d.Tier, d.Flags = -1, TierNone, 0
		d.Admission = Shed
		d.Trace.add(TierAdmission, ReasonTTFTObjective)
		return -1, true
	}
	d.Flags |= FlagObjectiveMiss
	return pick, false
}
