package actors

import (
	"fmt"
	"reflect"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/ladder"
)

// routerActor is the thin shell around routerCore: it turns messages into
// core calls and core effects into messages. It never blocks in Receive:
// fan-out goes out as Request (replies come back as ordinary messages), and
// deadlines are timers that send a message.
type routerActor struct {
	svc  *Service
	core *routerCore
	ctx  actor.Context // valid during Receive only
	log  zerolog.Logger
}

func newRouterActor(svc *Service) actor.Actor {
	lad := svc.lad.Fresh() // validated once, by Start
	a := &routerActor{svc: svc, log: svc.log.With().Str(logfield.Actor, "router").Logger()}
	a.core = newRouterCore(&svc.cfg, lad, a, svc.metrics, svc.ctrl)
	a.core.served = &svc.served
	return a
}

// Receive implements actor.Actor.
func (a *routerActor) Receive(ctx actor.Context) {
	a.svc.handled.Add(1) // the router moves (Service.Route's deadline)
	a.ctx = ctx
	defer func() { a.ctx = nil }()
	// The clock is read by the messages that use it only: a read costs
	// 0.1–0.5 µs on a VM, and a short request's conclusion needs none.
	c := a.core
	switch m := ctx.Message().(type) {
	case *routeMsg:
		c.route(time.Now(), m)
	case scoreReply:
		c.scoreReply(time.Now(), m)
	case sessionReply:
		c.sessionReply(time.Now(), m)
	case decisionDeadline:
		c.deadlineFired(time.Now(), m.id)
	case reportMsg:
		c.report(reportClock(m.o), m.o)
	case firstByteMsg:
		c.firstByte(m.t)
	case pinMsg:
		c.pinResponse(m.t, m.key)
	case finishMsg:
		c.finish(m.t, m.res)
	case *concludeMsg:
		c.report(reportClock(m.o), m.o)
		c.finish(m.o.Ticket, m.res)
		*m = concludeMsg{}
		a.svc.concludes.Put(m)
	case cancelMsg:
		c.cancel(m.id)
	case resumeMsg:
		c.resume(time.Now(), m)
	case wakeEmpty:
		c.wakeEmpty(m)
	case unparkedMsg:
		c.unparked(time.Now(), m)
	case probeState:
		c.probe(m)
	case breakerState:
		c.breakerState(m)
	case engineStats:
		c.engineStats(m)
	case inventorySize:
		c.views[m.ep].InventoryBlocks = m.blocks
	case ctrlReq:
		m.reply <- c.applyCtrl(time.Now(), m.ep, m.u)
	case statusReq:
		m.reply <- c.status()
	case sweepTick:
		c.decayCtrl(time.Now())
		a.svc.metrics.trieNodes(c.lad.Trie())
	case peerTick:
		c.publishPeers()
		c.refreshPeers()
	case peersChanged:
		a.svc.peersDirty.Store(false)
		c.refreshPeers()
	case peerLessons:
		c.learnFromPeers(m.lessons)
	case *actor.Started:
		// A restarted router has a fresh core: children push their state.
		if a.svc.routerRuns.Load() > 1 {
			a.resync(ctx)
		}
	case *actor.Restarting:
		// The mailbox outlives the incarnation: decisions in flight go back
		// into it and the successor decides them (their late fan-out
		// replies are ignored as unknown). Parked requests come back
		// through the endpoints' drain (resync).
		for _, m := range c.takePending() {
			ctx.Send(ctx.Self(), m)
		}
	case *actor.Stopping:
		c.stopAll()
	case *actor.Stopped:
	case crash:
		panic("actors: router crash requested (chaos)")
	default:
		a.log.Warn().Str(logfield.MsgType, typeName(m)).Msg("router actor: unknown message")
	}
}

// reportClock returns the time report needs for o: the clock only when
// the outcome carries what the cache-truth or TTFT checks compare (the
// engine's cached tokens, a measured TTFT); report reads its now for
// nothing else.
func reportClock(o Outcome) time.Time {
	if o.Usage.Reported || o.TTFT > 0 {
		return time.Now()
	}
	return time.Time{}
}

