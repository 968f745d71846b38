package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/rule"
)

// BreakerState is a circuit breaker's state.
type BreakerState uint8

// Breaker states.
const (
	// BreakerClosed: traffic flows; failures are counted.
	BreakerClosed BreakerState = iota
	// BreakerOpen: the endpoint is excluded from every tier until the open
	// window ends.
	BreakerOpen
	// BreakerHalfOpen: one trial request may go through; its outcome closes
	// or re-opens the breaker.
	BreakerHalfOpen
)

var breakerNames = [...]string{"closed", "open", "half_open"}

// String returns "closed", "open" or "half_open".
func (s BreakerState) String() string {
	if int(s) < len(breakerNames) {
		return breakerNames[s]
	}
	return "breaker(?)"
}

// outcomeClass is what a leg outcome means to a breaker.
type outcomeClass uint8

const (
	// classSuccess: a 2xx/3xx answer. Resets both streaks.
	classSuccess outcomeClass = iota
	// classTransport: connect failure, reset, timeout. Advances the
	// failure streak.
	classTransport
	// classOrigin5xx: an origin 5xx other than 503. Advances the origin
	// streak (when origin demotion is on).
	classOrigin5xx
	// classBackpressure: 429 or 503 from the engine — it is alive and
	// pushing back. Resets the transport streak only.
	classBackpressure
	// classClientError: a 4xx other than 429 — the request's fault. Neither
	// advances nor resets the origin streak; resets the transport streak
	// (the endpoint answered).
	classClientError
	// classNeutral: the client left; no signal about the endpoint.
	classNeutral
)

// classify maps an Outcome to its breaker class.
func classify(o Outcome) outcomeClass {
	switch o.Failure {
	case FailConnect, FailReset, FailTimeout:
		return classTransport
	case FailClientGone:
		return classNeutral
	}
	switch s := o.Status; {
	case s == 429 || s == 503:
		return classBackpressure
	case s >= 500:
		return classOrigin5xx
	case s >= 400:
		return classClientError
	case s > 0:
		return classSuccess
	}
	return classNeutral
}

// breakerCore is one endpoint's circuit breaker state machine. It is pure:
// time comes in as arguments and transitions come out as return values.
//
// Ownership: the endpoint's breaker actor only.
type breakerCore struct {
	cfg      rule.Breaker
	state    BreakerState
	failures int // consecutive transport failures
	origin   int // consecutive origin 5xx
	openedAt time.Time
	// epoch numbers open windows so a stale timer cannot half-open a
	// breaker that re-opened since.
	epoch uint64
	flips uint64
}

// observe feeds one outcome. It returns the new state and whether it
// changed.
func (b *breakerCore) observe(now time.Time, c outcomeClass) (BreakerState, bool) {
	if !b.cfg.Enabled || c == classNeutral {
		return b.state, false
	}
	switch b.state {
	case BreakerOpen:
		// Late outcomes of requests sent before the trip say nothing new.
		return b.state, false
	case BreakerHalfOpen:
		if c == classTransport || (c == classOrigin5xx && b.cfg.OriginErrThreshold > 0) {
			return b.open(now), true
		}
		b.reset()
		b.state = BreakerClosed
		b.flips++
		return b.state, true
	}
	switch c {
	case classSuccess:
		b.reset()
	case classTransport:
		b.failures++
		if b.failures >= b.cfg.Threshold {
			return b.open(now), true
		}
	case classOrigin5xx:
		b.failures = 0
		if b.cfg.OriginErrThreshold > 0 {
			b.origin++
			if b.origin >= b.cfg.OriginErrThreshold {
				return b.open(now), true
			}
		}
	case classBackpressure, classClientError:
		b.failures = 0
	}
	return b.state, false
}

// halfOpen ends an open window (the timer of epoch fired). It reports
// whether the breaker moved to HALF_OPEN.
func (b *breakerCore) halfOpen(epoch uint64) bool {
	if b.state != BreakerOpen || epoch != b.epoch {
		return false
	}
	b.state = BreakerHalfOpen
	b.flips++
	return true
}

func (b *breakerCore) open(now time.Time) BreakerState {
	b.reset()
	b.state = BreakerOpen
	b.openedAt = now
	b.epoch++
	b.flips++
	return b.state
}

func (b *breakerCore) reset() {
	b.failures = 0
	b.origin = 0
}

// breakerActor is the thin actor shell around breakerCore: it feeds
// outcomes, runs the open-window timer, and pushes transitions to the
// router.
//
// The core lives in the Service (svc.breakers), not in the actor: what a
// breaker knows is about its endpoint, not about the actor, so a restarted
// breaker actor carries on with the same state. A fresh CLOSED core would
// either send traffic to an endpoint known dead or, worse, leave the router
// excluding it forever (no outcome reaches an excluded endpoint's breaker
// and the successor's state never matches the pending open-window timer).
type breakerActor struct {
	svc  *Service
	ep   int
	core *breakerCore
	log  zerolog.Logger
}

func newBreakerActor(svc *Service, ep int) actor.Actor {
	return &breakerActor{
		svc:  svc,
		ep:   ep,
		core: &svc.breakerCores[ep],
		log:  svc.log.With().Int(logfield.EndpointIndex, ep).Logger(),
	}
}

// Receive implements actor.Actor.
func (a *breakerActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		// A restarted incarnation re-announces the state it took over, so
		// the router's view cannot drift from it whatever the crash cut.
		if a.core.state != BreakerClosed {
			ctx.Send(a.svc.router, breakerState{ep: a.ep, state: a.core.state})
		}
	case *actor.Restarting, *actor.Stopping, *actor.Stopped:
	case legResult:
		// Only a failure can open the breaker, the one transition that
		// reads the clock: a success costs no clock read.
		var now time.Time
		if m.class == classTransport || m.class == classOrigin5xx {
			now = time.Now()
		}
		st, changed := a.core.observe(now, m.class)
		if !changed {
			return
		}
		a.transition(ctx, st)
		if st == BreakerOpen {
			epoch, self := a.core.epoch, ctx.Self()
			root := ctx.ActorSystem().Root
			time.AfterFunc(a.core.cfg.OpenFor, func() { root.Send(self, breakerTimer{epoch: epoch}) })
		}
	case breakerTimer:
		if a.core.halfOpen(m.epoch) {
			a.transition(ctx, BreakerHalfOpen)
		}
	case resyncReq:
		ctx.Send(a.svc.router, breakerState{ep: a.ep, state: a.core.state})
	case crash:
		panic("actors: breaker crash requested (chaos)")
	default:
		a.log.Warn().Str(logfield.MsgType, typeName(m)).Msg("breaker actor: unknown message")
	}
}

func (a *breakerActor) transition(ctx actor.Context, st BreakerState) {
	a.svc.metrics.breakerFlip(a.ep, st)
	a.log.Info().Str(logfield.State, st.String()).Msg("circuit breaker transition")
	ctx.Send(a.svc.router, breakerState{ep: a.ep, state: st})
}
