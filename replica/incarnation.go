package replica

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/replica/etcdprovider"
	"github.com/llbproject/llb/replica/replicapb"
)

// Names of this package's cluster kind and well-known actors.
const (
	// SessionKind is the cluster kind of session-shard grains.
	SessionKind = "llb-session"
	// peerActorName is the named actor every incarnation runs for direct
	// peer messages (health transitions, trie batches).
	peerActorName = "llb-peer"
	// loadGossipKey is the gossip key of LoadState.
	loadGossipKey = "llb.load"
	// topologyGossipKey is protoactor's own gossip key of member
	// topologies (with each member's block list).
	topologyGossipKey = "topology"
)

// membersKeyBase is the etcd provider's base key: members live under
// /llb/members/<cluster>/<member id>.
const membersKeyBase = "/llb/members"

// incarnation is one membership: an actor system with its own id, the
// cluster member on it, and what it learned. It is discarded whole when
// the membership breaks.
type incarnation struct {
	m        *Member
	n        int64
	id       string
	system   *actor.ActorSystem
	cluster  *cluster.Cluster
	provider *etcdprovider.Provider
	started  time.Time

	// topo is the current topology, replaced on every change.
	topo    atomic.Pointer[topology]
	topoGen atomic.Uint64

	// activations are the session grains alive here: identity → activation id.
	activations   sync.Map
	activationSeq atomic.Int64

	failed   chan string // one reason; the supervisor tears down
	failOnce sync.Once
}

// topology is an immutable member view.
type topology struct {
	members []*cluster.Member // sorted by id
	rdv     *cluster.Rendezvous
	at      time.Time
}

func (t *topology) ownerAddress(identity string) string {
	if t == nil || t.rdv == nil {
		return ""
	}
	return t.rdv.GetByClusterIdentity(&cluster.ClusterIdentity{Kind: SessionKind, Identity: identity})
}

// fail asks the supervisor for a fresh incarnation, once.
func (inc *incarnation) fail(reason string) {
	inc.failOnce.Do(func() { inc.failed <- reason })
}

func (inc *incarnation) memberList() []*cluster.Member {
	if t := inc.topo.Load(); t != nil {
		return t.members
	}
	return nil
}

// startIncarnation builds and joins one incarnation; on error everything
// it started is stopped again.
func startIncarnation(m *Member, n int64) (inc *incarnation, err error) {
	host, port, _ := splitAdvertise(m.cfg.Advertise)
	system := actor.NewActorSystem(actor.WithLoggerFactory(loggerFactory(m.log)))
	inc = &incarnation{m: m, n: n, id: system.ID, system: system, failed: make(chan string, 1), started: time.Now()}
	inc.provider = etcdprovider.NewWithClient(membersKeyBase, m.cli,
		etcdprovider.WithLeaseTTL(m.cfg.LeaseTTL),
		etcdprovider.WithCallTimeout(m.cfg.Etcd.Timeout()),
		etcdprovider.WithRetryInterval(time.Second),
		etcdprovider.WithOnLeaseLost(func(reason string) { inc.fail("etcd: " + reason) }),
		etcdprovider.WithOnHealth(m.setEtcd),
	)
	kind := cluster.NewKind(SessionKind, actor.PropsFromProducer(func() actor.Actor { return newSessionGrain(inc) }))
	cfg := cluster.Configure(m.cfg.ClusterName, inc.provider, disthash.New(), remote.Configure(host, port),
		cluster.WithKinds(kind))
	cfg.GossipInterval = m.cfg.GossipInterval
	// Heartbeats expire well after the lease: etcd decides membership;
	// gossip only catches a member that renews its lease but cannot talk.
	cfg.HeartbeatExpiration = max(10*m.cfg.LeaseTTL, 10*time.Second)
	inc.cluster = cluster.New(system, cfg)

	system.EventStream.Subscribe(inc.onEvent)
	if _, err := system.Root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &peerActor{inc: inc} }), peerActorName); err != nil {
		system.Shutdown()
		return nil, fmt.Errorf("replica: spawn peer actor: %w", err)
	}

	joined := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				joined <- fmt.Errorf("replica: cluster join: %v", r)
			}
		}()
		inc.cluster.StartMember()
		joined <- nil
	}()
	select {
	case err = <-joined:
	case <-m.stop:
		err = fmt.Errorf("replica: stopped while joining")
	}
	if err != nil {
		inc.teardownPartial()
		return nil, err
	}
	if t := inc.topo.Load(); t == nil || !slices.ContainsFunc(t.members, func(x *cluster.Member) bool { return x.Id == inc.id }) {
		inc.teardown()
		return nil, fmt.Errorf("replica: joined, but not in its own member list")
	}
	// Re-publish own load at once so peers do not wait a round.
	m.Load.republish()
	return inc, nil
}

