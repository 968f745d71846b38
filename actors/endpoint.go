package actors

import (
	"context"
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/rule"
)

// probeCore is an endpoint's health state machine: consecutive-failure
// semantics with backoff while down. It is pure; time and results come in as
// arguments.
//
// An endpoint starts up (unknown counts as up). It goes down after Retries
// consecutive failures — or after the very first probe fails, as LoxiLB's
// first probe does, unless that probe only timed out — and comes back up
// on one success (LoxiLB issue #1087: any success resets the counter).
// While down the probe period grows by the period per failure up to
// cfg.MaxBackoff (LoxiLB #265) — unless the last failure only timed out:
// an engine that was too loaded to answer in time is probed again every
// period, so it is back within one period of answering (backing off kept
// a loaded engine that had recovered out for up to six periods, 30 s of
// 503 by default).
//
// A timeout is weaker evidence than a refusal or a wrong answer: a loaded
// engine answers late, a dead one refuses. llbd restarted, or a rule
// replaced, in front of a saturated engine would otherwise answer 503 for
// the whole backoff after a single late /health.
//
// An endpoint down by timeouts alone — every failure since its last
// success only timed out: no refusal, no reset, no wrong status — is slow,
// not dead (slow): when no endpoint is up the router routes to such
// endpoints anyway (panic routing, router_panic.go) rather than answer 503.
//
// Ownership: the endpoint actor only.
type probeCore struct {
	cfg      rule.Probe
	up       bool
	probed   bool // at least one result seen
	failures int
	timedOut bool // the last failure only timed out
	// onlyTimeouts: every failure since the last success timed out.
	onlyTimeouts bool
}

func newProbeCore(cfg rule.Probe) probeCore {
	return probeCore{cfg: cfg, up: true}
}

// observe feeds one probe result; it reports whether the up/down state
// changed.
func (p *probeCore) observe(err error) (changed bool) {
	first := !p.probed
	p.probed = true
	if err == nil {
		p.failures = 0
		if !p.up {
			p.up = true
			return true
		}
		return false
	}
	p.failures++
	p.timedOut = timedOut(err)
	p.onlyTimeouts = p.timedOut && (p.failures == 1 || p.onlyTimeouts)
	if p.up && ((first && !timedOut(err)) || p.failures >= p.cfg.Retries) {
		p.up = false
		return true
	}
	return false
}

// slow reports an endpoint down by timeouts alone.
func (p *probeCore) slow() bool { return !p.up && p.onlyTimeouts }

// lifeSign feeds an answer the endpoint gave outside a probe's attempt (a
// probe's late answer, response bytes read by a request): it brings back
// an endpoint down by timeouts alone, and reports whether it did. An
// endpoint that refused or answered wrongly keeps its probe schedule.
func (p *probeCore) lifeSign() bool {
	switch {
	case p.up:
		if p.onlyTimeouts {
			p.failures = 0 // a timeout streak that did not reach Retries is over
		}
		return false
	case !p.slow():
		return false
	}
	return p.observe(nil)
}

