package actors

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/asynkron/protoactor-go/actor"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

// System is the process's actor runtime: one protoactor ActorSystem that
// hosts every service.
type System struct {
	as      *actor.ActorSystem
	log     zerolog.Logger
	set     *metrics.Set
	disp    *workerDispatcher
	nextSvc atomic.Uint64
	// nextID numbers requests across every service of the process, so a
	// ticket issued by a replaced service can never be mistaken for one of
	// its successor's (late Report/Finish calls are simply stale).
	nextID atomic.Uint64
}

// NewSystem starts the actor runtime. set receives the runtime's metrics;
// nil disables them.
func NewSystem(log zerolog.Logger, set *metrics.Set) *System {
	quiet := slog.New(slog.NewTextHandler(discard{}, &slog.HandlerOptions{Level: slog.LevelError + 1}))
	as := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return quiet }))
	return &System{as: as, log: log, set: set, disp: newWorkerDispatcher(0, 300)}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// Shutdown stops the actor runtime. Stop services first.
func (s *System) Shutdown() {
	s.as.Shutdown()
	s.disp.close()
}

// props builds the Props of one of the runtime's actors.
func (s *System) props(p actor.Producer, opts ...actor.PropsOption) *actor.Props {
	return actor.PropsFromProducer(p, append(opts, actor.WithDispatcher(s.disp))...)
}

// Service is one running rule: a supervisor actor with a router actor, and
// per endpoint an endpoint actor, a breaker actor and (for endpoints with
// KV feeds) an inventory actor, plus the session shard actors. The gateway
// calls Route and the methods of the tickets it hands out from request
// goroutines; each call is a message to the router actor.
type Service struct {
	cfg ServiceConfig
	// lad is the rule's validated ladder router; every router actor
	// incarnation decides with a Fresh copy of it.
	lad     *ladder.Router
	sys     *System
	root    *actor.RootContext
	log     zerolog.Logger
	metrics *svcMetrics

	supervisor  *actor.PID
	router      *actor.PID
	endpoints   []*actor.PID
	breakers    []*actor.PID
	inventories []*actor.PID // nil for endpoints without feeds
	shards      []*actor.PID

	sessions   *ladder.SessionTable
	sessionLen []atomic.Int64
	// breakerCores[ep] is endpoint ep's breaker state; owned by its
	// breaker actor, kept here across its restarts.
	breakerCores []breakerCore
	// mirrors[ep] holds endpoint ep's per-rank mirrors (nil without feeds);
	// owned by its inventory actor, kept here across its restarts.
	mirrors [][]*inventory.Mirror
	// ctrl holds the controller's instructions; owned by the router actor
	// (one incarnation at a time), kept here across its restarts.
	ctrl []ctrlState
	// feedMarks[ep][rank] is the last sequence number applied to that
	// mirror; owned by the inventory actor, kept across its restarts so a
	// successor's feed continues the sequence.
	feedMarks [][]feedMark

	// served is which endpoints serve which model names
	// (SetServedModels); nil until the first list is read. The router
	// reads it per decision.
	served atomic.Pointer[ladder.ServedModels]

	gen atomic.Uint64
	// peersDirty coalesces PeersChanged notifications (cluster mode).
	peersDirty atomic.Bool
	// routerRuns counts router actor incarnations: every one after the
	// first is a restart, which resyncs the children.
	routerRuns atomic.Uint64
	stopped    atomic.Bool

	// routes holds Route's messages, each with its reply channel, given
	// back once the router's only answer was received: the message was
	// an allocation of 384 bytes per request. One that parked, was
	// cancelled or timed out is left to the collector (another actor may
	// still hold it).
	routes sync.Pool // of *routeMsg
	// concludes holds Conclude's messages (*concludeMsg), given back by
	// the router once handled: the Outcome boxed in a message was an
	// allocation per request.
	concludes sync.Pool
	// handled counts the messages the router actor took from its mailbox:
	// a Route still waiting at its RouteTimeout waits on while it moves.
	handled atomic.Uint64
	timers  sync.Pool // of *time.Timer, stopped (Route's deadline)
	sweep   *time.Ticker
	done    chan struct{}
}

