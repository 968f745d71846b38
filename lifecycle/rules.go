package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/gateway"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/tenant"
	"github.com/llbproject/llb/tokenizer"
)

// The rule set: a compiled rule's two running halves — its actors.Service
// (routing state) and its gateway.Listener (the data plane) — created,
// replaced with a warm hand-over, and removed.

// ruleSetConfig configures a ruleSet.
type ruleSetConfig struct {
	// System hosts the services' actors. Required.
	System *actors.System
	// Log is the base logger (without a component field): the set logs
	// lifecycle transitions as component "lifecycle", each rule's access
	// log as "gateway", the KV feeds as "kvfeed".
	Log zerolog.Logger
	// Metrics receives every rule's series; nil keeps them private.
	Metrics *metrics.Set
	// Feeds starts KV-event subscriptions; nil means actors.EngineFeeds.
	Feeds actors.FeedStarter
	// Drains coordinates TensorRT-LLM drains in a cluster (nil: a single
	// node drains every endpoint itself).
	Drains *drainRelay
	// Options are the data plane's daemon-wide settings; the set mints
	// Options.HopID when it is empty, shared by every rule and probe.
	Options gateway.Options
	// KVMaxMsgSize bounds one KV-event message in bytes for the default
	// Feeds (LLB_KV_MAX_MSG_BYTES); 0 means inventory.DefaultMaxMsgSize.
	KVMaxMsgSize int
	// BodyBudget and ConnLimit are the process-wide bounds every rule's
	// handler and listener share (gateway.NewBodyBudget,
	// gateway.NewConnLimit); nil sets none.
	BodyBudget *gateway.BodyBudget
	ConnLimit  *gateway.ConnLimit
	// TenantMetrics are the per-tenant and per-class series every rule's
	// handler shares.
	TenantMetrics *gateway.TenantMetrics
	// Keys are the API keys and tenant limits (nil: none).
	Keys *tenant.Gate
	// BindRetry is how often a rule whose VIP:port could not be bound tries
	// again; 0 means 5 s.
	BindRetry time.Duration
	// ReplaceTimeout bounds the hand-over of a replaced rule's service; 0
	// means 10 s.
	ReplaceTimeout time.Duration
}

// ruleSet runs compiled rules. Safe for concurrent use; calls for one rule
// are serialized.
type ruleSet struct {
	cfg    ruleSetConfig
	log    zerolog.Logger
	scrape *http.Client

	mu     sync.Mutex
	rules  map[string]*liveRule
	addrs  map[netip.AddrPort]*addrGroup // the listeners, by VIP:port (listeners.go)
	closed bool

	// tokenizers shares loaded tokenizer directories across rules.
	tokenizers *tokenizer.Registry
}

// runSpec is one rule as the set runs it.
type runSpec struct {
	// rule is the compiled rule; its VIP:port is where the listener binds
	// (the daemon's --data-bind may have replaced the rule's externalIP).
	rule *rule.Compiled
	// service is the routing configuration; service.Rule is rule. The set
	// fills in what it builds itself: each endpoint's Probe and Scrape, the
	// KV hasher and feed starter, and the endpoint watch's hook.
	service actors.ServiceConfig
}

// liveRule is one running rule.
type liveRule struct {
	spec    runSpec
	hasher  inventory.ChainHasher
	watch   *gateway.EndpointWatch
	router  *swapRouter
	svc     *actors.Service
	h       *gateway.Handler // the rule's data plane, in its address's listener
	started time.Time
	met     *gateway.Metrics
	// models is the rule's endpoints' /v1/models catalog; modelsStop ends
	// its refresh.
	models     *modelCatalog
	modelsStop context.CancelFunc
}

func (l *liveRule) key() string { return l.spec.rule.Key }

// startModels gives the rule a catalog of its endpoints' served models,
// refreshed from their /v1/models until the rule is replaced or removed.
func (rs *ruleSet) startModels(live *liveRule) {
	live.models = newModelCatalog(live.spec.rule.Endpoints, rs.scrape)
	ctx, cancel := context.WithCancel(context.Background())
	live.modelsStop = cancel
	go live.models.run(ctx, DefaultModelsRefresh)
}

func (l *liveRule) stopModels() {
	if l.modelsStop != nil {
		l.modelsStop()
	}
}

