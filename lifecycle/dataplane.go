package lifecycle

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/gateway"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/replica"
	"github.com/llbproject/llb/restapi"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/tenant"
)

// DataPlane is the restapi.Runtime of a daemon with its data plane: it
// compiles each rule (rule.Compile) and runs it — a listener and an actors
// service — and reports the live state back in the REST shapes. It is where
// rule changes become running services, whichever source they come from.
type DataPlane struct {
	rt       *ruleSet
	sys      *actors.System
	log      zerolog.Logger
	defaults ruleDefaults
	// dataBind, when valid, replaces every rule's externalIP as the
	// listener's address (--data-bind).
	dataBind netip.Addr
	// member is the cluster membership (nil on a single node).
	member *replica.Member
	// drains relays TensorRT-LLM drains between replicas (nil on a single
	// node).
	drains *drainRelay
	// keys are the API keys' limits (nil: none); stopUsage ends sharing
	// their buckets with the peers.
	keys      *tenant.Gate
	stopUsage chan struct{}

	mu sync.Mutex
	// unserved holds rules the data plane keeps but cannot serve (an L4
	// mode), with the reason.
	unserved map[rule.RuleKey]string
	// served holds the keys of the rules handed to the gateway runtime.
	served map[string]struct{}
	// tables names each rule's session table in the cluster (its owners
	// are prefetched while the rule runs).
	tables map[string]string
}

// ruleDefaults are the daemon-wide values a rule inherits.
type ruleDefaults struct {
	// Env is the routing knob set (LOXILB_KV_*, LLB_PD_*, LLB_KV_*).
	Env ladder.Env
	// Rule is what rule.Compile takes from the environment.
	Rule rule.Defaults
	// RouteTimeout is every service's actors.ServiceConfig.RouteTimeout
	// (0: actors.DefaultRouteTimeout).
	RouteTimeout time.Duration
	// DecisionTimeout is every service's actors.ServiceConfig.DecisionTimeout
	// (0: actors.DefaultDecisionTimeout).
	DecisionTimeout time.Duration
}

// Config configures a DataPlane.
type Config struct {
	// Log is the base logger (components add their own field).
	Log zerolog.Logger
	// Metrics receives every rule's series.
	Metrics *metrics.Set
	// Env is the routing knob set (ladder.ParseEnv).
	Env ladder.Env
	// Defaults are the rule defaults from the environment
	// (rule.DefaultsFromEnv).
	Defaults rule.Defaults
	// KVMaxMsgSize bounds one KV-event message (LLB_KV_MAX_MSG_BYTES; 0 =
	// the default).
	KVMaxMsgSize int
	// AccessLog writes every request's access line at Info.
	AccessLog bool
	// HideBackendAddrs keeps endpoint addresses out of client answers.
	HideBackendAddrs bool
	// DataBind, when valid, is the address every rule's listener binds
	// instead of the rule's externalIP (--data-bind): replicas behind one
	// VIP on different hosts, or several replicas on one machine. The rule
	// keeps its externalIP as its identity.
	DataBind netip.Addr
	// Cluster, when set, makes this data plane one replica of a router
	// that runs as several llbd processes: it starts the cluster member and
	// links every service to its peers (sessions, load, health, Tier-1).
	// nil: a single node; nothing of the cluster starts.
	Cluster *replica.Config
	// Feeds starts KV-event subscriptions; nil means ZMQ (tests pass
	// their own).
	Feeds actors.FeedStarter
	// BodyBufferBytes bounds the request bodies every listener holds at
	// once, in bytes (--body-buffer-bytes; 0: no bound beyond each rule's
	// body limit). See gateway.BodyBudget.
	BodyBufferBytes int64
	// MaxConns bounds the client connections every listener serves at once
	// (--max-conns; 0: no bound). See gateway.ConnLimit.
	MaxConns int
	// ClientSendTimeout is the send bound (--client-send-timeout; 0: off).
	// See gateway.Options.ClientSendTimeout.
	ClientSendTimeout time.Duration
	// RouteTimeout bounds the wait for a routing decision while the router
	// handles no message (--route-timeout; 0: actors.DefaultRouteTimeout).
	RouteTimeout time.Duration
	// DecisionTimeout bounds a decision's wait for the inventory and
	// session replies (--decision-timeout; 0: actors.DefaultDecisionTimeout).
	DecisionTimeout time.Duration
	// MaxTenantLabels bounds the tenant label of the per-tenant metrics
	// (--max-tenant-labels; 0: gateway.DefaultMaxTenantLabels).
	MaxTenantLabels int
	// Keys are the API keys and tenant limits rules with sse_mode enforce
	// (the catalog publishes them); nil: none. In cluster mode the
	// replicas share their buckets (consumption reports, replica.Usage).
	Keys *tenant.Gate
}

