package ladder

import (
	"math"
	"time"
)

// tier15 runs Tier 1.5 (KV-exact) over the eligible endpoints in set — the
// eligible prefill endpoints of a P/D rule, or the available endpoints of a
// kvExactMode:3 pool. roleSet is every endpoint of the role (eligible or
// not), used to tell "excluded" from "no candidate" and to flag an
// ineligible overlap winner. It returns the chosen endpoint, or -1 after
// recording the fall-through reason.
//
// Order: guards (mode, warmup, runtime guard, candidates, empty inventory,
// no overlap, min match) → the law over the positive-overlap candidates →
// spill relief over the whole eligible set → cold-start seeding. Seeding
// ticks only on genuine hits (after every guard), so "every Nth hit" counts
// hits that Tier 1.5 actually decided.
func (r *Router) tier15(now time.Time, req *Request, views []EndpointView, set, roleSet EndpointSet, d *Decision) int {
	var on bool
	if r.svc.PDDisagg {
		on = r.svc.KVExactMode == KVPrefill
	} else {
		on = r.svc.KVExactMode == KVSinglePool
	}
	if !on {
		d.Trace.add(Tier15, ReasonKVOff)
		return -1
	}
	if r.svc.KVWarmup > 0 && !r.svc.StartedAt.IsZero() && now.Before(r.svc.StartedAt.Add(r.svc.KVWarmup)) {
		d.Trace.add(Tier15, ReasonWarmup)
		return -1
	}
	if req.KV.Guard != ReasonNone {
		d.Trace.add(Tier15, req.KV.Guard)
		return -1
	}
	if set == 0 {
		if roleSet == 0 {
			d.Trace.add(Tier15, ReasonNoCandidate)
		} else {
			d.Trace.add(Tier15, ReasonExcluded)
		}
		return -1
	}

	promptBlocks := r.PromptBlocks(req)
	overlap := func(i int) uint32 {
		return effectiveOverlap(&views[i], promptBlocks, r.offloadPct)
	}

	r.effectiveCapacities(views, set)
	if r.law.Mode.HeadroomLaw() {
		r.headrooms(views, set, promptBlocks, overlap)
	}
	nFleet, nCands := 0, 0
	var best uint32
	inventory := false
	for i := set.next(0); i >= 0; i = set.next(i + 1) {
		v := &views[i]
		o := overlap(i)
		c := Candidate{Endpoint: i, Overlap: o, Load: v.ActiveConns, Capacity: r.caps[i]}
		if r.law.Mode.HeadroomLaw() {
			c.Headroom = r.room[i]
		}
		r.fleet[nFleet] = c
		nFleet++
		if o > 0 {
			r.cands[nCands] = c
			nCands++
			best = max(best, o)
		}
		if v.InventoryBlocks > 0 || o > 0 {
			inventory = true
		}
	}
	if !inventory || nCands == 0 {
		why := ReasonEmptyInventory
		if inventory {
			why = noCandidateReason(views, set)
		}
		// A demoted endpoint's mirror is wrong: when it may hold the prompt
		// (or every endpoint is demoted) Tier 1.5 cannot tell a miss from a
		// hit, so it places nothing and says why.
		if why != ReasonPredictionMismatch {
			if ep, ok := r.missTarget(now, req, views, set, r.fleet[:nFleet], inventory, d); ok {
				return ep
			}
		}
		d.Trace.add(Tier15, why)
		return -1
	}
	if r.minMatchTokens > 0 {
		bs := uint32(r.svc.KVBlockSize)
		minBlocks := (r.minMatchTokens + bs - 1) / bs
		if promptBlocks > 0 && minBlocks > promptBlocks {
			minBlocks = promptBlocks // a short prompt matched in full is a genuine hit
		}
		if best < max(minBlocks, 1) {
			if ep, ok := r.missTarget(now, req, views, set, r.fleet[:nFleet], true, d); ok {
				return ep
			}
			d.Trace.add(Tier15, ReasonMinMatch)
			return -1
		}
	}

	// An ineligible endpoint (excluded, draining, capped) with a better
	// overlap is never a candidate; the pick falls to the best eligible one.
	// Flag it so operators can see the excluded_mask at work.
	ineligible := roleSet &^ set
	for i := ineligible.next(0); i >= 0; i = ineligible.next(i + 1) {
		if overlap(i) > best {
			d.Flags |= FlagExcludedWinner
			break
		}
	}

	law := r.law
	if law.Mode == LBAuto {
		r.autoFactor = AutoFactor(r.autoFactor, queueing(views, set), set.Count())
		law.FactorPct = r.autoFactor
	}
	res := SelectUnified(r.cands[:nCands], promptBlocks, law)
	pick := r.cands[res.Pos].Endpoint
	relief := r.relief && r.law.Mode != LBOff
	d.KV = KVDetail{
		Ran: true, Mode: r.law.Mode, FactorPct: res.FactorPct, Lambda: res.Lambda,
		Load: res.TotalLoad, Candidates: uint8(nCands), BestOverlap: best,
		Affinity: r.cands[res.Affinity].Endpoint, Relief: relief,
	}
	if res.Spilled {
		d.Flags |= FlagSpill
	}
	if res.Saturated {
		d.Flags |= FlagSaturated
	}
	if relief && !res.Spilled {
		sel := -1
		for k := 0; k < nFleet; k++ {
			if r.fleet[k].Endpoint == pick {
				sel = k
				break
			}
		}
		if t, ok := ReliefTarget(r.fleet[:nFleet], sel, res.FactorPct); ok {
			pick = r.fleet[t].Endpoint
			d.Flags |= FlagRelief
			if r.fleet[t].Overlap < best {
				d.Flags |= FlagSpill
			}
		}
	}
	if r.law.Mode.HeadroomLaw() && pick != d.KV.Affinity {
		w := d.KV.Affinity
		if HoldWinner(views[w], views[pick], r.caps[w], promptBlocks, overlap(w), overlap(pick)) {
			pick = w
			d.Flags = d.Flags&^(FlagSpill|FlagRelief) | FlagHeld
		}
	}
	if r.law.Mode.HeadroomLaw() {
		if t, ok := r.refit(now, req, views, set, pick, promptBlocks, overlap); ok {
			pick = t
			d.Flags = d.Flags&^(FlagHeld|FlagRelief|FlagSpill) | FlagRefit
			if overlap(t) < best {
				d.Flags |= FlagSpill
			}
		}
	}
	if r.law.Mode.HeadroomLaw() {
		if t, ok := r.rebalance(now, req, views, set, pick, promptBlocks, overlap); ok {
			pick = t
			d.Flags = d.Flags&^(FlagHeld|FlagRelief|FlagSpill) | FlagBalance
			if overlap(t) < best {
				d.Flags |= FlagSpill
			}
		}
	}
	if r.seedN > 0 {
		r.coldTick++
		if r.coldTick%r.seedN == 0 {
			for i := set.next(0); i >= 0; i = set.next(i + 1) {
				if views[i].InventoryBlocks < r.coldFloor && i != pick {
					pick = i
					d.Flags |= FlagColdSeed
					break
				}
			}
		}
	}
	return pick
}

