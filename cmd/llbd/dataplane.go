package main

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/gateway"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/restapi"
)

// dataPlane is the restapi.Runtime of a daemon with its data plane: it turns
// each REST rule into a gateway.Rule (listener + actors service) and
// reports the live state back in the REST shapes.
type dataPlane struct {
	rt       *gateway.Runtime
	defaults ruleDefaults

	mu sync.Mutex
	// unserved holds rules the data plane keeps but cannot serve (an L4
	// mode), with the reason.
	unserved map[restapi.RuleKey]string
}

// ruleDefaults are the daemon-wide values a rule inherits.
type ruleDefaults struct {
	// Env is the routing knob set (LOXILB_KV_*, LLB_PD_*, LLB_KV_*).
	Env ladder.Env
	// NoneHashSeed is LLB_KV_NONE_HASH_SEED: the workers' PYTHONHASHSEED
	// when a rule has no kvNoneHashSeed.
	NoneHashSeed string
	// PrefillTimeout is LLB_PD_PREFILL_TIMEOUT_SEC (0 = gateway default).
	PrefillTimeout time.Duration
	// ProbePeriod is the probe period of rules that set no probeTimeout.
	ProbePeriod time.Duration
	// TokenizerDir is --tokenizer-dir / LLB_TOKENIZER_DIR: the tokenizer
	// directory of rules that set no kvTokenizerDir ("" = /tokenize).
	TokenizerDir string
}

// DataPlaneName implements restapi.DataPlaneNamer.
func (d *dataPlane) DataPlaneName() string { return "actors+gateway" }

// Apply implements restapi.Runtime.
func (d *dataPlane) Apply(ctx context.Context, r restapi.Rule) error {
	if why := unservable(&r); why != "" {
		d.mu.Lock()
		d.unserved[r.Key] = why
		d.mu.Unlock()
		return d.rt.Remove(ctx, r.Key.String())
	}
	gr, err := gatewayRule(&r, d.defaults)
	if err != nil {
		return err
	}
	d.mu.Lock()
	delete(d.unserved, r.Key)
	d.mu.Unlock()
	return d.rt.Apply(ctx, gr)
}

// Remove implements restapi.Runtime.
func (d *dataPlane) Remove(ctx context.Context, k restapi.RuleKey) error {
	d.mu.Lock()
	delete(d.unserved, k)
	d.mu.Unlock()
	return d.rt.Remove(ctx, k.String())
}