// New starts the actor runtime and an empty data plane.
func New(cfg Config) (*DataPlane, error) {
	sys := actors.NewSystem(cfg.Log.With().Str(logfield.Component, "actors").Logger(), cfg.Metrics)
	var budget *gateway.BodyBudget
	if cfg.BodyBufferBytes > 0 {
		budget = gateway.NewBodyBudget(cfg.BodyBufferBytes, cfg.Metrics)
	}
	var conns *gateway.ConnLimit
	if cfg.MaxConns > 0 {
		conns = gateway.NewConnLimit(cfg.MaxConns, cfg.Metrics)
	}
	var drains *drainRelay
	if cfg.Cluster != nil {
		drains = newDrainRelay()
	}
	rt, err := newRuleSet(ruleSetConfig{System: sys, Log: cfg.Log, Metrics: cfg.Metrics, KVMaxMsgSize: cfg.KVMaxMsgSize,
		Feeds: cfg.Feeds, Drains: drains, BodyBudget: budget, ConnLimit: conns,
		TenantMetrics: gateway.NewTenantMetrics(cfg.Metrics, cfg.MaxTenantLabels), Keys: cfg.Keys,
		Options: gateway.Options{AccessLog: cfg.AccessLog, HideBackendAddrs: cfg.HideBackendAddrs, ClientSendTimeout: sendTimeout(cfg.ClientSendTimeout)}})
	if err != nil {
		sys.Shutdown()
		return nil, err
	}
	d := &DataPlane{
		rt:       rt,
		sys:      sys,
		log:      cfg.Log.With().Str(logfield.Component, "lifecycle").Logger(),
		defaults: ruleDefaults{Env: cfg.Env, Rule: cfg.Defaults, RouteTimeout: cfg.RouteTimeout, DecisionTimeout: cfg.DecisionTimeout},
		dataBind: cfg.DataBind,
		unserved: make(map[rule.RuleKey]string),
		served:   make(map[string]struct{}),
		tables:   make(map[string]string),
		keys:     cfg.Keys,
	}
	if cfg.Cluster != nil {
		d.drains = drains
		if err := d.startMember(*cfg.Cluster); err != nil {
			_ = rt.close(context.Background())
			sys.Shutdown()
			return nil, err
		}
		d.clusterMetrics(cfg.Metrics)
	}
	return d, nil
}