// refit is the headroom law's answer to a pick whose cache cannot keep
// what is sent to it: when the pick Overflows (the request must compute at
// least SpillMarginBlocks of its prompt there again, and the prefixes sent
// to it within FootprintTTL take more blocks than it has), the request
// moves to the member of set where the whole prompt Fits beside that
// member's footprint, that has headroom (it runs the request at once: in
// flight below r.room, which is 0 while its engine reports waiting
// requests) and whose KV usage is known and trusted — the smallest
// footprint per capacity, then the lowest index — when the move pays
// (RefitPays): it gives up the blocks the pick holds and the target does
// not, and saves the tail the pick would compute again on each time the
// prompt is expected to come back (when the footprint table does not know
// the key, llb cannot tell, and the move is made). The requests after it
// find the prefix whole instead of its tail evicted again; a prompt that
// does not come back would only compute its cached blocks again. false
// leaves the pick.
func (r *Router) refit(now time.Time, req *Request, views []EndpointView, set EndpointSet, pick int, promptBlocks uint32, overlap func(int) uint32) (int, bool) {
	pickOverlap := overlap(pick)
	if r.foot == nil || !req.HasPrefixHash || promptBlocks-min(pickOverlap, promptBlocks) < SpillMarginBlocks {
		return -1, false
	}
	r.foot.sums(now, req.PrefixHash, &r.fp)
	if !Overflows(r.fp[pick], r.caps[pick], promptBlocks, pickOverlap) {
		return -1, false
	}
	t := -1
	for i := set.next(0); i >= 0; i = set.next(i + 1) {
		v := &views[i]
		if i == pick || v.QueuedRequests > 0 || v.ActiveConns >= r.room[i] || !v.KVUsageKnown || v.KVDistrusted || !Fits(r.fp[i], r.caps[i], promptBlocks) {
			continue
		}
		if t < 0 || lessFootprint(r.fp[i], r.caps[i], r.fp[t], r.caps[t]) {
			t = i
		}
	}
	if t < 0 {
		return -1, false
	}
	if n, ok := r.foot.returns(now, req.PrefixHash); ok && !RefitPays(n, promptBlocks, pickOverlap, overlap(t)) {
		return -1, false
	}
	return t, true
}

