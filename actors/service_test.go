package actors

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v: %s", within, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitBreaker0 waits until endpoint 0's breaker is in state want.
func waitBreaker0(t *testing.T, svc *Service, within time.Duration, want BreakerState) {
	t.Helper()
	eventually(t, within, "endpoint 0's breaker "+want.String(), func() bool {
		st, ok := svc.Status(time.Second)
		return ok && st.Endpoints[0].Breaker == want
	})
}

// passTrialOn0 routes requests until one reaches endpoint 0 (the half-open
// breaker's trial) and reports it a success.
func passTrialOn0(t *testing.T, svc *Service) {
	t.Helper()
	for {
		rt := route(t, svc, &RouteRequest{})
		if rt.Decision.Prefill != 0 {
			svc.Finish(rt.Ticket, Result{OK: true})
			continue
		}
		svc.Report(Outcome{Ticket: rt.Ticket, Leg: LegSingle, Status: 200})
		svc.Finish(rt.Ticket, Result{OK: true})
		return
	}
}

// feedHub is a FeedStarter that hands the test each feed's sink, so the
// test can publish updates into the real inventory actors.
type feedHub struct {
	mu     sync.Mutex
	sinks  map[int]func(inventory.Update)    // rank 0's, by endpoint
	ranks  map[[2]int]func(inventory.Update) // by endpoint and rank
	starts map[int]int                       // feeds started per endpoint
	live   atomic.Int32
}

func newFeedHub() *feedHub {
	return &feedHub{sinks: map[int]func(inventory.Update){}, ranks: map[[2]int]func(inventory.Update){}, starts: map[int]int{}}
}

func (h *feedHub) start(ctx context.Context, spec FeedSpec, sink func(inventory.Update)) FeedHandle {
	id := spec.ID
	h.mu.Lock()
	if id.Rank == 0 {
		h.sinks[id.EpIdx] = sink
	}
	h.ranks[[2]int{id.EpIdx, id.Rank}] = sink
	h.starts[id.EpIdx]++
	h.mu.Unlock()
	h.live.Add(1)
	f := &hubFeed{done: make(chan struct{})}
	go func() { <-ctx.Done(); h.live.Add(-1); close(f.done) }()
	return f
}

type hubFeed struct{ done chan struct{} }

func (f *hubFeed) Stats() inventory.FeedStats { return inventory.FeedStats{Connected: true} }
func (f *hubFeed) Done() <-chan struct{}      { return f.done }

func (h *feedHub) publish(t *testing.T, ep int, b *inventory.Batch) {
	t.Helper()
	eventually(t, time.Second, "feed started", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.sinks[ep] != nil
	})
	h.mu.Lock()
	sink := h.sinks[ep]
	h.mu.Unlock()
	sink(inventory.Update{Kind: inventory.UpdateBatch, Batch: b})
}

// send hands u to endpoint ep's rank feed once it started.
func (h *feedHub) send(t *testing.T, ep, rank int, u inventory.Update) {
	t.Helper()
	k := [2]int{ep, rank}
	eventually(t, time.Second, "feed started", func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.ranks[k] != nil
	})
	h.mu.Lock()
	sink := h.ranks[k]
	h.mu.Unlock()
	sink(u)
}

func newTestSystem(t *testing.T) *System {
	t.Helper()
	sys := NewSystem(zerolog.Nop(), metrics.NewSet())
	t.Cleanup(sys.Shutdown)
	return sys
}

func startService(t *testing.T, sys *System, cfg ServiceConfig) *Service {
	t.Helper()
	svc, err := sys.Start(cfg, nil)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := svc.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return svc
}

// kvPD is a P/D rule with KV-exact on token-keyed mirrors fed by hub.
func kvPD(t *testing.T, hub *feedHub, prefill, decode int) (ServiceConfig, *inventory.TokenHasher) {
	t.Helper()
	th, err := inventory.NewTokenHasher(16)
	if err != nil {
		t.Fatal(err)
	}
	env := ladder.DefaultEnv()
	env.MinMatchTokens = 0
	env.ColdStartSeedN = 0
	cfg := *pdConfig(prefill, decode, env)
	cfg.KV.Keys, cfg.KV.StartFeed = th, hub.start
	cfg.DecisionTimeout = 200 * time.Millisecond
	return cfg, th
}