// sendTimeout is gateway.Options.ClientSendTimeout for the daemon's
// --client-send-timeout, where 0 turns the bound off.
func sendTimeout(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// Close drains and stops every rule (until ctx ends), then the actor
// runtime.
func (d *DataPlane) Close(ctx context.Context) {
	if err := d.rt.close(ctx); err != nil {
		d.log.Warn().Err(err).Msg("data plane stopped with errors")
	}
	if d.stopUsage != nil {
		close(d.stopUsage)
	}
	if d.member != nil {
		d.member.Stop()
	}
	d.sys.Shutdown()
}

// Service returns rule key's running actors service, or nil (debug
// listener, tests).
func (d *DataPlane) Service(key string) *actors.Service { return d.rt.service(key) }

// DataPlaneName implements restapi.DataPlaneNamer.
func (d *DataPlane) DataPlaneName() string { return "actors+gateway" }

// Apply implements restapi.Runtime.
func (d *DataPlane) Apply(ctx context.Context, r rule.Rule) error {
	c, err := rule.Compile(&r, d.defaults.Rule)
	if errors.Is(err, rule.ErrNotServed) {
		d.mu.Lock()
		d.unserved[r.Key] = err.Error()
		d.mu.Unlock()
		return d.remove(ctx, r.Key.String())
	}
	if err != nil {
		return err
	}
	d.mu.Lock()
	delete(d.unserved, r.Key)
	d.served[c.Key] = struct{}{}
	d.mu.Unlock()
	rc := c
	if d.dataBind.IsValid() {
		bound := *c
		bound.VIP = d.dataBind
		rc = &bound
	}
	sc := actors.NewServiceConfig(rc, d.defaults.Env)
	if d.defaults.RouteTimeout > 0 {
		sc.RouteTimeout = d.defaults.RouteTimeout
	}
	if d.defaults.DecisionTimeout > 0 {
		sc.DecisionTimeout = d.defaults.DecisionTimeout
	}
	if d.member != nil {
		port := newClusterPort(d.member, rc)
		sc.Peers = port
		d.mu.Lock()
		if old, ok := d.tables[c.Key]; ok && old != port.spec.Service {
			d.member.Sessions.Forget(old)
		}
		d.tables[c.Key] = port.spec.Service
		d.mu.Unlock()
	}
	return d.rt.apply(ctx, runSpec{rule: rc, service: sc})
}

// Remove implements restapi.Runtime.
func (d *DataPlane) Remove(ctx context.Context, k rule.RuleKey) error {
	d.mu.Lock()
	delete(d.unserved, k)
	d.mu.Unlock()
	return d.remove(ctx, k.String())
}

// remove stops the rule's service and listener and withdraws its load
// from the peers' view.
func (d *DataPlane) remove(ctx context.Context, key string) error {
	d.mu.Lock()
	delete(d.served, key)
	d.mu.Unlock()
	err := d.rt.remove(ctx, key)
	if d.member != nil {
		d.member.Load.Remove(key)
		d.mu.Lock()
		if t, ok := d.tables[key]; ok {
			d.member.Sessions.Forget(t)
			delete(d.tables, key)
		}
		d.mu.Unlock()
	}
	return err
}

// Status implements restapi.Runtime.
func (d *DataPlane) Status(k rule.RuleKey) (restapi.RuleStatus, bool) {
	d.mu.Lock()
	why, un := d.unserved[k]
	d.mu.Unlock()
	if un {
		return restapi.RuleStatus{Operating: restapi.OperatingOffline, Detail: why}, true
	}
	st, ok := d.rt.status(k.String())
	if !ok {
		return restapi.RuleStatus{}, false
	}
	out := restapi.RuleStatus{
		Stats: restapi.RuleStats{
			ActiveConnections: uint64(max(st.Requests.Active, 0)),
			TotalConnections:  uint64(max(st.Requests.Total, 0)),
			BytesIn:           uint64(max(st.Requests.BytesIn, 0)),
			BytesOut:          uint64(max(st.Requests.BytesOut, 0)),
		},
	}
	if st.BindError != nil {
		out.ListenErr = st.BindError.Error()
	}
	if !st.ServiceOK {
		out.Detail = "router did not answer in time"
		return out, true
	}
	svc := d.rt.service(k.String())
	if svc == nil {
		return out, true
	}
	cfg := svc.Config()
	for i := range cfg.Rule.Endpoints {
		if cfg.Monitored(i) {
			out.Monitored = true
		}
	}
	for i, e := range st.Service.Endpoints {
		if i >= len(cfg.Rule.Endpoints) {
			break
		}
		es := endpointStatus(cfg, i, e)
		if es.Inventory {
			// The router's count is as of the endpoint's last Tier-1.5
			// score; the inventory actor knows the current one.
			if p, err := svc.Inventory(i, 0, 0, statusInventoryTimeout); err == nil {
				es.InventoryBlocks = p.Total
				es.KVIgnored = kvIgnored(p.Ranks, p.Feeds)
				for _, m := range p.Ranks {
					es.OffloadBlocks += m.OffloadBlocks
				}
			}
			es.KVPrediction = kvPrediction(e.Prediction)
		}
		if cfg.Rule.Endpoints[i].Role() != ladder.RoleDecode {
			es.TTFTPrediction = ttftPrediction(e.TTFT)
		}
		out.Endpoints = append(out.Endpoints, es)
	}
	return out, true
}

// statusInventoryTimeout bounds the ask for one endpoint's current inventory
// size in Status (on a miss the router's last-seen count is reported).
const statusInventoryTimeout = 250 * time.Millisecond

// endpointStatus is endpoint i's live state in restapi's shape.
func endpointStatus(cfg actors.ServiceConfig, i int, e actors.EndpointStatus) restapi.EndpointStatus {
	ec := &cfg.Rule.Endpoints[i]
	es := restapi.EndpointStatus{
		Addr:             ec.Addr,
		Active:           e.Available(),
		Probe:            restapi.ProbeOff,
		InFlight:         int(e.ActiveConns),
		Parked:           int(e.Parked),
		KVCapacityBlocks: int64(e.KVCapacityBlocks),
		Inventory:        len(ec.Feeds) > 0,
		InventoryBlocks:  int(e.InventoryBlocks),
		Controller:       controllerStatus(e.Controller),
	}
	if cfg.Monitored(i) {
		es.Probe = restapi.ProbeDown
		if e.Up {
			es.Probe = restapi.ProbeUp
		}
	}
	if cfg.Rule.Breaker.Enabled {
		es.Breaker = e.Breaker.String()
	}
	switch {
	case !e.Up:
		es.Detail = "probe failing"
	case e.Breaker == actors.BreakerOpen:
		es.Detail = "breaker open"
	case e.Ctrl == ladder.CtrlDisabled:
		es.Detail = "disabled by controller"
	case e.Ctrl == ladder.CtrlDraining:
		es.Detail = "draining"
	case e.PeerExcluded:
		es.Detail = "excluded by another replica (breaker open or probe down there)"
	}
	return es
}