// rebalance is the headroom law's last look at the pick: the member of
// set where the request joins the least prefill work (PrefillCost, the
// lowest index among equals), when that is more than BalanceMarginBlocks
// less than at the pick (Rebalance), it runs the request at once (no
// engine queue, in flight below r.room), its KV usage is known and
// trusted, when the request would compute SpillMarginBlocks or more
// of its prompt there, a copy — the prompt Fits beside its footprint, so
// the copy evicts nothing recent, and — when it holds less of the prompt
// than the pick (a spill) — the request is not predicted to start more
// than SpillPredictionFactor times later there (startsSooner). false
// leaves the pick. Most decisions end at the first test: a pick with less
// prefill queued than the margin cannot be beaten by it.
//
// The prediction is what tells the engines apart: vLLM's step scheduler
// computes the prefill chunks queued ahead of a request first, so a long
// queue at the pick is worth a copy elsewhere, while an engine that runs
// each request's prefill on its own clock (llm-d-inference-sim's
// load-factor model) makes nobody wait for the queue, and a spill there
// only computes again the blocks the pick held. Each endpoint's model
// learns which from its measured TTFTs (the weight of queued blocks,
// θ2); without trusted models the rule is PrefillCost's alone.
func (r *Router) rebalance(now time.Time, req *Request, views []EndpointView, set EndpointSet, pick int, promptBlocks uint32, overlap func(int) uint32) (int, bool) {
	pc := PrefillCost(views[pick].PrefillBlocks, promptBlocks, overlap(pick))
	if pc <= BalanceMarginBlocks {
		return -1, false
	}
	summed := false
	t, tc := -1, uint64(0)
	for i := set.next(0); i >= 0; i = set.next(i + 1) {
		v := &views[i]
		if i == pick || v.QueuedRequests > 0 || v.ActiveConns >= r.room[i] || !v.KVUsageKnown || v.KVDistrusted {
			continue
		}
		o := overlap(i)
		c := PrefillCost(v.PrefillBlocks, promptBlocks, o)
		if (t >= 0 && c >= tc) || !Rebalance(views[pick], *v, promptBlocks, overlap(pick), o) {
			continue
		}
		if o < overlap(pick) && !r.startsSooner(views, i, pick, promptBlocks, o, overlap(pick)) {
			continue
		}
		if promptBlocks-min(o, promptBlocks) >= SpillMarginBlocks {
			if r.foot == nil || !req.HasPrefixHash {
				continue
			}
			if !summed {
				r.foot.sums(now, req.PrefixHash, &r.fp)
				summed = true
			}
			if !Fits(r.fp[i], r.caps[i], promptBlocks) {
				continue
			}
		}
		t, tc = i, c
	}
	return t, t >= 0
}

