package des

import (
	"fmt"
	"math/rand/v2"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/workload"
)

// ArrivalKind is the shape of a trace's open-loop arrival process.
type ArrivalKind uint8

// Arrival processes.
const (
	// ArrivePoisson draws exponential gaps (the default).
	ArrivePoisson ArrivalKind = iota
	// ArriveConstant spaces requests evenly.
	ArriveConstant
)

// String returns "poisson" or "constant".
func (a ArrivalKind) String() string {
	if a == ArriveConstant {
		return "constant"
	}
	return "poisson"
}

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
	Arrivals ArrivalKind
	// BlockSize is the KV block size in tokens; 0 means 16.
	BlockSize int
	// Hash is the engines' hash contract (and llb's, which matches it);
	// zero means sha256_cbor with PYTHONHASHSEED "0". Only the CBOR
	// algorithms are valid: llb recomputes their keys.
	Hash engine.HashConfig
}

// TraceRequest is one request of a trace with everything llbd derives
// before routing (tokens, block digests, llb's key chain, routing keys)
// precomputed once and shared read-only by every run.
type TraceRequest struct {
	// Seq is the request's position in the trace.
	Seq int
	// UnitAt is the arrival offset in seconds at a rate of 1 request/s; a
	// run at rate r sends the request at UnitAt/r.
	UnitAt float64
	// Workload and Group are the generator's labels.
	Workload string
	Group    int
	// Tokens is the prompt as the worker tokenizes it.
	Tokens []uint32
	// Digests are the engine-side block digests of Tokens (one per full
	// block), handed to the engines so they do not re-hash.
	Digests []inventory.Digest
	// Chain is llb's own block-key chain of Tokens (inventory.Hasher under
	// the same contract): what Tier 1.5 scores mirrors with.
	Chain []uint64
	// Prompt, PrefixHash, SessionKey and ConvHash are the routing keys (see
	// render.go).
	Prompt      []byte
	PrefixHash  uint64
	SessionKey  string
	ConvHash    uint64
	HasConvHash bool
	// PromptTokens, ReusableTokens (the oracle's reusable prefix) and
	// OutputTokens come from the workload stream.
	PromptTokens, ReusableTokens, OutputTokens int
}

// Trace is a generated, pre-hashed request sequence. It is immutable once
// built and may be shared by concurrent runs.
type Trace struct {
	// Config is what built it (defaults applied).
	Config TraceConfig
	// Requests in arrival order.
	Requests []TraceRequest
	// DistinctBlocks is the working set: distinct block keys over the whole
	// trace (what an ideal fleet would have to hold to reuse every
	// reusable prefix).
	DistinctBlocks int
	// PromptTokens and OutputTokens are the trace's totals.
	PromptTokens, OutputTokens int64
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
	switch {
	case c.Spec == nil:
		return nil, fmt.Errorf("trace %q: no workload spec: %w", c.Name, ErrConfig)
	case c.Requests < 1:
		return nil, fmt.Errorf("trace %q: %d requests (want >= 1): %w", c.Name, c.Requests, ErrConfig)
	case c.Arrivals > ArriveConstant:
		return nil, fmt.Errorf("trace %q: arrival kind %d: %w", c.Name, c.Arrivals, ErrConfig)
	case c.Hash.Algo != engine.HashSHA256CBOR && c.Hash.Algo != engine.HashXXHashCBOR:
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
	content := rand.New(rand.NewPCG(c.Seed, 0x636f6e74656e74)) // "content"
	gaps := rand.New(rand.NewPCG(c.Seed, 0x6172726976616c))    // "arrival"
	src, err := c.Spec.Source(content)
	if err != nil {
		return nil, fmt.Errorf("trace %q: %w", c.Name, err)
	}
	// The stream's own arrivals are unused: gaps come from their own
	// generator so the content does not depend on the arrival process.
	stream, err := workload.NewStream(src, workload.Constant{Rate: 1}, c.BlockSize)
	if err != nil {
		return nil, fmt.Errorf("trace %q: %w", c.Name, err)
	}
	stream.KeepTokens = true
	t := &Trace{Config: c, Requests: make([]TraceRequest, 0, c.Requests)}
	seen := make(map[uint64]struct{})
	at := 0.0
	for i := range c.Requests {
		w, err := stream.Next(content)
		if err != nil {
			return nil, fmt.Errorf("trace %q: %w", c.Name, err)
		}
		if i > 0 {
			if c.Arrivals == ArriveConstant {
				at++
			} else {
				at += gaps.ExpFloat64()
			}
		}
		keys, err := deriveKeys(w.Body, w.Header)
		if err != nil {
			return nil, fmt.Errorf("trace %q request %d: %w", c.Name, i, err)
		}
		digests, err := eh.AppendDigests(nil, w.Tokens, inventory.ExtraKeys{})
		if err != nil {
			return nil, fmt.Errorf("trace %q request %d: %w: %w", c.Name, i, ErrConfig, err)
		}
		chain := lh.AppendBlockKeys(make([]uint64, 0, len(digests)), w.Tokens, inventory.ExtraKeys{})
		for _, k := range chain {
			seen[k] = struct{}{}
		}
		t.Requests = append(t.Requests, TraceRequest{
			Seq: i, UnitAt: at, Workload: w.Workload, Group: w.Group,
			Tokens: w.Tokens, Digests: digests, Chain: chain,
			Prompt: keys.prompt, PrefixHash: keys.prefixHash, SessionKey: keys.sessionKey,
			ConvHash: keys.convHash, HasConvHash: keys.hasConvHash,
			PromptTokens: w.PromptTokens, ReusableTokens: w.ReusableTokens, OutputTokens: w.OutputTokens,
		})
		t.PromptTokens += int64(w.PromptTokens)
		t.OutputTokens += int64(w.OutputTokens)
	}
	t.DistinctBlocks = len(seen)
	return t, nil
}

// OracleHitRate is the oracle bound over requests [from, len): every
// reusable prefix hit, as workload.OracleHitRate counts it (reusable prompt
// tokens / prompt tokens).
func (t *Trace) OracleHitRate(from int) float64 {
	var hit, all int64
	for _, r := range t.Requests[min(max(from, 0), len(t.Requests)):] {
		hit += int64(r.ReusableTokens)
		all += int64(r.PromptTokens)
	}
	if all == 0 {
		return 0
	}
	return float64(hit) / float64(all)
}

// UnitDuration is the arrival span at rate 1 (seconds).
func (t *Trace) UnitDuration() float64 {
	if len(t.Requests) == 0 {
		return 0
	}
	return t.Requests[len(t.Requests)-1].UnitAt
}
