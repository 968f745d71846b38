package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/tokenizer"
)

// The runtime: rule lifecycle glue between the REST control plane and the
// two halves of a running rule — its actors.Service (routing state) and its
// Listener (the data plane).

// Rule is one mode:4 rule as the runtime runs it.
type Rule struct {
	// Key identifies the rule (the REST rule key).
	Key string
	// Gateway is the data-plane configuration (VIP:port, endpoints, P/D,
	// timeouts, hashing, probes).
	Gateway RuleConfig
	// Service is the routing configuration. The runtime fills in what it
	// builds itself: each endpoint's Probe and Scrape functions and the KV
	// hasher and feed starter. Endpoints must be index-aligned with
	// Gateway.Endpoints; their Feeds say where each prefill engine publishes.
	Service actors.ServiceConfig

	// watch is the rule's endpoint watch (built by complete).
	watch *EndpointWatch
}

// RuntimeConfig configures a Runtime.
type RuntimeConfig struct {
	// System hosts the services' actors. Required.
	System *actors.System
	// Log is the base logger (without a component field): the runtime logs
	// lifecycle transitions as component "runtime", each rule's access log
	// as "gateway", the KV feeds as "kvfeed".
	Log zerolog.Logger
	// Metrics receives every rule's series; nil keeps them private.
	Metrics *metrics.Set
	// Feeds starts KV-event subscriptions; nil means actors.ZMQFeeds.
	Feeds actors.FeedStarter
	// AccessLog writes every rule's access log at Info (else Debug).
	AccessLog bool
	// HideBackendAddrs keeps endpoint addresses out of every rule's client
	// answers (RuleConfig.HideBackendAddrs).
	HideBackendAddrs bool
	// HopID identifies this llb instance in X-Llb-Hop (loop detection); ""
	// mints a random one. Every rule and probe of the runtime shares it.
	HopID string
	// BodyBudget and ConnLimit are the process-wide bounds every rule's
	// listener shares (NewBodyBudget, NewConnLimit); nil sets none.
	BodyBudget *BodyBudget
	ConnLimit  *ConnLimit
	// KVMaxMsgSize bounds one KV-event message in bytes for the default
	// Feeds (LLB_KV_MAX_MSG_BYTES); 0 means inventory.DefaultMaxMsgSize.
	KVMaxMsgSize int
	// BindRetry is how often a rule whose VIP:port could not be bound tries
	// again; 0 means 5 s.
	BindRetry time.Duration
	// ReplaceTimeout bounds the hand-over of a replaced rule's service; 0
	// means 10 s.
	ReplaceTimeout time.Duration
}

// Runtime runs mode:4 rules. Safe for concurrent use; calls for one rule
// are serialized.
type Runtime struct {
	cfg    RuntimeConfig
	log    zerolog.Logger
	scrape *http.Client

	mu     sync.Mutex
	rules  map[string]*liveRule
	closed bool

	// tokenizers shares loaded tokenizer directories across rules.
	tokenizers *tokenizer.Registry
}

// liveRule is one running rule.
type liveRule struct {
	rule    Rule
	hasher  inventory.ChainHasher
	router  *swapRouter
	svc     *actors.Service
	ln      *Listener // nil while the address cannot be bound
	bindErr error
	started time.Time
	met     *Metrics
	stop    chan struct{} // closed on removal (ends the bind retry loop)
	// loraStop ends the rule's LoRA catalog refresh (nil: none running).
	loraStop context.CancelFunc
}

// attachLoRA gives the rule a LoRA catalog refreshed from its engines'
// /v1/models (unless the caller set its own LoRAOf), running until the
// rule is replaced or removed.
func (rt *Runtime) attachLoRA(live *liveRule, r *Rule) {
	if r.Gateway.LoRAOf != nil {
		return
	}
	cat := newLoRACatalog(r.Gateway.Endpoints, rt.scrape)
	r.Gateway.LoRAOf = cat.loraOf
	ctx, cancel := context.WithCancel(context.Background())
	live.loraStop = cancel
	go cat.run(ctx, DefaultLoRARefresh)
}

