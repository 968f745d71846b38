package harness

import (
	"encoding/json"
	"fmt"

	"github.com/llbproject/llb/simulate/fleet"
)

// KVWarmupSec is the kvWarmupSec every KV-exact rule gets: llbd's default
// (30 s of wall time) would keep Tier 1.5 off for most of a short run. A
// fresh fleet starts with empty caches, so there is nothing to catch up on;
// one second lets the ZMQ subscriptions connect before the first request.
const KVWarmupSec = 1

// RuleJSON builds the LoxiLB rule that serves strategy s on vip:port over
// the fleet f: the fleet's role-less workers for ShapePool, its prefill and
// decode workers for ShapePD; the KV-event keys from the fleet's rule
// fragment when Tier 1.5 is on.
func RuleJSON(s *Strategy, f *fleet.Fleet, vip string, port int) ([]byte, error) {
	frag := f.Rule()
	sa := map[string]any{
		"externalIP": vip, "port": port, "protocol": "tcp", "mode": 4, "sel": s.Selector,
		"name": "llbsim-bench-" + s.Name,
	}
	eps := frag.Endpoints
	switch s.Shape {
	case ShapePD:
		if !frag.PDDisaggMode {
			return nil, fmt.Errorf("strategy %s needs a P/D fleet: %w", s.Name, ErrConfig)
		}
		sa["pd_disagg_mode"] = true
		if s.CacheAware {
			sa["pd_cache_aware_mode"] = true
		}
	default:
		if frag.PDDisaggMode {
			return nil, fmt.Errorf("strategy %s needs a role-less fleet: %w", s.Name, ErrConfig)
		}
	}
	if s.KVExact {
		if frag.KVZmqPort == 0 {
			return nil, fmt.Errorf("strategy %s needs KV events but no worker publishes: %w", s.Name, ErrConfig)
		}
		mode := 3
		if s.Shape == ShapePD {
			mode = 1
		}
		sa["kvExactMode"] = mode
		sa["kvZmqPort"] = frag.KVZmqPort
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
