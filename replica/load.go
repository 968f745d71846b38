package replica

import (
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/llbproject/llb/replica/replicapb"
)

// Breaker and probe states as published (aliases of the wire enums).
type (
	BreakerState = replicapb.BreakerState
	ProbeState   = replicapb.ProbeState
)

// Breaker and probe state values.
const (
	BreakerUnknown  = replicapb.BreakerState_BREAKER_UNKNOWN
	BreakerClosed   = replicapb.BreakerState_BREAKER_CLOSED
	BreakerOpen     = replicapb.BreakerState_BREAKER_OPEN
	BreakerHalfOpen = replicapb.BreakerState_BREAKER_HALF_OPEN
	ProbeUnknown    = replicapb.ProbeState_PROBE_UNKNOWN
	ProbeUp         = replicapb.ProbeState_PROBE_UP
	ProbeDown       = replicapb.ProbeState_PROBE_DOWN
)

// EndpointLoad is one endpoint of one service as one replica sees it.
type EndpointLoad struct {
	// Index is the endpoint's index in the rule; Addr its ip:port, the
	// identity to match on when rule versions may differ.
	Index int
	Addr  string
	// InFlight is the replica's own in-flight count on the endpoint.
	InFlight int64
	Breaker  BreakerState
	Probe    ProbeState
	// HealthChanged is the last breaker/probe transition (publisher's clock).
	HealthChanged time.Time
}

// Excluded reports whether this replica's view excludes the endpoint for
// every replica: its breaker is open or half-open (the half-open trial is
// the publisher's alone), or its probe is down.
func (e EndpointLoad) Excluded() bool {
	return e.Breaker == BreakerOpen || e.Breaker == BreakerHalfOpen || e.Probe == ProbeDown
}

// HealthTransition is one breaker or probe transition of an endpoint.
type HealthTransition struct {
	Service string
	Index   int
	Addr    string
	Breaker BreakerState
	Probe   ProbeState
	At      time.Time
}

// PeerLoad is one peer's last published view.
type PeerLoad struct {
	// Member is the peer's member id.
	Member string
	// Seq is the publication counter; Published the peer's clock at
	// publication; Received when this replica got it.
	Seq       uint64
	Published time.Time
	Received  time.Time
	// Services are the peer's services by rule key.
	Services map[string][]EndpointLoad
	// InFlight is, by rule key, the requests the peer has admitted or
	// parked (what the global valve counts).
	InFlight map[string]int64
}

// Age is how long ago this replica received the values.
func (p *PeerLoad) Age(now time.Time) time.Duration { return now.Sub(p.Received) }

// Load shares per-endpoint load and health across replicas. Own values are
// set with Update/Transition by the owner of the counts (the router); they
// are gossiped every PublishInterval when they changed (and every second
// regardless, so a peer's age stays meaningful). Transitions are also sent
// to every peer directly, at once. Peers' last values are read from an
// immutable snapshot: no locks, no network.
type Load struct {
	m *Member

	mu sync.Mutex
	// Guarded by mu: own services, the publication counter, and whether
	// own values changed since the last publication.
	own     map[string][]EndpointLoad
	ownIn   map[string]int64
	seq     uint64
	dirty   bool
	lastPub time.Time

	peers atomic.Pointer[map[string]*PeerLoad] // member id → last values

	subMu sync.Mutex
	subs  []func()

	published, receivedN, transitionsSent atomic.Int64
}

func newLoad(m *Member) *Load {
	l := &Load{m: m, own: map[string][]EndpointLoad{}, ownIn: map[string]int64{}}
	empty := map[string]*PeerLoad{}
	l.peers.Store(&empty)
	return l
}

// Update replaces this replica's view of service: its requests admitted
// or parked (inFlight) and its endpoints.
func (l *Load) Update(service string, inFlight int64, eps []EndpointLoad) {
	l.mu.Lock()
	l.own[service] = slices.Clone(eps)
	l.ownIn[service] = inFlight
	l.dirty = true
	l.mu.Unlock()
}

// Remove forgets a service (its rule was deleted).
func (l *Load) Remove(service string) {
	l.mu.Lock()
	delete(l.own, service)
	delete(l.ownIn, service)
	l.dirty = true
	l.mu.Unlock()
}