func (l *liveRule) stopLoRA() {
	if l.loraStop != nil {
		l.loraStop()
	}
}

// NewRuntime builds an empty runtime.
func NewRuntime(cfg RuntimeConfig) (*Runtime, error) {
	if cfg.System == nil {
		return nil, errors.New("gateway: runtime needs an actor system")
	}
	if cfg.Feeds == nil {
		cfg.Feeds = actors.ZMQFeeds(cfg.Log.With().Str(logfield.Component, "kvfeed").Logger(), cfg.Metrics, cfg.KVMaxMsgSize)
	}
	if cfg.BindRetry <= 0 {
		cfg.BindRetry = 5 * time.Second
	}
	if cfg.HopID == "" {
		cfg.HopID = newHopID()
	}
	if cfg.ReplaceTimeout <= 0 {
		cfg.ReplaceTimeout = 10 * time.Second
	}
	return &Runtime{
		cfg:    cfg,
		log:    cfg.Log.With().Str(logfield.Component, "runtime").Logger(),
		scrape: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute}},
		rules:  make(map[string]*liveRule),

		tokenizers: tokenizer.NewRegistry(),
	}, nil
}

// ErrRuntimeClosed is returned by Apply after Close.
var ErrRuntimeClosed = errors.New("gateway: runtime closed")

// Apply creates rule r, or replaces the running rule with the same key. A
// replace keeps the listener (same VIP:port) and hands the service's warm
// state — mirrors and sessions of the endpoints that stay — to its
// successor. A VIP:port that cannot be bound is not an Apply error: the
// rule is kept, reported by Status, and retried every BindRetry.
func (rt *Runtime) Apply(ctx context.Context, r Rule) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closed {
		return ErrRuntimeClosed
	}
	if err := rt.complete(&r, rt.rules[r.Key]); err != nil {
		return err
	}
	if err := r.Service.Validate(); err != nil {
		return err
	}
	if err := r.Gateway.Validate(); err != nil {
		return err
	}
	if old := rt.rules[r.Key]; old != nil {
		return rt.replace(ctx, old, r)
	}
	return rt.create(r)
}

// complete builds what the runtime owns: the hasher (the live rule's own
// when the hash settings are unchanged, so mirrors stay warm), probes,
// scrapes and the feed starter.
func (rt *Runtime) complete(r *Rule, live *liveRule) error {
	sc := &r.Service
	if sc.Rule == nil {
		return fmt.Errorf("gateway: rule %s has no compiled rule: %w", r.Key, ErrInvalidConfig)
	}
	r.watch = NewEndpointWatch()
	sc.OnEndpointDown = r.watch.EndpointDown
	r.Gateway.HopID = rt.cfg.HopID
	r.Gateway.AccessLog = rt.cfg.AccessLog
	r.Gateway.HideBackendAddrs = r.Gateway.HideBackendAddrs || rt.cfg.HideBackendAddrs
	r.Gateway.Probe.HopID = rt.cfg.HopID
	if len(sc.Rule.Endpoints) != len(r.Gateway.Endpoints) {
		return fmt.Errorf("gateway: rule %s: %d service endpoints for %d gateway endpoints: %w",
			r.Key, len(sc.Rule.Endpoints), len(r.Gateway.Endpoints), ErrInvalidConfig)
	}
	if r.Gateway.KVExactMode != ladder.KVOff {
		if live != nil && live.hasher != nil && live.rule.Gateway.Hasher == r.Gateway.Hasher {
			sc.KV.Keys = live.hasher
		} else {
			h, err := r.Gateway.Hasher.Build()
			if err != nil {
				return fmt.Errorf("gateway: rule %s hasher: %w: %w", r.Key, ErrInvalidConfig, err)
			}
			sc.KV.Keys = h
		}
		sc.KV.StartFeed = rt.cfg.Feeds
	}
	sc.Probes = make([]actors.ProbeFunc, len(r.Gateway.Endpoints))
	sc.Scrapes = make([]actors.ScrapeFunc, len(r.Gateway.Endpoints))
	for i := range r.Gateway.Endpoints {
		ep := &r.Gateway.Endpoints[i]
		p, err := NewProbe(r.Gateway.Probe, *ep)
		switch {
		case errors.Is(err, ErrProbeOff):
		case err != nil:
			return fmt.Errorf("gateway: rule %s endpoint %d probe: %w", r.Key, i, err)
		default:
			sc.Probes[i] = actors.ProbeFunc(p)
		}
		sc.Scrapes[i] = rt.scraper(ep)
	}
	return nil
}