// resync asks every child for its current state and sends the parked
// requests back through the ladder (the new core knows none of them).
func (a *routerActor) resync(ctx actor.Context) {
	a.log.Warn().Msg("router restarted with fresh state; resyncing endpoints and breakers")
	for _, pid := range a.svc.endpoints {
		ctx.Send(pid, resyncReq{})
		ctx.Send(pid, drainParked{})
	}
	for _, pid := range a.svc.breakers {
		ctx.Send(pid, resyncReq{})
	}
	for _, pid := range a.svc.inventories {
		if pid != nil {
			ctx.Send(pid, resyncReq{})
		}
	}
}

// ---- routerPorts ----------------------------------------------------------

func (a *routerActor) score(ep int, id uint64, chain []uint64) {
	a.ctx.Request(a.svc.inventories[ep], scoreReq{id: id, chain: chain})
}

func (a *routerActor) checkRemoved(ep int, id uint64, keys []uint64, since uint64) {
	a.ctx.Request(a.svc.inventories[ep], scoreReq{id: id, chain: keys, checkRemoved: true, since: since})
}

// Sessions live in the local shard actors on a single node, and in the
// cluster's session grains in cluster mode.

// lookupSession asks key's shard for its pin. In a cluster a stored
// response's pin travels from the replica that saw the response start to its
// shard's owner while the client reads the answer and sends the next turn,
// possibly through the owner itself: a pin lookup that misses asks again
// every pinRetryGap while its deadline leaves room, so the pin may land
// first. (On a single node the router sends pins and lookups to the shard
// actor in order.)
func (a *routerActor) lookupSession(id uint64, key string) {
	if p := a.svc.cfg.Peers; p != nil {
		self, root := a.ctx.Self(), a.svc.root
		pin := id&pinLookupIDBit != 0
		deadline := time.Now().Add(a.svc.cfg.lookupTimeout(pin))
		var ask func()
		ask = func() {
			p.LookupSession(key, deadline, func(l ladder.SessionLookup, err error) {
				if err != nil {
					l = ladder.SessionLookup{}
				}
				if pin && !l.Found && time.Until(deadline) > 2*pinRetryGap {
					time.AfterFunc(pinRetryGap, ask)
					return
				}
				root.Send(self, sessionReply{id: id, lookup: l})
			})
		}
		ask()
		return
	}
	a.ctx.Request(a.svc.sessionPID(key), sessionLookup{id: id, key: key})
}

// pinRetryGap spaces a missed pin lookup's retries (see lookupSession).
const pinRetryGap = 10 * time.Millisecond

func (a *routerActor) pinSession(key string, pin ladder.Pin) {
	if p := a.svc.cfg.Peers; p != nil {
		p.PinSession(key, pin)
		return
	}
	a.ctx.Send(a.svc.sessionPID(key), sessionPin{key: key, pin: pin})
}

func (a *routerActor) evictSession(key string) {
	if p := a.svc.cfg.Peers; p != nil {
		p.EvictSession(key)
		return
	}
	a.ctx.Send(a.svc.sessionPID(key), sessionEvict{key: key})
}

func (a *routerActor) evictEndpointSessions(ep int) {
	if p := a.svc.cfg.Peers; p != nil {
		p.EvictEndpointSessions(ep)
		return
	}
	for _, pid := range a.svc.shards {
		a.ctx.Send(pid, sessionEvictEndpoint{ep: ep})
	}
}

func (a *routerActor) publishPeers(inFlight uint64, eps []PeerEndpoint) {
	a.svc.cfg.Peers.Publish(inFlight, eps)
}

func (a *routerActor) healthTransition(ep int, e PeerEndpoint) { a.svc.cfg.Peers.Transition(ep, e) }

func (a *routerActor) peerLoad(load []uint32, excluded *ladder.EndpointSet) uint64 {
	return a.svc.cfg.Peers.PeerLoad(load, excluded)
}

func (a *routerActor) teach(prompt []byte, ep int) { a.svc.cfg.Peers.Teach(prompt, ep) }

func (a *routerActor) park(ep int, m *routeMsg) { a.ctx.Send(a.svc.endpoints[ep], parkMsg{req: m}) }

func (a *routerActor) wake(held int, id uint64, slot int) {
	a.ctx.Send(a.svc.endpoints[held], wakeMsg{id: id, slot: slot})
}

