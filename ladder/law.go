package ladder

import (
	"math"
	"math/bits"
)

// The unified selection law of Tier 1.5 (spec "The unified selection law").
// Everything here is integer math over a candidate slice; no state.
//
// LoxiLB's laws: off, hard (its default), soft, adaptive, adaptive-soft.
// llb adds headroom, its default: hard with an absolute floor under each
// cap (Candidate.Headroom, from HeadroomFor). LoxiLB's relative cap
// ceil(1.75·L·cap_i/Σcap) is tiny while L is: with 4 in flight on 4 equal
// endpoints it is 2, so two requests on the endpoint holding a prefix
// "overload" it and relief spills the third to an endpoint that must
// prefill the whole prompt and evict another prefix to hold it, which at
// light load costs more cache hits than CHWBL loses
// (docs/performance.md, the headroom law). An endpoint that can run the
// request at once is not overloaded; the floor says so, and the relative
// cap rules again once it is near its concurrency estimate or its engine
// queues, where spilling wins.

const (
	// CapacityClampMax bounds an advertised num_gpu_blocks before it enters
	// any division (LoxiLB's kvCapacityClampMax), so a buggy engine cannot
	// overflow the sums.
	CapacityClampMax = 8_000_000
	// SoftCostScale prices one uncached block in soft mode (milli-blocks).
	SoftCostScale = 1000

	adaptiveLoadAnchor = 16 // L at/below which ε/λ sit at their floors
	adaptiveLoadSat    = 26 // L at/above which ε/λ sit at their caps
	adaptiveFactorLo   = 175
	adaptiveFactorHi   = 300
	adaptiveLambdaLo   = 50000
	adaptiveLambdaHi   = 100000
)

// Candidate is one endpoint as the law sees it.
type Candidate struct {
	// Endpoint is the endpoint's index in the rule.
	Endpoint int
	// Overlap is the matched leading-block count.
	Overlap uint32
	// Load is llb's active_conns on the endpoint.
	Load uint32
	// Capacity is the effective capacity weight (clamped blocks × controller
	// weight); values below 1 count as 1.
	Capacity uint64
	// Headroom is the headroom law's absolute floor under the cap: the
	// candidate counts as under its cap while Load < Headroom, whatever
	// the relative cap says (see HeadroomFor). LoxiLB's modes never set it;
	// 0 adds nothing.
	Headroom uint32
}

// under reports whether c is under its cap: below its headroom, or below
// the relative cap CapFor(totalLoad, capacity, totalCap, factorPct).
func (c *Candidate) under(totalLoad, totalCap uint64, factorPct uint32) bool {
	return c.Load < c.Headroom || underCap(c.Load, c.capacity(), totalLoad, totalCap, factorPct)
}

func (c *Candidate) capacity() uint64 {
	if c.Capacity == 0 {
		return 1
	}
	return c.Capacity
}

// LawParams selects and tunes the law.
type LawParams struct {
	// Mode is the law (hard by default).
	Mode LBMode
	// FactorPct is the static (1+ε)·100 for hard mode (and relief in soft).
	FactorPct uint32
	// Lambda is the static soft-mode λ.
	Lambda uint32
}

// LawResult is the law's pick and the quantities it used.
type LawResult struct {
	// Pos is the chosen candidate's position in the slice; -1 when empty.
	Pos int
	// Affinity is the position of the overlap winner the law started from.
	Affinity int
	// Spilled is true when the pick holds fewer overlapping blocks than the
	// overlap winner: the law traded cache locality for load. (Moving to an
	// equally-overlapping endpoint is not a spill.)
	Spilled bool
	// Saturated is true when hard mode found every candidate at/over its cap.
	Saturated bool
	// Negligible is true when hard mode's best under-cap overlap was 0 and
	// it picked the least-loaded under-cap candidate instead.
	Negligible bool
	// FactorPct is the (1+ε)·100 in effect (adaptive modes: ε(L)).
	FactorPct uint32
	// Lambda is the λ in effect (adaptive modes: λ(L)).
	Lambda uint32
	// TotalLoad is L = Σ Load over the slice.
	TotalLoad uint64
	// TotalCap is Σ capacity over the slice.
	TotalCap uint64
}