// scraper reads an engine's KV capacity and waiting-queue depth from its
// /metrics (Tier 2 scores active_conns + queued_requests).
func (rt *Runtime) scraper(ep *EndpointConfig) actors.ScrapeFunc {
	url := "http://" + ep.Addr.String() + "/metrics"
	return func(ctx context.Context) (actors.EngineStats, error) {
		cc, err := inventory.ScrapeCacheConfig(ctx, rt.scrape, url, inventory.DefaultCapacityMaxBytes)
		if err != nil {
			return actors.EngineStats{}, err
		}
		return actors.EngineStats{
			KVCapacityBlocks: uint32(min(cc.NumGPUBlocks, ladder.CapacityClampMax)),
			Waiting:          uint32(min(cc.Waiting, 1<<20)),
		}, nil
	}
}

func (rt *Runtime) create(r Rule) error {
	svc, err := rt.cfg.System.Start(r.Service, nil)
	if err != nil {
		return err
	}
	live := &liveRule{rule: r, hasher: r.Service.KV.Keys, svc: svc, started: time.Now(), stop: make(chan struct{})}
	live.router = &swapRouter{svc: svc}
	live.met = NewMetrics(rt.cfg.Metrics, r.Key)
	rt.attachLoRA(live, &r)
	live.rule = r
	h, err := rt.handler(live, r)
	if err != nil {
		live.stopLoRA()
		_ = svc.Stop(context.Background())
		live.met.Unregister()
		return err
	}
	rt.rules[r.Key] = live
	rt.listen(live, h)
	rt.log.Info().Str(logfield.Rule, r.Key).Int(logfield.Endpoints, len(r.Gateway.Endpoints)).Msg("rule running")
	return nil
}

// handler builds the rule's request handler over live's router.
func (rt *Runtime) handler(live *liveRule, r Rule) (*Handler, error) {
	deps := Deps{
		Router:  live.router,
		Hasher:  r.Service.KV.Keys,
		Watch:   r.watch,
		Metrics: live.met,
		Log:     rt.cfg.Log.With().Str(logfield.Component, "gateway").Str(logfield.Rule, r.Key).Logger(),
		Budget:  rt.cfg.BodyBudget,
		Conns:   rt.cfg.ConnLimit,
	}
	if r.Gateway.KVExactMode != ladder.KVOff {
		tok, err := rt.ruleTokenizer(live, r)
		if err != nil {
			return nil, err
		}
		deps.Tokenizer = tok
	}
	return NewHandler(r.Gateway, deps)
}