// newRuleSet builds an empty rule set.
func newRuleSet(cfg ruleSetConfig) (*ruleSet, error) {
	if cfg.System == nil {
		return nil, errors.New("lifecycle: the rule set needs an actor system")
	}
	if cfg.Feeds == nil {
		fc := actors.FeedsConfig{Log: cfg.Log.With().Str(logfield.Component, "kvfeed").Logger(), Metrics: cfg.Metrics, MaxMsgSize: cfg.KVMaxMsgSize}
		if cfg.Drains != nil {
			fc.Cluster = cfg.Drains
		}
		cfg.Feeds = actors.EngineFeeds(fc)
	}
	if cfg.BindRetry <= 0 {
		cfg.BindRetry = 5 * time.Second
	}
	if cfg.Options.HopID == "" {
		cfg.Options.HopID = gateway.NewHopID()
	}
	if cfg.ReplaceTimeout <= 0 {
		cfg.ReplaceTimeout = 10 * time.Second
	}
	return &ruleSet{
		cfg:    cfg,
		log:    cfg.Log.With().Str(logfield.Component, "lifecycle").Logger(),
		scrape: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute}},
		rules:  make(map[string]*liveRule),
		addrs:  make(map[netip.AddrPort]*addrGroup),

		tokenizers: tokenizer.NewRegistry(),
	}, nil
}

// errClosed is returned by apply after close.
var errClosed = errors.New("lifecycle: data plane closed")

// apply creates the rule, or replaces the running rule with the same key. A
// replace keeps the listener (same VIP:port) and hands the service's warm
// state — mirrors and sessions of the endpoints that stay — to its
// successor. A VIP:port that cannot be bound is not an error: the rule is
// kept, reported by status, and retried every BindRetry.
func (rs *ruleSet) apply(ctx context.Context, s runSpec) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.closed {
		return errClosed
	}
	old := rs.rules[s.rule.Key]
	live, err := rs.complete(s, old)
	if err != nil {
		return err
	}
	if err := live.spec.service.Validate(); err != nil {
		return err
	}
	if old != nil {
		return rs.replace(ctx, old, live)
	}
	return rs.create(live)
}

// complete builds what the set owns around a rule: the hasher (the live
// rule's own when the hash contract is unchanged, so mirrors stay warm),
// the endpoint watch, probes, scrapes and the feed starter.
func (rs *ruleSet) complete(s runSpec, old *liveRule) (*liveRule, error) {
	c := s.rule
	if c == nil || s.service.Rule == nil {
		return nil, fmt.Errorf("lifecycle: a rule without its compiled form: %w", gateway.ErrInvalidConfig)
	}
	live := &liveRule{spec: s, watch: gateway.NewEndpointWatch()}
	sc := &live.spec.service
	sc.OnEndpointDown = live.watch.EndpointDown
	if c.Spec.KVExactMode != ladder.KVOff {
		if old != nil && old.hasher != nil && sameKeys(old.spec.rule.KV, c.KV) {
			live.hasher = old.hasher
		} else {
			h, err := inventory.NewChainHasher(c.KV.Algo, c.KV.BlockSize, c.KV.Seed, c.KV.TokenKeyed)
			if err != nil {
				return nil, fmt.Errorf("lifecycle: rule %s hasher: %w: %w", c.Key, gateway.ErrInvalidConfig, err)
			}
			live.hasher = h
		}
		sc.KV.Keys = live.hasher
		sc.KV.StartFeed = rs.cfg.Feeds
	}
	sc.Probes = make([]actors.ProbeFunc, len(c.Endpoints))
	sc.Scrapes = make([]actors.ScrapeFunc, len(c.Endpoints))
	for i := range c.Endpoints {
		ep := &c.Endpoints[i]
		p, err := gateway.NewProbe(c.Probe, ep, rs.cfg.Options.HopID)
		switch {
		case errors.Is(err, gateway.ErrProbeOff):
		case err != nil:
			return nil, fmt.Errorf("lifecycle: rule %s endpoint %d probe: %w", c.Key, i, err)
		default:
			// A probe that times out while the endpoint answers other
			// requests passes: busy is not down (gateway/liveness.go).
			sc.Probes[i] = actors.ProbeFunc(live.watch.Probe(i, p, c.Probe))
		}
		// TensorRT-LLM's GET /metrics is JSON iteration stats, handed out
		// once like its events: llb leaves it to the operator's monitoring.
		if c.KV.Algo != string(inventory.AlgoBlockHashTRTLLM) {
			sc.Scrapes[i] = rs.scraper(ep.Addr.String(), c.KV.BlockSize)
		}
	}
	return live, nil
}