func tokens(n int, base uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

func route(t *testing.T, r Router, rr *RouteRequest) Route {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rt, err := r.Route(ctx, rr)
	if err != nil {
		t.Fatalf("Route: %v", err)
	}
	return rt
}

func TestService_TierOneFiveRoutesToTheEndpointHoldingThePrompt(t *testing.T) {
	sys := newTestSystem(t)
	hub := newFeedHub()
	cfg, th := kvPD(t, hub, 3, 1)
	svc := startService(t, sys, cfg)

	prompt := tokens(64, 1000)
	chain := th.AppendBlockKeys(nil, prompt, inventory.ExtraKeys{})
	ev := inventory.Event{
		Kind: inventory.EventBlockStored, BlockHashes: []uint64{11, 12, 13, 14},
		TokenIDs: prompt, BlockSize: 16,
	}
	hub.publish(t, 2, &inventory.Batch{Events: []inventory.Event{ev}})

	rr := func() *RouteRequest {
		r := &RouteRequest{Chain: chain}
		r.Req.KV.PromptBlocks = uint32(len(chain))
		return r
	}
	eventually(t, 2*time.Second, "tier 1.5 picks endpoint 2", func() bool {
		rt := route(t, svc, rr())
		defer svc.Finish(rt.Ticket, Result{OK: true})
		return rt.Decision.Tier == ladder.Tier15 && rt.Decision.Prefill == 2
	})
	rt := route(t, svc, rr())
	if rt.Decision.Decode != 3 {
		t.Fatalf("decode %d; want 3", rt.Decision.Decode)
	}
	svc.Report(Outcome{Ticket: rt.Ticket, Leg: LegPrefill, Status: 200})
	svc.Report(Outcome{Ticket: rt.Ticket, Leg: LegDecode, Status: 200})
	svc.Finish(rt.Ticket, Result{OK: true})
	eventually(t, time.Second, "all slots released", func() bool {
		st, ok := svc.Status(time.Second)
		if !ok {
			return false
		}
		for _, e := range st.Endpoints {
			if e.ActiveConns != 0 {
				return false
			}
		}
		return st.InFlight == 0
	})
}

func TestService_SessionPinsThePairAfterSuccess(t *testing.T) {
	sys := newTestSystem(t)
	cfg := *pdConfig(3, 2, ladder.DefaultEnv())
	cfg.Rule.Spec.KVExactMode = ladder.KVOff
	for i := range cfg.Rule.Endpoints {
		cfg.Rule.Endpoints[i].Feeds = nil
	}
	svc := startService(t, sys, cfg)
	rr := &RouteRequest{}
	rr.Req.SessionKey = "conv-1"
	first := route(t, svc, rr)
	svc.Finish(first.Ticket, Result{OK: true})
	eventually(t, time.Second, "session pinned", func() bool {
		rr := &RouteRequest{}
		rr.Req.SessionKey = "conv-1"
		rt := route(t, svc, rr)
		svc.Finish(rt.Ticket, Result{OK: true})
		return rt.Decision.Tier == ladder.Tier0 &&
			rt.Decision.Prefill == first.Decision.Prefill && rt.Decision.Decode == first.Decision.Decode
	})
}

func TestService_ProbeDownExcludesAtOnceAndRecovers(t *testing.T) {
	sys := newTestSystem(t)
	cfg := *poolConfig(2, ladder.SelRR)
	var down atomic.Bool
	down.Store(true)
	cfg.Probes = make([]ProbeFunc, len(cfg.Rule.Endpoints))
	cfg.Probes[0] = func(ctx context.Context) error {
		if down.Load() {
			return errors.New("connection refused")
		}
		return nil
	}
	cfg.Rule.Probe = rule.Probe{Period: 10 * time.Millisecond, AttemptTimeout: 50 * time.Millisecond, Retries: 2, MaxBackoff: 60 * time.Millisecond}
	svc := startService(t, sys, cfg)
	eventually(t, time.Second, "endpoint 0 marked down", func() bool {
		st, ok := svc.Status(time.Second)
		return ok && !st.Endpoints[0].Up
	})
	for i := 0; i < 6; i++ {
		rt := route(t, svc, &RouteRequest{})
		if rt.Decision.Prefill != 1 {
			t.Fatalf("request %d went to %d; want 1 while 0 is down", i, rt.Decision.Prefill)
		}
		svc.Finish(rt.Ticket, Result{OK: true})
	}
	down.Store(false)
	eventually(t, time.Second, "endpoint 0 back up", func() bool {
		st, ok := svc.Status(time.Second)
		return ok && st.Endpoints[0].Up
	})
}

func TestService_BreakerOpensOnConnectFailuresThenHalfOpens(t *testing.T) {
	sys := newTestSystem(t)
	cfg := *poolConfig(2, ladder.SelRR)
	cfg.Rule.Breaker = rule.Breaker{Enabled: true, Threshold: 3, OpenFor: 50 * time.Millisecond}
	svc := startService(t, sys, cfg)
	failed := 0
	for failed < 3 {
		rt := route(t, svc, &RouteRequest{})
		if rt.Decision.Prefill == 0 {
			svc.Report(Outcome{Ticket: rt.Ticket, Leg: LegSingle, Failure: FailConnect})
			failed++
		}
		svc.Finish(rt.Ticket, Result{})
	}
	waitBreaker0(t, svc, time.Second, BreakerOpen)
	waitBreaker0(t, svc, 2*time.Second, BreakerHalfOpen)
	// The trial succeeds: closed again.
	passTrialOn0(t, svc)
	waitBreaker0(t, svc, time.Second, BreakerClosed)
}

func TestService_ConcludeIsReportThenFinish(t *testing.T) {
	sys := newTestSystem(t)
	cfg := *poolConfig(2, ladder.SelRR)
	cfg.Rule.Breaker = rule.Breaker{Enabled: true, Threshold: 3, OpenFor: time.Minute}
	svc := startService(t, sys, cfg)
	for failed := 0; failed < 3; {
		rt := route(t, svc, &RouteRequest{})
		if rt.Decision.Prefill == 0 {
			svc.Conclude(Outcome{Ticket: rt.Ticket, Leg: LegSingle, Failure: FailConnect}, Result{})
			failed++
		} else {
			svc.Conclude(Outcome{Ticket: rt.Ticket, Leg: LegSingle, Status: 200}, Result{OK: true})
		}
	}
	waitBreaker0(t, svc, time.Second, BreakerOpen) // the outcomes were reported
	eventually(t, time.Second, "every ticket finished", func() bool {
		st, ok := svc.Status(time.Second)
		if !ok || st.InFlight != 0 {
			return false
		}
		for _, e := range st.Endpoints {
			if e.ActiveConns != 0 {
				return false
			}
		}
		return true
	})
}

func TestService_ParkHoldsThenResumesOrTimesOut(t *testing.T) {
	sys := newTestSystem(t)
	cfg := *pdConfig(1, 1, admissionEnv(1, 8, 0))
	cfg.Rule.Spec.KVExactMode = ladder.KVOff
	cfg.Rule.Endpoints[0].Feeds = nil
	cfg.Rule.Spec.Admission.MaxPark = 300 * time.Millisecond
	svc := startService(t, sys, cfg)

	first := route(t, svc, &RouteRequest{})
	if !first.Decision.Available() {
		t.Fatalf("first: %s", first.Decision.String())
	}
	type res struct {
		rt  Route
		err error
	}
	resumed := make(chan res, 1)
	go func() {
		rt, err := svc.Route(context.Background(), &RouteRequest{})
		resumed <- res{rt, err}
	}()
	eventually(t, time.Second, "second request parked", func() bool {
		st, ok := svc.Status(time.Second)
		return ok && st.Parked == 1
	})
	svc.Finish(first.Ticket, Result{OK: true})
	r := <-resumed
	if r.err != nil || r.rt.Decision.Tier != ladder.TierResume {
		t.Fatalf("second: %v %s; want resumed", r.err, r.rt.Decision.String())
	}
	// Hold the slot and let a third request time out in the queue.
	start := time.Now()
	_, err := svc.Route(context.Background(), &RouteRequest{})
	if !errors.Is(err, ErrParkTimeout) {
		t.Fatalf("third: %v; want ErrParkTimeout", err)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Fatalf("third timed out after %v; want about the 300ms park limit", waited)
	}
	// A client that leaves while parked leaves nothing behind.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := svc.Route(ctx, &RouteRequest{}); done <- err }()
	eventually(t, time.Second, "fourth parked", func() bool {
		st, ok := svc.Status(time.Second)
		return ok && st.Parked == 1
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("fourth: %v; want context.Canceled", err)
	}
	svc.Finish(r.rt.Ticket, Result{OK: true})
	eventually(t, time.Second, "queue and slots empty", func() bool {
		st, ok := svc.Status(time.Second)
		return ok && st.Parked == 0 && st.InFlight == 0 && st.Endpoints[0].ActiveConns == 0
	})
}

func TestService_CrashedActorsRestartAndServiceKeepsAnswering(t *testing.T) {
	sys := newTestSystem(t)
	hub := newFeedHub()
	cfg, th := kvPD(t, hub, 2, 2)
	cfg.Rule.Probe = rule.Probe{Period: 10 * time.Millisecond, AttemptTimeout: 10 * time.Millisecond, Retries: 2, MaxBackoff: 60 * time.Millisecond}
	for range cfg.Rule.Endpoints {
		cfg.Probes = append(cfg.Probes, func(context.Context) error { return nil })
	}
	svc := startService(t, sys, cfg)
	chain := th.AppendBlockKeys(nil, tokens(32, 7), inventory.ExtraKeys{})
	kinds := []ActorKind{KindEndpoint, KindBreaker, KindInventory, KindSession, KindRouter}
	for round := 0; round < 3; round++ {
		for _, k := range kinds {
			for idx := 0; idx < 4; idx++ {
				svc.Crash(k, idx)
			}
			rr := &RouteRequest{Chain: chain}
			rr.Req.SessionKey = fmt.Sprintf("s-%d", round)
			rr.Req.KV.PromptBlocks = uint32(len(chain))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			rt, err := svc.Route(ctx, rr)
			cancel()
			if err != nil && !errors.Is(err, ErrRouterTimeout) {
				t.Fatalf("round %d after crashing %d: %v", round, k, err)
			}
			if err == nil {
				if !rt.Decision.Available() {
					t.Fatalf("round %d after crashing %d: %s", round, k, rt.Decision.String())
				}
				svc.Finish(rt.Ticket, Result{OK: true})
			}
		}
	}
	// Every actor is back: a decision still fans out and answers.
	eventually(t, 2*time.Second, "service answers after the crashes", func() bool {
		rt := route(t, svc, &RouteRequest{Chain: chain})
		svc.Finish(rt.Ticket, Result{OK: true})
		return rt.Decision.Available()
	})
	if live := hub.live.Load(); live != 2 {
		t.Fatalf("%d feeds running; want 2 (one per prefill endpoint, restarted ones replaced)", live)
	}
	if got := svc.metrics.restarts.Get(); got < 30 {
		t.Fatalf("%d supervised restarts; want at least 30 (every crash restarts its actor)", got)
	}
}

func TestService_StopAnswersWaitersAndRefusesNewWork(t *testing.T) {
	sys := newTestSystem(t)
	cfg := *pdConfig(1, 1, admissionEnv(1, 8, 0))
	cfg.Rule.Spec.KVExactMode = ladder.KVOff
	cfg.Rule.Endpoints[0].Feeds = nil
	svc, err := sys.Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := route(t, svc, &RouteRequest{})
	_ = first
	done := make(chan error, 1)
	go func() { _, err := svc.Route(context.Background(), &RouteRequest{}); done <- err }()
	eventually(t, time.Second, "second parked", func() bool {
		st, ok := svc.Status(time.Second)
		return ok && st.Parked == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := svc.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := <-done; !errors.Is(err, ErrStopped) {
		t.Fatalf("parked request got %v; want ErrStopped", err)
	}
	if _, err := svc.Route(context.Background(), &RouteRequest{}); !errors.Is(err, ErrStopped) {
		t.Fatalf("Route after Stop: %v; want ErrStopped", err)
	}
}

func zerologNop() zerolog.Logger { return zerolog.Nop() }

func benchEnv() ladder.Env {
	env := ladder.DefaultEnv()
	env.ColdStartSeedN = 0
	return env
}

func TestService_HandoverKeepsWarmInventoryAndSessions(t *testing.T) {
	sys := newTestSystem(t)
	hub := newFeedHub()
	cfg, th := kvPD(t, hub, 3, 1)
	old, err := sys.Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	prompt := tokens(64, 500)
	chain := th.AppendBlockKeys(nil, prompt, inventory.ExtraKeys{})
	hub.publish(t, 1, &inventory.Batch{Events: []inventory.Event{{
		Kind: inventory.EventBlockStored, BlockHashes: []uint64{1, 2, 3, 4}, TokenIDs: prompt, BlockSize: 16,
	}}})
	kv := func() *RouteRequest {
		r := &RouteRequest{Chain: chain}
		r.Req.KV.PromptBlocks = uint32(len(chain))
		return r
	}
	eventually(t, 2*time.Second, "old service routes to endpoint 1", func() bool {
		rt := route(t, old, kv())
		old.Finish(rt.Ticket, Result{OK: true})
		return rt.Decision.Prefill == 1
	})
	sess := &RouteRequest{}
	sess.Req.SessionKey = "chat-9"
	pinned := route(t, old, sess)
	old.Finish(pinned.Ticket, Result{OK: true})
	eventually(t, time.Second, "pin stored", func() bool {
		st, _ := old.Status(time.Second)
		return st.Sessions == 1
	})

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	warm, err := old.Handover(ctx)
	if err != nil {
		t.Fatalf("Handover: %v", err)
	}
	// The replacement changes a tuning knob only.
	cfg.Rule.Spec.CacheThresholdPct = 40
	nu := startServiceWarm(t, sys, cfg, warm)
	rt := route(t, nu, kv())
	if rt.Decision.Tier != ladder.Tier15 || rt.Decision.Prefill != 1 {
		t.Fatalf("first decision after replace: %s; want tier 1.5 on 1 (warm inventory)", rt.Decision.String())
	}
	nu.Finish(rt.Ticket, Result{OK: true})
	sess = &RouteRequest{}
	sess.Req.SessionKey = "chat-9"
	again := route(t, nu, sess)
	if again.Decision.Tier != ladder.Tier0 || again.Decision.Prefill != pinned.Decision.Prefill {
		t.Fatalf("session after replace: %s; want tier 0 on %d", again.Decision.String(), pinned.Decision.Prefill)
	}
	nu.Finish(again.Ticket, Result{OK: true})
	// A late Finish for the old service's ticket is stale for the new one.
	nu.Finish(pinned.Ticket, Result{OK: true})
}

func startServiceWarm(t *testing.T, sys *System, cfg ServiceConfig, warm *Warm) *Service {
	t.Helper()
	svc, err := sys.Start(cfg, warm)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
	})
	return svc
}

func TestService_ControllerFoldsInAndGlidesToNeutralWhenStale(t *testing.T) {
	sys := newTestSystem(t)
	cfg := *poolConfig(2, ladder.SelRR)
	cfg.Ctrl = CtrlConfig{StaleAfter: 50 * time.Millisecond, DecayWindow: 100 * time.Millisecond}
	svc := startService(t, sys, cfg)
	if err := svc.SetController(0, CtrlUpdate{State: ladder.CtrlDisabled, Weight: 100, Epoch: 2}, time.Second); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		rt := route(t, svc, &RouteRequest{})
		if rt.Decision.Prefill != 1 {
			t.Fatalf("request went to %d while 0 is DISABLED", rt.Decision.Prefill)
		}
		svc.Finish(rt.Ticket, Result{OK: true})
	}
	if err := svc.SetController(0, CtrlUpdate{State: ladder.CtrlActive, Weight: 20, Epoch: 1}, time.Second); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("older epoch: %v; want ErrStaleEpoch", err)
	}
	if err := svc.SetController(7, CtrlUpdate{Epoch: 3}, time.Second); !errors.Is(err, ErrNoEndpoint) {
		t.Fatalf("bad endpoint: %v; want ErrNoEndpoint", err)
	}
	if err := svc.SetController(0, CtrlUpdate{State: ladder.CtrlActive, Weight: 20, Epoch: 3}, time.Second); err != nil {
		t.Fatal(err)
	}
	st, _ := svc.Status(time.Second)
	if c := st.Endpoints[0].Controller; c.Effective != 20 || c.Stale || c.State != ladder.CtrlActive {
		t.Fatalf("fresh controller view %+v; want ACTIVE weight 20", c)
	}
	eventually(t, 3*time.Second, "weight glides back to neutral", func() bool {
		st, _ := svc.Status(time.Second)
		c := st.Endpoints[0].Controller
		return c.Stale && c.Effective == 100 && c.State == ladder.CtrlActive
	})
}

