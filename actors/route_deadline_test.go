package actors

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/llbproject/llb/ladder"
)

// A router with a long queue ahead of a request is slow, not stuck: the
// request waits for its decision past RouteTimeout as long as the router
// keeps handling messages (issue 31: under saturation the fixed 2 s
// deadline turned a slow router into 503 service_unavailable).
func TestService_SlowRouterIsWaitedForWhileItMoves(t *testing.T) {
	sys := newTestSystem(t)
	cfg := *poolConfig(2, ladder.SelRR)
	cfg.RouteTimeout = 50 * time.Millisecond
	svc := startService(t, sys, cfg)
	route(t, svc, &RouteRequest{}) // started
	// Twenty messages ahead of the request, each holding the router 10 ms
	// (status requests answered 10 ms late): the router needs four
	// RouteTimeouts to reach the request, and moves five times in each.
	const queued = 20
	slow := make(chan ServiceStatus)
	for range queued {
		svc.root.Send(svc.router, statusReq{reply: slow})
	}
	go func() {
		for range queued {
			time.Sleep(10 * time.Millisecond)
			<-slow
		}
	}()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rt, err := svc.Route(ctx, &RouteRequest{})
	if err != nil {
		t.Fatalf("Route behind %d queued messages, RouteTimeout %v: %v after %v; want a decision", queued, cfg.RouteTimeout, err, time.Since(start))
	}
	if !rt.Decision.Available() {
		t.Fatalf("decision %s; want an endpoint", rt.Decision.String())
	}
	rt.Ticket.Finish(Result{OK: true})
	t.Logf("%d messages queued ahead: the decision came after %v", queued, time.Since(start).Round(time.Millisecond))
}

// A router that handles nothing at all for routeStalls RouteTimeouts is stuck:
// the request gets ErrRouterTimeout.
func TestService_StuckRouterTimesOut(t *testing.T) {
	sys := newTestSystem(t)
	cfg := *poolConfig(2, ladder.SelRR)
	cfg.RouteTimeout = 50 * time.Millisecond
	svc := startService(t, sys, cfg)
	route(t, svc, &RouteRequest{})
	stuck := make(chan ServiceStatus) // nobody reads: the router blocks on it
	svc.root.Send(svc.router, statusReq{reply: stuck})
	defer func() { <-stuck }() // unblock it for Stop
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := svc.Route(ctx, &RouteRequest{})
	if !errors.Is(err, ErrRouterTimeout) {
		t.Fatalf("Route to a stuck router: %v; want ErrRouterTimeout", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("waited %v for a stuck router; want about routeStalls RouteTimeouts", waited)
	}
}

// hold suspends the router's mailbox, as a restart does and as a CPU
// that never comes looks from outside: messages queue, none is handled,
// the router is inside none of them. The returned func resumes it.
func hold(t *testing.T, svc *Service) (resume func()) {
	t.Helper()
	p, ok := svc.sys.as.ProcessRegistry.Get(svc.router)
	if !ok {
		t.Fatal("no router process")
	}
	p.SendSystemMessage(svc.router, &actor.SuspendMailbox{})
	return func() { p.SendSystemMessage(svc.router, &actor.ResumeMailbox{}) }
}

// A router that does not run at all for several RouteTimeouts — its
// goroutine waiting for a CPU in a saturated process, which Go's scheduler
// can make seconds (issue 31: go_sched_latencies_seconds p99 0.27 s at
// 4 000 streams, and 503 service_unavailable while HAProxy served) — is
// not stuck: the request waits until it runs.
func TestService_UnscheduledRouterIsWaitedFor(t *testing.T) {
	sys := newTestSystem(t)
	cfg := *poolConfig(2, ladder.SelRR)
	cfg.RouteTimeout = 50 * time.Millisecond
	svc := startService(t, sys, cfg)
	route(t, svc, &RouteRequest{}) // started
	resume := hold(t, svc)
	time.AfterFunc(5*cfg.RouteTimeout, resume)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	rt, err := svc.Route(ctx, &RouteRequest{})
	if err != nil {
		t.Fatalf("Route while the router did not run for %v (RouteTimeout %v): %v after %v; want a decision",
			5*cfg.RouteTimeout, cfg.RouteTimeout, err, time.Since(start))
	}
	rt.Ticket.Finish(Result{OK: true})
}

// A router that never runs again does not hold a request for ever: after
// routeStalls RouteTimeouts it gets ErrRouterTimeout.
func TestService_RouterThatNeverRunsTimesOut(t *testing.T) {
	sys := newTestSystem(t)
	cfg := *poolConfig(2, ladder.SelRR)
	cfg.RouteTimeout = 20 * time.Millisecond
	svc := startService(t, sys, cfg)
	route(t, svc, &RouteRequest{})
	resume := hold(t, svc)
	defer resume() // for Stop
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err := svc.Route(ctx, &RouteRequest{})
	if !errors.Is(err, ErrRouterTimeout) {
		t.Fatalf("Route to a router that never runs: %v after %v; want ErrRouterTimeout", err, time.Since(start))
	}
	if waited := time.Since(start); waited < routeStalls*cfg.RouteTimeout {
		t.Fatalf("gave up after %v; want at least %v", waited, routeStalls*cfg.RouteTimeout)
	}
}
