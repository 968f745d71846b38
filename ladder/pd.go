package ladder

import "time"

// The P/D ladder: excluded mask → controller fold-in → admission → Tier 0 →
// Tier 1 → Tier 1.5 → Tier 2 → decode selection → any-healthy rescue → 503.
//
// Eligibility, computed once per decision:
//
//	excluded = down | CB-open | controller DISABLED       never selected
//	draining = local drain | controller DRAINING          Tier-0 pins only
//	capped   = admission: active_conns ≥ per-EP cap        pins fall through
//	eligible prefill = role 1 − excluded − draining − capped
//	eligible decode  = role 2 − excluded − draining

func (r *Router) decidePD(now time.Time, req *Request, snap *Snapshot) Decision {
	d := newDecision()
	views := snap.Endpoints
	excl, drain := foldMasks(views)

	capped, stop := r.admission(now, req, snap, excl, drain, &d)
	if stop {
		return d
	}
	elig := r.prefill &^ excl &^ drain &^ capped

	prefill, decodeHint := r.tier0(req, excl, capped, &d)
	if prefill >= 0 {
		d.Tier = Tier0
	}
	if prefill < 0 {
		if prefill = r.tier1(req, views, elig, &d); prefill >= 0 {
			d.Tier = Tier1
		}
	}
	if prefill < 0 {
		if prefill = r.tier15(now, req, views, elig, r.prefill, &d); prefill >= 0 {
			d.Tier = Tier15
		}
	}
	if prefill < 0 {
		if prefill = r.tier2(views, elig, &d); prefill >= 0 {
			d.Tier = Tier2
		}
	}
	if shed := false; prefill >= 0 {
		if prefill, shed = r.objective(req, views, elig, prefill, &d); shed {
			return d
		}
	}
	decode := -1
	if prefill >= 0 {
		decode = r.selectDecode(views, excl, drain, decodeHint, &d)
	}
	if prefill < 0 || decode < 0 {
		r.rescue(views, excl, drain, &d)
		return d
	}
	d.Prefill, d.Decode = prefill, decode
	d.PinSession = req.SessionKey != ""
	return d
}

// admission applies the gate. It returns the capped prefill endpoints, or
// stop=true with d filled in when the request is refused, shed or parked.
// With the per-EP cap and the global valve both 0 (the default) it does
// nothing at all. When every eligible endpoint is capped, a sheddable
// request is shed at once (ReasonSheddable); any other parks on the
// shortest queue, or, when every queue is full, displaces a parked
// request of a lower class, or of its own class whose tenant has received
// more service (RouteInput.OutranksParked; Decision.Displace), else is
// shed.
func (r *Router) admission(now time.Time, req *Request, snap *Snapshot, excl, drain EndpointSet, d *Decision) (capped EndpointSet, stop bool) {
	if r.maxTotal > 0 && snap.TotalInflight >= r.maxTotal {
		d.Admission = Refuse
		d.Trace.add(TierAdmission, ReasonGlobalValve)
		return 0, true
	}
	if r.maxInflight == 0 {
		return 0, false
	}
	views := snap.Endpoints
	healthy := r.prefill &^ excl &^ drain
	limit := r.CapFor(req.Class, req.UnderShare)
	for i := healthy.next(0); i >= 0; i = healthy.next(i + 1) {
		if views[i].ActiveConns >= limit {
			capped = capped.With(i)
		}
	}
	if healthy == 0 || capped != healthy {
		return capped, false
	}
	// Every eligible prefill endpoint is at its cap.
	if req.Class.Sheddable() {
		d.Admission = Shed
		d.Trace.add(TierAdmission, ReasonSheddable)
		return capped, true
	}
	if r.queueDepth == 0 {
		d.Admission = Shed
		d.Trace.add(TierAdmission, ReasonAllCapped)
		return capped, true
	}
	park := -1
	for i := healthy.next(0); i >= 0; i = healthy.next(i + 1) {
		if views[i].Parked < r.queueDepth && (park < 0 || views[i].Parked < views[park].Parked) {
			park = i
		}
	}
	if park < 0 && !snap.parkedBelow(req.Class) && !req.OutranksParked {
		d.Admission = Shed
		d.Trace.add(TierAdmission, ReasonQueuesFull)
		return capped, true
	}
	d.Admission = Park
	d.ParkOn = park
	if r.maxPark > 0 {
		d.ParkDeadline = now.Add(r.maxPark)
	}
	if park < 0 {
		d.Displace = true
		d.Trace.add(TierAdmission, ReasonQueuesFull)
		return capped, true
	}
	d.Trace.add(TierAdmission, ReasonAllCapped)
	return capped, true
}

