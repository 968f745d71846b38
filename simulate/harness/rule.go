package harness

import (
	"encoding/json"
	"fmt"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/worker"
)

// KVWarmupSec is the kvWarmupSec every KV-exact rule gets: llbd's default
// (30 s of wall time) would keep Tier 1.5 off for most of a short run. A
// fresh fleet starts with empty caches, so there is nothing to catch up on;
// one second lets the ZMQ subscriptions connect before the first request.
const KVWarmupSec = 1

// RuleJSON builds the LoxiLB rule that serves strategy s on vip:port over
// the fleet f: the fleet's role-less workers for ShapePool; for ShapePD its
// prefill and decode workers, or, on a fleet without P/D roles (kv_both
// workers, see FleetConfig.PDSameWorkers), every worker twice — first all as
// prefill endpoints (indexes 0..n-1), then all as decode endpoints; the
// KV-event keys from the fleet's rule fragment when Tier 1.5 is on; the
// fleet's engine (kvEngineType, and SGLang P/D's pdBootstrapPort) when its
// workers are not vLLM's.
func RuleJSON(s *strategy.Strategy, f *fleet.Fleet, vip string, port int) ([]byte, error) {
	frag := f.Rule()
	sa := map[string]any{
		"externalIP": vip, "port": port, "protocol": "tcp", "mode": 4, "sel": int(s.Selector),
		"name": "llbsim-bench-" + s.Name,
	}
	eps := frag.Endpoints
	switch s.Shape {
	case strategy.ShapePD:
		if !frag.PDDisaggMode {
			eps = make([]fleet.Endpoint, 0, 2*len(frag.Endpoints))
			for _, role := range []ladder.Role{ladder.RolePrefill, ladder.RoleDecode} {
				for _, ep := range frag.Endpoints {
					if ep.NIXLPort == 0 {
						return nil, fmt.Errorf("strategy %s: worker %s:%d has no NIXL side channel (a P/D strategy on the serving workers needs kv_both workers): %w",
							s.Name, ep.EndpointIP, ep.TargetPort, ErrConfig)
					}
					ep.EpRole = int(role)
					eps = append(eps, ep)
				}
			}
		}
		sa["pd_disagg_mode"] = true
		if frag.PDBootstrapPort != 0 {
			sa["pdBootstrapPort"] = frag.PDBootstrapPort
		}
		if s.CacheAware {
			sa["pd_cache_aware_mode"] = true
		}
	default:
		if frag.PDDisaggMode || hasNIXL(frag.Endpoints) {
			return nil, fmt.Errorf("strategy %s needs a role-less fleet: %w", s.Name, ErrConfig)
		}
	}
	if frag.KVEngineType != "" {
		sa["kvEngineType"] = frag.KVEngineType
	}
	if s.KVExact {
		// TensorRT-LLM publishes nothing: llbd drains each endpoint's
		// POST /kv_cache_events, so its rules name no ZMQ port.
		drained := f.Dialect() == worker.DialectTRTLLM
		if frag.KVZmqPort == 0 && !drained {
			return nil, fmt.Errorf("strategy %s needs KV events but no worker publishes: %w", s.Name, ErrConfig)
		}
		sa["kvExactMode"] = int(s.KVMode())
		if !drained {
			sa["kvZmqPort"] = frag.KVZmqPort
		}
		sa["kvBlockSize"] = frag.KVBlockSize
		sa["kvHashAlgo"] = frag.KVHashAlgo
		sa["kvWarmupSec"] = KVWarmupSec
		if frag.KVNoneHashSeed != nil {
			sa["kvNoneHashSeed"] = *frag.KVNoneHashSeed
		}
	}
	b, err := json.Marshal(map[string]any{"serviceArguments": sa, "endpoints": eps})
	if err != nil {
		return nil, fmt.Errorf("rule: %w", err)
	}
	return b, nil
}

// rule is the run's rule: the strategy's (RuleJSON) with c.RuleArgs added.
func (c *RunConfig) rule(f *fleet.Fleet, vip string, port int) ([]byte, error) {
	b, err := RuleJSON(&c.Strategy, f, vip, port)
	if err != nil || len(c.RuleArgs) == 0 {
		return b, err
	}
	var r struct {
		SA        map[string]any    `json:"serviceArguments"`
		Endpoints []json.RawMessage `json:"endpoints"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("rule: %w", err)
	}
	for k, v := range c.RuleArgs {
		if _, taken := r.SA[k]; taken {
			return nil, fmt.Errorf("rule argument %s is the strategy's: %w", k, ErrConfig)
		}
		r.SA[k] = v
	}
	if b, err = json.Marshal(map[string]any{"serviceArguments": r.SA, "endpoints": r.Endpoints}); err != nil {
		return nil, fmt.Errorf("rule: %w", err)
	}
	return b, nil
}

// hasNIXL reports whether any endpoint has a NIXL side channel (a P/D
// worker, which a single-pool rule must not list).
func hasNIXL(eps []fleet.Endpoint) bool {
	for _, ep := range eps {
		if ep.NIXLPort != 0 {
			return true
		}
	}
	return false
}