// sameKeys reports whether two KV contracts compute the same block keys.
func sameKeys(a, b rule.KVContract) bool {
	return a.Algo == b.Algo && a.BlockSize == b.BlockSize && a.Seed == b.Seed && a.TokenKeyed == b.TokenKeyed
}

func (rs *ruleSet) create(live *liveRule) error {
	svc, err := rs.cfg.System.Start(live.spec.service, nil)
	if err != nil {
		return err
	}
	key := live.key()
	live.svc, live.started = svc, time.Now()
	live.watch.OnLifeSign(svc.LifeSign)
	live.router = &swapRouter{svc: svc}
	live.met = gateway.NewMetrics(rs.cfg.Metrics, key)
	rs.startModels(live)
	live.models.attach(svc)
	h, err := rs.handler(live)
	if err != nil {
		live.stopModels()
		_ = svc.Stop(context.Background())
		live.met.Unregister()
		return err
	}
	live.h = h
	rs.rules[key] = live
	rs.join(live)
	rs.log.Info().Str(logfield.Rule, key).Int(logfield.Endpoints, len(live.spec.rule.Endpoints)).Msg("rule running")
	return nil
}

// handler builds the rule's request handler over live's router.
func (rs *ruleSet) handler(live *liveRule) (*gateway.Handler, error) {
	c := live.spec.rule
	deps := gateway.Deps{
		Router:     live.router,
		Hasher:     live.hasher,
		Watch:      live.watch,
		Metrics:    live.met,
		Log:        rs.cfg.Log.With().Str(logfield.Component, "gateway").Str(logfield.Rule, c.Key).Logger(),
		LoRAOf:     live.models.loraOf,
		ModelsBody: live.models.modelsBody,
		EnsureAdapter: func(ctx context.Context, ep int, model string) error {
			if !live.spec.service.Env.LoRARuntimeLoad {
				return nil
			}
			return live.models.ensureAdapter(ctx, ep, model)
		},
		Budget: rs.cfg.BodyBudget,
		Conns:  rs.cfg.ConnLimit,

		TenantMetrics: rs.cfg.TenantMetrics,
		Keys:          rs.cfg.Keys,
	}
	if c.Spec.KVExactMode != ladder.KVOff {
		tok, err := rs.ruleTokenizer(c, live.met)
		if err != nil {
			return nil, err
		}
		deps.Tokenizer = tok
	}
	return gateway.NewHandler(c, rs.cfg.Options, deps)
}

// replace hands the rule over to its new configuration next on the same
// listener. Requests that arrive meanwhile wait (briefly) for the new
// service; requests already admitted by the old service finish on their
// backends, their tickets reporting to the old service, which has stopped
// and drops what they report.
func (rs *ruleSet) replace(ctx context.Context, live, next *liveRule) error {
	ctx, cancel := context.WithTimeout(ctx, rs.cfg.ReplaceTimeout)
	defer cancel()
	key := next.key()
	router := &swapRouter{held: make(chan struct{})}
	next.router, next.started, next.met = router, live.started, live.met
	rs.startModels(next)
	h, err := rs.handler(next)
	if err != nil {
		next.stopModels()
		return err
	}
	compatible := sameEndpoints(live.spec.rule.Endpoints, next.spec.rule.Endpoints)
	live.router.retire(router, compatible)
	warm, err := live.svc.Handover(ctx)
	if err != nil {
		rs.log.Warn().Err(err).Str(logfield.Rule, key).Msg("replace: old service did not hand over cleanly; starting cold")
		warm = nil
	}
	svc, err := rs.cfg.System.Start(next.spec.service, warm)
	if err != nil {
		// The new configuration passed validation, so this is a runtime
		// fault; keep serving the old configuration, cold.
		rs.log.Error().Err(err).Str(logfield.Rule, key).Msg("replace failed; restarting the previous configuration")
		next.stopModels()
		old, err2 := rs.cfg.System.Start(live.spec.service, nil)
		if err2 != nil {
			router.set(nil)
			return errors.Join(err, err2)
		}
		router.set(old)
		live.svc = old
		live.watch.OnLifeSign(old.LifeSign)
		live.models.attach(old)
		live.router = router
		if oh, herr := rs.handler(live); herr == nil {
			live.h = oh
			rs.swap(live, live)
		}
		return err
	}
	next.watch.OnLifeSign(svc.LifeSign)
	next.models.attach(svc)
	router.set(svc)
	live.stopModels()
	next.svc, next.h = svc, h
	rs.rules[key] = next
	rs.swap(live, next)
	rs.log.Info().Str(logfield.Rule, key).Bool("warm", warm != nil).Msg("rule replaced")
	return nil
}

