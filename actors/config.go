package actors

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

// The runtime's own tunables as NewServiceConfig sets them (a rule's values
// come compiled in rule.Compiled).
const (
	// DefaultDecisionTimeout bounds how long the router waits for the
	// inventory and session replies of one decision; a reply that misses it
	// counts as a miss (overlap 0 / no session), never as a stall.
	DefaultDecisionTimeout = 5 * time.Millisecond
	// PinLookupTimeout bounds instead the session lookup of a request
	// naming a stored response (RouteRequest.Pin). Its miss is no cache
	// miss: the request would go to a worker that does not hold the
	// response and be answered 404, so the decision waits for the owner of
	// the pin longer (in a cluster it is another replica's shard).
	PinLookupTimeout = 250 * time.Millisecond
	// DefaultRouteTimeout is a tenth of how long Service.Route waits
	// (outside admission parking) for a router actor that handles no
	// message at all: a router that is slow but moving is waited for, one
	// that stopped answers ErrRouterTimeout (llbd --route-timeout).
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
	// LoRA is the engine's vllm:lora_requests_info (LoRA.Known false when
	// it publishes none).
	LoRA inventory.LoRAInfo
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
	// Positive when the rule's KV-exact mode is on (NewServiceConfig:
	// DefaultRankSilentAfter).
	SilentAfter time.Duration
}

// DefaultRankSilentAfter is KVConfig.SilentAfter as NewServiceConfig sets
// it: three times
// the ZMQ feed's reconnect ceiling (inventory.DefaultReconnectIvlMax), so a
// publisher restart that reconnects is judged by its sequence numbers
// instead.
const DefaultRankSilentAfter = 15 * time.Second

// ServiceConfig is everything the runtime needs to run one rule: the
// compiled rule itself (what to run) and what the runtime builds around it
// (probe and scrape functions, the chain hasher, the feed starter) or tunes
// (table sizes, deadlines). The probe, breaker, session and endpoint
// settings are the rule's own, read as compiled; actors applies no default
// to them. NewServiceConfig sets the runtime's tunables; Validate refuses a
// config whose tunables are unset.
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
	// Sessions sizes the Tier-0 table: Shards and MaxEntries (0 takes the
	// ladder's table size). Its TTL is ignored: pins live the rule's
	// Spec.SessionTTL.
	Sessions ladder.SessionConfig
	// Router sizes the ladder router's own tables.
	Router ladder.RouterConfig
	// KV configures the inventory actors (used when the rule's KV-exact
	// mode is on).
	KV KVConfig
	// Ctrl times the external controller's staleness glide (positive).
	Ctrl CtrlConfig
	// ScrapeInterval is the engine-metrics period (positive).
	ScrapeInterval time.Duration
	// DecisionTimeout bounds fan-out replies per decision (positive).
	DecisionTimeout time.Duration
	// RouteTimeout bounds a Route call outside parking while the router
	// handles no message (positive), 10 of them in a row: a Route whose
	// answer is late waits on as long as the router handled messages in
	// the last one, so saturation slows routing down without failing it.
	RouteTimeout time.Duration
	// Peers links the service to the same rule on the other replicas of a
	// router that runs as several llbd processes (cluster mode; see
	// peers.go). nil on a single node.
	Peers Peers
	// PeerInterval is how often the router publishes its load to its peers
	// and re-reads theirs (positive).
	PeerInterval time.Duration
	// OnEndpointDown, when set, is called from the router actor each time
	// an endpoint is excluded by a failing probe or an opening breaker (the
	// gateway cancels legs still waiting for that endpoint's first byte).
	// It must not block.
	OnEndpointDown func(ep int)
}

// NewServiceConfig is the config that runs compiled rule r under env with
// the runtime's default tunables (Default*); the caller adds the probe,
// scrape and feed functions, the chain hasher and, in a cluster, the peers.
func NewServiceConfig(r *rule.Compiled, env ladder.Env) ServiceConfig {
	return ServiceConfig{
		Rule:            r,
		Env:             env,
		Ctrl:            CtrlConfig{StaleAfter: DefaultCtrlStaleAfter, DecayWindow: DefaultCtrlDecayWindow},
		ScrapeInterval:  DefaultScrapeInterval,
		DecisionTimeout: DefaultDecisionTimeout,
		RouteTimeout:    DefaultRouteTimeout,
		PeerInterval:    DefaultPeerInterval,
		KV:              KVConfig{SilentAfter: DefaultRankSilentAfter},
	}
}

// Validate checks what the service needs beyond a valid rule (the ladder
// validates the rule itself, once, when Start builds its router).
func (c *ServiceConfig) Validate() error {
	if c.Rule == nil {
		return errors.New("no compiled rule")
	}
	var errs []error
	if c.Rule.Spec.KVExactMode != ladder.KVOff && c.KV.Keys == nil {
		errs = append(errs, errors.New("kv: kvExactMode is on but no chain hasher is configured"))
	}
	if c.Rule.Spec.KVExactMode != ladder.KVOff && c.KV.SilentAfter <= 0 {
		errs = append(errs, fmt.Errorf("kv: SilentAfter is %v; want a positive duration (NewServiceConfig sets it)", c.KV.SilentAfter))
	}
	for _, t := range []struct {
		name string
		d    time.Duration
	}{
		{"ScrapeInterval", c.ScrapeInterval}, {"DecisionTimeout", c.DecisionTimeout}, {"RouteTimeout", c.RouteTimeout},
		{"PeerInterval", c.PeerInterval}, {"Ctrl.StaleAfter", c.Ctrl.StaleAfter}, {"Ctrl.DecayWindow", c.Ctrl.DecayWindow},
	} {
		if t.d <= 0 {
			errs = append(errs, fmt.Errorf("%s is %v; want a positive duration (NewServiceConfig sets every tunable)", t.name, t.d))
		}
	}
	return errors.Join(errs...)
}

// lookupTimeout is how long a decision waits for its session lookup: the
// decision timeout, or PinLookupTimeout for a stored response's pin.
func (c *ServiceConfig) lookupTimeout(pin bool) time.Duration {
	if pin {
		return max(c.DecisionTimeout, PinLookupTimeout)
	}
	return c.DecisionTimeout
}

// sessionConfig is the Tier-0 table's configuration: Sessions' size, the
// rule's TTL.
func (c *ServiceConfig) sessionConfig() ladder.SessionConfig {
	s := c.Sessions
	s.TTL = c.Rule.Spec.SessionTTL
	return s
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