func TestService_CrashedBreakerKeepsItsStateAndStillHeals(t *testing.T) {
	sys := newTestSystem(t)
	cfg := *poolConfig(2, ladder.SelRR)
	cfg.Rule.Breaker = rule.Breaker{Enabled: true, Threshold: 3, OpenFor: 300 * time.Millisecond}
	svc := startService(t, sys, cfg)
	for failed := 0; failed < 3; {
		rt := route(t, svc, &RouteRequest{})
		if rt.Decision.Prefill == 0 {
			svc.Report(Outcome{Ticket: rt.Ticket, Leg: LegSingle, Failure: FailConnect})
			failed++
		}
		svc.Finish(rt.Ticket, Result{})
	}
	waitBreaker0(t, svc, time.Second, BreakerOpen)
	// The breaker actor dies while open. Its successor must neither forget
	// the open window (sending traffic to a dead endpoint at once) nor
	// leave the router excluding the endpoint forever.
	svc.Crash(KindBreaker, 0)
	for i := 0; i < 4; i++ {
		rt := route(t, svc, &RouteRequest{})
		if rt.Decision.Prefill != 1 {
			t.Fatalf("request %d after the crash went to %d; want 1 while 0's breaker is open", i, rt.Decision.Prefill)
		}
		svc.Finish(rt.Ticket, Result{OK: true})
	}
	waitBreaker0(t, svc, 2*time.Second, BreakerHalfOpen)
	passTrialOn0(t, svc)
	waitBreaker0(t, svc, time.Second, BreakerClosed)
	if got := svc.metrics.restarts.Get(); got != 1 {
		t.Fatalf("%d supervised restarts; want 1", got)
	}
}

