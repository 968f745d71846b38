package ladder

import (
	"math/bits"
	"time"
)

// EndpointSet is a set of endpoint indexes (a rule has at most 32).
type EndpointSet uint64

// Has reports whether i is in the set.
func (s EndpointSet) Has(i int) bool { return i >= 0 && i < 64 && s&(1<<uint(i)) != 0 }

// With returns the set plus i.
func (s EndpointSet) With(i int) EndpointSet { return s | 1<<uint(i) }

// Count returns the set's size.
func (s EndpointSet) Count() int { return bits.OnesCount64(uint64(s)) }

// next returns the smallest member ≥ i, or -1.
func (s EndpointSet) next(i int) int {
	if i >= 64 {
		return -1
	}
	rest := uint64(s) >> uint(i) << uint(i)
	if rest == 0 {
		return -1
	}
	return bits.TrailingZeros64(rest)
}

// Pool is a single-pool selection's input. Avail is the one shared "is this
// endpoint available" answer (not excluded, not draining, in the active
// primary-or-backup tier); selectors never pick outside it.
type Pool struct {
	// Endpoints is the rule's endpoint list.
	Endpoints []EndpointSpec
	// Views is the live state, indexed like Endpoints.
	Views []EndpointView
	// Avail is the set the selector may pick from; never empty.
	Avail EndpointSet
	// List is the fixed, health-independent endpoint list of the active tier
	// (all primaries, or all backups), for placement by key modulo.
	List []int
	// Req is the request being routed.
	Req *Request
	// Now is the decision time.
	Now time.Time
}

// Selector is one single-pool selection policy. Pick returns an endpoint in
// p.Avail (p.Avail is never empty) and the flags it set. A selector may keep
// state (counters, a table); it is owned by its Router, never shared.
type Selector interface {
	Pick(p *Pool) (ep int, flags Flags)
}

// newSelector builds the selector for a rule.
func newSelector(svc *ServiceSpec, eps []EndpointSpec, persistCap int) Selector {
	switch svc.Selector {
	case SelHash:
		return &hashSelector{}
	case SelPriority:
		return &wrrSelector{}
	case SelPersist:
		return &persistSelector{table: newLRUTable[int](persistCap, svc.PersistTTL)}
	case SelLeastConn:
		return &leastConnSelector{}
	case SelCHWBL:
		return &chwblSelector{ring: NewRing(eps, false)}
	case SelWeightedCHWBL:
		return &chwblSelector{ring: NewRing(eps, true), weighted: true}
	case SelGPUAware:
		return &moduloSelector{}
	default:
		return &rrSelector{}
	}
}

// rrSelector (sel:0) hands out the available endpoints in index order,
// resuming after the previous pick.
type rrSelector struct{ next int }

// Pick returns the next available endpoint after the previous pick.
func (s *rrSelector) Pick(p *Pool) (int, Flags) {
	ep := p.Avail.next(s.next)
	if ep < 0 {
		ep = p.Avail.next(0)
	}
	s.next = ep + 1
	return ep, 0
}

// placeByKey returns the List member at key modulo its length, or — when
// that endpoint is unavailable — the next available member after it in List
// order (wrapping). Only the keys of an unavailable endpoint move, and they
// move deterministically.
func placeByKey(p *Pool, key uint64) int {
	n := len(p.List)
	if n == 0 {
		return p.Avail.next(0)
	}
	home := int(key % uint64(n))
	for k := 0; k < n; k++ {
		ep := p.List[(home+k)%n]
		if p.Avail.Has(ep) {
			return ep
		}
	}
	return p.Avail.next(0)
}

// hashSelector (sel:1) places Request.ClientHash modulo the fixed list.
type hashSelector struct{}

// Pick places Request.ClientHash on the fixed list.
func (hashSelector) Pick(p *Pool) (int, Flags) { return placeByKey(p, p.Req.ClientHash), 0 }

// moduloSelector (sel:9, gpuaware on a single pool) places prefix_hash, else
// conv_id's hash, modulo the fixed list; round robin without either key.
type moduloSelector struct{ rr rrSelector }

// Pick places the prefix hash, else the conversation hash; RR without either.
func (s *moduloSelector) Pick(p *Pool) (int, Flags) {
	switch {
	case p.Req.HasPrefixHash:
		return placeByKey(p, p.Req.PrefixHash), 0
	case p.Req.HasConvHash:
		return placeByKey(p, p.Req.ConvHash), 0
	}
	return s.rr.Pick(p)
}

// wrrSelector (sel:2, priority) is nginx's smooth weighted round robin over
// the available endpoints; weights are traffic shares. An unavailable
// endpoint keeps its current weight and simply sits out.
type wrrSelector struct{ current [MaxEndpoints]int64 }