// AdaptiveFactor is ε_eff(L) = clamp(175 + 125·(L−16)/10, 175, 300), in
// percent, with integer division (L = 21 gives 237).
func AdaptiveFactor(load uint64) uint32 {
	switch {
	case load <= adaptiveLoadAnchor:
		return adaptiveFactorLo
	case load >= adaptiveLoadSat:
		return adaptiveFactorHi
	}
	return adaptiveFactorLo + uint32(125*(load-adaptiveLoadAnchor)/10)
}

// AdaptiveLambda is λ_eff(L) = clamp(50000 + 5000·(L−16), 50000, 100000).
func AdaptiveLambda(load uint64) uint32 {
	switch {
	case load <= adaptiveLoadAnchor:
		return adaptiveLambdaLo
	case load >= adaptiveLoadSat:
		return adaptiveLambdaHi
	}
	return adaptiveLambdaLo + uint32(5000*(load-adaptiveLoadAnchor))
}

// CapFor is the hard-mode bound cap_i = ceil(factor·totalLoad·cap_i /
// (100·totalCap)), floored at 1 — exactly LoxiLB's kvCapFor. totalLoad is
// Σ load_i of the set as it stands, without the request being placed; the
// floor of 1 is how an idle set (totalLoad 0) stays routable: every cap is 1
// and every idle endpoint (load 0) is under it. The arithmetic is 128-bit and
// saturates, so no input can overflow it.
func CapFor(totalLoad, capI, totalCap uint64, factorPct uint32) uint64 {
	if totalCap == 0 {
		return 1
	}
	var c uint64
	if totalCap > math.MaxUint64/100 {
		// ceil(ceil(x/T)/100) == ceil(x/(100·T)) for positive integers.
		c = mulDivCeil(uint64(factorPct), totalLoad, capI, totalCap)
		c = c/100 + min(c%100, 1)
	} else {
		c = mulDivCeil(uint64(factorPct), totalLoad, capI, 100*totalCap)
	}
	if c < 1 {
		return 1
	}
	return c
}

// underCap reports load < CapFor(totalLoad, capI, totalCap, factorPct)
// without dividing: with X = factor·totalLoad·capI and D = 100·totalCap,
// load < max(1, ceil(X/D)) ⇔ load == 0 ∨ load·D < X.
func underCap(load uint32, capI, totalLoad, totalCap uint64, factorPct uint32) bool {
	if load == 0 {
		return true // every cap is at least 1
	}
	if totalCap == 0 {
		return false // CapFor is 1
	}
	xh, xl, ok1 := mul3(uint64(factorPct), totalLoad, capI)
	dh, dl, ok2 := mul3(uint64(load), 100, totalCap)
	if !ok1 || !ok2 {
		return uint64(load) < CapFor(totalLoad, capI, totalCap, factorPct)
	}
	return dh < xh || (dh == xh && dl < xl)
}

// ConcurrencyEstimate is the headroom law's estimate of how many requests
// like this one an endpoint runs at once before it queues:
//
//	K = min(maxNumSeqs, (capacity − o) / max(1, promptBlocks − o))
//
// with o the prompt's overlap with the endpoint (at most capacity and
// promptBlocks): the o cached blocks are shared by every such request, and
// each needs its own promptBlocks − o. Without an overlap it is how many
// such prompts the KV cache holds. maxNumSeqs is the engine's running-batch
// limit (LLB_KV_MAX_NUM_SEQS). Output blocks are not counted: the engine
// allocates them as tokens come, and the queue test (HeadroomFor) and the
// held-spill test (HoldWinner) see the engine's real usage.
func ConcurrencyEstimate(capacity uint64, promptBlocks, overlap, maxNumSeqs uint32) uint64 {
	o := min(uint64(overlap), uint64(promptBlocks), capacity)
	need := max(uint64(promptBlocks)-o, 1)
	return min((capacity-o)/need, uint64(maxNumSeqs))
}