// Start validates cfg and starts its service. cfg.Rule.Spec.StartedAt is set to
// now when zero (the KV warmup guard counts from it). warm, when not nil, is
// what a replaced service with the same key handed over (see Handover):
// mirrors of endpoints that keep their index, address, feed and hasher are
// reused warm, and Tier-0 pins between endpoints that stay are kept; the
// rest is released.
func (s *System) Start(cfg ServiceConfig, warm *Warm) (*Service, error) {
	defer warm.release()
	if cfg.Rule == nil {
		return nil, errors.New("actors: service without a compiled rule")
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("actors: service %q: %w", cfg.Rule.Key, err)
	}
	r := *cfg.Rule // the service's own copy: the caller's stays untouched
	cfg.Rule = &r
	if r.Spec.StartedAt.IsZero() {
		r.Spec.StartedAt = time.Now()
	}
	lad, err := ladder.NewRouter(r.Spec, cfg.specs(), cfg.Env, cfg.Router)
	if err != nil {
		return nil, fmt.Errorf("actors: service %q: %w", r.Key, err)
	}
	n := len(cfg.Rule.Endpoints)
	svc := &Service{
		cfg:          cfg,
		lad:          lad,
		sys:          s,
		root:         s.as.Root,
		log:          s.log.With().Str(logfield.Service, cfg.Rule.Key).Logger(),
		endpoints:    make([]*actor.PID, n),
		breakers:     make([]*actor.PID, n),
		inventories:  make([]*actor.PID, n),
		sessions:     warm.takeSessions(&cfg),
		ctrl:         warm.takeCtrl(&cfg),
		breakerCores: make([]breakerCore, n),
		done:         make(chan struct{}),
	}
	for i := range svc.breakerCores {
		svc.breakerCores[i].cfg = cfg.Rule.Breaker
	}
	svc.metrics = newSvcMetrics(s.set, cfg.Rule.Key, svc)
	svc.sessionLen = make([]atomic.Int64, svc.sessions.NumShards())
	svc.routes.New = func() any { return &routeMsg{reply: make(chan routeReply, 2)} }

	// Children get predictable names under the supervisor, so every PID is
	// known before any actor runs (no actor reads a PID that is still being
	// written).
	name := fmt.Sprintf("svc-%d", s.nextSvc.Add(1))
	pid := func(child string) *actor.PID { return actor.NewPID(s.as.Address(), name+"/"+child) }
	svc.supervisor = actor.NewPID(s.as.Address(), name)
	svc.router = pid("router")
	for i := range cfg.Rule.Endpoints {
		svc.endpoints[i] = pid(fmt.Sprintf("ep-%d", i))
		svc.breakers[i] = pid(fmt.Sprintf("cb-%d", i))
		if len(cfg.Rule.Endpoints[i].Feeds) > 0 && cfg.Rule.Spec.KVExactMode != ladder.KVOff {
			svc.inventories[i] = pid(fmt.Sprintf("inv-%d", i))
		}
	}
	if err := svc.buildMirrors(warm); err != nil {
		return nil, fmt.Errorf("actors: service %q: %w", cfg.Rule.Key, err)
	}
	svc.shards = make([]*actor.PID, svc.sessions.NumShards())
	for i := range svc.shards {
		svc.shards[i] = pid(fmt.Sprintf("sess-%d", i))
	}

	ready := make(chan error, 1)
	strategy := actor.NewOneForOneStrategy(DefaultRestartBudget, DefaultRestartWindow, func(reason any) actor.Directive {
		svc.metrics.restart()
		svc.log.Error().Str(logfield.Reason, fmt.Sprint(reason)).Msg("actor failed; restarting it")
		return actor.RestartDirective
	})
	props := s.props(func() actor.Actor { return &supervisorActor{svc: svc, ready: ready} },
		actor.WithSupervisor(strategy))
	if _, err := s.as.Root.SpawnNamed(props, name); err != nil {
		return nil, fmt.Errorf("actors: service %q: spawn: %w", cfg.Rule.Key, err)
	}
	select {
	case err := <-ready:
		if err != nil {
			s.as.Root.Stop(svc.supervisor)
			return nil, fmt.Errorf("actors: service %q: %w", cfg.Rule.Key, err)
		}
	case <-time.After(10 * time.Second):
		s.as.Root.Stop(svc.supervisor)
		return nil, fmt.Errorf("actors: service %q: children did not start", cfg.Rule.Key)
	}
	svc.sweep = time.NewTicker(time.Second)
	go svc.housekeeping()
	svc.log.Info().Int(logfield.Endpoints, n).Msg("service started")
	return svc, nil
}

