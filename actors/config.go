package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
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
	// DefaultProbeInterval is the probe period when the rule sets none. The
	// seed page recommends 5 s probes for AI rules; LoxiLB's own default of
	// 60 s is far too slow for a load balancer in front of GPUs.
	DefaultProbeInterval = 5 * time.Second
	// DefaultProbeTimeout bounds one probe.
	DefaultProbeTimeout = 2 * time.Second
	// DefaultProbeRetries is the consecutive failures before an endpoint is
	// marked down (LoxiLB's probeRetries default is 2).
	DefaultProbeRetries = 2
	// DefaultScrapeInterval is the /metrics scrape period (capacity, queue
	// depth, KV usage). The headroom law reads the queue and the KV usage
	// as load signals, so they must be fresh: 250 ms (llm-d's endpoint
	// picker scrapes every 50 ms; llb adds what it sent since the last
	// scrape to the usage, so it can afford a slower one).
	DefaultScrapeInterval = 250 * time.Millisecond
	// DefaultBreakerThreshold is the consecutive-failure count that opens a
	// breaker (P/D rules auto-arm with 3, as LoxiLB's control plane does).
	DefaultBreakerThreshold = 3
	// DefaultBreakerOpen is how long an open breaker stays open before it
	// lets one trial request through (HALF_OPEN).
	DefaultBreakerOpen = 30 * time.Second
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

// EndpointConfig is one endpoint of a service.
type EndpointConfig struct {
	// Spec is the ladder's view of the endpoint (role, weight, backup).
	Spec ladder.EndpointSpec
	// Host and Port address the endpoint (the KV feed dials Host too).
	Host string
	Port int
	// Probe is the endpoint's health probe; nil means "not monitored":
	// the endpoint is considered up until traffic proves otherwise.
	Probe ProbeFunc
	// Scrape reads engine metrics; nil disables scraping.
	Scrape ScrapeFunc
	// Feeds are the endpoint's KV-event feeds, one per DP rank; empty when
	// the endpoint publishes no inventory (decode endpoints, KV off).
	Feeds []FeedConfig
}

// FeedConfig is one KV-event subscription (one endpoint, one DP rank).
type FeedConfig struct {
	// Rank is the data-parallel rank.
	Rank int
	// Endpoint is the ZMQ address, e.g. "tcp://10.0.0.1:5557".
	Endpoint string
	// ReplayEndpoint is the engine's replay ROUTER address, "" when none.
	ReplayEndpoint string
}

// ProbeConfig schedules health probes.
type ProbeConfig struct {
	// Interval is the probe period while up; 0 means DefaultProbeInterval.
	Interval time.Duration
	// Timeout bounds one probe; 0 means DefaultProbeTimeout.
	Timeout time.Duration
	// Retries is the consecutive failures that mark an endpoint down; 0
	// means DefaultProbeRetries. One success marks it up again (LoxiLB
	// issue #1087: any success resets the counter).
	Retries int
	// MaxBackoff caps the probe period while down (it grows by Interval per
	// failure, as LoxiLB's +20 s per failure); 0 means 6 × Interval.
	MaxBackoff time.Duration
}

// BreakerConfig configures each endpoint's circuit breaker.
type BreakerConfig struct {
	// Enabled arms the breakers (cb_enable; on by default for P/D rules).
	Enabled bool
	// Threshold is the consecutive transport failures that open a breaker;
	// 0 means DefaultBreakerThreshold.
	Threshold int
	// OriginErrThreshold is the consecutive origin 5xx responses (not 503)
	// that open it (LLB_PD_ORIGIN_ERR_THRESHOLD); 0 disables origin
	// demotion.
	OriginErrThreshold int
	// OpenFor is the OPEN window before HALF_OPEN; 0 means
	// DefaultBreakerOpen.
	OpenFor time.Duration
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
}

// ServiceConfig is everything the runtime needs to run one rule.
type ServiceConfig struct {
	// Key identifies the rule (e.g. "127.0.0.1:2020/tcp"); metric label
	// "service" and log field.
	Key string
	// Spec is the rule's ladder spec. StartedAt is set by StartService.
	Spec ladder.ServiceSpec
	// Endpoints, in rule order; the index is the endpoint's identity.
	Endpoints []EndpointConfig
	// Env is the process-wide knob set.
	Env ladder.Env
	// Sessions sizes the Tier-0 table (TTL comes from Spec).
	Sessions ladder.SessionConfig
	// Router sizes the ladder router's own tables.
	Router ladder.RouterConfig
	// KV configures the inventory actors (used when Spec.KVExactMode is on).
	KV KVConfig
	// Breaker configures the circuit breakers.
	Breaker BreakerConfig
	// Probe schedules the health probes.
	Probe ProbeConfig
	// Ctrl times the external controller's staleness glide.
	Ctrl CtrlConfig
	// ScrapeInterval is the engine-metrics period; 0 means
	// DefaultScrapeInterval.
	ScrapeInterval time.Duration
	// DecisionTimeout bounds fan-out replies per decision; 0 means
	// DefaultDecisionTimeout.
	DecisionTimeout time.Duration
	// RouteTimeout bounds a Route call outside parking; 0 means
	// DefaultRouteTimeout.
	RouteTimeout time.Duration
}

// Validate checks what the ladder does not: endpoint addresses and feeds.
func (c *ServiceConfig) Validate() error {
	var errs []error
	specs := make([]ladder.EndpointSpec, len(c.Endpoints))
	for i := range c.Endpoints {
		specs[i] = c.Endpoints[i].Spec
		if c.Endpoints[i].Host == "" || c.Endpoints[i].Port <= 0 || c.Endpoints[i].Port > 65535 {
			errs = append(errs, fmt.Errorf("endpoints[%d]: bad address %q:%d", i, c.Endpoints[i].Host, c.Endpoints[i].Port))
		}
	}
	if err := ladder.ValidateRule(&c.Spec, specs); err != nil {
		errs = append(errs, err)
	}
	if c.Spec.KVExactMode != ladder.KVOff && c.KV.Keys == nil {
		errs = append(errs, errors.New("kv: kvExactMode is on but no chain hasher is configured"))
	}
	return errors.Join(errs...)
}

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
	p := &c.Probe
	if p.Interval <= 0 {
		p.Interval = DefaultProbeInterval
	}
	if p.Timeout <= 0 {
		p.Timeout = DefaultProbeTimeout
	}
	if p.Retries <= 0 {
		p.Retries = DefaultProbeRetries
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 6 * p.Interval
	}
	if c.Ctrl.StaleAfter <= 0 {
		c.Ctrl.StaleAfter = DefaultCtrlStaleAfter
	}
	if c.Ctrl.DecayWindow <= 0 {
		c.Ctrl.DecayWindow = DefaultCtrlDecayWindow
	}
	b := &c.Breaker
	if b.Threshold <= 0 {
		b.Threshold = DefaultBreakerThreshold
	}
	if b.OpenFor <= 0 {
		b.OpenFor = DefaultBreakerOpen
	}
	if c.Sessions.TTL <= 0 {
		c.Sessions.TTL = c.Spec.SessionTTLOrDefault()
	}
	return c
}

// specs returns the endpoints' ladder specs.
func (c *ServiceConfig) specs() []ladder.EndpointSpec {
	out := make([]ladder.EndpointSpec, len(c.Endpoints))
	for i := range c.Endpoints {
		out[i] = c.Endpoints[i].Spec
	}
	return out
}