// HeadroomFor is the headroom law's floor under one endpoint's cap:
//
//	headroom = floor(pct · K / 100),   0 while the engine reports a queue
//
// with K its ConcurrencyEstimate and pct LLB_KV_HEADROOM_PCT. An endpoint
// whose in-flight load is below it runs a new request at once, so the
// request's cached prefix is worth more than any balance: the law keeps it
// there. An engine that reports waiting requests (vllm:num_requests_waiting
// > 0) has no headroom.
func HeadroomFor(k uint64, queued uint32, pct uint32) uint32 {
	if queued > 0 {
		return 0
	}
	return uint32(min(mulDivFloor(k, uint64(pct), 1, 100), math.MaxUint32))
}

// SpillMarginBlocks is what the headroom law charges a spill for the copy
// it makes: the spilled request computes its prompt again elsewhere and
// evicts some other prefix to hold it. A spill must save more than this
// much queued prefill work (64 blocks, 1024 tokens at vLLM's default block
// size) or the overlap winner keeps the request (HoldWinner).
const SpillMarginBlocks = 64

// PrefillCost is the prefill work, in blocks, a request joins on an
// endpoint: the uncached prompt blocks of the requests already sent there
// that have not answered yet (queued is EndpointView.PrefillBlocks), plus
// its own uncached blocks, promptBlocks − overlap.
func PrefillCost(queued, promptBlocks, overlap uint32) uint64 {
	return uint64(queued) + uint64(promptBlocks-min(overlap, promptBlocks))
}

// HoldWinner is the headroom law's test of a spill, from the overlap
// winner w to the spill target t: keep w when it still has room for the
// request's new blocks (its KV blocks in use, EndpointView.KVUsedBlocks,
// plus promptBlocks − o_w, within its capacity) and moving
// would not save more than SpillMarginBlocks of prefill work:
//
//	PrefillCost(w) ≤ PrefillCost(t) + SpillMarginBlocks
//
// The cap-based laws spill on llb's in-flight counts alone; on an engine
// whose batch shares its compute (vLLM's scheduler) a spill pays the whole
// prompt's prefill to escape a queue of cheap cache hits. An endpoint
// whose KV usage is unknown never holds (the law's spill stands).
func HoldWinner(w, t EndpointView, capW uint64, promptBlocks, overlapW, overlapT uint32) bool {
	if !w.KVUsageKnown {
		return false
	}
	need := uint64(promptBlocks - min(overlapW, promptBlocks))
	if uint64(w.KVUsedBlocks)+need > capW {
		return false
	}
	return PrefillCost(w.PrefillBlocks, promptBlocks, overlapW) <= PrefillCost(t.PrefillBlocks, promptBlocks, overlapT)+SpillMarginBlocks
}

// BalanceMarginBlocks is how much less prefill work, in blocks (4096
// tokens at vLLM's default block size), another endpoint must offer
// before the headroom law moves a request off its pick (Rebalance). The
// law's other tests move a request only when its pick is over a cap or
// cannot keep the prompt; on vLLM's step scheduler a request also waits
// for every prefill chunk queued ahead of it, and a pick that is under
// its cap can still hold a long queue of misses. A smaller margin moves
// requests too often (each move copies a prompt, and shared-prefix traffic
// loses more to the copies than it gains); at 256 chat sessions on vLLM's
// step scheduler stop waiting behind queued misses (docs/performance.md,
// rebalancing).
const BalanceMarginBlocks = 256

// Rebalance is the headroom law's test of a move from the pick p to t:
// true when the request joins more than BalanceMarginBlocks more prefill
// work at p than at t,
//
//	PrefillCost(p) > PrefillCost(t) + BalanceMarginBlocks
//
// (each side's queued prefill blocks plus the request's own uncached
// blocks there). The caller checks that t runs the request at once and,
// when the move copies the prompt, that the copy fits t's cache.
func Rebalance(p, t EndpointView, promptBlocks, overlapP, overlapT uint32) bool {
	return PrefillCost(p.PrefillBlocks, promptBlocks, overlapP) > PrefillCost(t.PrefillBlocks, promptBlocks, overlapT)+BalanceMarginBlocks
}