// Transition records a breaker/probe transition in own state and sends it
// to every peer at once (the gossip carries it ~100 ms later as well).
func (l *Load) Transition(t HealthTransition) {
	if t.At.IsZero() {
		t.At = time.Now()
	}
	l.mu.Lock()
	eps := l.own[t.Service]
	i := slices.IndexFunc(eps, func(e EndpointLoad) bool { return e.Addr == t.Addr })
	if i < 0 {
		eps = append(slices.Clone(eps), EndpointLoad{Index: t.Index, Addr: t.Addr})
		i = len(eps) - 1
	} else {
		eps = slices.Clone(eps)
	}
	eps[i].Breaker, eps[i].Probe, eps[i].HealthChanged = t.Breaker, t.Probe, t.At
	l.own[t.Service] = eps
	l.dirty = true
	l.mu.Unlock()
	inc := l.m.current()
	if inc == nil {
		return
	}
	msg := &replicapb.PeerMessage{From: inc.id, Body: &replicapb.PeerMessage_Health{Health: &replicapb.HealthBatch{
		Transitions: []*replicapb.HealthTransition{{Service: t.Service, Index: int32(t.Index), Addr: t.Addr,
			Breaker: t.Breaker, Probe: t.Probe, AtUnixMs: t.At.UnixMilli()}},
	}}}
	inc.sendPeers(msg)
	l.transitionsSent.Add(1)
}

// Peers returns every current peer's last published values (members that
// left are not included).
func (l *Load) Peers() []*PeerLoad {
	inc := l.m.current()
	snap := *l.peers.Load()
	out := make([]*PeerLoad, 0, len(snap))
	for id, p := range snap {
		if inc != nil && (id == inc.id || !inc.hasMember(id)) {
			continue
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *PeerLoad) int {
		if a.Member < b.Member {
			return -1
		}
		if a.Member > b.Member {
			return 1
		}
		return 0
	})
	return out
}

// Own returns this replica's current values.
func (l *Load) Own() map[string][]EndpointLoad {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string][]EndpointLoad, len(l.own))
	for k, v := range l.own {
		out[k] = slices.Clone(v)
	}
	return out
}

// PeerInFlight adds, for each address in addrs, the in-flight counts of
// every peer whose values are younger than maxAge into out (len(out) ≥
// len(addrs)), and sets excluded[i] when any such peer has the endpoint's
// breaker open or probe down. It returns the oldest age used.
func (l *Load) PeerInFlight(service string, addrs []string, maxAge time.Duration, out []int64, excluded []bool) time.Duration {
	_, oldest := l.PeerService(service, addrs, maxAge, out, excluded)
	return oldest
}

// PeerService is PeerInFlight that also returns the sum of the peers'
// service-wide in-flight counts (Update's inFlight).
func (l *Load) PeerService(service string, addrs []string, maxAge time.Duration, out []int64, excluded []bool) (total int64, oldest time.Duration) {
	now := time.Now()
	for _, p := range l.Peers() {
		age := p.Age(now)
		if age > maxAge {
			continue
		}
		oldest = max(oldest, age)
		total += p.InFlight[service]
		for _, e := range p.Services[service] {
			i := slices.Index(addrs, e.Addr)
			if i < 0 {
				continue
			}
			out[i] += e.InFlight
			if excluded != nil && e.Excluded() {
				excluded[i] = true
			}
		}
	}
	return total, oldest
}

// Subscribe registers f to run after peers' values change (from a protoactor
// goroutine: f must not block).
func (l *Load) Subscribe(f func()) {
	l.subMu.Lock()
	l.subs = append(l.subs, f)
	l.subMu.Unlock()
}

func (l *Load) notify() {
	l.subMu.Lock()
	subs := l.subs
	l.subMu.Unlock()
	for _, f := range subs {
		f()
	}
}

// received stores a peer's gossiped state.
func (l *Load) received(member string, st *replicapb.LoadState) {
	if inc := l.m.current(); inc != nil && member == inc.id {
		return
	}
	old := *l.peers.Load()
	if p, ok := old[member]; ok && p.Seq >= st.Seq {
		return
	}
	p := &PeerLoad{Member: member, Seq: st.Seq, Published: time.UnixMilli(st.PublishedUnixMs), Received: time.Now(),
		Services: make(map[string][]EndpointLoad, len(st.Services)), InFlight: make(map[string]int64, len(st.Services))}
	for _, s := range st.Services {
		p.InFlight[s.Service] = s.InFlight
		eps := make([]EndpointLoad, len(s.Endpoints))
		for i, e := range s.Endpoints {
			eps[i] = EndpointLoad{Index: int(e.Index), Addr: e.Addr, InFlight: e.InFlight, Breaker: e.Breaker, Probe: e.Probe,
				HealthChanged: time.UnixMilli(e.HealthChangedUnixMs)}
		}
		p.Services[s.Service] = eps
	}
	l.store(old, member, p)
	l.receivedN.Add(1)
	l.notify()
}