// Pick runs one step of smooth weighted round robin.
func (s *wrrSelector) Pick(p *Pool) (int, Flags) {
	var total int64
	best := -1
	for i := p.Avail.next(0); i >= 0 && i < MaxEndpoints; i = p.Avail.next(i + 1) {
		w := int64(p.Endpoints[i].weight())
		s.current[i] += w
		total += w
		if best < 0 || s.current[i] > s.current[best] {
			best = i
		}
	}
	s.current[best] -= total
	return best, 0
}

// leastConnSelector (sel:4) picks the fewest active_conns; a genuine tie is
// broken by a round-robin counter over the tied endpoints in index order.
type leastConnSelector struct{ rr uint64 }

// Pick returns the least-connected available endpoint.
func (s *leastConnSelector) Pick(p *Pool) (int, Flags) {
	var ties [MaxEndpoints]int
	n := 0
	var best uint32
	for i := p.Avail.next(0); i >= 0 && i < MaxEndpoints; i = p.Avail.next(i + 1) {
		load := p.Views[i].ActiveConns
		switch {
		case n == 0 || load < best:
			best, ties[0], n = load, i, 1
		case load == best:
			ties[n] = i
			n++
		}
	}
	if n == 1 {
		return ties[0], 0
	}
	ep := ties[s.rr%uint64(n)]
	s.rr++
	return ep, FlagRRTie
}

// persistSelector (sel:3) pins Request.ClientKey to an endpoint in its own
// TTL+LRU table (PersistTTL, sliding). A miss, or a pin to
// an endpoint that is no longer available, picks round robin and re-pins.
// Requests without a key are round-robined and not pinned.
type persistSelector struct {
	table lruTable[int]
	rr    rrSelector
}

// Pick returns the client key's pinned endpoint, pinning a new one when needed.
func (s *persistSelector) Pick(p *Pool) (int, Flags) {
	key := p.Req.ClientKey
	if key == "" || len(key) > MaxSessionKeyLen {
		return s.rr.Pick(p)
	}
	if ep, ok := s.table.get(p.Now, key); ok && p.Avail.Has(ep) {
		return ep, 0
	}
	ep, f := s.rr.Pick(p)
	s.table.put(p.Now, key, ep)
	return ep, f
}

func (s *persistSelector) removeEndpoint(ep int) int {
	return s.table.evictIf(func(v int) bool { return v == ep })
}

// chwblSelector (sel:8, and sel:10 when weighted) keys the ring with
// prefix_hash, else conv_id's hash, else falls back to round robin; from the
// key's point it walks clockwise to the first available endpoint under its
// CHWBLBound.
type chwblSelector struct {
	ring     *Ring
	weighted bool
	rr       rrSelector
}

// Pick walks the ring from the request's key to the first endpoint under its bound.
func (s *chwblSelector) Pick(p *Pool) (int, Flags) {
	var key uint64
	switch {
	case p.Req.HasPrefixHash:
		key = p.Req.PrefixHash
	case p.Req.HasConvHash:
		key = p.Req.ConvHash
	default:
		return s.rr.Pick(p)
	}
	if s.ring.Len() == 0 {
		return s.rr.Pick(p)
	}
	start := s.ring.search(key)
	ep := -1
	if under := chwblUnderBound(p, s.weighted); under != 0 {
		ep = s.ring.firstFrom(start, under)
	}
	if ep < 0 {
		ep = leastLoaded(p.Views, p.Avail)
	}
	var f Flags
	if ep != int(s.ring.points[start].ep) {
		f = FlagBoundWalk
	}
	return ep, f
}

// chwblUnderBound returns the available endpoints whose load is under their
// CHWBLBound.
func chwblUnderBound(p *Pool, weighted bool) EndpointSet {
	var load, totalShare uint64
	for i := p.Avail.next(0); i >= 0 && i < MaxEndpoints; i = p.Avail.next(i + 1) {
		load += uint64(p.Views[i].ActiveConns)
		if weighted {
			totalShare += p.Endpoints[i].weight()
		} else {
			totalShare++
		}
	}
	var under EndpointSet
	for i := p.Avail.next(0); i >= 0 && i < MaxEndpoints; i = p.Avail.next(i + 1) {
		share := uint64(1)
		if weighted {
			share = p.Endpoints[i].weight()
		}
		if uint64(p.Views[i].ActiveConns) < CHWBLBound(load, share, totalShare) {
			under = under.With(i)
		}
	}
	return under
}

// leastLoaded returns the member of set with the fewest active_conns (ties:
// lowest index), or -1 for an empty set.
func leastLoaded(views []EndpointView, set EndpointSet) int {
	best := -1
	for i := set.next(0); i >= 0 && i < len(views); i = set.next(i + 1) {
		if best < 0 || views[i].ActiveConns < views[best].ActiveConns {
			best = i
		}
	}
	return best
}