// MissSlackPct is how close to the least-used endpoint's KV usage, in
// percent of an endpoint's capacity, a miss target must be (missTarget):
// the misses go among those, so at light load, when every cache is about
// as busy, new prefixes spread evenly over the endpoints as round robin
// spreads them, and under load they avoid the busy ones. A wider window
// (a quarter of a cache) herds misses onto busy engines near saturation
// (docs/routing.md, misses).
const MissSlackPct = 5

// The auto law's ε range, as (1+ε)·100.
const (
	AutoFactorMax = 300
	AutoFactorMin = 150
)

// AutoFactor is the auto law's (1+ε)·100 after one more Tier-1.5
// decision: it moves an eighth of the way from prev towards
//
//	target = AutoFactorMax − (AutoFactorMax − AutoFactorMin) · queued / n
//
// with queued of the n eligible endpoints reporting waiting requests at
// their last scrape. While no engine queues the cap is loose (300: keep the
// cache affinity; only the headroom law's other tests spill), and it
// tightens towards 150 as queues spread over the fleet — the best static
// factors the ε sweep of report/ finds at light and at saturating load. A
// start from 0 or n = 0 gives the target.
func AutoFactor(prev uint32, queued, n int) uint32 {
	target := uint32(AutoFactorMax)
	if n > 0 {
		q := min(max(queued, 0), n)
		target = AutoFactorMax - uint32((AutoFactorMax-AutoFactorMin)*q/n)
	}
	if prev < AutoFactorMin || prev > AutoFactorMax {
		return target
	}
	if target >= prev {
		return prev + (target-prev+7)/8
	}
	return prev - (prev-target+7)/8
}

// MeanCapacity is Σcapacity / n (floored, at least 1): the capacity an
// endpoint needs for a soft-mode capacity weight of exactly 1.
func MeanCapacity(cands []Candidate) uint64 {
	if len(cands) == 0 {
		return 1
	}
	var sum uint64
	for i := range cands {
		sum = satAdd(sum, cands[i].capacity())
	}
	m := sum / uint64(len(cands))
	if m == 0 {
		return 1
	}
	return m
}

// SoftCost is soft mode's cost of one candidate:
//
//	cost = (promptBlocks − overlap)·1000 + λ·load·meanCap / capacity
//
// i.e. the spec's (λ·load_i)/capacity_i with capacity_i read as the
// candidate's capacity weight relative to the set's mean (capacity /
// meanCap). llb deliberately normalises: with raw num_gpu_blocks (tens of
// thousands) as the divisor, as LoxiLB's kvSoftBlendSelect does, the load
// term rounds to 0 and soft degenerates to argmax. On a homogeneous fleet
// the weight is 1 and the load term is exactly λ·load. At zero load the
// cost is the uncached term alone, so soft equals overlap argmax.
func SoftCost(c *Candidate, promptBlocks uint32, lambda uint32, meanCap uint64) uint64 {
	uncached := uint64(0)
	if promptBlocks > c.Overlap {
		uncached = uint64(promptBlocks - c.Overlap)
	}
	penalty := mulDivFloor(uint64(lambda), uint64(c.Load), meanCap, c.capacity())
	return satAdd(uncached*SoftCostScale, penalty)
}