// Status implements restapi.Runtime.
func (d *dataPlane) Status(k restapi.RuleKey) (restapi.RuleStatus, bool) {
	d.mu.Lock()
	why, un := d.unserved[k]
	d.mu.Unlock()
	if un {
		return restapi.RuleStatus{Operating: restapi.OperatingOffline, Detail: why}, true
	}
	st, ok := d.rt.Status(k.String())
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
	svc := d.rt.Service(k.String())
	if svc == nil {
		return out, true
	}
	cfg := svc.Config()
	for _, ep := range cfg.Endpoints {
		if ep.Probe != nil {
			out.Monitored = true
		}
	}
	for i, e := range st.Service.Endpoints {
		if i >= len(cfg.Endpoints) {
			break
		}
		es := endpointStatus(cfg, i, e)
		if es.Inventory {
			// The router's count is as of the endpoint's last Tier-1.5
			// score; the inventory actor knows the current one.
			if p, err := svc.Inventory(i, 0, 0, statusInventoryTimeout); err == nil {
				es.InventoryBlocks = p.Total
			}
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
	ec := cfg.Endpoints[i]
	var addr netip.AddrPort
	if a, err := netip.ParseAddr(ec.Host); err == nil && ec.Port >= 0 && ec.Port <= 65535 {
		addr = netip.AddrPortFrom(a, uint16(ec.Port))
	}
	es := restapi.EndpointStatus{
		Addr:             addr,
		Active:           e.Available(),
		Probe:            restapi.ProbeOff,
		InFlight:         int(e.ActiveConns),
		Parked:           int(e.Parked),
		KVCapacityBlocks: int64(e.KVCapacityBlocks),
		Inventory:        len(ec.Feeds) > 0,
		InventoryBlocks:  int(e.InventoryBlocks),
		Controller:       controllerStatus(e.Controller),
	}
	if ec.Probe != nil {
		es.Probe = restapi.ProbeDown
		if e.Up {
			es.Probe = restapi.ProbeUp
		}
	}
	if cfg.Breaker.Enabled {
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
	}
	return es
}

// unservable says why llb's data plane cannot serve r ("" when it can).
func unservable(r *restapi.Rule) string {
	sa := r.Entry.ServiceArguments
	switch {
	case sa.Mode != 4:
		return fmt.Sprintf("mode %d is an L4 mode; llb's data plane serves fullproxy (mode 4) rules only", sa.Mode)
	case sa.Security != 0:
		return "TLS termination (security 1/2) is not served by llb's data plane yet"
	case sa.Protocol != "" && sa.Protocol != "tcp":
		return fmt.Sprintf("protocol %q is not served by llb's data plane (tcp only)", sa.Protocol)
	case sa.PortMax != 0:
		return "port ranges are not served by llb's data plane"
	}
	return ""
}

// gatewayRule converts a validated REST rule into the runtime's rule.
func gatewayRule(r *restapi.Rule, def ruleDefaults) (gateway.Rule, error) {
	sa := r.Entry.ServiceArguments
	eff := &r.Effective
	vip, err := netip.ParseAddr(sa.ExternalIP)
	if err != nil {
		return gateway.Rule{}, fmt.Errorf("externalIP %q: %w", sa.ExternalIP, err)
	}
	key := r.Key.String()
	seed := def.NoneHashSeed
	if eff.KV.NoneHashSeed != nil {
		seed = *eff.KV.NoneHashSeed
	}
	probePeriod := eff.ProbePeriod
	if sa.ProbeTimeout == 0 && def.ProbePeriod > 0 {
		probePeriod = def.ProbePeriod
	}
	gw := gateway.RuleConfig{
		Name:        key,
		VIP:         vip,
		Port:        r.Key.Port,
		PDDisagg:    eff.PD.Enabled,
		KVExactMode: ladder.KVExactMode(eff.KV.Mode),
		Hasher: gateway.HasherConfig{
			Algo: eff.KV.HashAlgo, BlockSize: eff.KV.BlockSize, Seed: seed,
			TokenKeyed: eff.KV.BlockKey == restapi.BlockKeyTokens,
		},
		PrefixHashLevel:   eff.CHWBL.Level,
		PrefixHashFlags:   int(eff.CHWBL.Flags),
		SessionHeaderName: sa.SessionHeaderName,
		TokenizerDir:      cmp.Or(eff.KV.TokenizerDir, def.TokenizerDir),
		ConnectTimeout:    eff.ConnectTimeout,
		DataTimeout:       time.Duration(sa.TimeoutMemberData) * time.Millisecond,
		PrefillTimeout:    def.PrefillTimeout,
		MaxStreamDuration: eff.MaxStreamDuration,
		SSEMode:           sa.SSEMode,
		Paused:            !eff.AdminUp,
		Probe: gateway.ProbeConfig{
			Type:     sa.ProbeType,
			Port:     uint16(sa.ProbePort),
			Request:  sa.ProbeReq,
			Response: sa.ProbeResp,
			Period:   probePeriod,
			Retries:  eff.ProbeRetries,
		},
	}
	sc := actors.ServiceConfig{
		Spec: ladder.ServiceSpec{
			Name:                key,
			Selector:            ladder.SelectorKind(sa.Sel),
			PDDisagg:            eff.PD.Enabled,
			CacheAware:          eff.PD.CacheAware,
			SessionTTL:          eff.PD.SessionTTL,
			CacheThresholdPct:   eff.PD.CacheThresholdPct,
			BalanceAbsThreshold: eff.PD.BalanceAbsThreshold,
			KVExactMode:         ladder.KVExactMode(eff.KV.Mode),
			KVBlockSize:         eff.KV.BlockSize,
			KVWarmup:            eff.KV.Warmup,
			Admission:           admissionSpec(&eff.Admission),
		},
		Env: def.Env,
		Breaker: actors.BreakerConfig{
			Enabled:            eff.BreakerEnabled,
			Threshold:          breakerThreshold(eff.PD.Enabled),
			OriginErrThreshold: int(def.Env.OriginErrThreshold),
		},
		Probe: actors.ProbeConfig{Interval: probePeriod, Retries: eff.ProbeRetries},
	}
	for i, ep := range eff.Endpoints {
		src := &r.Entry.Endpoints[i]
		role := ladder.Role(ep.Role)
		gw.Endpoints = append(gw.Endpoints, gateway.EndpointConfig{
			Addr: ep.Addr, NixlPort: ep.NixlPort, Role: role,
			Probe: gateway.EndpointProbe{
				MonitorAddress: src.MonitorAddress, HTTPMethod: src.HTTPMethod, URLPath: src.URLPath,
				ExpectedCodes: src.ExpectedCodes, HTTPVersion: src.HTTPVersion, DomainName: src.DomainName,
			},
		})
		ac := actors.EndpointConfig{
			Spec: ladder.EndpointSpec{Addr: ep.Addr.String(), Role: role, Weight: ep.Weight, Backup: ep.Backup},
			Host: ep.Addr.Addr().String(),
			Port: int(ep.Addr.Port()),
		}
		if mirrored, _ := eff.MirrorsKV(i); mirrored {
			for rank := 0; rank < max(eff.KV.DPRanks, 1); rank++ {
				fc := actors.FeedConfig{Rank: rank, Endpoint: inventory.FeedEndpoint(ac.Host, int(eff.KV.ZmqPort), rank)}
				if eff.KV.ReplayPort != 0 {
					fc.ReplayEndpoint = inventory.FeedEndpoint(ac.Host, int(eff.KV.ReplayPort), rank)
				}
				ac.Feeds = append(ac.Feeds, fc)
			}
		}
		sc.Endpoints = append(sc.Endpoints, ac)
	}
	return gateway.Rule{Key: key, Gateway: gw, Service: sc}, nil
}

// breakerThreshold: P/D rules are auto-armed with 3 consecutive failures
// (LoxiLB's control plane); cb_enable on other rules uses the data plane's
// own default of 5.
func breakerThreshold(pd bool) int {
	if pd {
		return 3
	}
	return 5
}

// admissionSpec maps the rule's fc_* admission fields onto the ladder's
// per-rule overrides (0 inherits the LLB_PD_* environment). fc_mode "off"
// is not a per-rule kill switch here: the environment still applies.
func admissionSpec(a *restapi.EffectiveAdmission) ladder.AdmissionSpec {
	perEP := a.PrefillMaxInflight
	if perEP == 0 {
		perEP = a.EpMaxInflight
	}
	return ladder.AdmissionSpec{
		MaxInflightPerEP: perEP,
		QueueDepthPerEP:  min(a.MaxQueueDepth, ladder.MaxQueueDepthPerEP),
		MaxPark:          a.MaxQueueWait,
		MaxTotalInflight: int64(a.MaxOutstanding),
	}
}