// onEvent watches the incarnation's event stream for topology changes and
// for peers that blocked this member.
func (inc *incarnation) onEvent(ev any) {
	switch e := ev.(type) {
	case *cluster.ClusterTopology:
		members := append([]*cluster.Member(nil), e.Members...)
		slices.SortFunc(members, func(a, b *cluster.Member) int {
			if a.Id < b.Id {
				return -1
			}
			if a.Id > b.Id {
				return 1
			}
			return 0
		})
		rdv := cluster.NewRendezvous()
		rdv.UpdateMembers(members)
		inc.topo.Store(&topology{members: members, rdv: rdv, at: time.Now()})
		inc.topoGen.Add(1)
		inc.m.Sessions.topologyChanged()
		if !slices.ContainsFunc(members, func(x *cluster.Member) bool { return x.Id == inc.id }) {
			inc.fail("dropped from its own member list")
		}
	case *cluster.GossipUpdate:
		switch e.Key {
		case topologyGossipKey:
			var t cluster.ClusterTopology
			if e.Value == nil || e.Value.UnmarshalTo(&t) != nil {
				return
			}
			if slices.Contains(t.Blocked, inc.id) {
				inc.fail("blocked by peer " + e.MemberID)
			}
		case loadGossipKey:
			var st replicapb.LoadState
			if e.Value == nil || e.Value.UnmarshalTo(&st) != nil {
				return
			}
			inc.m.Load.received(e.MemberID, &st)
		}
	}
}

// teardown leaves: revoke the lease (peers drop this id at once), close
// the remote's connections and listener, stop the actor system.
func (inc *incarnation) teardown() {
	_ = inc.provider.Shutdown(true)
	inc.teardownPartial()
}

// teardownPartial stops what a (possibly failed) join started. The remote
// goes first and gracefully, while the actor system still runs: that stops
// its endpoint writers (closing the gRPC connections to peers) and ends the
// peers' streams into this member; protoactor's non-graceful path leaves
// both behind, ~14 goroutines per rejoin. Bounded, in case a peer hangs.
func (inc *incarnation) teardownPartial() {
	_ = inc.provider.Shutdown(true)
	if r := inc.cluster.Remote; r != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer func() { _ = recover() }() // a remote that never started panics on Shutdown
			r.Shutdown(true)
		}()
		select {
		case <-done:
		case <-time.After(3 * time.Second):
			inc.m.log.Warn().Str(logfield.Member, inc.id).Msg("remote shutdown slow; stopping its server now")
		}
		// Whatever the graceful path did — finished, still waiting (it can
		// take far longer on a loaded machine: endpoint writers, then gRPC's
		// GracefulStop with a 10 s bound), or panicked part way and was
		// recovered — stop the gRPC server now: its listener must be closed
		// before the next incarnation listens on the advertised port. On a
		// stopped server this is a no-op.
		func() {
			defer func() { _ = recover() }()
			r.Shutdown(false)
		}()
	}
	inc.system.Shutdown()
}

// send delivers msg to the named actor of every other member.
func (inc *incarnation) sendPeers(msg *replicapb.PeerMessage) int {
	n := 0
	for _, mb := range inc.memberList() {
		if mb.Id == inc.id {
			continue
		}
		inc.system.Root.Send(actor.NewPID(mb.Address(), peerActorName), msg)
		n++
	}
	return n
}

// peerActor receives direct peer messages for the incarnation.
type peerActor struct{ inc *incarnation }

// Receive implements actor.Actor.
func (a *peerActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started, *actor.Stopping, *actor.Stopped, *actor.Restarting:
	case *replicapb.PeerMessage:
		if msg.From == a.inc.id {
			return
		}
		switch b := msg.Body.(type) {
		case *replicapb.PeerMessage_Health:
			a.inc.m.Load.receivedHealth(msg.From, b.Health)
		case *replicapb.PeerMessage_Trie:
			a.inc.m.Teacher.received(msg.From, b.Trie)
		case *replicapb.PeerMessage_Usage:
			a.inc.m.receivedUsage(msg.From, b.Usage)
		case *replicapb.PeerMessage_KvDrain:
			if f := a.inc.m.cfg.OnKVDrain; f != nil && b.KvDrain != nil {
				f(msg.From, KVDrain{Service: b.KvDrain.Service, Addr: b.KvDrain.Addr, Body: b.KvDrain.Body})
			}
		default:
			a.inc.m.log.Debug().Str("from", msg.From).Msg("peer message with an unknown body (a newer replica?): ignored")
		}
	default:
		a.inc.m.log.Warn().Str("msg_type", fmt.Sprintf("%T", msg)).Msg("peer actor: unknown message")
	}
}

// hasMember reports whether id is in the current topology.
func (inc *incarnation) hasMember(id string) bool {
	return slices.ContainsFunc(inc.memberList(), func(x *cluster.Member) bool { return x.Id == id })
}