// tier0 checks the session pin. A pinned prefill that is excluded (down,
// CB-open, DISABLED), out of range or no longer a prefill endpoint asks the
// caller to evict the key; one at its admission cap falls through but keeps
// its pin (capacity is not health). A draining pin still serves: draining
// endpoints finish their pinned work. It returns the prefill and the decode
// hint, or -1s.
func (r *Router) tier0(req *Request, excl, capped EndpointSet, d *Decision) (prefill, decodeHint int) {
	switch {
	case req.SessionKey == "":
		d.Trace.add(Tier0, ReasonNoSessionKey)
		return -1, -1
	case !req.Session.Found:
		d.Trace.add(Tier0, ReasonSessionMiss)
		return -1, -1
	}
	p := req.Session.Pin.Prefill
	if !r.prefill.Has(p) || excl.Has(p) {
		d.EvictSession = true
		d.Trace.add(Tier0, ReasonSessionEvictedUnhealthy)
		return -1, -1
	}
	if capped.Has(p) {
		d.Trace.add(Tier0, ReasonSessionPinAtCap)
		return -1, -1
	}
	return p, req.Session.Pin.Decode
}

// tier1 consults the radix trie. Guards in order: cache-aware off, empty
// prompt, no eligible endpoint, load imbalance, no match, match rate below
// pd_cache_threshold, ineligible winner.
func (r *Router) tier1(req *Request, views []EndpointView, elig EndpointSet, d *Decision) int {
	switch {
	case r.trie == nil:
		d.Trace.add(Tier1, ReasonCacheAwareOff)
		return -1
	case len(req.Prompt) == 0:
		d.Trace.add(Tier1, ReasonEmptyPrefix)
		return -1
	case elig == 0:
		d.Trace.add(Tier1, ReasonExcluded)
		return -1
	}
	lo, hi := ^uint32(0), uint32(0)
	for i := elig.next(0); i >= 0; i = elig.next(i + 1) {
		lo = min(lo, views[i].ActiveConns)
		hi = max(hi, views[i].ActiveConns)
	}
	if uint64(hi-lo) > uint64(r.svc.BalanceAbsThreshold) {
		d.Trace.add(Tier1, ReasonImbalanceGuard)
		return -1
	}
	ep, matched, ok := r.trie.Match(req.Prompt)
	if !ok {
		d.Trace.add(Tier1, ReasonTrieMiss)
		return -1
	}
	// matched/len ≥ threshold/100, in integers.
	if uint64(matched)*100 < uint64(r.svc.CacheThresholdPct)*uint64(len(req.Prompt)) {
		d.Trace.add(Tier1, ReasonMatchRateBelowThreshold)
		return -1
	}
	if !elig.Has(ep) {
		d.Trace.add(Tier1, ReasonTrieWinnerExcluded)
		return -1
	}
	return ep
}

// tier2 is the min-load fallback over the eligible prefill endpoints.
// Default arm: score = active_conns + queued_requests. Capacity-blend arm,
// gated on the rule's configured selector being gpuaware (sel:9) — never on
// a mutable cursor: score = (conns·20 + queued·50 + swap·30)·meanCap/cap_i.
// Lower wins. A genuine tie (several endpoints share the best score) is
// broken by the Tier-2 counter: the tied endpoints are listed in index order
// and the counter, modulo their number, picks one; only then does the
// counter advance.
func (r *Router) tier2(views []EndpointView, elig EndpointSet, d *Decision) int {
	if elig == 0 {
		if r.prefill == 0 {
			d.Trace.add(Tier2, ReasonNoCandidate)
		} else {
			d.Trace.add(Tier2, ReasonExcluded)
		}
		return -1
	}
	blend := r.svc.Selector == SelGPUAware
	var meanCap uint64
	if blend {
		r.effectiveCapacities(views, elig)
		var sum uint64
		for i := elig.next(0); i >= 0; i = elig.next(i + 1) {
			sum += r.caps[i]
		}
		meanCap = max(sum/uint64(elig.Count()), 1)
	}
	var mins minSet
	for i := elig.next(0); i >= 0; i = elig.next(i + 1) {
		v := &views[i]
		if blend {
			mins.offer(i, CapacityBlendScore(v.ActiveConns, v.QueuedRequests, v.SwapPressure, r.caps[i], meanCap))
		} else {
			mins.offer(i, uint64(v.ActiveConns)+uint64(v.QueuedRequests))
		}
	}
	ep, tied := mins.pick(&r.prefillRR)
	if tied {
		d.Flags |= FlagRRTie
	}
	return ep
}