// listen binds the rule's address, or records the error and retries in the
// background until it binds or the rule goes away.
func (rt *Runtime) listen(live *liveRule, h *Handler) {
	ln, err := newListenerFor(h)
	if err == nil {
		live.ln, live.bindErr = ln, nil
		return
	}
	live.bindErr = err
	rt.log.Error().Err(err).Str(logfield.Rule, live.rule.Key).Msg("rule address cannot be bound; retrying")
	go func() {
		t := time.NewTicker(rt.cfg.BindRetry)
		defer t.Stop()
		for {
			select {
			case <-live.stop:
				return
			case <-t.C:
			}
			rt.mu.Lock()
			if rt.rules[live.rule.Key] != live || live.ln != nil {
				rt.mu.Unlock()
				return
			}
			cur, err := rt.currentHandler(live)
			if err == nil {
				var ln *Listener
				if ln, err = newListenerFor(cur); err == nil {
					live.ln, live.bindErr = ln, nil
					rt.log.Info().Str(logfield.Rule, live.rule.Key).Msg("rule address bound")
				}
			}
			if err != nil {
				live.bindErr = err
			}
			rt.mu.Unlock()
			if err == nil {
				return
			}
		}
	}()
}

// currentHandler rebuilds a handler for an unbound rule (its previous
// listener never existed).
func (rt *Runtime) currentHandler(live *liveRule) (*Handler, error) {
	return rt.handler(live, live.rule)
}

// newListenerFor binds and serves h on h's VIP:port.
func newListenerFor(h *Handler) (*Listener, error) {
	l := newListener(h)
	if err := l.Start(); err != nil {
		return nil, err
	}
	return l, nil
}

// replace hands the rule over to its new configuration on the same
// listener. Requests that arrive meanwhile wait (briefly) for the new
// service; requests already admitted by the old service finish on their
// backends, their late reports being stale for the successor.
func (rt *Runtime) replace(ctx context.Context, live *liveRule, r Rule) error {
	ctx, cancel := context.WithTimeout(ctx, rt.cfg.ReplaceTimeout)
	defer cancel()
	next := &swapRouter{held: make(chan struct{})}
	nextLive := &liveRule{rule: r, hasher: r.Service.KV.Keys, router: next, started: live.started, met: live.met, stop: live.stop}
	rt.attachLoRA(nextLive, &r)
	nextLive.rule = r
	h, err := rt.handler(nextLive, r)
	if err != nil {
		nextLive.stopLoRA()
		return err
	}
	compatible := sameEndpoints(live.rule.Gateway.Endpoints, r.Gateway.Endpoints)
	live.router.retire(next, compatible)
	warm, err := live.svc.Handover(ctx)
	if err != nil {
		rt.log.Warn().Err(err).Str(logfield.Rule, r.Key).Msg("replace: old service did not hand over cleanly; starting cold")
		warm = nil
	}
	svc, err := rt.cfg.System.Start(r.Service, warm)
	if err != nil {
		// The new configuration passed validation, so this is a runtime
		// fault; keep serving the old configuration, cold.
		rt.log.Error().Err(err).Str(logfield.Rule, r.Key).Msg("replace failed; restarting the previous configuration")
		nextLive.stopLoRA()
		old, err2 := rt.cfg.System.Start(live.rule.Service, nil)
		if err2 != nil {
			next.set(nil)
			return errors.Join(err, err2)
		}
		next.set(old)
		live.svc = old
		live.router = next
		if live.ln != nil {
			if oh, herr := rt.handler(live, live.rule); herr == nil {
				live.ln.Swap(oh)
			}
		}
		return err
	}
	next.set(svc)
	live.stopLoRA()
	nextLive.svc = svc
	nextLive.ln, nextLive.bindErr = live.ln, live.bindErr
	rt.rules[r.Key] = nextLive
	if nextLive.ln != nil {
		nextLive.ln.Swap(h)
	} else {
		// Still unbound: the predecessor's retry loop ends (the rule map no
		// longer holds it); retry with the new handler.
		rt.listen(nextLive, h)
	}
	rt.log.Info().Str(logfield.Rule, r.Key).Bool("warm", warm != nil).Msg("rule replaced")
	return nil
}