// receivedHealth applies a peer's direct transitions to its last values.
func (l *Load) receivedHealth(member string, b *replicapb.HealthBatch) {
	old := *l.peers.Load()
	p := &PeerLoad{Member: member, Received: time.Now(), Services: map[string][]EndpointLoad{}, InFlight: map[string]int64{}}
	if prev, ok := old[member]; ok {
		*p = *prev
		p.Services = make(map[string][]EndpointLoad, len(prev.Services))
		p.InFlight = maps.Clone(prev.InFlight)
		for k, v := range prev.Services {
			p.Services[k] = slices.Clone(v)
		}
	}
	out := make([]HealthTransition, 0, len(b.Transitions))
	for _, t := range b.Transitions {
		ht := HealthTransition{Service: t.Service, Index: int(t.Index), Addr: t.Addr, Breaker: t.Breaker, Probe: t.Probe, At: time.UnixMilli(t.AtUnixMs)}
		out = append(out, ht)
		eps := p.Services[t.Service]
		i := slices.IndexFunc(eps, func(e EndpointLoad) bool { return e.Addr == t.Addr })
		if i < 0 {
			eps = append(eps, EndpointLoad{Index: int(t.Index), Addr: t.Addr})
			i = len(eps) - 1
		}
		eps[i].Breaker, eps[i].Probe, eps[i].HealthChanged = t.Breaker, t.Probe, ht.At
		p.Services[t.Service] = eps
	}
	l.store(old, member, p)
	if f := l.m.cfg.OnHealth; f != nil {
		f(member, out)
	}
	l.notify()
}

func (l *Load) store(old map[string]*PeerLoad, member string, p *PeerLoad) {
	next := make(map[string]*PeerLoad, len(old)+1)
	inc := l.m.current()
	for k, v := range old {
		if inc == nil || inc.hasMember(k) {
			next[k] = v // members that left are dropped here
		}
	}
	next[member] = p
	l.peers.Store(&next)
}

// republish makes the next tick publish even without a change.
func (l *Load) republish() {
	l.mu.Lock()
	l.dirty = true
	l.mu.Unlock()
}

// publishLoop gossips own values every PublishInterval when they changed,
// and every second regardless.
func (l *Load) publishLoop(stop <-chan struct{}) {
	t := time.NewTicker(l.m.cfg.PublishInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			l.publish(now)
		}
	}
}

func (l *Load) publish(now time.Time) {
	inc := l.m.current()
	if inc == nil {
		return
	}
	l.mu.Lock()
	if !l.dirty && now.Sub(l.lastPub) < time.Second {
		l.mu.Unlock()
		return
	}
	l.seq++
	st := &replicapb.LoadState{Member: inc.id, Seq: l.seq, PublishedUnixMs: now.UnixMilli()}
	for svc, eps := range l.own {
		sl := &replicapb.ServiceLoad{Service: svc, InFlight: l.ownIn[svc], Endpoints: make([]*replicapb.EndpointLoad, len(eps))}
		for i, e := range eps {
			sl.Endpoints[i] = &replicapb.EndpointLoad{Index: int32(e.Index), Addr: e.Addr, InFlight: e.InFlight,
				Breaker: e.Breaker, Probe: e.Probe, HealthChangedUnixMs: unixMs(e.HealthChanged)}
		}
		st.Services = append(st.Services, sl)
	}
	slices.SortFunc(st.Services, func(a, b *replicapb.ServiceLoad) int {
		if a.Service < b.Service {
			return -1
		}
		if a.Service > b.Service {
			return 1
		}
		return 0
	})
	l.dirty, l.lastPub = false, now
	l.mu.Unlock()
	inc.cluster.Gossip.SetState(loadGossipKey, proto.Message(st))
	l.published.Add(1)
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}
