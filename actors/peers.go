package actors

import (
	"time"

	"github.com/llbproject/llb/ladder"
)

// Cluster mode: several llbd replicas act as one router. A service then
// shares with its peers — the same rule running on the other replicas —
// its Tier-0 sessions (one owner per session shard in the cluster), its
// per-endpoint load and health, and what its Tier-1 trie learns. The
// runtime reaches the cluster only through Peers, which lifecycle
// implements over package replica; on a single node ServiceConfig.Peers is
// nil and none of this runs.
//
// What the router does with peers' state:
//   - Tier 0: session lookups, pins and evictions go to the cluster's owner
//     of the key's shard instead of the local shard actors; a lookup that
//     does not answer within the decision deadline is a session miss.
//   - Load: every decision folds peers' last published in-flight counts
//     into each endpoint's ActiveConns (Tier-2 min-load, the hard law's
//     totalLoad, the per-endpoint admission cap, Tier 1's imbalance guard)
//     and their service-wide counts into the global valve's total.
//     Releases and wake-ups of parked requests count own slots only, so a
//     parked request is never stranded behind a peer's stale count; a cap
//     may therefore overshoot by what peers admitted since they last
//     published (about PeerInterval of their admissions).
//   - Health: an endpoint a peer excludes (its breaker OPEN or HALF_OPEN,
//     its probe DOWN) is excluded here too, as long as the peer's values
//     are fresh; gaining such an exclusion cancels legs still waiting for
//     the endpoint's first byte and drains its parked requests, as an own
//     exclusion does.
//   - Tier 1: every admitted prompt is taught to the peers' tries, and
//     their lessons are learned here (never taught on).

// DefaultPeerInterval is how often the router publishes its load to its
// peers and re-reads theirs (ServiceConfig.PeerInterval as NewServiceConfig
// sets it).
const DefaultPeerInterval = 100 * time.Millisecond

// Peers is a service's link to the same rule on the other replicas.
// The router actor is its only caller, one call at a time, so an
// implementation may keep per-service scratch without locks. No method
// waits on the network.
type Peers interface {
	// LookupSession asks the cluster owner of key's session shard for its
	// pin and returns at once; done is called exactly once, from another
	// goroutine, with the answer, or with an error (a miss) by deadline at
	// the latest.
	LookupSession(key string, deadline time.Time, done func(ladder.SessionLookup, error))
	// PinSession pins key to pin in its shard (fire and forget).
	PinSession(key string, pin ladder.Pin)
	// EvictSession drops key's pin (fire and forget).
	EvictSession(key string)
	// EvictEndpointSessions drops every pin naming endpoint ep, in every
	// shard of the service (fire and forget).
	EvictEndpointSessions(ep int)
	// Publish replaces this replica's published view of the service:
	// inFlight requests admitted or parked, and per endpoint (indexed like
	// the rule's endpoints) its own in-flight count and health.
	Publish(inFlight uint64, eps []PeerEndpoint)
	// Transition sends endpoint ep's own new health to every peer at once.
	Transition(ep int, e PeerEndpoint)
	// PeerLoad adds the peers' last published in-flight counts into load
	// (indexed like the rule's endpoints), sets in excluded the endpoints
	// some peer excludes, and returns the peers' service-wide in-flight
	// sum. Values too old to trust are left out.
	PeerLoad(load []uint32, excluded *ladder.EndpointSet) (inFlight uint64)
	// Teach tells the peers' tries that prompt was routed to prefill
	// endpoint ep. It copies what it keeps of prompt.
	Teach(prompt []byte, ep int)
}

// PeerEndpoint is one endpoint as this replica publishes it.
type PeerEndpoint struct {
	// InFlight is this replica's own in-flight count on the endpoint.
	InFlight uint32
	// Breaker is the breaker's state; meaningful when HasBreaker.
	Breaker    BreakerState
	HasBreaker bool
	// Down is the probe's verdict; meaningful when Monitored.
	Down      bool
	Monitored bool
}

// Lesson is one Tier-1 insert a peer made: prompt went to endpoint
// Endpoint (this replica's index for it).
type Lesson struct {
	Prompt   []byte
	Endpoint int
}