// minSet collects the lowest-scoring endpoints of a min-load pick, in the
// order offered (index order), on the stack.
type minSet struct {
	eps  [MaxEndpoints]int
	n    int
	best uint64
}

// offer considers endpoint i with score.
func (m *minSet) offer(i int, score uint64) {
	switch {
	case m.n == 0 || score < m.best:
		m.best, m.eps[0], m.n = score, i, 1
	case score == m.best:
		m.eps[m.n] = i
		m.n++
	}
}

// pick returns the single minimum, or breaks a genuine tie with the
// round-robin counter, which advances only then. It returns -1 when nothing
// was offered.
func (m *minSet) pick(counter *uint64) (ep int, tied bool) {
	switch m.n {
	case 0:
		return -1, false
	case 1:
		return m.eps[0], false
	}
	ep = m.eps[*counter%uint64(m.n)]
	*counter++
	return ep, true
}

// Capacity-blend weights (LoxiLB's PROXY_SEL_GPU_AWARE defaults).
const (
	blendConnWeight  = 20
	blendQueueWeight = 50
	blendSwapWeight  = 30
)

// CapacityBlendScore is Tier 2's sel:9 arm: (conns·20 + queued·50 +
// swap·30) · meanCap / capacity, floored. An endpoint at the mean capacity
// keeps its weighted load; a bigger one is penalised less for the same load.
func CapacityBlendScore(conns, queued, swap uint32, capacity, meanCap uint64) uint64 {
	w := uint64(conns)*blendConnWeight + uint64(queued)*blendQueueWeight + uint64(swap)*blendSwapWeight
	return mulDivFloor(w, meanCap, 1, max(capacity, 1))
}

// selectDecode picks the decode endpoint: the session's decode pin when it
// is a decode endpoint that is not excluded (a draining one still finishes
// pinned work), else min-load (active_conns + queued_requests) over the
// eligible decode endpoints with the decode counter breaking genuine ties.
func (r *Router) selectDecode(views []EndpointView, excl, drain EndpointSet, hint int, d *Decision) int {
	if hint >= 0 {
		if r.decode.Has(hint) && !excl.Has(hint) {
			return hint
		}
		d.Trace.add(TierDecode, ReasonDecodePinInvalid)
	}
	set := r.decode &^ excl &^ drain
	if set == 0 {
		d.Trace.add(TierDecode, ReasonDecodeUnavailable)
		return -1
	}
	var mins minSet
	for i := set.next(0); i >= 0; i = set.next(i + 1) {
		mins.offer(i, uint64(views[i].ActiveConns)+uint64(views[i].QueuedRequests))
	}
	ep, tied := mins.pick(&r.decodeRR)
	if tied {
		d.Flags |= FlagDecodeRRTie
	}
	return ep
}

// rescue is the any-healthy fallback: the least-loaded role-0 endpoint that
// is neither excluded nor draining (ties: lowest index); else the decision is
// unavailable with pd_pool_unavailable (503). Decode endpoints are never
// rescue candidates. The flags of the abandoned prefill pick are dropped.
func (r *Router) rescue(views []EndpointView, excl, drain EndpointSet, d *Decision) {
	d.Prefill, d.Decode, d.PinSession = -1, -1, false
	d.Flags = 0
	if ep := leastLoaded(views, r.role0&^excl&^drain); ep >= 0 {
		d.Prefill = ep
		d.Tier = TierRescue
		d.Flags |= FlagRescue
		return
	}
	d.Tier = TierNone
	d.Unavailable = ReasonPDPoolUnavailable
}

// resume is Resume's ladder.
func (r *Router) resume(now time.Time, req *Request, snap *Snapshot, ep int) (Decision, error) {
	if err := r.checkInput(req, snap); err != nil {
		d := newDecision()
		d.Unavailable = ReasonNoHealthyBackend
		return d, err
	}
	if !r.svc.PDDisagg {
		return r.decidePool(now, req, snap), nil
	}
	views := snap.Endpoints
	excl, drain := foldMasks(views)
	if !r.prefill.Has(ep) || excl.Has(ep) {
		return r.decidePD(now, req, snap), nil
	}
	d := newDecision()
	hint := -1
	if req.Session.Found && req.Session.Pin.Prefill == ep {
		hint = req.Session.Pin.Decode
	}
	decode := r.selectDecode(views, excl, drain, hint, &d)
	if decode < 0 {
		r.rescue(views, excl, drain, &d)
		return d, nil
	}
	d.Tier = TierResume
	d.Prefill, d.Decode = ep, decode
	d.PinSession = req.SessionKey != ""
	return d, nil
}
