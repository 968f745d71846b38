package des

import (
	"fmt"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/workload"
)

// TraceConfig describes a trace: a seeded workload, its size and the hash
// contract the fleet runs with.
type TraceConfig struct {
	// Name labels the trace in results ("shared-prefix-pressure").
	Name string
	// Spec is the workload (simulate/workload). Required.
	Spec workload.Spec
	// Requests is the number of requests (>= 1).
	Requests int
	// Seed seeds the content and the arrival gaps (separate streams), so a
	// trace is the same for every strategy and every rate.
	Seed uint64
	// Arrivals is the arrival process; rates are applied per run.
	Arrivals workload.ArrivalKind
	// BlockSize is the KV block size in tokens; 0 means 16.
	BlockSize int
	// Hash is the engines' hash contract (and llb's, which matches it);
	// zero means sha256_cbor with PYTHONHASHSEED "0". Only the CBOR
	// algorithms are valid: llb recomputes their keys.
	Hash engine.HashConfig
}

// RequestKeys is what llbd derives from one request before routing,
// precomputed once per trace and shared read-only by every run.
type RequestKeys struct {
	// Digests are the engine-side block digests of the prompt tokens (one
	// per full block), handed to the engines so they do not re-hash.
	Digests []inventory.Digest
	// Chain is llb's own block-key chain of the prompt (inventory.Hasher
	// under the same contract): what Tier 1.5 scores mirrors with.
	Chain []uint64
	// Prompt, PrefixHash, SessionKey and ConvHash are the routing keys (see
	// render.go).
	Prompt      []byte
	PrefixHash  uint64
	SessionKey  string
	ConvHash    uint64
	HasConvHash bool
}

// Trace is a generated, pre-hashed request sequence: workload.NewTrace's
// requests (the harness replays the same ones for a seed) with the keys
// llbd derives from each. It is immutable once built and may be shared by
// concurrent runs.
type Trace struct {
	// Config is what built it (defaults applied).
	Config TraceConfig
	// Trace holds the requests (with their prompt tokens), the working
	// set and the totals.
	workload.Trace
	// Keys[i] is what llbd derives from Requests[i].
	Keys []RequestKeys
}

func (c *TraceConfig) withDefaults() TraceConfig {
	out := *c
	if out.BlockSize == 0 {
		out.BlockSize = 16
	}
	if out.Hash.Algo == "" {
		out.Hash = engine.HashConfig{Algo: engine.HashSHA256CBOR, Seed: "0"}
	}
	return out
}

// NewTrace generates and hashes a trace.
func NewTrace(cfg TraceConfig) (*Trace, error) {
	c := cfg.withDefaults()
	if c.Hash.Algo != engine.HashSHA256CBOR && c.Hash.Algo != engine.HashXXHashCBOR {
		return nil, fmt.Errorf("trace %q: hash %q (llb recomputes only sha256_cbor and xxhash_cbor): %w", c.Name, c.Hash.Algo, ErrConfig)
	}
	eh, err := engine.NewHasher(c.Hash, c.BlockSize)
	if err != nil {
		return nil, fmt.Errorf("trace %q: %w: %w", c.Name, ErrConfig, err)
	}
	lh, err := inventory.NewHasher(inventory.Algo(c.Hash.Algo), c.BlockSize, c.Hash.Seed)
	if err != nil {
		return nil, fmt.Errorf("trace %q: %w: %w", c.Name, ErrConfig, err)
	}
	wt, err := workload.NewTrace(workload.TraceConfig{
		Spec: c.Spec, Requests: c.Requests, Seed: c.Seed, Arrivals: c.Arrivals, BlockSize: c.BlockSize, KeepTokens: true,
	})
	if err != nil {
		return nil, fmt.Errorf("trace %q: %w: %w", c.Name, ErrConfig, err)
	}
	t := &Trace{Config: c, Trace: *wt, Keys: make([]RequestKeys, len(wt.Requests))}
	for i := range wt.Requests {
		r := &wt.Requests[i]
		k, err := deriveKeys(r.Body, r.Header)
		if err != nil {
			return nil, fmt.Errorf("trace %q request %d: %w", c.Name, i, err)
		}
		extra := inventory.ExtraKeys{LoRAName: r.LoRA}
		k.Digests, err = eh.AppendDigests(nil, r.Tokens, extra)
		if err != nil {
			return nil, fmt.Errorf("trace %q request %d: %w: %w", c.Name, i, ErrConfig, err)
		}
		k.Chain = lh.AppendBlockKeys(make([]uint64, 0, len(k.Digests)), r.Tokens, extra)
		t.Keys[i] = k
	}
	return t, nil
}

// DropBodies forgets the requests' bodies, which a simulation never sends
// once their keys are derived (a recorded trace's add up to gigabytes).
// Call it before the trace is shared.
func (t *Trace) DropBodies() {
	for i := range t.Requests {
		t.Requests[i].Body = nil
	}
}