// missEligible reports whether a miss may go to v: its KV state is
// trusted and, while some trusted endpoint queues nothing (calm), its
// engine reported no waiting request at its last scrape.
func missEligible(v *EndpointView, calm bool) bool {
	return !v.KVDistrusted && !(calm && v.QueuedRequests > 0)
}

// lessFootprint reports whether footprint a of capacity ca is a smaller
// share of its cache than b of cb (capacities are at least 1).
func lessFootprint(a, ca, b, cb uint64) bool {
	xh, xl, ok1 := mul3(a, cb, 1)
	yh, yl, ok2 := mul3(b, ca, 1)
	if !ok1 || !ok2 {
		return a/ca < b/cb
	}
	return xh < yh || (xh == yh && xl < yl)
}

// headrooms fills r.room for every member of set: HeadroomFor each
// endpoint's ConcurrencyEstimate for this prompt and its overlap there. While any member is cold (fewer inventory
// blocks than the cold-start floor) every headroom is 0: a fleet that is
// still warming spreads new prefixes as LoxiLB's hard law does, instead of
// piling them on the first endpoint that holds them.
func (r *Router) headrooms(views []EndpointView, set EndpointSet, promptBlocks uint32, overlap func(int) uint32) {
	cold := false
	for i := set.next(0); i >= 0; i = set.next(i + 1) {
		cold = cold || views[i].InventoryBlocks < r.coldFloor
	}
	for i := set.next(0); i >= 0; i = set.next(i + 1) {
		r.room[i] = 0
		if !cold {
			k := ConcurrencyEstimate(r.caps[i], promptBlocks, overlap(i), r.maxNumSeqs)
			r.room[i] = HeadroomFor(k, views[i].QueuedRequests, r.headroomPct)
		}
	}
}

// missTarget is the headroom law's answer to a Tier-1.5 miss (no
// inventory, no overlap, below the minimum match): the endpoint the
// request's prefix key was sent to moments ago (followPending), else —
// once the fleet has inventory and every endpoint's KV usage is known —
// among the endpoints whose KV blocks in use are within MissSlackPct of
// its capacity of the least used one's, the one with the smallest
// footprint per capacity when that footprint is below its capacity (the
// first in turn among equals), else the next in turn (flag least_kv): a
// new or evicted prefix lands where there is room for it and beside the
// fewest other recent prefixes; when every cache is already filled by its
// recent prefixes the misses go round, as round robin spreads them. false
// leaves the miss to the rule's selector, as under LoxiLB's modes.
//
// The footprint here is weighted by how often each prompt comes back
// (weightedSums), not the 20 s sum refits use: at 15–20 requests/s of
// 13k-token prompts the 20 s sum is several caches on every endpoint and
// the misses would only go in turn, while a one-off prompt, which LRU
// will not keep anyway, counts a quarter (docs/performance.md, Mooncake).
func (r *Router) missTarget(now time.Time, req *Request, views []EndpointView, set EndpointSet, fleet []Candidate, inventory bool, d *Decision) (int, bool) {
	if !r.law.Mode.HeadroomLaw() {
		return -1, false
	}
	if ep, ok := r.followPending(now, req, views, set); ok {
		d.Flags |= FlagPending
		return ep, true
	}
	if !inventory || len(fleet) == 0 {
		return -1, false
	}
	// A demoted endpoint's KV state is not trusted: misses go elsewhere.
	// While some trusted endpoint's engine queues nothing, neither does a
	// miss go to one that queues: its whole prompt would wait there.
	calm := false
	for i := range fleet {
		v := &views[fleet[i].Endpoint]
		if !v.KVUsageKnown {
			return -1, false
		}
		calm = calm || !v.KVDistrusted && v.QueuedRequests == 0
	}
	least, trusted := uint32(math.MaxUint32), false
	for i := range fleet {
		if v := &views[fleet[i].Endpoint]; missEligible(v, calm) {
			least, trusted = min(least, v.KVUsedBlocks), true
		}
	}
	if !trusted {
		return -1, false
	}
	if r.foot != nil && req.HasPrefixHash {
		r.foot.weightedSums(now, req.PrefixHash, &r.fp)
	} else {
		r.fp = [MaxEndpoints]uint64{}
	}
	r.missTick++
	if r.env.MissSettle {
		if ep, ok := r.settleMiss(now, req, views, fleet, calm); ok {
			d.Flags |= FlagLeastKV
			return ep, true
		}
	}
	turn, small := -1, -1
	for j := range fleet {
		c := &fleet[(j+int(r.missTick%uint64(len(fleet))))%len(fleet)]
		e := c.Endpoint
		if !missEligible(&views[e], calm) || uint64(views[e].KVUsedBlocks) > uint64(least)+r.caps[e]*MissSlackPct/100 {
			continue
		}
		if turn < 0 {
			turn = e
		}
		if small < 0 || lessFootprint(r.fp[e], r.caps[e], r.fp[small], r.caps[small]) {
			small = e
		}
	}
	if small >= 0 && r.fp[small] < r.caps[small] {
		turn = small
	}
	if turn >= 0 {
		d.Flags |= FlagLeastKV
		return turn, true
	}
	return -1, false
}