// housekeeping sends the periodic sweep ticks (session TTL, gauges) and,
// in cluster mode, the peer ticks (publish own load, re-read the peers').
func (svc *Service) housekeeping() {
	var peerC <-chan time.Time
	if svc.cfg.Peers != nil {
		t := time.NewTicker(svc.cfg.PeerInterval)
		defer t.Stop()
		peerC = t.C
	}
	for {
		select {
		case <-svc.done:
			return
		case <-peerC:
			svc.root.Send(svc.router, peerTick{})
		case <-svc.sweep.C:
			for _, p := range svc.shards {
				svc.root.Send(p, sweepTick{})
			}
			svc.root.Send(svc.router, sweepTick{})
			var n int64
			for i := range svc.sessionLen {
				n += svc.sessionLen[i].Load()
			}
			svc.metrics.sessionsActive(n)
		}
	}
}

// Config returns the service's configuration (defaults applied).
func (svc *Service) Config() ServiceConfig { return svc.cfg }

// Stop stops every actor of the service and waits for them (bounded by
// ctx), then releases its mirrors and metric series: the rule is gone.
// Requests still waiting in Route get ErrStopped.
func (svc *Service) Stop(ctx context.Context) error {
	err := svc.halt(ctx)
	svc.metrics.unregister()
	svc.closeMirrors()
	return err
}

// Handover stops the service like Stop but keeps what a successor with the
// same key can reuse — its mirrors, session table and metric series — and
// returns it for System.Start. The actors (and so the KV feeds) are fully
// stopped when it returns, so the successor's feeds never overlap them.
func (svc *Service) Handover(ctx context.Context) (*Warm, error) {
	if err := svc.halt(ctx); err != nil {
		svc.closeMirrors()
		return nil, err
	}
	w := &Warm{keys: svc.cfg.KV.Keys, sessions: svc.sessions, sessCfg: svc.cfg.sessionConfig(), ctrl: svc.ctrl}
	for i := range svc.cfg.Rule.Endpoints {
		w.addrs = append(w.addrs, endpointAddr(&svc.cfg.Rule.Endpoints[i]))
	}
	w.mirrors = svc.mirrors
	w.feeds = make([][]rule.Feed, len(svc.cfg.Rule.Endpoints))
	for i := range svc.cfg.Rule.Endpoints {
		w.feeds[i] = svc.cfg.Rule.Endpoints[i].Feeds
	}
	return w, nil
}

