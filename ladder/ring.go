package ladder

import (
	"sort"
	"strconv"
)

// CHWBL: consistent hashing with bounded loads over a ring of virtual nodes.

const (
	// RingVNodes is the virtual-node count per endpoint of an unweighted
	// ring (LoxiLB's proxy uses 256 whatever the REST replication says).
	RingVNodes = 256
	// CHWBLLoadFactorPct is the fixed bounded-load factor, 1.75× the mean.
	CHWBLLoadFactorPct = 175
	// ringSeed seeds the virtual-node hashes (LoxiLB's 0xDEADBEEF; llb keys
	// the hash on the endpoint address only, so reordering endpoints does
	// not move their points).
	ringSeed = 0xDEADBEEF
)

type ringPoint struct {
	hash uint64
	ep   uint8
}

// Ring is an immutable hash ring of virtual nodes. Build it once per rule
// (NewRing); Lookup is read-only and safe for concurrent readers.
type Ring struct {
	points []ringPoint
}

// NewRing builds the ring for eps. Unweighted: RingVNodes points per
// endpoint. Weighted (sel:10): RingVNodes·n points in total, shared in
// proportion to the endpoints' weights (weight 0 counts as 1), at least one
// each — so an equal-weight weighted ring has the same points as an
// unweighted one. Point j of an endpoint hashes "addr#j" (or "#index#j"
// without an address) with XXH64.
func NewRing(eps []EndpointSpec, weighted bool) *Ring {
	n := len(eps)
	counts := make([]int, n)
	var sumW uint64
	for i := range eps {
		sumW += eps[i].weight()
	}
	total := 0
	for i := range eps {
		c := RingVNodes
		if weighted && sumW > 0 {
			c = int(uint64(RingVNodes*n) * eps[i].weight() / sumW)
			if c < 1 {
				c = 1
			}
		}
		counts[i] = c
		total += c
	}
	r := &Ring{points: make([]ringPoint, 0, total)}
	var key []byte
	for i := range eps {
		key = key[:0]
		if eps[i].Addr != "" {
			key = append(key, eps[i].Addr...)
		} else {
			key = append(key, '#')
			key = strconv.AppendInt(key, int64(i), 10)
		}
		key = append(key, '#')
		base := len(key)
		for j := 0; j < counts[i]; j++ {
			key = strconv.AppendInt(key[:base], int64(j), 10)
			r.points = append(r.points, ringPoint{hash: XXH64(key, ringSeed), ep: uint8(i)})
		}
	}
	sort.Slice(r.points, func(a, b int) bool {
		pa, pb := r.points[a], r.points[b]
		if pa.hash != pb.hash {
			return pa.hash < pb.hash
		}
		return pa.ep < pb.ep
	})
	return r
}

// Len returns the number of virtual nodes.
func (r *Ring) Len() int { return len(r.points) }

// Home returns the endpoint owning key: the first virtual node clockwise
// from key (hash ≥ key, wrapping to the smallest). -1 on an empty ring.
func (r *Ring) Home(key uint64) int {
	if len(r.points) == 0 {
		return -1
	}
	return int(r.points[r.search(key)].ep)
}

func (r *Ring) search(key uint64) int {
	lo, hi := 0, len(r.points)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if r.points[m].hash < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo == len(r.points) {
		return 0
	}
	return lo
}

// First returns the first endpoint clockwise from key that is in set, or
// -1 when set holds none of the ring's endpoints. It does not allocate.
func (r *Ring) First(key uint64, set EndpointSet) int {
	if len(r.points) == 0 || set == 0 {
		return -1
	}
	return r.firstFrom(r.search(key), set)
}

// firstFrom is First starting at point index start.
func (r *Ring) firstFrom(start int, set EndpointSet) int {
	for k := 0; k < len(r.points); k++ {
		i := start + k
		if i >= len(r.points) {
			i -= len(r.points)
		}
		if ep := int(r.points[i].ep); set.Has(ep) {
			return ep
		}
	}
	return -1
}

// CHWBLBound is the classic bounded-load cap for an endpoint:
//
//	bound = ceil(175 · (L+1) · w / (100 · W))
//
// where L is Σ load over the available endpoints, the +1 counts the request
// being placed, and w/W is the endpoint's share (1/n unweighted, weight/Σ
// weights for sel:10). Because Σ bounds ≥ 1.75·(L+1) > L, at least one
// available endpoint is always under its bound. LoxiLB's sockproxy_lb.c
// differs: it floors the mean first (ceil(floor(L/n)·1.75)), floors the
// bound at n while L < n, probes a single extra point and then falls back to
// least-loaded; llb uses the exact formula and a full clockwise walk.
func CHWBLBound(totalLoad, share, totalShare uint64) uint64 {
	if totalShare == 0 {
		return 1
	}
	return mulDivCeil(CHWBLLoadFactorPct, totalLoad+1, share, 100*totalShare)
}