// followPending is the headroom law's answer to a Tier-1.5 miss (no
// inventory, no overlap, below the minimum match): the endpoint the
// request's prefix key was sent to within PendingTTL, where its blocks are
// about to appear — when that endpoint is still in set and has headroom
// (an endpoint that queues, or is at its headroom, is no place to pile
// more work on a guess). r.room must be current for set.
func (r *Router) followPending(now time.Time, req *Request, views []EndpointView, set EndpointSet) (int, bool) {
	if r.pending == nil || !req.HasPrefixHash {
		return -1, false
	}
	ep, ok := r.pending.lookup(now, req.PrefixHash)
	if !ok || !set.Has(ep) {
		return -1, false
	}
	if views[ep].ActiveConns >= r.room[ep] {
		return -1, false
	}
	return ep, true
}

// effectiveOverlap is the overlap Tier 1.5 ranks an endpoint by, in blocks:
//
//	o    = min(Overlap, promptBlocks)          (promptBlocks 0: no clamp)
//	off  = min(OverlapOffloaded, o)            blocks only in an offload tier
//	eff  = (o − off) + ⌊off · w / 100⌋         w = Env.OffloadWeightPct
//	eff  = 0 when the endpoint is KVDistrusted
//
// A block the engine must load from CPU memory is worth w % of one already
// in GPU memory (llm-d's tiered scorer weighs its "cpu" backend 0.8 against
// "gpu" 1.0 and defaults w to 80 likewise). The floor makes a prefix held
// only in CPU memory rank strictly below an equally long GPU prefix, and a
// single offloaded block count nothing while w < 100.
func effectiveOverlap(v *EndpointView, promptBlocks uint32, w uint32) uint32 {
	if v.KVDistrusted {
		return 0
	}
	o := v.Overlap
	if promptBlocks > 0 && o > promptBlocks {
		o = promptBlocks
	}
	off := min(v.OverlapOffloaded, o)
	return o - off + uint32(uint64(off)*uint64(w)/100)
}

// noCandidateReason says why no eligible endpoint had a usable overlap:
// prediction_mismatch when a demoted (KVDistrusted) endpoint held one, or
// when every eligible endpoint is demoted; no_overlap otherwise.
func noCandidateReason(views []EndpointView, set EndpointSet) Reason {
	all := true
	for i := set.next(0); i >= 0; i = set.next(i + 1) {
		v := &views[i]
		if !v.KVDistrusted {
			all = false
			continue
		}
		if v.Overlap > 0 {
			return ReasonPredictionMismatch
		}
	}
	if all {
		return ReasonPredictionMismatch
	}
	return ReasonNoOverlap
}

// queueing counts the members of set whose engine reports waiting
// requests.
func queueing(views []EndpointView, set EndpointSet) int {
	n := 0
	for i := set.next(0); i >= 0; i = set.next(i + 1) {
		if views[i].QueuedRequests > 0 {
			n++
		}
	}
	return n
}