func TestService_RestartedInventoryKeepsItsMirrorUnlessTheSequenceSaysOtherwise(t *testing.T) {
	tests := []struct {
		name     string
		give     uint64 // the first sequence number the successor's feed delivers
		wantKept bool
	}{
		{"next batch", 11, true},
		{"gap within the window", 11 + 64, true},
		{"gap beyond the window", 11 + 65, false},
		{"publisher restarted", 0, false},
		{"sequence repeated", 10, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sys := newTestSystem(t)
			hub := newFeedHub()
			cfg, th := kvPD(t, hub, 2, 1)
			svc := startService(t, sys, cfg)
			stored := func(seq uint64, prompt []uint32, keys ...uint64) {
				t.Helper()
				hub.mu.Lock()
				sink := hub.sinks[1]
				hub.mu.Unlock()
				sink(inventory.Update{Kind: inventory.UpdateBatch, Seq: seq, Batch: &inventory.Batch{Events: []inventory.Event{{
					Kind: inventory.EventBlockStored, BlockHashes: keys, TokenIDs: prompt, BlockSize: 16,
				}}}})
			}
			tier15 := func(prompt []uint32) (bool, int) {
				chain := th.AppendBlockKeys(nil, prompt, inventory.ExtraKeys{})
				rr := &RouteRequest{Chain: chain}
				rr.Req.KV.PromptBlocks = uint32(len(chain))
				rt := route(t, svc, rr)
				svc.Finish(rt.Ticket, Result{OK: true})
				return rt.Decision.Tier == ladder.Tier15, rt.Decision.Prefill
			}
			a, b := tokens(64, 1000), tokens(64, 5000)
			hub.publish(t, 1, &inventory.Batch{}) // waits for the feed
			stored(10, a, 1, 2, 3, 4)
			eventually(t, 2*time.Second, "prompt a on endpoint 1 by tier 1.5", func() bool {
				ok, ep := tier15(a)
				return ok && ep == 1
			})

			svc.Crash(KindInventory, 1)
			eventually(t, 2*time.Second, "the restarted inventory actor's feed", func() bool {
				hub.mu.Lock()
				defer hub.mu.Unlock()
				return hub.starts[1] == 2
			})
			stored(tt.give, b, 5, 6, 7, 8)
			eventually(t, 2*time.Second, "prompt b on endpoint 1 by tier 1.5", func() bool {
				ok, ep := tier15(b)
				return ok && ep == 1
			})
			ok, ep := tier15(a)
			if kept := ok && ep == 1; kept != tt.wantKept {
				t.Fatalf("after the restart and sequence %d, prompt a kept on endpoint 1: %v; want %v", tt.give, kept, tt.wantKept)
			}
		})
	}
}