// sameEndpoints reports whether two endpoint lists are index-compatible
// (same address and role at every index), so a decision made by one
// service is valid for the other's handler.
func sameEndpoints(a, b []rule.CompiledEndpoint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Addr != b[i].Addr || a[i].Role() != b[i].Role() {
			return false
		}
	}
	return true
}

// remove stops rule key: the listener drains in-flight requests until ctx
// ends (then cuts them), then the service stops. Removing an unknown key is
// not an error.
func (rs *ruleSet) remove(ctx context.Context, key string) error {
	rs.mu.Lock()
	live := rs.rules[key]
	delete(rs.rules, key)
	var ln *gateway.Listener
	shared := false
	if live != nil {
		ln, shared = rs.leave(live)
	}
	rs.mu.Unlock()
	if live == nil {
		return nil
	}
	return rs.stopRule(ctx, live, ln, shared)
}

// stopRule stops a rule that left its listener: ln, when it was the
// listener's last rule, drains and closes; when other rules keep the
// listener (shared), the rule's own requests drain.
func (rs *ruleSet) stopRule(ctx context.Context, live *liveRule, ln *gateway.Listener, shared bool) error {
	live.stopModels()
	var errs []error
	if ln != nil {
		if err := ln.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("drain: %w", err))
		}
	} else if shared {
		if err := drainHandler(ctx, live.h); err != nil {
			errs = append(errs, fmt.Errorf("drain: %w", err))
		}
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), rs.cfg.ReplaceTimeout)
	defer cancel()
	if err := live.svc.Stop(stopCtx); err != nil {
		errs = append(errs, err)
	}
	live.met.Unregister()
	rs.log.Info().Str(logfield.Rule, live.key()).Msg("rule removed")
	return errors.Join(errs...)
}

// close removes every rule (draining each until ctx ends) and refuses
// later applies.
func (rs *ruleSet) close(ctx context.Context) error {
	rs.mu.Lock()
	rs.closed = true
	type leaving struct {
		l      *liveRule
		ln     *gateway.Listener
		shared bool
	}
	lives := make([]leaving, 0, len(rs.rules))
	for k, l := range rs.rules {
		ln, shared := rs.leave(l)
		lives = append(lives, leaving{l, ln, shared})
		delete(rs.rules, k)
	}
	rs.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(lives))
	for i, l := range lives {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = rs.stopRule(ctx, l.l, l.ln, l.shared) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// liveStatus is a running rule's live state.
type liveStatus struct {
	// Addr is the bound VIP:port ("" while unbound).
	Addr string
	// BindError is why the rule's address is not bound (nil when bound).
	BindError error
	// Service is the router's view; ServiceOK is false when it did not
	// answer in time.
	Service   actors.ServiceStatus
	ServiceOK bool
	// Requests are the data plane's counters.
	Requests gateway.HandlerStats
	// Started is when the rule first started.
	Started time.Time
}

// status reports rule key's live state without blocking on the data path
// (the router is asked with a short deadline).
func (rs *ruleSet) status(key string) (liveStatus, bool) {
	// The bind retry loop updates ln and bindErr under rs.mu: copy them
	// under it, then ask the (immutable) service without holding it.
	rs.mu.Lock()
	live := rs.rules[key]
	if live == nil {
		rs.mu.Unlock()
		return liveStatus{}, false
	}
	ln, bindErr := rs.groupOf(live)
	st := liveStatus{BindError: bindErr, Started: live.started}
	svc, h := live.svc, live.h
	rs.mu.Unlock()
	if ln != nil {
		if a := ln.Addr(); a != nil {
			st.Addr = a.String()
		}
		st.Requests = h.Stats()
	}
	st.Service, st.ServiceOK = svc.Status(250 * time.Millisecond)
	return st, true
}

// service returns rule key's running service (for controller updates and
// inventory views), or nil.
func (rs *ruleSet) service(key string) *actors.Service {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if live := rs.rules[key]; live != nil {
		return live.svc
	}
	return nil
}
