package gateway

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"time"
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
// decides what a timeout means:
//
//   - a probe that times out while legs to its endpoint read response
//     bytes during the attempt passes (EndpointWatch.Probe): the endpoint
//     is busy, not down. A refused connection, a wrong status or body, and
//     a timeout with nothing read still fail it, so a dead, frozen
//     (SIGSTOP: the kernel still accepts, nothing answers) or hung engine
//     goes down as before;
//   - a dial still waiting at the connect timeout waits on while the
//     endpoint keeps answering other legs (upstreamPool.dial), up to
//     busyConnectMax: a loaded backend's full accept queue drops the SYN,
//     which the kernel sends again 1 s and 3 s later, past any sub-second
//     timeout.
//
// Only response bytes count: a completed TCP handshake is the kernel's
// work, which a frozen engine still does.

const (
	// lifeGrain: an endpoint's last sign of life is stored at most once
	// per grain (a load of a shared word on every read, a store rarely).
	lifeGrain = 10 * time.Millisecond
	// lifeWindow is how recent a sign must be for a dial past its connect
	// timeout to wait on (at least the connect timeout itself).
	lifeWindow = time.Second
	// busyConnectMax bounds a dial to an endpoint that shows signs of life
	// (three SYNs: at 0, 1 and 3 s, with 7 s for the last to be answered).
	busyConnectMax = 10 * time.Second
)

// lifeSigns is an endpoint's last sign of life. A nil *lifeSigns records
// nothing and has seen nothing. Safe for concurrent use.
type lifeSigns struct {
	last atomic.Int64 // Unix nanoseconds
}

// note records a sign of life seen at now.
func (s *lifeSigns) note(now time.Time) {
	if s == nil {
		return
	}
	n := now.UnixNano()
	if n-s.last.Load() >= int64(lifeGrain) {
		s.last.Store(n)
	}
}

// since reports whether a sign of life was seen at t or later (within
// lifeGrain).
func (s *lifeSigns) since(t time.Time) bool {
	return s != nil && s.last.Load() >= t.UnixNano()-int64(lifeGrain)
}

// signs returns endpoint ep's signs of life (nil out of range or without a
// watch).
func (w *EndpointWatch) signs(ep int) *lifeSigns {
	if w == nil || ep < 0 || ep >= len(w.life) {
		return nil
	}
	return &w.life[ep]
}

// Probe returns endpoint ep's probe p judged with what the data plane sees
// of ep: a timeout while legs to ep read response bytes during the attempt
// passes (the endpoint is busy, not down); every other result is p's.
// Wire it into actors.ServiceConfig.Probes with the same watch the rule's
// Handler gets (Deps.Watch).
func (w *EndpointWatch) Probe(ep int, p Probe) Probe {
	s := w.signs(ep)
	if s == nil || p == nil {
		return p
	}
	return func(ctx context.Context) error {
		start := time.Now()
		err := p(ctx)
		if err != nil && errors.Is(err, ErrProbeTimeout) && s.since(start) {
			return nil
		}
		return err
	}
}

// errNoSignOfLife ends a dial that reached the connect timeout while the
// endpoint answered nothing (a timeout: net.Error's Timeout is true).
var errNoSignOfLife = &noSignOfLife{}

type noSignOfLife struct{}

func (*noSignOfLife) Error() string {
	return "i/o timeout (the connect timeout passed and the endpoint answered no other request meanwhile)"
}
func (*noSignOfLife) Timeout() bool   { return true }
func (*noSignOfLife) Temporary() bool { return true }

var _ net.Error = errNoSignOfLife

// dialBusy connects to the endpoint: after the connect timeout the dial
// waits on, one timeout at a time, while the endpoint shows a sign of life
// within lifeWindow, up to busyConnectMax; otherwise it fails with
// errNoSignOfLife.
func (p *upstreamPool) dialBusy(ctx context.Context) (net.Conn, error) {
	start := time.Now()
	dctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	limit := start.Add(max(busyConnectMax, p.connectTimeout))
	window := max(p.connectTimeout, lifeWindow)
	var check func()
	check = func() {
		if dctx.Err() != nil {
			return
		}
		now := time.Now()
		if left := limit.Sub(now); left > 0 && p.life.since(now.Add(-window)) {
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