func TestService_ControllerSurvivesRouterRestartAndReplace(t *testing.T) {
	sys := newTestSystem(t)
	cfg := *poolConfig(2, ladder.SelRR)
	old, err := sys.Start(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.SetController(0, CtrlUpdate{State: ladder.CtrlDisabled, Weight: 100, Epoch: 5}, time.Second); err != nil {
		t.Fatal(err)
	}
	onlyOne := func(svc *Service, what string) {
		t.Helper()
		for i := 0; i < 4; i++ {
			rt := route(t, svc, &RouteRequest{})
			svc.Finish(rt.Ticket, Result{OK: true})
			if rt.Decision.Prefill != 1 {
				t.Fatalf("%s: request went to %d; want 1 (0 is DISABLED)", what, rt.Decision.Prefill)
			}
		}
	}
	old.Crash(KindRouter, 0)
	eventually(t, 2*time.Second, "router restarted", func() bool { return old.routerRuns.Load() == 2 })
	onlyOne(old, "after a router restart")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	warm, err := old.Handover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nu := startServiceWarm(t, sys, cfg, warm)
	onlyOne(nu, "after a replace")
	if err := nu.SetController(0, CtrlUpdate{State: ladder.CtrlActive, Weight: 100, Epoch: 4}, time.Second); !errors.Is(err, ErrStaleEpoch) {
		t.Fatalf("epoch 4 after a replace: %v; want ErrStaleEpoch (5 was applied)", err)
	}
}

func TestService_RouterRestartReroutesDecisionsInFlightInsteadOfFailingThem(t *testing.T) {
	sys := newTestSystem(t)
	hub := newFeedHub()
	cfg, th := kvPD(t, hub, 2, 2)
	svc := startService(t, sys, cfg)
	chain := th.AppendBlockKeys(nil, tokens(64, 7), inventory.ExtraKeys{})
	var stopped, routed atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				// Every decision fans out (session lookup and two scores), so
				// decisions are in flight when the router dies.
				rr := &RouteRequest{Chain: chain}
				rr.Req.SessionKey = fmt.Sprintf("s-%d-%d", g, i%5)
				rr.Req.KV.PromptBlocks = uint32(len(chain))
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				rt, err := svc.Route(ctx, rr)
				cancel()
				switch {
				case errors.Is(err, ErrStopped):
					stopped.Add(1)
				case err != nil:
					t.Errorf("Route: %v", err)
					return
				default:
					routed.Add(1)
					svc.Finish(rt.Ticket, Result{OK: true})
				}
			}
		}()
	}
	for i := 0; i < 15; i++ {
		before := routed.Load()
		eventually(t, 2*time.Second, "decisions flowing", func() bool { return routed.Load() > before+20 })
		svc.Crash(KindRouter, 0)
	}
	close(done)
	wg.Wait()
	if n := stopped.Load(); n != 0 {
		t.Fatalf("%d of %d decisions failed with ErrStopped across 15 router restarts; want 0 (a restart is not a stop)", n, n+routed.Load())
	}
	if got := svc.metrics.restarts.Get(); got != 15 {
		t.Fatalf("%d supervised restarts; want 15", got)
	}
}

