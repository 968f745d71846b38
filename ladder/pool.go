package ladder

import "time"

// decidePool routes a single-pool (non-P/D) rule. There is no Tier 0, Tier 1
// or admission here (spec: kvExactMode:3 has none of them). The available
// set is the primaries that are neither excluded nor draining; only when
// none is left do the backups stand in (FlagBackup). With kvExactMode:3,
// Tier 1.5 scores the available set first (spill relief defaults on); a
// miss, or any other rule, goes to the rule's selector. Nothing available
// means 503 no_healthy_backend.
func (r *Router) decidePool(now time.Time, req *Request, snap *Snapshot) Decision {
	d := newDecision()
	views := snap.Endpoints
	excl, drain := foldMasks(views)
	tierSet, list := r.primaries, r.primaryList
	avail := tierSet &^ excl &^ drain
	if avail == 0 {
		if avail = r.backups &^ excl &^ drain; avail != 0 {
			d.Flags |= FlagBackup
			tierSet, list = r.backups, r.backupList
		}
	}
	if avail == 0 {
		d.Unavailable = ReasonNoHealthyBackend
		if r.svc.KVExactMode == KVSinglePool {
			d.Trace.add(Tier15, ReasonExcluded)
		}
		return d
	}
	if r.svc.KVExactMode == KVSinglePool {
		if ep := r.tier15(now, req, views, avail, tierSet, &d); ep >= 0 {
			d.Prefill, d.Tier = ep, Tier15
			return r.objectivePool(req, views, avail, d)
		}
	}
	// The pool lives in the router's scratch so the interface call does not
	// move it to the heap.
	r.pool = Pool{Endpoints: r.eps, Views: views, Avail: avail, List: list, Req: req, Now: now}
	ep, f := r.sel.Pick(&r.pool)
	r.pool = Pool{} // drop the references to the caller's request and views
	d.Prefill, d.Tier, d.Selector = ep, TierSelector, r.svc.Selector
	d.Flags |= f
	return r.objectivePool(req, views, avail, d)
}

// objectivePool applies the request's TTFT objective to a single pool's
// pick (objective).
func (r *Router) objectivePool(req *Request, views []EndpointView, avail EndpointSet, d Decision) Decision {
	ep, shed := r.objective(req, views, avail, d.Prefill, &d)
	if shed {
		d.Prefill, d.Tier = -1, TierNone
		return d
	}
	d.Prefill = ep
	return d
}