// timedOut reports whether a probe error says only that the probe timed
// out (its Timeout method, as net.Error's).
func timedOut(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// nextDelay is the wait before the next probe.
func (p *probeCore) nextDelay() time.Duration {
	if p.up || p.timedOut {
		return p.cfg.Period
	}
	d := p.cfg.Period * time.Duration(1+p.failures)
	return min(d, p.cfg.MaxBackoff)
}

// parkQueue holds an endpoint's parked requests (admission's
// hold-don't-drop queue): the requests themselves, while the router's
// admission policy (ladder.FlowQueue) decides which leaves next and names
// it by id. Depth is bounded by the ladder (≤ 64), so a slice is the right
// shape.
//
// Ownership: the endpoint actor only.
type parkQueue struct {
	items []*routeMsg
}

func (q *parkQueue) push(m *routeMsg) { q.items = append(q.items, m) }

func (q *parkQueue) len() int { return len(q.items) }

// remove takes request id out of the queue; nil when it is not there.
func (q *parkQueue) remove(id uint64) *routeMsg {
	for i, m := range q.items {
		if m.id == id {
			copy(q.items[i:], q.items[i+1:])
			q.items[len(q.items)-1] = nil
			q.items = q.items[:len(q.items)-1]
			return m
		}
	}
	return nil
}

// takeAll empties the queue, oldest first.
func (q *parkQueue) takeAll() []*routeMsg {
	out := q.items
	q.items = nil
	return out
}

// endpointActor owns one endpoint's operational state: its admission queue,
// its health probe schedule and its engine-metrics scrape. Transitions are
// pushed to the router; the probe and scrape run one goroutine per attempt,
// never inside Receive.
type endpointActor struct {
	svc    *Service
	ep     int
	probeF ProbeFunc  // nil: not monitored
	scrape ScrapeFunc // nil: not scraped
	queue  parkQueue
	probe  probeCore
	stats  EngineStats
	pushed bool // this incarnation pushed its probe state at least once
	// probing: a probe of this incarnation is under way (one at a time).
	probing bool
	gen     uint64 // incarnation: stale timers and results are ignored
	ctx     context.Context
	cancel  context.CancelFunc
	// timers are the pending probe and scrape ticks, stopped with the
	// incarnation so none fires into a stopped actor.
	timers [2]*time.Timer
	log    zerolog.Logger
}

// Timer slots of endpointActor.timers.
const (
	probeTimer = iota
	scrapeTimer
)

func newEndpointActor(svc *Service, ep int) actor.Actor {
	return &endpointActor{
		svc:    svc,
		ep:     ep,
		probeF: svc.cfg.probe(ep),
		scrape: svc.cfg.scrape(ep),
		probe:  newProbeCore(svc.cfg.Rule.Probe),
		gen:    svc.gen.Add(1),
		log:    svc.log.With().Str(logfield.Actor, "endpoint").Int(logfield.EndpointIndex, ep).Logger(),
	}
}

// Receive implements actor.Actor.
func (a *endpointActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		a.ctx, a.cancel = context.WithCancel(context.Background())
		if a.probeF != nil {
			ctx.Send(ctx.Self(), probeTick{gen: a.gen})
		}
		if a.scrape != nil {
			ctx.Send(ctx.Self(), scrapeTick{gen: a.gen})
		}
	case *actor.Restarting:
		// The queue dies with this incarnation: hand every parked request
		// back to the router rather than strand its client.
		a.stopWork()
		a.drain(ctx)
	case *actor.Stopping:
		a.stopWork()
		for _, r := range a.queue.takeAll() {
			r.reply <- routeReply{err: ErrStopped}
		}
	case *actor.Stopped:
	case parkMsg:
		a.queue.push(m.req)
		if !m.req.deadline.IsZero() {
			id, gen, self, root := m.req.id, a.gen, ctx.Self(), ctx.ActorSystem().Root
			time.AfterFunc(time.Until(m.req.deadline), func() { root.Send(self, parkExpired{id: id, gen: gen}) })
		}
	case wakeMsg:
		if r := a.queue.remove(m.id); r != nil {
			ctx.Send(a.svc.router, resumeMsg{ep: m.slot, held: a.ep, req: r})
		} else {
			ctx.Send(a.svc.router, wakeEmpty{ep: m.slot, id: m.id})
		}
	case evictParked:
		if r := a.queue.remove(m.id); r != nil {
			r.reply <- routeReply{route: m.route}
		}
	case dropParked:
		if r := a.queue.remove(m.id); r != nil {
			ctx.Send(a.svc.router, unparkedMsg{ep: a.ep, id: m.id})
		}
	case parkExpired:
		if m.gen != a.gen {
			return
		}
		if r := a.queue.remove(m.id); r != nil {
			r.reply <- routeReply{err: ErrParkTimeout}
			ctx.Send(a.svc.router, unparkedMsg{ep: a.ep, id: m.id})
		}
	case drainParked:
		a.drain(ctx)
	case probeTick:
		if m.gen == a.gen && !a.probing {
			a.runProbe(ctx)
		}
	case reprobe:
		// A request found no endpoint available. An endpoint down only
		// because its last probe timed out is probed now rather than a
		// period later; a refused one keeps its backoff.
		if a.probeF != nil && a.gen != 0 && !a.probe.up && a.probe.timedOut && !a.probing {
			if t := a.timers[probeTimer]; t != nil {
				t.Stop()
				a.timers[probeTimer] = nil
			}
			a.runProbe(ctx)
		}
	case lifeSign:
		// The endpoint answered outside a probe's attempt: an endpoint
		// down by timeouts alone is back at once.
		if a.gen != 0 && a.probe.lifeSign() {
			a.pushProbe(ctx, nil, true)
		}
	case probeResult:
		if m.gen != a.gen {
			return
		}
		a.probing = false
		// The first result of an incarnation is always pushed: the router
		// may still hold a predecessor's state.
		wasSlow := a.probe.slow()
		if changed := a.probe.observe(m.err); changed || !a.pushed || wasSlow != a.probe.slow() {
			a.pushed = true
			a.pushProbe(ctx, m.err, changed)
		}
		a.after(ctx, probeTimer, a.probe.nextDelay(), probeTick{gen: a.gen})
	case scrapeTick:
		if m.gen == a.gen {
			a.runScrape(ctx, true)
		}
	case scrapeNow:
		if a.scrape != nil && a.gen != 0 {
			a.runScrape(ctx, false)
		}
	case scrapeResult:
		if m.gen != a.gen {
			return
		}
		// Every scrape that reports KV usage is pushed, changed or not:
		// the router restarts its count of blocks sent since the last one.
		if m.err == nil && (m.stats != a.stats || m.stats.KVUsageKnown) {
			a.stats = m.stats
			ctx.Send(a.svc.router, engineStats{ep: a.ep, stats: m.stats})
		}
		if m.periodic {
			a.after(ctx, scrapeTimer, a.svc.cfg.ScrapeInterval, scrapeTick{gen: a.gen})
		}
	case resyncReq:
		if a.probe.probed {
			ctx.Send(a.svc.router, probeState{ep: a.ep, up: a.probe.up, slow: a.probe.slow()})
		}
		if a.stats != (EngineStats{}) {
			ctx.Send(a.svc.router, engineStats{ep: a.ep, stats: a.stats})
		}
	case crash:
		panic("actors: endpoint crash requested (chaos)")
	default:
		a.log.Warn().Str(logfield.MsgType, typeName(m)).Msg("endpoint actor: unknown message")
	}
}