// sameEndpoints reports whether two endpoint lists are index-compatible
// (same address and role at every index), so a decision made by one
// service is valid for the other's handler.
func sameEndpoints(a, b []EndpointConfig) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Addr != b[i].Addr || a[i].Role != b[i].Role {
			return false
		}
	}
	return true
}

// Remove stops rule key: the listener drains in-flight requests until ctx
// ends (then cuts them), then the service stops. Removing an unknown key is
// not an error.
func (rt *Runtime) Remove(ctx context.Context, key string) error {
	rt.mu.Lock()
	live := rt.rules[key]
	delete(rt.rules, key)
	rt.mu.Unlock()
	if live == nil {
		return nil
	}
	return rt.stopRule(ctx, live)
}

func (rt *Runtime) stopRule(ctx context.Context, live *liveRule) error {
	close(live.stop)
	live.stopLoRA()
	var errs []error
	if live.ln != nil {
		if err := live.ln.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("drain: %w", err))
		}
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), rt.cfg.ReplaceTimeout)
	defer cancel()
	if err := live.svc.Stop(stopCtx); err != nil {
		errs = append(errs, err)
	}
	live.met.Unregister()
	rt.log.Info().Str(logfield.Rule, live.rule.Key).Msg("rule removed")
	return errors.Join(errs...)
}