func TestService_ActorPastItsRestartBudgetIsRespawnedNotLostForGood(t *testing.T) {
	sys := newTestSystem(t)
	cfg := *poolConfig(2, ladder.SelRR)
	svc := startService(t, sys, cfg)
	// A crash loop beyond the budget: the supervisor gives up on the
	// router, and for a while the rule cannot route.
	for i := 0; i < DefaultRestartBudget+5; i++ {
		svc.Crash(KindRouter, 0)
	}
	eventually(t, 2*time.Second, "the router given up on", func() bool { return svc.metrics.lost.Get() >= 1 })
	// It comes back by itself after the respawn delay: the rule routes
	// again without anyone re-applying it.
	eventually(t, DefaultRespawnDelay+3*time.Second, "the router respawned and routing", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		rt, err := svc.Route(ctx, &RouteRequest{})
		if err != nil {
			return false
		}
		svc.Finish(rt.Ticket, Result{OK: true})
		return rt.Decision.Available()
	})
}

func TestService_ControllerEpochsOnlyMoveForwardAcrossARelease(t *testing.T) {
	sys := newTestSystem(t)
	svc := startService(t, sys, *poolConfig(2, ladder.SelRR))
	steps := []struct {
		give CtrlUpdate
		want error
	}{
		{CtrlUpdate{State: ladder.CtrlActive, Weight: 50, Epoch: 10}, nil},
		{CtrlUpdate{State: ladder.CtrlActive, Weight: 50, Epoch: 5}, ErrStaleEpoch},
		{CtrlUpdate{State: ladder.CtrlNone, Epoch: 20}, nil},
		{CtrlUpdate{State: ladder.CtrlDisabled, Weight: 100, Epoch: 15}, ErrStaleEpoch},
		{CtrlUpdate{State: ladder.CtrlNone, Epoch: 20}, nil}, // an equal epoch re-applies
	}
	for i, s := range steps {
		if err := svc.SetController(0, s.give, time.Second); !errors.Is(err, s.want) {
			t.Fatalf("step %d %+v: got %v; want %v", i, s.give, err, s.want)
		}
	}
	st, _ := svc.Status(time.Second)
	if c := st.Endpoints[0].Controller; c.State != ladder.CtrlNone || c.Epoch != 20 || c.Effective != 100 {
		t.Fatalf("after the stale DISABLED: %+v; want NONE, epoch 20, neutral", c)
	}
	rt := route(t, svc, &RouteRequest{Avoid: 1 << 1})
	if rt.Decision.Prefill != 0 {
		t.Fatalf("endpoint 0 not routable after its release: %s", rt.Decision.String())
	}
	svc.Finish(rt.Ticket, Result{OK: true})
}