func (a *endpointActor) stopWork() {
	if a.cancel != nil {
		a.cancel()
	}
	for i, t := range a.timers {
		if t != nil {
			t.Stop()
			a.timers[i] = nil
		}
	}
	a.gen = 0 // no later tick or result matches a dead incarnation
}

func (a *endpointActor) drain(ctx actor.Context) {
	for _, r := range a.queue.takeAll() {
		ctx.Send(a.svc.router, unparkedMsg{ep: a.ep, id: r.id, requeue: r})
	}
}

// after sends msg to the actor itself in d, in timer slot (one pending
// tick per slot).
func (a *endpointActor) after(ctx actor.Context, slot int, d time.Duration, msg any) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	if t := a.timers[slot]; t != nil {
		t.Stop()
	}
	a.timers[slot] = time.AfterFunc(d, func() { root.Send(self, msg) })
}

func (a *endpointActor) runProbe(ctx actor.Context) {
	probe, gen, self, root := a.probeF, a.gen, ctx.Self(), ctx.ActorSystem().Root
	a.probing = true
	pctx, cancel := context.WithTimeout(a.ctx, a.svc.cfg.Rule.Probe.AttemptTimeout)
	go func() {
		defer cancel()
		err := probe(pctx)
		root.Send(self, probeResult{gen: gen, err: err})
	}()
}

func (a *endpointActor) runScrape(ctx actor.Context, periodic bool) {
	scrape, gen, self, root := a.scrape, a.gen, ctx.Self(), ctx.ActorSystem().Root
	actx := a.ctx
	sctx, cancel := context.WithTimeout(actx, a.svc.cfg.Rule.Probe.AttemptTimeout)
	go func() {
		defer cancel()
		st, err := scrape(sctx)
		if actx.Err() != nil {
			return // the incarnation is gone: nobody reads the result
		}
		root.Send(self, scrapeResult{gen: gen, stats: st, err: err, periodic: periodic})
	}()
}

func (a *endpointActor) pushProbe(ctx actor.Context, err error, changed bool) {
	if changed {
		state := "up"
		if !a.probe.up {
			state = "down"
		}
		ev := a.log.Info().Str(logfield.State, state)
		if err != nil {
			ev = ev.Str(logfield.Error, err.Error()).Int(logfield.Failures, a.probe.failures)
		}
		ev.Msg("endpoint health transition")
		a.svc.metrics.probeFlip(a.ep, a.probe.up)
	}
	ctx.Send(a.svc.router, probeState{ep: a.ep, up: a.probe.up, slow: a.probe.slow()})
}
