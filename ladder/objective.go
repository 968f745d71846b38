package ladder

import "time"

// TTFT objectives. A request may carry an objective for its time to first
// token (Request.TTFTObjective: the budget left when the router decides).
// After the ladder has picked, the pick stands when its trusted prediction
// meets the budget, or when llb cannot tell (no trusted prediction there:
// an untrained or drifting model). When the pick is predicted to miss:
//
//   - the request moves to an eligible endpoint predicted to meet the
//     budget (flag objective): the one holding the most of the prompt
//     (effective overlap), then the lowest prediction, then the lowest
//     index;
//   - with none, a sheddable request (Class.Sheddable) is refused at once
//     with 429 (admission shed, reason ttft_objective) instead of queueing
//     for a first token that would come too late — when every eligible
//     endpoint's prediction is trusted, so that llb knows none meets it;
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
	meet := -1
	var meetOverlap uint32
	var meetPred time.Duration
	allTrusted := true
	for i := set.next(0); i >= 0; i = set.next(i + 1) {
		p, ok := predict(i)
		if !ok {
			allTrusted = false
			continue
		}
		if !meetsObjective(p, budget) {
			continue
		}
		o := effectiveOverlap(&views[i], pb, r.offloadPct)
		if meet < 0 || o > meetOverlap || o == meetOverlap && p < meetPred {
			meet, meetOverlap, meetPred = i, o, p
		}
	}
	switch {
	case meet >= 0:
		d.Flags |= FlagObjective
		return meet, false
	case req.Class.Sheddable() && allTrusted:
		d.Prefill, d.Tier, d.Flags = -1, TierNone, 0
		d.Admission = Shed
		d.Trace.add(TierAdmission, ReasonTTFTObjective)
		return -1, true
	}
	d.Flags |= FlagObjectiveMiss
	return pick, false
}