// halt stops the actors and waits for them.
func (svc *Service) halt(ctx context.Context) error {
	if svc.stopped.Swap(true) {
		return nil
	}
	close(svc.done)
	svc.sweep.Stop()
	f := svc.root.PoisonFuture(svc.supervisor)
	errc := make(chan error, 1)
	go func() { errc <- f.Wait() }()
	select {
	case err := <-errc:
		svc.log.Info().Msg("service stopped")
		if err != nil && !errors.Is(err, actor.ErrTimeout) {
			return err
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("actors: stop %q: %w", svc.cfg.Rule.Key, ctx.Err())
	}
}

// routeStalls is how many RouteTimeouts in a row without a message handled
// make a router stuck (20 s by default). A single one did not: at 4 000
// streams on two loaded cores the router went 2 s without running while
// HAProxy served (issue 31); a router that will never run again does not
// hold its requests for longer.
const routeStalls = 10

// Route implements Router.
func (svc *Service) Route(ctx context.Context, rr *RouteRequest) (Route, error) {
	if svc.stopped.Load() {
		return Route{}, ErrStopped
	}
	id := svc.sys.nextID.Add(1)
	m := svc.routes.Get().(*routeMsg)
	m.id, m.rr = id, rr
	reply := m.reply
	svc.root.Send(svc.router, m)
	// A router that was idle has decided already: this goroutine ran its
	// mailbox (senderRunsMailbox), so the answer waits in the channel and
	// no timer is needed.
	var early routeReply
	select {
	case early = <-reply:
		if !early.parked {
			return svc.routed(m, early)
		}
	default:
	}
	// A pooled timer: creating one per call was a third of Route's cost.
	// Since Go 1.23 a stopped or reset timer delivers no stale tick, so a
	// timer stopped on the way out can serve the next call.
	timer, _ := svc.timers.Get().(*time.Timer)
	if timer == nil {
		timer = time.NewTimer(svc.cfg.RouteTimeout)
	} else {
		timer.Reset(svc.cfg.RouteTimeout)
	}
	defer func() {
		timer.Stop()
		svc.timers.Put(timer)
	}()
	// parked waits for the endpoint's queue (it answers at the park
	// deadline at the latest), or for the client to leave.
	parked := func(r routeReply) {
		timer.Stop()
		if !r.parkDeadline.IsZero() {
			timer.Reset(time.Until(r.parkDeadline) + svc.cfg.RouteTimeout)
		}
	}
	if early.parked {
		parked(early)
	}
	seen := svc.handled.Load()
	stalls := 0 // consecutive RouteTimeouts without a message handled
	for {
		select {
		case r := <-reply:
			if r.parked {
				// The admission gate holds the request.
				parked(r)
				continue
			}
			return svc.routed(m, r)
		case <-ctx.Done():
			// The channel may still receive the router's answer: it is
			// abandoned, not reused.
			svc.root.Send(svc.router, cancelMsg{id: id})
			return Route{}, ctx.Err()
		case <-timer.C:
			// A slow router is not a stuck one. Saturation slows routing
			// down; only a router that stops is a failure. The client's
			// leaving and the max stream duration still end the wait
			// (ctx).
			if h := svc.handled.Load(); h != seen {
				// It handled messages since the last look: its queue
				// moves towards this request.
				seen = h
				stalls = 0
				timer.Reset(svc.cfg.RouteTimeout)
				continue
			}
			if stalls++; stalls < routeStalls {
				// It handled nothing, yet that alone does not make it
				// stuck: in a saturated process its goroutine waits for
				// a CPU (Go's scheduling latency reaches seconds) or is
				// preempted inside a message, and its mailbox waits out
				// a restart.
				timer.Reset(svc.cfg.RouteTimeout)
				continue
			}
			svc.root.Send(svc.router, cancelMsg{id: id})
			svc.metrics.routeTimeout()
			return Route{}, ErrRouterTimeout
		}
	}
}

// routed returns the router's final answer and, when it was the only
// one (the request never parked), the message to its pool.
func (svc *Service) routed(m *routeMsg, r routeReply) (Route, error) {
	if m.parkedAt.IsZero() {
		*m = routeMsg{reply: m.reply}
		svc.routes.Put(m)
	}
	if r.route.Ticket.ID != 0 {
		r.route.Ticket.ledger = svc
	}
	return r.route, r.err
}

// The service is the Ledger of the tickets it issues: each call is one
// message to the router actor. A stopped service's tickets are stale; what
// is reported on them is dropped.

// Report implements Ledger.
func (svc *Service) Report(o Outcome) {
	if !svc.stopped.Load() {
		svc.root.Send(svc.router, reportMsg{o: o})
	}
}

// Conclude implements Ledger.
func (svc *Service) Conclude(o Outcome, res Result) {
	if !svc.stopped.Load() {
		m, _ := svc.concludes.Get().(*concludeMsg)
		if m == nil {
			m = new(concludeMsg)
		}
		m.o, m.res = o, res
		svc.root.Send(svc.router, m)
	}
}

// FirstByte implements Ledger.
func (svc *Service) FirstByte(t Ticket) {
	if !svc.stopped.Load() {
		svc.root.Send(svc.router, firstByteMsg{t: t})
	}
}

// Pin implements Ledger.
func (svc *Service) Pin(t Ticket, key string) {
	if !svc.stopped.Load() {
		svc.root.Send(svc.router, pinMsg{t: t, key: key})
	}
}

// LifeSign says endpoint ep answered outside a probe's attempt: a probe's
// late answer, or response bytes read from it by a request. An endpoint
// down by timeouts alone (slow, not dead) comes back up at once; any other
// state is left to the probes. Safe for concurrent use; call it rarely
// (gateway.EndpointWatch calls it once per such answer of a down
// endpoint).
func (svc *Service) LifeSign(ep int) {
	if !svc.stopped.Load() && ep >= 0 && ep < len(svc.endpoints) {
		svc.root.Send(svc.endpoints[ep], lifeSign{})
	}
}

// SetServedModels tells the service which endpoints serve which model
// names (their /v1/models lists); decisions from then on keep to the
// endpoints serving the request's model (RouteRequest.Model). Safe for
// concurrent use; s is not modified afterwards.
func (svc *Service) SetServedModels(s *ladder.ServedModels) { svc.served.Store(s) }

// ServedModels returns the table SetServedModels last set (nil: none).
func (svc *Service) ServedModels() *ladder.ServedModels { return svc.served.Load() }

// Finish implements Ledger.
func (svc *Service) Finish(t Ticket, res Result) {
	if !svc.stopped.Load() {
		svc.root.Send(svc.router, finishMsg{t: t, res: res})
	}
}

// sessionPID returns the shard actor that owns key.
func (svc *Service) sessionPID(key string) *actor.PID {
	return svc.shards[svc.sessions.ShardFor(key)]
}

// ActorKind names a class of the service's actors, for chaos tests.
type ActorKind uint8

// Actor kinds.
const (
	KindRouter ActorKind = iota
	KindEndpoint
	KindBreaker
	KindInventory
	KindSession
)

// Crash makes one of the service's actors panic, as a fault would: its
// supervisor restarts it. idx selects the endpoint or shard. It reports
// whether such an actor exists.
func (svc *Service) Crash(kind ActorKind, idx int) bool {
	var pids []*actor.PID
	switch kind {
	case KindRouter:
		pids = []*actor.PID{svc.router}
		idx = 0
	case KindEndpoint:
		pids = svc.endpoints
	case KindBreaker:
		pids = svc.breakers
	case KindInventory:
		pids = svc.inventories
	case KindSession:
		pids = svc.shards
	}
	if idx < 0 || idx >= len(pids) || pids[idx] == nil {
		return false
	}
	svc.root.Send(pids[idx], crash{})
	return true
}

// supervisorActor is the service's root: it spawns the children under its
// restart strategy and watches them. A child stopped for exhausting its
// restart budget is spawned again after DefaultRespawnDelay (same name, so
// every PID held elsewhere reaches the new incarnation).
type supervisorActor struct {
	svc   *Service
	ready chan<- error
	// producers builds each child by name (for respawns).
	producers map[string]actor.Producer
	// senderRuns names the children every request talks to, whose
	// mailbox its senders may process (senderRunsMailbox).
	senderRuns map[string]bool
}

// respawnChild asks the supervisor to spawn a lost child again.
type respawnChild struct{ name string }

// Receive implements actor.Actor.
func (s *supervisorActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		select {
		case s.ready <- s.spawnAll(ctx):
		default:
		}
	case *actor.Terminated:
		if !s.svc.stopped.Load() {
			s.svc.log.Error().Str(logfield.Actor, m.Who.Id).Dur(logfield.Duration, DefaultRespawnDelay).
				Msg("actor stopped (restart budget exhausted); service degraded until it is respawned")
			s.svc.metrics.childLost()
			name := m.Who.Id[strings.LastIndexByte(m.Who.Id, '/')+1:]
			s.respawnLater(ctx, name)
		}
	case respawnChild:
		if s.svc.stopped.Load() {
			return
		}
		if err := s.spawn(ctx, m.name); err != nil {
			s.svc.log.Error().Err(err).Str(logfield.Actor, m.name).Msg("respawn failed; retrying")
			s.respawnLater(ctx, m.name)
			return
		}
		s.svc.log.Warn().Str(logfield.Actor, m.name).Msg("actor respawned after its restart budget was exhausted")
	case *actor.Stopping, *actor.Stopped, *actor.Restarting:
	default:
		s.svc.log.Warn().Str(logfield.MsgType, typeName(m)).Msg("supervisor: unknown message")
	}
}