func (a *routerActor) evictParked(held int, id uint64, r Route) {
	a.ctx.Send(a.svc.endpoints[held], evictParked{id: id, route: r})
}

func (a *routerActor) dropParked(ep int, id uint64) {
	a.ctx.Send(a.svc.endpoints[ep], dropParked{id: id})
}

func (a *routerActor) drainParked(ep int) { a.ctx.Send(a.svc.endpoints[ep], drainParked{}) }

func (a *routerActor) reprobe(ep int) { a.ctx.Send(a.svc.endpoints[ep], reprobe{}) }

func (a *routerActor) endpointLost(ep int) {
	if f := a.svc.cfg.OnEndpointDown; f != nil {
		f(ep)
	}
}

func (a *routerActor) breaker(ep int, c outcomeClass) {
	a.ctx.Send(a.svc.breakers[ep], legResult{class: c})
}

func (a *routerActor) deadline(id uint64, d time.Duration) func() bool {
	self, root := a.ctx.Self(), a.svc.root
	t := time.AfterFunc(d, func() { root.Send(self, decisionDeadline{id: id}) })
	return t.Stop
}

func (a *routerActor) truthChanged(ep int, v ladder.TruthVerdict, demoted bool) {
	addr := a.svc.cfg.Rule.Endpoints[ep].Addr.String()
	if !v.Distrusted {
		a.log.Info().Int(logfield.EndpointIndex, ep).Str(logfield.Endpoint, addr).
			Int(logfield.Count, v.Samples).
			Msg("kv cache predictions agree with the engine again; Tier 1.5 uses the endpoint's overlap again")
		return
	}
	what := "Tier 1.5 ignores the endpoint's overlap until predictions agree again (reason prediction_mismatch)"
	if !demoted {
		what = "LLB_KV_PREDICTION_DEMOTE is off, so Tier 1.5 keeps using it"
	}
	a.log.Warn().Int(logfield.EndpointIndex, ep).Str(logfield.Endpoint, addr).
		Str(logfield.Reason, v.Cause.String()).Int(logfield.Count, v.Wrong).
		Msgf("kv cache predictions keep disagreeing with what the engine reports (%d of the last %d wrong); likely cause %s: %s. %s",
			v.Wrong, v.Samples, v.Cause, v.Detail, what)
}

func (a *routerActor) panicChanged(on bool, slow ladder.EndpointSet) {
	var addrs []string
	for i := range a.svc.cfg.Rule.Endpoints {
		if slow.Has(i) {
			addrs = append(addrs, a.svc.cfg.Rule.Endpoints[i].Addr.String())
		}
	}
	if on {
		a.log.Warn().Strs(logfield.Endpoints, addrs).
			Msg("panic routing: no endpoint is up and these are down by probe timeouts alone (slow, not dead): requests go to them anyway (X-Llb-Route flag panic, llb_panic_routing_total)")
		return
	}
	a.log.Info().Strs(logfield.Endpoints, addrs).
		Msg("panic routing ends: an endpoint is up again, or none is down by timeouts alone")
}

// typeName names a message's Go type for logs.
func typeName(m any) string {
	if m == nil {
		return "<nil>"
	}
	if t := reflect.TypeOf(m); t != nil {
		return t.String()
	}
	return fmt.Sprintf("%T", m)
}

func (a *routerActor) ttftChanged(ep int, v ladder.TTFTVerdict) {
	addr := a.svc.cfg.Rule.Endpoints[ep].Addr.String()
	if !v.Drifting {
		a.log.Info().Int(logfield.EndpointIndex, ep).Str(logfield.Endpoint, addr).Int(logfield.Count, v.Samples).
			Msg("ttft predictions agree with the engine again; decisions rely on them again")
		return
	}
	a.log.Warn().Int(logfield.EndpointIndex, ep).Str(logfield.Endpoint, addr).Int(logfield.Count, v.Wrong).
		Msgf("ttft predictions keep missing the measured first tokens (%d of the last %d off by more than half, median error %+.0f%%): "+
			"the engine's timing depends on something llb does not see (other clients, preemption, a throttled GPU) or llb's count of the prefill work it sent is off; "+
			"its model starts again and decisions (ttft objectives) do not rely on its predictions until they agree",
			v.Wrong, v.Samples, v.Bias*100)
}
