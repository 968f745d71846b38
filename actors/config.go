package actors

import (
	"context"
	"errors"
	"time"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

// Defaults applied by ServiceConfig.withDefaults.
const (
	// DefaultDecisionTimeout bounds how long the router waits for the
	// inventory and session replies of one decision; a reply that misses it
	// counts as a miss (overlap 0 / no session), never as a stall.
	DefaultDecisionTimeout = 5 * time.Millisecond
	// DefaultRouteTimeout bounds how long Service.Route waits for the router
	// actor itself (outside admission parking) before ErrRouterTimeout.
	DefaultRouteTimeout = 2 * time.Second
	// DefaultScrapeInterval is the /metrics scrape period (capacity, queue
	// depth, KV usage). The headroom law reads the queue and the KV usage
	// as load signals, so they must be fresh: 250 ms (llm-d's endpoint
	// picker scrapes every 50 ms; llb adds what it sent since the last
	// scrape to the usage, so it can afford a slower one).
	DefaultScrapeInterval = 250 * time.Millisecond
	// DefaultRestartBudget and DefaultRestartWindow bound child restarts:
	// a child that fails more often than this is stopped (a crash loop is
	// not restarted at full speed forever), counted in
	// llb_actors_lost_total, and respawned DefaultRespawnDelay later with a
	// fresh budget: a crash-looping actor degrades its rule for a while,
	// it never takes it down for good.
	DefaultRestartBudget = 20
	DefaultRestartWindow = 10 * time.Second
	// DefaultRespawnDelay is how long a child stopped for exhausting its
	// restart budget stays down before the supervisor spawns it again.
	DefaultRespawnDelay = time.Second
)

// ProbeFunc performs one health probe of an endpoint and returns nil when
// the endpoint is healthy. It must honour ctx's deadline.
type ProbeFunc func(ctx context.Context) error

// ScrapeFunc reads an endpoint's engine metrics once (KV capacity and queue
// depth). It must honour ctx's deadline.
type ScrapeFunc func(ctx context.Context) (EngineStats, error)

// EngineStats is what a scrape of an engine's /metrics yields.
type EngineStats struct {
	// KVCapacityBlocks is num_gpu_blocks; 0 when unknown.
	KVCapacityBlocks uint32
	// Waiting is vllm:num_requests_waiting.
	Waiting uint32
	// Swapped is the swapped-request count (0 on engines without it).
	Swapped uint32
	// KVUsedBlocks is the engine's KV blocks in use
	// (vllm:kv_cache_usage_perc × num_gpu_blocks), meaningful when
	// KVUsageKnown.
	KVUsedBlocks uint32
	KVUsageKnown bool
}

// KVConfig configures the service's inventory actors. Prompt hashing
// happens in the gateway with the same Keys; the actors only mirror and
// score.
type KVConfig struct {
	// Keys is the rule's chain hasher (exact vLLM contract or token-keyed);
	// every mirror indexes with it.
	Keys inventory.ChainHasher
	// MaxBlocks caps each mirror (LOXILB_KV_MAX_BLOCKS); 0 means
	// inventory.DefaultMaxBlocks.
	MaxBlocks int
	// StartFeed starts one subscription; nil runs the mirrors without feeds
	// (tests that apply updates by hand).
	StartFeed FeedStarter
	// SilentAfter is how long a DP rank's feed may stay disconnected before
	// its mirror is dropped: an endpoint's inventory is the union of its
	// ranks', and a rank that went silent (its publisher dead, frozen or
	// cut off) must not keep promising blocks llb no longer hears about.
	// 0 means DefaultRankSilentAfter.
	SilentAfter time.Duration
}

// DefaultRankSilentAfter is KVConfig.SilentAfter's default: three times
// the ZMQ feed's reconnect ceiling (inventory.DefaultReconnectIvlMax), so a
// publisher restart that reconnects is judged by its sequence numbers
// instead.
const DefaultRankSilentAfter = 15 * time.Second

// ServiceConfig is everything the runtime needs to run one rule: the
// compiled rule itself (what to run) and what the runtime builds around it
// (probe and scrape functions, the chain hasher, the feed starter) or tunes
// (table sizes, deadlines). The probe, breaker and endpoint settings are the
// rule's own; actors applies no default of its own to them.
type ServiceConfig struct {
	// Rule is the compiled rule: key, ladder spec, endpoints (with their
	// KV feeds), breaker and probe settings. Required; read-only (the
	// service keeps its own copy of what it changes).
	Rule *rule.Compiled
	// Env is the process-wide knob set.
	Env ladder.Env
	// Probes[ep] is endpoint ep's health probe; a missing or nil entry
	// means "not monitored": the endpoint is up until traffic proves
	// otherwise.
	Probes []ProbeFunc
	// Scrapes[ep] reads endpoint ep's engine metrics; missing or nil
	// disables scraping.
	Scrapes []ScrapeFunc
	// Sessions sizes the Tier-0 table (TTL comes from the rule's spec).
	Sessions ladder.SessionConfig
	// Router sizes the ladder router's own tables.
	Router ladder.RouterConfig
	// KV configures the inventory actors (used when the rule's KV-exact
	// mode is on).
	KV KVConfig
	// Ctrl times the external controller's staleness glide.
	Ctrl CtrlConfig
	// ProbeMaxBackoff caps the probe period while an endpoint is down (it
	// grows by the period per failure, as LoxiLB's +20 s per failure); 0
	// means 6 × the period.
	ProbeMaxBackoff time.Duration
	// ScrapeInterval is the engine-metrics period; 0 means
	// DefaultScrapeInterval.
	ScrapeInterval time.Duration
	// DecisionTimeout bounds fan-out replies per decision; 0 means
	// DefaultDecisionTimeout.
	DecisionTimeout time.Duration
	// RouteTimeout bounds a Route call outside parking; 0 means
	// DefaultRouteTimeout.
	RouteTimeout time.Duration
	// Peers links the service to the same rule on the other replicas of a
	// router that runs as several llbd processes (cluster mode; see
	// peers.go). nil on a single node.
	Peers Peers
	// PeerInterval is how often the router publishes its load to its peers
	// and re-reads theirs; 0 means DefaultPeerInterval.
	PeerInterval time.Duration
	// OnEndpointDown, when set, is called from the router actor each time
	// an endpoint is excluded by a failing probe or an opening breaker (the
	// gateway cancels legs still waiting for that endpoint's first byte).
	// It must not block.
	OnEndpointDown func(ep int)
}

// Validate checks what the service needs beyond a valid rule.
func (c *ServiceConfig) Validate() error {
	if c.Rule == nil {
		return errors.New("no compiled rule")
	}
	var errs []error
	if err := ladder.ValidateRule(&c.Rule.Spec, c.specs()); err != nil {
		errs = append(errs, err)
	}
	if c.Rule.Spec.KVExactMode != ladder.KVOff && c.KV.Keys == nil {
		errs = append(errs, errors.New("kv: kvExactMode is on but no chain hasher is configured"))
	}
	return errors.Join(errs...)
}

// withDefaults fills the service's own tunables, and the rule's probe and
// breaker settings where a hand-built rule (tests) left them zero — on a
// copy of the rule: the caller's stays untouched.
func (c ServiceConfig) withDefaults() ServiceConfig {
	if c.DecisionTimeout <= 0 {
		c.DecisionTimeout = DefaultDecisionTimeout
	}
	if c.RouteTimeout <= 0 {
		c.RouteTimeout = DefaultRouteTimeout
	}
	if c.ScrapeInterval <= 0 {
		c.ScrapeInterval = DefaultScrapeInterval
	}
	if c.PeerInterval <= 0 {
		c.PeerInterval = DefaultPeerInterval
	}
	r := *c.Rule
	p := &r.Probe
	if p.Period <= 0 {
		p.Period = rule.DefaultProbePeriodSec * time.Second
	}
	if p.AttemptTimeout <= 0 {
		p.AttemptTimeout = min(rule.DefaultProbeAttemptTimeout, p.Period)
	}
	if p.Retries <= 0 {
		p.Retries = rule.DefaultProbeRetries
	}
	if c.ProbeMaxBackoff <= 0 {
		c.ProbeMaxBackoff = 6 * p.Period
	}
	b := &r.Breaker
	if b.Threshold <= 0 {
		b.Threshold = rule.DefaultBreakerThreshold
		if r.Spec.PDDisagg {
			b.Threshold = rule.DefaultBreakerThresholdPD
		}
	}
	if b.OpenFor <= 0 {
		b.OpenFor = rule.DefaultBreakerOpen
	}
	c.Rule = &r
	if c.Ctrl.StaleAfter <= 0 {
		c.Ctrl.StaleAfter = DefaultCtrlStaleAfter
	}
	if c.Ctrl.DecayWindow <= 0 {
		c.Ctrl.DecayWindow = DefaultCtrlDecayWindow
	}
	if c.Sessions.TTL <= 0 {
		c.Sessions.TTL = r.Spec.SessionTTLOrDefault()
	}
	if c.KV.SilentAfter <= 0 {
		c.KV.SilentAfter = DefaultRankSilentAfter
	}
	return c
}

// specs returns the endpoints' ladder specs.
func (c *ServiceConfig) specs() []ladder.EndpointSpec {
	out := make([]ladder.EndpointSpec, len(c.Rule.Endpoints))
	for i := range c.Rule.Endpoints {
		out[i] = c.Rule.Endpoints[i].Spec
	}
	return out
}

// probe returns endpoint ep's probe (nil: not monitored).
func (c *ServiceConfig) probe(ep int) ProbeFunc {
	if ep < len(c.Probes) {
		return c.Probes[ep]
	}
	return nil
}

// Monitored reports whether endpoint ep is health-probed.
func (c *ServiceConfig) Monitored(ep int) bool { return c.probe(ep) != nil }

// scrape returns endpoint ep's scrape (nil: none).
func (c *ServiceConfig) scrape(ep int) ScrapeFunc {
	if ep < len(c.Scrapes) {
		return c.Scrapes[ep]
	}
	return nil
}