// Close removes every rule (draining each until ctx ends) and refuses
// later Applies.
func (rt *Runtime) Close(ctx context.Context) error {
	rt.mu.Lock()
	rt.closed = true
	lives := make([]*liveRule, 0, len(rt.rules))
	for k, l := range rt.rules {
		lives = append(lives, l)
		delete(rt.rules, k)
	}
	rt.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(lives))
	for i, l := range lives {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = rt.stopRule(ctx, l) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// RuleStatus is a running rule's live state.
type RuleStatus struct {
	// Addr is the bound VIP:port ("" while unbound).
	Addr string
	// BindError is why the rule's address is not bound (nil when bound).
	BindError error
	// Service is the router's view; ServiceOK is false when it did not
	// answer in time.
	Service   actors.ServiceStatus
	ServiceOK bool
	// Requests are the data plane's counters.
	Requests HandlerStats
	// Started is when the rule first started.
	Started time.Time
}

// Status reports rule key's live state without blocking on the data path
// (the router is asked with a short deadline).
func (rt *Runtime) Status(key string) (RuleStatus, bool) {
	// The bind retry loop updates ln and bindErr under rt.mu: copy them
	// under it, then ask the (immutable) service without holding it.
	rt.mu.Lock()
	live := rt.rules[key]
	if live == nil {
		rt.mu.Unlock()
		return RuleStatus{}, false
	}
	st := RuleStatus{BindError: live.bindErr, Started: live.started}
	ln, svc := live.ln, live.svc
	rt.mu.Unlock()
	if ln != nil {
		if a := ln.Addr(); a != nil {
			st.Addr = a.String()
		}
		st.Requests = ln.Handler().Stats()
	}
	st.Service, st.ServiceOK = svc.Status(250 * time.Millisecond)
	return st, true
}

// Service returns rule key's running service (for controller updates and
// inventory views), or nil.
func (rt *Runtime) Service(key string) *actors.Service {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if live := rt.rules[key]; live != nil {
		return live.svc
	}
	return nil
}

// swapRouter is the actors.Router a rule's handler holds: the rule's
// current service. During a replace, routing waits until the successor is
// up; a retired router forwards to its successor when the endpoint lists
// are index-compatible, and answers ErrStopped otherwise (its handler's
// endpoint indexes would not match the successor's decisions).
type swapRouter struct {
	mu   sync.RWMutex
	svc  *actors.Service
	held chan struct{} // closed once svc is set (nil: set from the start)
	next *swapRouter   // successor when retired and compatible
	gone bool          // retired and incompatible
}

func (s *swapRouter) set(svc *actors.Service) {
	s.mu.Lock()
	s.svc = svc
	s.mu.Unlock()
	if s.held != nil {
		close(s.held)
	}
}

func (s *swapRouter) retire(next *swapRouter, compatible bool) {
	s.mu.Lock()
	if compatible {
		s.next = next
	} else {
		s.gone = true
	}
	s.mu.Unlock()
}

func (s *swapRouter) current(ctx context.Context) (*actors.Service, error) {
	for {
		s.mu.RLock()
		svc, next, gone, held := s.svc, s.next, s.gone, s.held
		s.mu.RUnlock()
		switch {
		case next != nil:
			s = next
			continue
		case gone:
			return nil, actors.ErrStopped
		}
		if held != nil {
			select {
			case <-held:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			s.mu.RLock()
			svc = s.svc
			s.mu.RUnlock()
		}
		if svc == nil {
			return nil, actors.ErrStopped
		}
		return svc, nil
	}
}

// Route implements actors.Router.
func (s *swapRouter) Route(ctx context.Context, rr *actors.RouteRequest) (actors.Route, error) {
	svc, err := s.current(ctx)
	if err != nil {
		return actors.Route{}, err
	}
	return svc.Route(ctx, rr)
}

// Report implements actors.Router. Ticket IDs are process-wide, so a
// report that reaches a successor for its predecessor's ticket is stale and
// ignored there.
func (s *swapRouter) Report(o actors.Outcome) {
	if svc, err := s.current(context.Background()); err == nil {
		svc.Report(o)
	}
}

// Conclude implements concluder: Report and Finish in one message.
func (s *swapRouter) Conclude(o actors.Outcome, res actors.Result) {
	if svc, err := s.current(context.Background()); err == nil {
		svc.Conclude(o, res)
	}
}

// Finish implements actors.Router.
func (s *swapRouter) Finish(t actors.Ticket, res actors.Result) {
	if svc, err := s.current(context.Background()); err == nil {
		svc.Finish(t, res)
	}
}

// failoverTokenizer calls /tokenize on the rule's engines in order,
// starting with the last one that answered, until one answers or ctx ends.
// Every engine of a rule serves the same model, so any may tokenize.
type failoverTokenizer struct {
	toks []*inventory.RemoteTokenizer
	mu   sync.Mutex
	good int
}

func newFailoverTokenizer(cfg RuleConfig, timeout time.Duration) (*failoverTokenizer, error) {
	f := &failoverTokenizer{}
	for _, role := range []ladder.Role{ladder.RolePrefill, ladder.RoleNone, ladder.RoleDecode} {
		for _, ep := range cfg.Endpoints {
			if ep.Role != role {
				continue
			}
			t, err := inventory.NewRemoteTokenizer(inventory.RemoteTokenizerConfig{
				BaseURL: "http://" + net.JoinHostPort(ep.Addr.Addr().String(), strconv.Itoa(int(ep.Addr.Port()))),
				Timeout: timeout,
			})
			if err != nil {
				return nil, fmt.Errorf("gateway: rule %s tokenizer: %w", cfg.Name, err)
			}
			f.toks = append(f.toks, t)
		}
	}
	if len(f.toks) == 0 {
		return nil, fmt.Errorf("gateway: rule %s has no endpoint to tokenize with: %w", cfg.Name, ErrInvalidConfig)
	}
	return f, nil
}

// Tokenize implements inventory.Tokenizer.
func (f *failoverTokenizer) Tokenize(ctx context.Context, req inventory.TokenizeRequest, dst []uint32) ([]uint32, error) {
	f.mu.Lock()
	start := f.good
	f.mu.Unlock()
	var err error
	for k := 0; k < len(f.toks); k++ {
		i := (start + k) % len(f.toks)
		var out []uint32
		if out, err = f.toks[i].Tokenize(ctx, req, dst); err == nil {
			if i != start {
				f.mu.Lock()
				f.good = i
				f.mu.Unlock()
			}
			return out, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return dst, err
}