// A rule key carries the rule's host, which REST takes as any string: a
// quote or a line break in it must be escaped in the service label, not
// panic in the metrics registry (a rule with host "x\r\nX-Injected: 1" was
// accepted and never ran: make attack).
func TestService_AKeyWithQuotesAndLineBreaksLabelsItsMetrics(t *testing.T) {
	set := metrics.NewSet()
	sys := NewSystem(zerolog.Nop(), set)
	t.Cleanup(sys.Shutdown)
	cfg := *poolConfig(1, ladder.SelRR)
	cfg.Rule.Key = "tcp:127.0.0.1:2020@x\r\nX-Injected: \"1\"\\"
	startService(t, sys, cfg)
	var b strings.Builder
	set.WritePrometheus(&b)
	want := `llb_actor_restarts_total{service="tcp:127.0.0.1:2020@x` + "\r" + `\nX-Injected: \"1\"\\"} 0`
	if !strings.Contains(b.String(), want) {
		t.Fatalf("metrics lack %q:\n%s", want, b.String())
	}
}

// Children are spawned so that nothing the router sends to is still being
// spawned when a child's first message makes it send: protoactor registers
// a PID before its mailbox can take messages, and a send in between
// panics. Endpoints whose first probe fails at once made the router evict
// their sessions into shards not yet spawned (make attack: a router
// restart, then a 10 s stop, about once in 200 rule creations).
func TestService_StartsWithoutARouterCrashWhenEveryProbeFailsAtOnce(t *testing.T) {
	set := metrics.NewSet()
	sys := NewSystem(zerolog.Nop(), set)
	t.Cleanup(sys.Shutdown)
	cfg := *poolConfig(ladder.MaxEndpoints, ladder.SelRR)
	cfg.Probes = make([]ProbeFunc, len(cfg.Rule.Endpoints))
	for i := range cfg.Probes {
		cfg.Probes[i] = func(context.Context) error { return errors.New("connection refused") }
	}
	cfg.Rule.Probe = rule.Probe{Period: time.Hour, AttemptTimeout: time.Second, Retries: 1, MaxBackoff: 6 * time.Hour}
	for i := range 400 {
		cfg.Rule.Key = fmt.Sprintf("svc-%d", i)
		svc, err := sys.Start(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		eventually(t, 5*time.Second, "every endpoint probed down", func() bool {
			st, ok := svc.Status(time.Second)
			if !ok {
				return false
			}
			for _, e := range st.Endpoints {
				if e.Up {
					return false
				}
			}
			return true
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = svc.Stop(ctx)
		cancel()
		if err != nil {
			t.Fatalf("start %d: Stop: %v", i, err)
		}
		if svc.metrics.restarts.Get() != 0 {
			t.Fatalf("start %d: %d actor restarts; want none", i, svc.metrics.restarts.Get())
		}
	}
}

// TestService_DPRanksScoreTheUnionAndASilentRankDropsOut: an endpoint's
// inventory is the union of its DP ranks' mirrors (SGLang's keys are
// absolute, so a rank can hold a prefix's later pages only); a rank whose
// feed stays disconnected stops counting.
func TestService_DPRanksScoreTheUnionAndASilentRankDropsOut(t *testing.T) {
	sys := newTestSystem(t)
	hub := newFeedHub()
	cfg, _ := kvPD(t, hub, 2, 1)
	h, err := inventory.NewSGLangHasher(16)
	if err != nil {
		t.Fatal(err)
	}
	cfg.KV.Keys = h
	cfg.KV.SilentAfter = 150 * time.Millisecond
	r := *cfg.Rule
	r.Endpoints = append([]rule.CompiledEndpoint(nil), r.Endpoints...)
	r.Endpoints[0].Feeds = []rule.Feed{{Rank: 0, Endpoint: "tcp://127.0.0.1:5557"}, {Rank: 1, Endpoint: "tcp://127.0.0.1:5558"}, {Rank: 2, Endpoint: "tcp://127.0.0.1:5559"}}
	cfg.Rule = &r
	svc := startService(t, sys, cfg)

	prompt := tokens(64, 7000)
	chain := h.AppendBlockKeys(nil, prompt, inventory.ExtraKeys{})
	stored := func(from, to int) *inventory.Batch {
		ev := inventory.Event{Kind: inventory.EventBlockStored, BlockHashes: chain[from:to], TokenIDs: prompt[from*16 : to*16], BlockSize: 16}
		if from > 0 {
			ev.Parent, ev.HasParent = chain[from-1], true
		}
		return &inventory.Batch{Events: []inventory.Event{ev}}
	}
	hub.send(t, 0, 0, inventory.Update{Kind: inventory.UpdateBatch, Batch: stored(0, 2)}) // rank 0: pages 0-1
	hub.send(t, 0, 1, inventory.Update{Kind: inventory.UpdateBatch, Batch: stored(2, 4)}) // rank 1: pages 2-3
	hub.send(t, 1, 0, inventory.Update{Kind: inventory.UpdateBatch, Batch: stored(0, 3)}) // endpoint 1: pages 0-2

	pick := func() int {
		rr := &RouteRequest{Chain: chain}
		rr.Req.KV.PromptBlocks = uint32(len(chain))
		rt := route(t, svc, rr)
		defer svc.Finish(rt.Ticket, Result{OK: true})
		if rt.Decision.Tier != ladder.Tier15 {
			return -1
		}
		return rt.Decision.Prefill
	}
	eventually(t, 2*time.Second, "the union of endpoint 0's ranks (4 pages) beats endpoint 1 (3)", func() bool { return pick() == 0 })
	hub.send(t, 0, 1, inventory.Update{Kind: inventory.UpdateDisconnected})
	eventually(t, 2*time.Second, "rank 1 silent: endpoint 0 holds 2 pages, endpoint 1 wins", func() bool { return pick() == 1 })
	hub.send(t, 0, 1, inventory.Update{Kind: inventory.UpdateConnected})
	if got := pick(); got != 1 {
		t.Fatalf("a reconnected rank brought its dropped blocks back: picked %d; want 1", got)
	}
}

// An endpoint down because its probe timed out comes back as soon as it
// answers once a request finds no endpoint: the request asks it to probe
// again, rather than waiting for its next period (an hour here). One that
// refused keeps its schedule.
func TestService_ARefusedRequestReprobesAnEndpointDownByTimeouts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		failure error
		wantUp  bool
	}{
		{"timed out", probeTimeout{}, true},
		{"refused", errors.New("refused"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := newTestSystem(t)
			cfg := *poolConfig(1, ladder.SelRR)
			cfg.Rule.Probe = rule.Probe{Period: time.Hour, AttemptTimeout: 50 * time.Millisecond, Retries: 1, MaxBackoff: 6 * time.Hour}
			var fail atomic.Bool
			fail.Store(true)
			cfg.Probes = []ProbeFunc{func(context.Context) error {
				if fail.Load() {
					return tc.failure
				}
				return nil
			}}
			svc := startService(t, sys, cfg)
			eventually(t, 5*time.Second, "the endpoint probed down", func() bool {
				st, ok := svc.Status(time.Second)
				return ok && !st.Endpoints[0].Up
			})
			fail.Store(false) // the engine answers again
			up := false
			for end := time.Now().Add(2 * time.Second); time.Now().Before(end) && !up; time.Sleep(60 * time.Millisecond) {
				if rt := route(t, svc, &RouteRequest{}); rt.Decision.Available() {
					svc.Finish(rt.Ticket, Result{OK: true})
					up = true
				}
			}
			if up != tc.wantUp {
				t.Fatalf("routable again within 2 s of answering: %v; want %v", up, tc.wantUp)
			}
		})
	}
}
