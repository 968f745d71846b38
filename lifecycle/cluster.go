package lifecycle

import (
	"hash/fnv"
	"strconv"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/replica"
	"github.com/llbproject/llb/rule"
)

// Cluster mode: the data plane runs this process's replica.Member and links
// every service to its peers through a clusterPort (actors.Peers over the
// member). Peers' health transitions and Tier-1 lessons arrive through the
// member's callbacks and are routed to the service by rule key; a change of
// the peers' gossiped load makes every service re-read it.

// peerMaxAge is how old a peer's published load may be and still count.
// A replica publishes at least once a second (every 100 ms while its load
// changes); values older than this come from a replica that stopped (frozen
// or killed; membership drops it a little later, after the lease TTL).
const peerMaxAge = 2 * time.Second

// startMember starts the cluster member with callbacks into d.
func (d *DataPlane) startMember(cfg replica.Config) error {
	cfg.OnHealth = d.peerHealth
	cfg.OnTrie = d.peerLessons
	if d.drains != nil {
		cfg.OnKVDrain = d.drains.received
	}
	if d.keys != nil {
		cfg.OnUsage = peerUsage(d.keys)
	}
	m, err := replica.Start(cfg)
	if err != nil {
		return err
	}
	if d.keys != nil {
		d.stopUsage = make(chan struct{})
		go shareUsage(m, d.keys, d.stopUsage)
	}
	if d.drains != nil {
		d.drains.member.Store(m)
	}
	m.Load.Subscribe(d.peersChanged)
	d.member = m
	return nil
}

// Member is the cluster member (nil on a single node).
func (d *DataPlane) Member() *replica.Member { return d.member }

// running returns the services of every rule the data plane runs.
func (d *DataPlane) running() []*actors.Service {
	d.mu.Lock()
	keys := make([]string, 0, len(d.served))
	for k := range d.served {
		keys = append(keys, k)
	}
	d.mu.Unlock()
	out := make([]*actors.Service, 0, len(keys))
	for _, k := range keys {
		if svc := d.rt.service(k); svc != nil {
			out = append(out, svc)
		}
	}
	return out
}

// peersChanged runs after peers' gossiped load changed (from a protoactor
// goroutine: it only posts coalesced messages).
func (d *DataPlane) peersChanged() {
	for _, svc := range d.running() {
		svc.PeersChanged()
	}
}

// peerHealth receives a peer's direct breaker/probe transitions.
func (d *DataPlane) peerHealth(_ string, ts []replica.HealthTransition) {
	seen := map[string]bool{}
	for _, t := range ts {
		if seen[t.Service] {
			continue
		}
		seen[t.Service] = true
		if svc := d.rt.service(t.Service); svc != nil {
			svc.PeersChanged()
		}
	}
}

// peerLessons receives a peer's Tier-1 inserts and hands them to the
// services, each endpoint matched by address (the index may differ while a
// rule change is still reaching the replicas).
func (d *DataPlane) peerLessons(_ string, ins []replica.TrieInsert) {
	by := map[string][]replica.TrieInsert{}
	for _, in := range ins {
		by[in.Service] = append(by[in.Service], in)
	}
	for key, batch := range by {
		svc := d.rt.service(key)
		if svc == nil {
			continue
		}
		eps := svc.Config().Rule.Endpoints
		ls := make([]actors.Lesson, 0, len(batch))
		for _, in := range batch {
			if i := endpointIndex(eps, in.Addr); i >= 0 {
				ls = append(ls, actors.Lesson{Prompt: in.Prompt, Endpoint: i})
			}
		}
		svc.LearnFromPeers(ls)
	}
}

func endpointIndex(eps []rule.CompiledEndpoint, addr string) int {
	for i := range eps {
		if eps[i].Addr.String() == addr {
			return i
		}
	}
	return -1
}

// clusterPort is actors.Peers for one service over the member. The router
// actor is its only caller, so the scratch slices need no lock.
type clusterPort struct {
	m     *replica.Member
	key   string
	spec  replica.SessionSpec
	addrs []string

	eps     []replica.EndpointLoad
	changed []time.Time
	load    []int64
	excl    []bool
}

var _ actors.Peers = (*clusterPort)(nil)

