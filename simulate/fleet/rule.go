package fleet

import (
	"net"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/worker"
)

// Endpoint is one element of an llb rule's "endpoints" array.
type Endpoint struct {
	// EndpointIP is the worker's address.
	EndpointIP string `json:"endpointIP"`
	// TargetPort is the worker's OpenAI API port.
	TargetPort int `json:"targetPort"`
	// Weight is always 1.
	Weight int `json:"weight"`
	// EpRole is the wire's ep_role, int(ladder.Role): 1 prefill, 2 decode;
	// omitted (0, none) for single-pool workers.
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
		out = append(out, Endpoint{EndpointIP: host, TargetPort: w.HTTPPort(), Weight: 1, EpRole: int(m.Role),
			NIXLPort: endpointPort(w.NIXLAddr())})
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
	// KVEngineType is serviceArguments.kvEngineType (absent for vLLM).
	KVEngineType string `json:"kvEngineType,omitempty"`
	// KVDpRankCount is serviceArguments.kvDpRankCount (absent for one
	// rank).
	KVDpRankCount int `json:"kvDpRankCount,omitempty"`
	// PDBootstrapPort is serviceArguments.pdBootstrapPort (SGLang P/D).
	PDBootstrapPort int `json:"pdBootstrapPort,omitempty"`
}

// Rule returns the fleet's rule fragment.
func (f *Fleet) Rule() RuleFragment {
	r := RuleFragment{
		Endpoints:   f.Endpoints(),
		KVBlockSize: f.bs,
		KVHashAlgo:  string(f.hash.Algo),
	}
	if f.events && f.dialect != worker.DialectTRTLLM {
		r.KVZmqPort = f.kvPort
	}
	seedSet := len(f.members) > 0 && !f.members[0].cfg.SeedUnset
	if seedSet && f.dialect == worker.DialectVLLM {
		seed := f.hash.Seed
		r.KVNoneHashSeed = &seed
	}
	for _, m := range f.members {
		if m.Role != ladder.RoleNone {
			r.PDDisaggMode = true
		}
	}
	switch f.dialect {
	case worker.DialectSGLang:
		r.KVEngineType, r.KVHashAlgo = string(f.dialect), "sha256_sglang"
		if r.PDDisaggMode {
			r.PDBootstrapPort = f.bootPort
		}
	case worker.DialectTRTLLM:
		r.KVEngineType, r.KVHashAlgo = string(f.dialect), "blockhash_trtllm"
	}
	if f.dpRanks > 1 {
		r.KVDpRankCount = f.dpRanks
	}
	return r
}

// BootstrapPort is the SGLang prefill workers' bootstrap port (0 when
// none serves one).
func (f *Fleet) BootstrapPort() int { return f.bootPort }

// Dialect is the engine the fleet's workers speak as.
func (f *Fleet) Dialect() worker.Dialect { return f.dialect }