// SelectUnified runs the law over cands and returns the pick. Decide feeds it
// the positive-overlap candidates only (the spec's primary candidate set);
// the negligible-overlap branch therefore fires only for callers, such as
// the simulator, that also pass zero-overlap candidates. promptBlocks feeds
// soft mode's uncached term (raised to the best overlap if smaller).
//
// Tie-breaks: the overlap winner (and hard mode's under-cap pick) orders by
// overlap desc, load asc, endpoint asc; off mode by overlap desc, endpoint
// asc; soft by cost asc, overlap desc, load asc, endpoint asc.
func SelectUnified(cands []Candidate, promptBlocks uint32, p LawParams) LawResult {
	res := LawResult{Pos: -1, Affinity: -1, FactorPct: p.FactorPct, Lambda: p.Lambda}
	if len(cands) == 0 {
		return res
	}
	for i := range cands {
		res.TotalLoad += uint64(cands[i].Load)
		res.TotalCap = satAdd(res.TotalCap, cands[i].capacity())
	}
	switch p.Mode {
	case LBAdaptive, LBAdaptiveSoft:
		res.FactorPct = AdaptiveFactor(res.TotalLoad)
		res.Lambda = AdaptiveLambda(res.TotalLoad)
	}
	if p.Mode == LBOff {
		best := 0
		for i := 1; i < len(cands); i++ {
			c, b := &cands[i], &cands[best]
			if c.Overlap > b.Overlap || (c.Overlap == b.Overlap && c.Endpoint < b.Endpoint) {
				best = i
			}
		}
		res.Pos, res.Affinity = best, best
		return res
	}
	res.Affinity = affinityWinner(cands)
	switch p.Mode {
	case LBSoft, LBAdaptiveSoft:
		res.Pos = softPick(cands, promptBlocks, res.Lambda)
	default:
		res.Pos, res.Saturated, res.Negligible = hardPick(cands, res.TotalLoad, res.TotalCap, res.FactorPct)
	}
	res.Spilled = cands[res.Pos].Overlap < cands[res.Affinity].Overlap
	return res
}

// better reports whether a beats b under "overlap desc, load asc, endpoint asc".
func better(a, b *Candidate) bool {
	if a.Overlap != b.Overlap {
		return a.Overlap > b.Overlap
	}
	if a.Load != b.Load {
		return a.Load < b.Load
	}
	return a.Endpoint < b.Endpoint
}

// lessLoaded reports whether a beats b under "load asc, endpoint asc".
func lessLoaded(a, b *Candidate) bool {
	if a.Load != b.Load {
		return a.Load < b.Load
	}
	return a.Endpoint < b.Endpoint
}

func affinityWinner(cands []Candidate) int {
	best := 0
	for i := 1; i < len(cands); i++ {
		if better(&cands[i], &cands[best]) {
			best = i
		}
	}
	return best
}

func hardPick(cands []Candidate, totalLoad, totalCap uint64, factor uint32) (pos int, saturated, negligible bool) {
	// Each cap is computed once; slices longer than the scratch (never the
	// case inside Decide, which passes at most MaxEndpoints) recompute.
	var scratch [2 * MaxEndpoints]bool
	isUnder := func(i int) bool { return cands[i].under(totalLoad, totalCap, factor) }
	if len(cands) <= len(scratch) {
		for i := range cands {
			scratch[i] = isUnder(i)
		}
		isUnder = func(i int) bool { return scratch[i] }
	}
	under := -1
	for i := range cands {
		if isUnder(i) && (under < 0 || better(&cands[i], &cands[under])) {
			under = i
		}
	}
	if under >= 0 {
		if cands[under].Overlap > 0 {
			return under, false, false
		}
		// Negligible overlap: no affinity worth honouring; least-loaded under cap.
		least := -1
		for i := range cands {
			if isUnder(i) && (least < 0 || lessLoaded(&cands[i], &cands[least])) {
				least = i
			}
		}
		return least, false, true
	}
	// Saturated: least-loaded among the positive-overlap candidates (then
	// overlap desc, endpoint asc); among all when none has overlap.
	pick := -1
	anyPositive := false
	for i := range cands {
		if cands[i].Overlap > 0 {
			anyPositive = true
			break
		}
	}
	for i := range cands {
		c := &cands[i]
		if anyPositive && c.Overlap == 0 {
			continue
		}
		if pick < 0 {
			pick = i
			continue
		}
		b := &cands[pick]
		if c.Load < b.Load || (c.Load == b.Load && (c.Overlap > b.Overlap || (c.Overlap == b.Overlap && c.Endpoint < b.Endpoint))) {
			pick = i
		}
	}
	return pick, true, false
}

