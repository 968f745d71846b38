package gateway

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"

	"github.com/llbproject/llb/rule"
)

// Signs of life: what the data plane sees of an endpoint between its
// probes. An engine saturated by thousands of streams answers its health
// probe late and its accept queue drops SYNs, yet every one of its streams
// is still producing tokens; HAProxy keeps serving it, and so must llb
// (judged by its probes alone, a CPU-starved backend whose probe times out
// would be marked down for 15 s at a time, 503 no_healthy_backend, and
// dials timing out at 500 ms would answer 502 backend_unreachable). The
// passive evidence — response bytes read from the endpoint, as Caddy's
// passive health and HAProxy's "observe layer7" count real traffic —
// decides what a timeout means. A timeout and a refusal are different
// evidence: a refused connection, a reset, a wrong status or body prove
// the endpoint is not serving; a timeout proves only that one answer was
// slow, which a loaded engine's are.
//
//   - a probe that times out passes while the endpoint answered anything
//     since the previous probe ended (EndpointWatch.Probe): one probe
//     cycle of silence (period + attempt timeout, 7 s by default), not
//     just the attempt's 2 s, is what a timeout needs to count. A starved
//     engine's streams stall for seconds at a time, and a starved llbd
//     reads what they sent seconds late; neither is a dead engine. A
//     refused connection, a wrong status or body, and a timeout after a
//     whole silent cycle still fail it, so a dead, frozen (SIGSTOP: the
//     kernel still accepts, nothing answers) or hung engine goes down one
//     cycle later at most;
//   - a dial still waiting at the connect timeout waits on while the
//     endpoint answered anything — a leg's response bytes or a probe —
//     within the same cycle (upstreamPool.dial), up to busyConnectMax: a
//     loaded backend's full accept queue drops the SYN, which the kernel
//     sends again 1 s and 3 s later, past any sub-second timeout.
//
//   - a probe that times out reads on for a period (lateAnswer): a late
//     answer that passes is the endpoint answering, and the next answer of
//     an endpoint whose last probe failed — that late answer or a leg's
//     response bytes — is reported at once (OnLifeSign), so an endpoint
//     down by timeouts alone comes back without waiting for a probe in
//     time. While every endpoint is down the router still sends requests
//     to those down by timeouts alone (panic routing, actors), and their
//     first bytes end it.
//
// Only answers count: a completed TCP handshake is the kernel's work,
// which a frozen engine still does.

const (
	// lifeGrain: an endpoint's last sign of life is stored at most once
	// per grain (a load of a shared word on every read, a store rarely).
	lifeGrain = 10 * time.Millisecond
	// busyConnectMax bounds a dial to an endpoint that shows signs of life
	// (three SYNs: at 0, 1 and 3 s, with 7 s for the last to be answered).
	busyConnectMax = 10 * time.Second
)

// quietCycle is how long an endpoint may answer nothing before a timeout
// counts against it: one probe cycle (the period, then an attempt), the
// default cycle when the rule does not probe.
func quietCycle(p rule.Probe) time.Duration {
	if p.Type == rule.ProbeNone || p.Period <= 0 || p.AttemptTimeout <= 0 {
		return time.Duration(rule.DefaultProbePeriodSec)*time.Second + rule.DefaultProbeAttemptTimeout
	}
	return p.Period + p.AttemptTimeout
}

// lifeSigns is an endpoint's last sign of life. A nil *lifeSigns records
// nothing and has seen nothing. Safe for concurrent use.
type lifeSigns struct {
	last   atomic.Int64 // Unix nanoseconds: response bytes read by a leg
	probed atomic.Int64 // Unix nanoseconds: the last probe that passed
	// failing: the endpoint's last probe failed; the next answer from it
	// is reported to wake (once).
	failing atomic.Bool
	wake    atomic.Pointer[func()]
}

// note records a sign of life seen at now. It costs a load per call; a
// store at most once per lifeGrain, and the wake of an endpoint whose last
// probe failed once per failure.
func (s *lifeSigns) note(now time.Time) {
	if s == nil {
		return
	}
	n := now.UnixNano()
	if n-s.last.Load() >= int64(lifeGrain) {
		s.last.Store(n)
		s.answer()
	}
}

// answer reports an answer of an endpoint whose last probe failed to the
// wake hook (the actors service's LifeSign), once per failed probe.
func (s *lifeSigns) answer() {
	if s.failing.Load() && s.failing.CompareAndSwap(true, false) {
		if f := s.wake.Load(); f != nil {
			(*f)()
		}
	}
}

// since reports whether a leg read response bytes at t or later (within
// lifeGrain).
func (s *lifeSigns) since(t time.Time) bool {
	return s != nil && s.last.Load() >= t.UnixNano()-int64(lifeGrain)
}

// answered reports whether the endpoint answered anything at t or later:
// a leg's response bytes or a probe that passed.
func (s *lifeSigns) answered(t time.Time) bool {
	return s.since(t) || (s != nil && s.probed.Load() >= t.UnixNano())
}

// signs returns endpoint ep's signs of life (nil out of range or without a
// watch).
func (w *EndpointWatch) signs(ep int) *lifeSigns {
	if w == nil || ep < 0 || ep >= len(w.life) {
		return nil
	}
	return &w.life[ep]
}

// OnLifeSign sets the hook told that an endpoint whose last probe failed
// answered after all: a probe's late answer, or response bytes a request
// read from it (a request routed there in panic, or one sent before the
// probe failed). Wire it to actors.Service.LifeSign: an endpoint down by
// timeouts alone comes back at once. f must not block.
func (w *EndpointWatch) OnLifeSign(f func(ep int)) {
	if w == nil {
		return
	}
	for i := range w.life {
		ep := i
		g := func() { f(ep) }
		w.life[i].wake.Store(&g)
	}
}