// newClusterPort links compiled rule c's service to the member.
func newClusterPort(m *replica.Member, c *rule.Compiled) *clusterPort {
	n := len(c.Endpoints)
	p := &clusterPort{
		m: m, key: c.Key,
		spec: replica.SessionSpec{
			Service:    sessionService(c),
			Shards:     ladder.DefaultSessionShards,
			TTL:        c.Spec.SessionTTL,
			MaxEntries: ladder.DefaultSessionMaxEntries,
		},
		addrs:   make([]string, n),
		eps:     make([]replica.EndpointLoad, n),
		changed: make([]time.Time, n),
		load:    make([]int64, n),
		excl:    make([]bool, n),
	}
	for i := range c.Endpoints {
		p.addrs[i] = c.Endpoints[i].Addr.String()
	}
	m.Sessions.Prefetch(p.spec)
	return p
}

// sessionService names a rule's session table in the cluster: the rule key
// and a digest of its endpoint list. Pins hold endpoint indexes, so a
// replace that changes the endpoints starts a fresh table (the old one's
// grains passivate when idle) instead of reading pins that now name other
// endpoints; a replace that keeps them keeps the pins.
func sessionService(c *rule.Compiled) string {
	h := fnv.New32a()
	for i := range c.Endpoints {
		h.Write([]byte(c.Endpoints[i].Addr.String()))
		h.Write([]byte{'/', byte(c.Endpoints[i].Spec.Role), ','})
	}
	return c.Key + "#" + strconv.FormatUint(uint64(h.Sum32()), 16)
}

// LookupSession implements actors.Peers.
func (p *clusterPort) LookupSession(key string, deadline time.Time, done func(ladder.SessionLookup, error)) {
	p.m.Sessions.LookupAsync(p.spec, key, deadline, func(a replica.SessionAnswer, err error) { done(a.SessionLookup, err) })
}

// PinSession implements actors.Peers.
func (p *clusterPort) PinSession(key string, pin ladder.Pin) { p.m.Sessions.Pin(p.spec, key, pin) }

// EvictSession implements actors.Peers.
func (p *clusterPort) EvictSession(key string) { p.m.Sessions.Evict(p.spec, key) }

// EvictEndpointSessions implements actors.Peers.
func (p *clusterPort) EvictEndpointSessions(ep int) { p.m.Sessions.EvictEndpoint(p.spec, ep) }

// Publish implements actors.Peers.
func (p *clusterPort) Publish(inFlight uint64, eps []actors.PeerEndpoint) {
	for i := range eps {
		if i < len(p.eps) {
			p.eps[i] = p.endpointLoad(i, eps[i])
		}
	}
	p.m.Load.Update(p.key, int64(inFlight), p.eps)
}

// Transition implements actors.Peers.
func (p *clusterPort) Transition(ep int, e actors.PeerEndpoint) {
	if ep < 0 || ep >= len(p.eps) {
		return
	}
	p.changed[ep] = time.Now()
	l := p.endpointLoad(ep, e)
	p.eps[ep] = l
	p.m.Load.Transition(replica.HealthTransition{Service: p.key, Index: ep, Addr: l.Addr, Breaker: l.Breaker, Probe: l.Probe, At: p.changed[ep]})
}

func (p *clusterPort) endpointLoad(i int, e actors.PeerEndpoint) replica.EndpointLoad {
	l := replica.EndpointLoad{Index: i, Addr: p.addrs[i], InFlight: int64(e.InFlight), HealthChanged: p.changed[i]}
	if e.HasBreaker {
		switch e.Breaker {
		case actors.BreakerOpen:
			l.Breaker = replica.BreakerOpen
		case actors.BreakerHalfOpen:
			l.Breaker = replica.BreakerHalfOpen
		default:
			l.Breaker = replica.BreakerClosed
		}
	}
	if e.Monitored {
		l.Probe = replica.ProbeUp
		if e.Down {
			l.Probe = replica.ProbeDown
		}
	}
	return l
}

// PeerLoad implements actors.Peers.
func (p *clusterPort) PeerLoad(load []uint32, excluded *ladder.EndpointSet) uint64 {
	clear(p.load)
	clear(p.excl)
	total, _ := p.m.Load.PeerService(p.key, p.addrs, peerMaxAge, p.load, p.excl)
	for i := range p.load {
		if i < len(load) {
			load[i] += uint32(min(max(p.load[i], 0), 1<<24))
		}
		if p.excl[i] {
			*excluded = excluded.With(i)
		}
	}
	return uint64(max(total, 0))
}

// Teach implements actors.Peers.
func (p *clusterPort) Teach(prompt []byte, ep int) {
	if ep < 0 || ep >= len(p.addrs) {
		return
	}
	p.m.Teacher.Teach(replica.TrieInsert{Service: p.key, Prompt: prompt, Index: ep, Addr: p.addrs[ep]})
}