func (s *supervisorActor) respawnLater(ctx actor.Context, name string) {
	self, root := ctx.Self(), ctx.ActorSystem().Root
	time.AfterFunc(DefaultRespawnDelay, func() { root.Send(self, respawnChild{name: name}) })
}

// spawn starts child name under the supervisor and watches it.
func (s *supervisorActor) spawn(ctx actor.Context, name string) error {
	producer, ok := s.producers[name]
	if !ok {
		return fmt.Errorf("spawn %s: no such child", name)
	}
	var opts []actor.PropsOption
	if s.senderRuns[name] {
		opts = append(opts, actor.WithMailbox(newSenderRunsMailbox))
	}
	pid, err := ctx.SpawnNamed(s.svc.sys.props(producer, opts...), name)
	if err != nil {
		return fmt.Errorf("spawn %s: %w", name, err)
	}
	ctx.Watch(pid)
	return nil
}

func (s *supervisorActor) spawnAll(ctx actor.Context) error {
	svc := s.svc
	s.producers = make(map[string]actor.Producer)
	s.senderRuns = make(map[string]bool)
	spawn := func(name string, producer actor.Producer) error {
		s.producers[name] = producer
		return s.spawn(ctx, name)
	}
	s.senderRuns["router"] = true
	for i := range svc.cfg.Rule.Endpoints {
		s.senderRuns[fmt.Sprintf("cb-%d", i)] = true
	}
	// Order matters: protoactor registers a child's PID before its mailbox
	// can take messages, and a send in between panics (and leaves that
	// mailbox stuck). Every actor the router sends to is spawned before the
	// endpoints, whose first probe result is what makes the router send
	// (session evictions): the router first, then the shards, breakers and
	// inventories, the endpoints last. The router sends to an endpoint only
	// for a request, and none arrives before Start returns.
	var errs []error
	errs = append(errs, spawn("router", func() actor.Actor {
		svc.routerRuns.Add(1)
		return newRouterActor(svc)
	}))
	for i := range svc.shards {
		errs = append(errs, spawn(fmt.Sprintf("sess-%d", i), func() actor.Actor { return newSessionActor(svc, i) }))
	}
	for i := range svc.cfg.Rule.Endpoints {
		errs = append(errs, spawn(fmt.Sprintf("cb-%d", i), func() actor.Actor { return newBreakerActor(svc, i) }))
		if svc.inventories[i] != nil {
			errs = append(errs, spawn(fmt.Sprintf("inv-%d", i), func() actor.Actor { return newInventoryActor(svc, i) }))
		}
	}
	for i := range svc.cfg.Rule.Endpoints {
		errs = append(errs, spawn(fmt.Sprintf("ep-%d", i), func() actor.Actor { return newEndpointActor(svc, i) }))
	}
	return errors.Join(errs...)
}

