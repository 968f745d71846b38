package ladder

import (
	"math"
	"time"
)

// Settled misses (Env.MissSettle, on by default): a light-load placement
// of Tier-1.5 misses that keeps each prompt on one endpoint, as SGLang's
// cache_aware tree does, while the prompts per endpoint stay balanced.
//
// At half load the headroom law's misses are prompts LRU evicted since
// their last request, and it sends each to the endpoint with the least KV
// in use (within MissSlackPct), so an evicted prompt moves to wherever
// the running batches happen to be smallest and the prompts per endpoint
// drift apart; an endpoint given more of them evicts more, and TTFT p90
// sits on the boundary between hits and misses (docs/performance.md, the
// default over six seeds). Settling sends the miss back to its home — the
// endpoint its key was last sent to — unless the home's footprint exceeds
// the smallest one by more than this prompt, and otherwise to the smallest
// footprint, among the endpoints that run it at once and are about as idle
// as the idlest. The footprint here is weighted by how often each prompt
// comes back (footprintTable.weightedSums), so a Zipf workload's cold
// prompts do not count as much as its hot ones.
//
// Only a hot prompt settles: one that comes back about once per
// FootprintTTL or more often (footprintTable.hotHome). A stable home is
// worth something to a prompt asked for again and again, which it keeps
// the prompts per endpoint even for; a prompt seen once in a while (a
// recorded trace's next turn, minutes later) finds nothing left at home,
// and is better placed where the running batches are smallest: settled
// too, the Mooncake synthetic trace's TTFT p90 was 4 % higher on the step
// model.
//
// Measured in docs/performance.md ("Settled misses", "Why the 50 % cells
// lose").

const (
	// SettleFillPct: the fleet is light while its in-flight requests,
	// averaged over SettleFillWindow, are below this percentage of the sum
	// of its endpoints' headrooms for the miss. Above it the misses go by
	// KV use as before: near saturation the least-used engine is what
	// keeps a full prefill fast.
	SettleFillPct = 70
	// SettleFillWindow is the time constant of that average. One miss's
	// fill says little — at 90 % load a Poisson lull shows the fill of
	// half load — and a 20 s average still opened on compute-bound
	// workers at 90 % (their fill is 0.68–0.88 there), while the mean over
	// a minute of misses keeps them apart (docs/performance.md).
	SettleFillWindow = 60 * time.Second
	// SettlePromptsPerCache: a prompt settles only on an endpoint whose
	// cache holds at least this many prompts of its size. Settling evens out
	// the number of prompts per endpoint, which is what keeps a cache of
	// many prompts evicting few of them; a cache of a few large prompts
	// (long documents) is a packing problem, where the smallest footprint
	// or the home packs a second document beside one that needs the cache
	// alone.
	SettlePromptsPerCache = 6
	// SettleHorizon is how long a placement counts as a prompt's home and
	// towards the weighted footprint.
	SettleHorizon = 300 * time.Second
	// SettleHalfLife is the half-life of a prompt's hit count.
	SettleHalfLife = 60 * time.Second
)

// settleMiss places a Tier-1.5 miss while the fleet is light (see the
// section comment). The candidates are the members of fleet whose KV state
// is trusted (missEligible), whose engine queues nothing, that are below
// their headroom, with at most one request in flight more than the least
// loaded candidate and at most one prompt's blocks of queued prefill work
// more than the least; only a hot prompt settles. false leaves the miss to
// missTarget's KV window. r.room must be current, and r.fp the prompt's
// weighted footprint (missTarget computes it before calling).
func (r *Router) settleMiss(now time.Time, req *Request, views []EndpointView, fleet []Candidate, calm bool) (int, bool) {
	if r.foot == nil || !req.HasPrefixHash || len(fleet) == 0 {
		return -1, false
	}
	var inflight, room uint64
	minPF, minAct := uint32(math.MaxUint32), uint32(math.MaxUint32)
	for i := range fleet {
		e := fleet[i].Endpoint
		v := &views[e]
		inflight += uint64(v.ActiveConns)
		room += uint64(r.room[e])
		if missEligible(v, calm) {
			minPF = min(minPF, v.PrefillBlocks)
			minAct = min(minAct, v.ActiveConns)
		}
	}
	if !r.settleFill.light(now, inflight, room) {
		return -1, false
	}
	home, hot := r.foot.hotHome(now, req.PrefixHash)
	if !hot {
		return -1, false
	}
	fp := &r.fp
	pb := uint64(max(r.PromptBlocks(req), 1))
	runsNow := func(e int) bool {
		v := &views[e]
		return missEligible(v, calm) && v.QueuedRequests == 0 && v.ActiveConns < r.room[e] && pb*SettlePromptsPerCache <= r.caps[e]
	}
	small := -1
	for j := range fleet {
		e := fleet[(j+int(r.missTick%uint64(len(fleet))))%len(fleet)].Endpoint
		v := &views[e]
		if !runsNow(e) || uint64(v.PrefillBlocks) > uint64(minPF)+pb || v.ActiveConns > minAct+1 {
			continue
		}
		if small < 0 || lessFootprint(fp[e], r.caps[e], fp[small], r.caps[small]) {
			small = e
		}
	}
	if small < 0 {
		return -1, false
	}
	if home != small && inFleet(fleet, home) && runsNow(home) && fp[home] <= fp[small]+pb {
		return home, true
	}
	return small, true
}

func inFleet(fleet []Candidate, e int) bool {
	for i := range fleet {
		if fleet[i].Endpoint == e {
			return true
		}
	}
	return false
}

// fillAverage is an exponentially weighted average of the fleet's fill
// (requests in flight per headroom), sampled at each Tier-1.5 miss with a
// weight that grows with the time since the previous sample, so that it
// averages over SettleFillWindow however often the misses come.
type fillAverage struct {
	at   int64 // time of the last sample, UnixNano; 0 before the first
	fill float64
}

// light records the fill inflight/room at now and reports whether the
// average is below SettleFillPct. A fleet without headroom is not light.
func (a *fillAverage) light(now time.Time, inflight, room uint64) bool {
	x := 1.0
	if room > 0 {
		x = float64(inflight) / float64(room)
	}
	n := now.UnixNano()
	if a.at == 0 {
		a.fill = x
	} else if dt := n - a.at; dt > 0 {
		w := 1 - math.Exp(-float64(dt)/float64(SettleFillWindow))
		a.fill += w * (x - a.fill)
	}
	a.at = max(a.at, n)
	return room > 0 && 100*a.fill < SettleFillPct
}
