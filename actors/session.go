package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/ladder"
)

// sessionActor owns one shard of the service's Tier-0 pin table. The shard
// itself lives in the service's ladder.SessionTable, outside the actor, so a
// restarted shard actor keeps its pins (sessions are the strongest affinity
// signal there is; a crash should not throw them away).
type sessionActor struct {
	svc   *Service
	idx   int
	shard *ladder.SessionShard
	log   zerolog.Logger
}

func newSessionActor(svc *Service, idx int) actor.Actor {
	return &sessionActor{
		svc:   svc,
		idx:   idx,
		shard: svc.sessions.Shard(idx),
		log:   svc.log.With().Str(logfield.Actor, "session").Int(logfield.Count, idx).Logger(),
	}
}

// Receive implements actor.Actor.
func (a *sessionActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started, *actor.Restarting, *actor.Stopping, *actor.Stopped:
	case sessionLookup:
		ctx.Respond(sessionReply{id: m.id, lookup: a.shard.Get(time.Now(), m.key)})
	case sessionPin:
		a.shard.Put(time.Now(), m.key, m.pin)
		a.publishLen()
	case sessionEvict:
		a.shard.Evict(m.key)
		a.publishLen()
	case sessionEvictEndpoint:
		if n := a.shard.EvictEndpoint(m.ep); n > 0 {
			a.log.Debug().Int(logfield.EndpointIndex, m.ep).Int(logfield.Count, n).Msg("sessions evicted: endpoint unhealthy")
		}
		a.publishLen()
	case sweepTick:
		a.shard.Sweep(time.Now())
		a.publishLen()
	case crash:
		panic("actors: session shard crash requested (chaos)")
	default:
		a.log.Warn().Str(logfield.MsgType, typeName(m)).Msg("session actor: unknown message")
	}
}

// publishLen makes the shard's size readable by the sessions gauge without
// a message round trip.
func (a *sessionActor) publishLen() { a.svc.sessionLen[a.idx].Store(int64(a.shard.Len())) }