// buildMirrors creates (or takes over from warm) the per-rank mirrors of
// every endpoint with an inventory actor.
func (svc *Service) buildMirrors(warm *Warm) error {
	svc.mirrors = make([][]*inventory.Mirror, len(svc.cfg.Rule.Endpoints))
	svc.feedMarks = make([][]feedMark, len(svc.cfg.Rule.Endpoints))
	for i, pid := range svc.inventories {
		if pid == nil {
			continue
		}
		ep := &svc.cfg.Rule.Endpoints[i]
		for _, fc := range ep.Feeds {
			if m := warm.takeMirror(i, ep, fc, svc.cfg.KV.Keys); m != nil {
				svc.mirrors[i] = append(svc.mirrors[i], m)
				continue
			}
			m, err := inventory.NewMirror(inventory.MirrorConfig{
				ID:        inventory.EndpointID{Service: svc.cfg.Rule.Key, EpIdx: i, Rank: fc.Rank},
				Keys:      svc.cfg.KV.Keys,
				MaxBlocks: svc.cfg.KV.MaxBlocks,
				Logger:    svc.sys.log, // the mirror adds its own service field
				Metrics:   svc.sys.set,
			})
			if err != nil {
				svc.closeMirrors()
				return fmt.Errorf("endpoint %d rank %d: %w", i, fc.Rank, err)
			}
			svc.mirrors[i] = append(svc.mirrors[i], m)
		}
		svc.feedMarks[i] = make([]feedMark, len(svc.mirrors[i]))
	}
	return nil
}

// mirrorsFor returns endpoint ep's mirrors (for its inventory actor).
func (svc *Service) mirrorsFor(ep int) []*inventory.Mirror { return svc.mirrors[ep] }

func (svc *Service) closeMirrors() {
	for _, ms := range svc.mirrors {
		for _, m := range ms {
			m.Close()
		}
	}
}