// Probe returns endpoint ep's probe p judged with what the data plane sees
// of ep: a timeout passes while legs to ep read response bytes since the
// previous probe ended or a probe's late answer came (the endpoint is
// busy, not down), looking back one
// probe cycle of cfg at most (the backoff of a down endpoint spaces its
// probes further); every other result is p's. Wire it into
// actors.ServiceConfig.Probes with the same watch the rule's Handler gets
// (Deps.Watch); probes of one endpoint run one at a time.
//
// A probe that times out is not abandoned: it reads on for up to a probe
// period past its attempt timeout (lateAnswer), and an answer that passes
// then is a sign of life (the wake hook, OnLifeSign). A starved engine
// answers /health seconds late; it is slow, not dead.
func (w *EndpointWatch) Probe(ep int, p Probe, cfg rule.Probe) Probe {
	s := w.signs(ep)
	if s == nil || p == nil {
		return p
	}
	cycle := quietCycle(cfg)
	late := lateAnswer(cfg)
	var prevEnd atomic.Int64 // Unix nanoseconds; 0 before the first probe
	return func(ctx context.Context) error {
		start := time.Now()
		from := start
		if pe := prevEnd.Load(); pe != 0 {
			from = time.Unix(0, max(pe, start.Add(-cycle).UnixNano()))
		}
		err := s.run(ctx, p, late)
		end := time.Now()
		prevEnd.Store(end.UnixNano())
		switch {
		case err == nil:
			s.probed.Store(end.UnixNano())
			s.failing.Store(false)
			return nil
		case errors.Is(err, ErrProbeTimeout) && (s.since(from) || s.probed.Load() > from.UnixNano()):
			return nil // busy: legs read bytes, or the previous probe's late answer came
		}
		// Only a timeout waits for a sign of life: a refusal or a wrong
		// answer is not undone by bytes from an older connection.
		s.failing.Store(errors.Is(err, ErrProbeTimeout))
		return err
	}
}

// lateAnswer is how long past its attempt timeout a probe reads on for a
// late answer: a period (it ends before the next probe of an endpoint
// probed every period starts), nothing when the rule does not probe.
func lateAnswer(p rule.Probe) time.Duration {
	if p.Type == rule.ProbeNone || p.Period <= 0 || p.AttemptTimeout <= 0 {
		return 0
	}
	return p.Period
}

// run runs probe p within ctx; when ctx's deadline passes first it
// returns a timeout at once, but p reads on, up to late past that
// deadline, and a late pass is a sign of life (s.probed, the wake hook).
// A ctx cancelled (the endpoint's actor stopped) ends p with it.
func (s *lifeSigns) run(ctx context.Context, p Probe, late time.Duration) error {
	dl, ok := ctx.Deadline()
	if late <= 0 || !ok {
		return p(ctx)
	}
	pctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), dl.Add(late))
	pctx = context.WithValue(pctx, probeBoundKey{}, time.Until(dl)+late)
	done := make(chan error, 1)
	go func() { done <- p(pctx) }()
	select {
	case err := <-done:
		cancel()
		return err
	case <-ctx.Done():
	}
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		cancel()
		return <-done
	}
	go func() {
		defer cancel()
		if err := <-done; err == nil {
			s.probed.Store(time.Now().UnixNano())
			s.failing.Store(true) // the failure is reported after this returns
			s.answer()
		}
	}()
	return &ProbeError{Target: "", Kind: ErrProbeTimeout, Detail: "no answer within the attempt timeout (the probe reads on for a late answer)"}
}

// errNoSignOfLife ends a dial that reached the connect timeout while the
// endpoint answered nothing (a timeout: net.Error's Timeout is true).
var errNoSignOfLife = &noSignOfLife{}

type noSignOfLife struct{}

func (*noSignOfLife) Error() string {
	return "i/o timeout (the connect timeout passed and the endpoint answered nothing, neither a request nor a probe, within its probe cycle)"
}
func (*noSignOfLife) Timeout() bool   { return true }
func (*noSignOfLife) Temporary() bool { return true }

var _ net.Error = errNoSignOfLife

// dialBusy connects to the endpoint: after the connect timeout the dial
// waits on, one timeout at a time, while the endpoint answered anything
// within its quiet cycle (or throughout when patient: a request routed in
// panic to an endpoint down by timeouts alone), up to busyConnectMax;
// otherwise it fails with errNoSignOfLife. A refusal ends it at once.
func (p *upstreamPool) dialBusy(ctx context.Context, patient bool) (net.Conn, error) {
	start := time.Now()
	dctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	limit := start.Add(max(busyConnectMax, p.connectTimeout))
	window := max(p.connectTimeout, p.quiet)
	var check func()
	check = func() {
		if dctx.Err() != nil {
			return
		}
		now := time.Now()
		if left := limit.Sub(now); left > 0 && (patient || p.life.answered(now.Add(-window))) {
			time.AfterFunc(min(p.connectTimeout, left), check)
			return
		}
		cancel(errNoSignOfLife)
	}
	time.AfterFunc(p.connectTimeout, check)
	nc, err := p.busyDialer.DialContext(dctx, "tcp", p.addr)
	if err != nil && ctx.Err() == nil && context.Cause(dctx) == errNoSignOfLife {
		err = &net.OpError{Op: "dial", Net: "tcp", Addr: addrOf(p.addr), Err: errNoSignOfLife}
	}
	return nc, err
}

// addrOf is a net.Addr that prints as s.
type addrOf string

func (a addrOf) Network() string { return "tcp" }
func (a addrOf) String() string  { return string(a) }
