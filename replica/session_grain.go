package replica

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/replica/replicapb"
)

// sessionSweepEvery is how often a busy shard drops expired pins.
const sessionSweepEvery = 10 * time.Second

// sessionGrain is one session shard as a cluster virtual actor: the state
// is a ladder.SessionShard, created with the sizing of the first pin. The
// grain is a cache: when it moves or its member dies it starts empty.
type sessionGrain struct {
	inc        *incarnation
	identity   string
	activation string
	shard      *ladder.SessionShard
	ttl        time.Duration
	maxEntries int
	lastSweep  time.Time
}

func newSessionGrain(inc *incarnation) actor.Actor {
	return &sessionGrain{inc: inc, activation: fmt.Sprintf("%s/%d", inc.id, inc.activationSeq.Add(1))}
}

// Receive implements actor.Actor.
func (g *sessionGrain) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		ctx.SetReceiveTimeout(g.inc.m.cfg.IdleShard)
	case *cluster.ClusterInit:
		g.identity = msg.Identity.Identity
		g.inc.activations.Store(g.identity, g.activation)
	case *actor.Stopped:
		if g.identity != "" {
			g.inc.activations.CompareAndDelete(g.identity, g.activation)
		}
	case *actor.Stopping, *actor.Restarting:
	case *actor.ReceiveTimeout:
		if g.shard != nil {
			g.shard.Sweep(time.Now())
		}
		if g.shard == nil || g.shard.Len() == 0 {
			ctx.Stop(ctx.Self()) // passivate an idle, empty shard
		}
	case *replicapb.SessionRequest:
		g.handle(ctx, msg)
	default:
		g.inc.m.log.Warn().Str("msg_type", typeName(msg)).Msg("session grain: unknown message")
	}
}

func (g *sessionGrain) handle(ctx actor.Context, req *replicapb.SessionRequest) {
	now := time.Now()
	if g.shard != nil && now.Sub(g.lastSweep) > sessionSweepEvery {
		g.shard.Sweep(now)
		g.lastSweep = now
	}
	reply := &replicapb.SessionReply{Member: g.inc.id, Activation: g.activation}
	switch op := req.Op.(type) {
	case *replicapb.SessionRequest_Lookup:
		if g.shard != nil {
			l := g.shard.Get(now, op.Lookup.Key)
			reply.Found, reply.Prefill, reply.Decode = l.Found, int32(l.Pin.Prefill), int32(l.Pin.Decode)
		}
	case *replicapb.SessionRequest_Pin:
		p := op.Pin
		g.ensureShard(time.Duration(p.TtlMs)*time.Millisecond, int(p.MaxEntries))
		g.shard.Put(now, p.Key, ladder.Pin{Prefill: int(p.Prefill), Decode: int(p.Decode)})
	case *replicapb.SessionRequest_Evict:
		if g.shard != nil {
			g.shard.Evict(op.Evict.Key)
		}
	case *replicapb.SessionRequest_EvictEndpoint:
		if g.shard != nil {
			g.shard.EvictEndpoint(int(op.EvictEndpoint.Endpoint))
		}
	case *replicapb.SessionRequest_Stats:
	default:
		reply.Unsupported = true
	}
	if g.shard != nil {
		reply.Entries = int32(g.shard.Len())
	}
	if ctx.Sender() != nil {
		ctx.Respond(reply)
	}
}

// ensureShard creates the shard with the given sizing, or re-creates it
// (empty) when the sizing changed: a rule's session settings changed.
func (g *sessionGrain) ensureShard(ttl time.Duration, maxEntries int) {
	if maxEntries <= 0 {
		maxEntries = ladder.DefaultSessionMaxEntries / ladder.DefaultSessionShards
	}
	if g.shard != nil && g.ttl == ttl && g.maxEntries == maxEntries {
		return
	}
	g.shard = ladder.NewSessionTable(ladder.SessionConfig{Shards: 1, MaxEntries: maxEntries, TTL: ttl}).Shard(0)
	g.ttl, g.maxEntries = ttl, maxEntries
	g.lastSweep = time.Now()
}

func typeName(m any) string { return fmt.Sprintf("%T", m) }