func softPick(cands []Candidate, promptBlocks uint32, lambda uint32) int {
	for i := range cands {
		if cands[i].Overlap > promptBlocks {
			promptBlocks = cands[i].Overlap
		}
	}
	meanCap := MeanCapacity(cands)
	best, bestCost := -1, uint64(0)
	for i := range cands {
		c := &cands[i]
		cost := SoftCost(c, promptBlocks, lambda, meanCap)
		if best < 0 || cost < bestCost || (cost == bestCost && better(c, &cands[best])) {
			best, bestCost = i, cost
		}
	}
	return best
}

// ReliefTarget is spill relief: when the pick at position sel is at/over its
// fleet-wide cap (CapFor over the whole fleet slice, all eligible endpoints
// including zero-overlap ones), it returns the least-loaded under-cap fleet
// position (ties: lowest endpoint) and true. It returns (sel, false) when
// the pick is under its fleet cap, no other endpoint is under its cap, or the
// fleet has fewer than two endpoints. fleet[sel] must be the law's pick.
func ReliefTarget(fleet []Candidate, sel int, factorPct uint32) (int, bool) {
	if len(fleet) < 2 || sel < 0 || sel >= len(fleet) {
		return sel, false
	}
	var totalLoad, totalCap uint64
	for i := range fleet {
		totalLoad += uint64(fleet[i].Load)
		totalCap = satAdd(totalCap, fleet[i].capacity())
	}
	if fleet[sel].under(totalLoad, totalCap, factorPct) {
		return sel, false
	}
	relief := -1
	for i := range fleet {
		c := &fleet[i]
		if !c.under(totalLoad, totalCap, factorPct) {
			continue
		}
		if relief < 0 || lessLoaded(c, &fleet[relief]) {
			relief = i
		}
	}
	if relief < 0 || relief == sel {
		return sel, false
	}
	return relief, true
}

// mulDivCeil returns ceil(a·b·c / d) in 128-bit arithmetic, saturating at
// MaxUint64. d must be non-zero.
func mulDivCeil(a, b, c, d uint64) uint64 {
	// Fast path: the product and the rounding fit in 64 bits.
	if h1, l1 := bits.Mul64(a, b); h1 == 0 {
		if h2, l2 := bits.Mul64(l1, c); h2 == 0 && l2 <= math.MaxUint64-(d-1) {
			return (l2 + d - 1) / d
		}
	}
	hi, lo, ok := mul3(a, b, c)
	if !ok {
		return math.MaxUint64
	}
	var carry uint64
	lo, carry = bits.Add64(lo, d-1, 0)
	hi, carry = bits.Add64(hi, 0, carry)
	if carry != 0 || hi >= d {
		return math.MaxUint64
	}
	q, _ := bits.Div64(hi, lo, d)
	return q
}

// mulDivFloor returns floor(a·b·c / d) in 128-bit arithmetic, saturating.
func mulDivFloor(a, b, c, d uint64) uint64 {
	if d == 0 {
		d = 1
	}
	if h1, l1 := bits.Mul64(a, b); h1 == 0 {
		if h2, l2 := bits.Mul64(l1, c); h2 == 0 {
			return l2 / d
		}
	}
	hi, lo, ok := mul3(a, b, c)
	if !ok || hi >= d {
		return math.MaxUint64
	}
	q, _ := bits.Div64(hi, lo, d)
	return q
}

// mul3 returns a·b·c as a 128-bit value; ok is false when it exceeds 128 bits.
func mul3(a, b, c uint64) (hi, lo uint64, ok bool) {
	h1, l1 := bits.Mul64(a, b)
	h2, l2 := bits.Mul64(l1, c)
	h3, l3 := bits.Mul64(h1, c)
	if h3 != 0 {
		return 0, 0, false
	}
	sum, carry := bits.Add64(h2, l3, 0)
	if carry != 0 {
		return 0, 0, false
	}
	return sum, l2, true
}

func satAdd(a, b uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 {
		return math.MaxUint64
	}
	return s
}