// PeersChanged tells the service that its peers' published load or health
// changed: the router re-reads them. Calls are coalesced; safe from any
// goroutine; a no-op on a single node.
func (svc *Service) PeersChanged() {
	if svc.cfg.Peers == nil || svc.stopped.Load() || !svc.peersDirty.CompareAndSwap(false, true) {
		return
	}
	svc.root.Send(svc.router, peersChanged{})
}

// LearnFromPeers teaches the service's Tier-1 trie what a peer routed
// (the prompts are kept as given: the caller hands them over). Safe from
// any goroutine; a no-op on a single node or for a rule without a trie.
func (svc *Service) LearnFromPeers(ls []Lesson) {
	if svc.cfg.Peers == nil || svc.stopped.Load() || len(ls) == 0 {
		return
	}
	svc.root.Send(svc.router, peerLessons{lessons: ls})
}

// peersChanged asks the router to re-read its peers' load.
type peersChanged struct{}

// peerTick drives the router's publication of its own load.
type peerTick struct{}

// peerLessons carries a peer's Tier-1 inserts to the router.
type peerLessons struct{ lessons []Lesson }

// ---- the router core's side -----------------------------------------------

// peerState is what the router core knows of its peers (cluster mode).
type peerState struct {
	on bool
	// load[ep] is the peers' in-flight count on ep; excl the endpoints a
	// peer excludes; total their service-wide in-flight sum.
	load  [ladder.MaxEndpoints]uint32
	excl  ladder.EndpointSet
	total uint64
	pub   []PeerEndpoint // Publish's scratch
}

// ownEndpoint is endpoint ep's own state as published.
func (c *routerCore) ownEndpoint(ep int) PeerEndpoint {
	v := &c.views[ep]
	b := BreakerClosed
	switch {
	case v.BreakerOpen:
		b = BreakerOpen
	case c.halfOpen.Has(ep):
		b = BreakerHalfOpen
	}
	return PeerEndpoint{
		InFlight: v.ActiveConns - min(c.reserved[ep], v.ActiveConns),
		Breaker:  b, HasBreaker: c.breakers,
		Down: v.Down, Monitored: c.cfg.Monitored(ep),
	}
}

// publishPeers publishes own load and health.
func (c *routerCore) publishPeers() {
	if !c.peer.on {
		return
	}
	c.peer.pub = c.peer.pub[:0]
	for i := range c.views {
		c.peer.pub = append(c.peer.pub, c.ownEndpoint(i))
	}
	c.ports.publishPeers(uint64(len(c.tickets)+len(c.parked)), c.peer.pub)
}

// refreshPeers re-reads the peers' load. An endpoint a peer newly excludes
// is treated as an own exclusion would be: legs waiting for its first
// byte are cancelled and its parked requests go back to the ladder.
func (c *routerCore) refreshPeers() {
	if !c.peer.on {
		return
	}
	n := len(c.views)
	clear(c.peer.load[:n])
	var excl ladder.EndpointSet
	c.peer.total = c.ports.peerLoad(c.peer.load[:n], &excl)
	gained := excl &^ c.peer.excl
	c.peer.excl = excl
	for ep := 0; ep < n; ep++ {
		if !gained.Has(ep) {
			continue
		}
		v := &c.views[ep]
		if !v.Down && !v.BreakerOpen {
			c.ports.endpointLost(ep)
		}
		if v.Parked > 0 {
			c.ports.drainParked(ep)
		}
	}
}

// healthChanged publishes an own breaker or probe transition at once.
func (c *routerCore) healthChanged(ep int) {
	if c.peer.on {
		c.ports.healthTransition(ep, c.ownEndpoint(ep))
	}
}

// learnFromPeers applies a peer's Tier-1 lessons.
func (c *routerCore) learnFromPeers(ls []Lesson) {
	for _, l := range ls {
		c.lad.Learn(l.Prompt, l.Endpoint)
	}
}

// teach shares an admitted prompt with the peers' tries.
func (c *routerCore) teach(prompt []byte, ep int) {
	if !c.peer.on || len(prompt) == 0 || c.lad.Trie() == nil || c.lad.Endpoint(ep).Role != ladder.RolePrefill {
		return
	}
	c.ports.teach(prompt, ep)
}
