package fleet

import (
	"net"

	"github.com/llbproject/llb/simulate/engine"
)

// LoxiLB endpoint roles (ep_role).
const (
	// EpRolePrefill is ep_role 1.
	EpRolePrefill = 1
	// EpRoleDecode is ep_role 2.
	EpRoleDecode = 2
)

// Endpoint is one element of an llb rule's "endpoints" array.
type Endpoint struct {
	// EndpointIP is the worker's address.
	EndpointIP string `json:"endpointIP"`
	// TargetPort is the worker's OpenAI API port.
	TargetPort int `json:"targetPort"`
	// Weight is always 1.
	Weight int `json:"weight"`
	// EpRole is 1 (prefill) or 2 (decode); omitted for single-pool workers.
	EpRole int `json:"ep_role,omitempty"`
	// NIXLPort is the P/D side-channel port; omitted for single-pool
	// workers.
	NIXLPort int `json:"nixl_port,omitempty"`
}

// Endpoints returns the rule endpoints of the current workers, in layout
// order.
func (f *Fleet) Endpoints() []Endpoint {
	out := make([]Endpoint, 0, len(f.members))
	for _, m := range f.members {
		w := m.Worker()
		host, _, _ := net.SplitHostPort(w.Addr()) // Addr is always host:port
		ep := Endpoint{EndpointIP: host, TargetPort: w.HTTPPort(), Weight: 1, NIXLPort: endpointPort(w.NIXLAddr())}
		switch m.Role {
		case engine.RolePrefill:
			ep.EpRole = EpRolePrefill
		case engine.RoleDecode:
			ep.EpRole = EpRoleDecode
		}
		out = append(out, ep)
	}
	return out
}

// RuleFragment is what an llb rule needs to know about the fleet: the
// endpoints plus the KV-event settings of its serviceArguments.
type RuleFragment struct {
	// Endpoints is the rule's "endpoints" array.
	Endpoints []Endpoint `json:"endpoints"`
	// KVZmqPort is serviceArguments.kvZmqPort (0: no worker publishes).
	KVZmqPort int `json:"kvZmqPort,omitempty"`
	// KVBlockSize is serviceArguments.kvBlockSize.
	KVBlockSize int `json:"kvBlockSize"`
	// KVHashAlgo is serviceArguments.kvHashAlgo (the workers' algorithm;
	// "fnv" is not one llb can recompute: use token-keyed mode).
	KVHashAlgo string `json:"kvHashAlgo"`
	// KVNoneHashSeed is the workers' PYTHONHASHSEED (absent when unset).
	KVNoneHashSeed *string `json:"kvNoneHashSeed,omitempty"`
	// PDDisaggMode is serviceArguments.pd_disagg_mode.
	PDDisaggMode bool `json:"pd_disagg_mode,omitempty"`
}

// Rule returns the fleet's rule fragment.
func (f *Fleet) Rule() RuleFragment {
	r := RuleFragment{
		Endpoints:   f.Endpoints(),
		KVBlockSize: f.bs,
		KVHashAlgo:  string(f.hash.Algo),
	}
	if f.events {
		r.KVZmqPort = f.kvPort
	}
	seedSet := len(f.members) > 0 && !f.members[0].cfg.SeedUnset
	if seedSet {
		seed := f.hash.Seed
		r.KVNoneHashSeed = &seed
	}
	for _, m := range f.members {
		if m.Role == engine.RolePrefill || m.Role == engine.RoleDecode {
			r.PDDisaggMode = true
		}
	}
	return r
}
