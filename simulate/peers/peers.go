// Package peers implements other routers' request-placement policies —
// what a user would deploy instead of llb — from their public
// documentation and code, with the defaults they ship: NVIDIA Dynamo's KV
// router, llm-d's precise-prefix-cache scheduling profile, SGLang's router
// (sgl-model-gateway, SMG) cache_aware policy, AIBrix's prefix-cache router
// and KubeAI's PrefixHash (CHWBL). Each file cites its source next to the
// constants.
//
// A Policy is a pure, deterministic state machine, as llb's ladder is: no
// goroutines, no clock (time comes in as an argument), no I/O; ties are
// broken by a seeded generator. The caller — the discrete-event simulator
// (simulate/des) or the load harness's peer router (simulate/harness) —
// feeds it, per request, what that router would see of each endpoint
// (Endpoint) and tells it each request's first token and end, which the
// routers that track their own load need. Several instances of a policy
// model several router replicas, each with its own state.
package peers

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// ErrConfig reports an unknown policy or a bad configuration.
var ErrConfig = errors.New("peers: invalid policy")

// Request is one request as a router sees it.
type Request struct {
	// ID identifies the request in FirstToken and Done (unique per
	// policy instance).
	ID int
	// Text is the prompt as the router reads it from the body: the
	// completion prompt, or the chat messages' rendering. The char-based
	// routers (SGLang, AIBrix, KubeAI) match and hash it.
	Text []byte
	// Chain is the prompt's block-key chain under the engines' hash
	// contract (one key per full block), what the KV-event routers
	// (Dynamo, llm-d) compute after tokenizing.
	Chain []uint64
	// PromptTokens and OutputTokens size the request; BlockSize is the
	// engines' tokens per block.
	PromptTokens, OutputTokens, BlockSize int
	// Adapter is the LoRA adapter the request names ("" for the base
	// model).
	Adapter string
}

// Endpoint is what a router sees of one endpoint when it routes a request.
type Endpoint struct {
	// Overlap is how many leading blocks of the request's Chain the
	// endpoint holds, from its KV events (an inventory mirror); only the
	// KV-event routers read it.
	Overlap int
	// Waiting and KVUsage are the engine's vllm:num_requests_waiting and
	// vllm:kv_cache_usage_perc (0..1) as last scraped; only llm-d reads
	// them.
	Waiting int
	KVUsage float64
	// LoRAStale is the endpoint's vllm:lora_requests_info as llm-d reads
	// it (the newest series naming some adapter); only llm-d-lora reads it.
	LoRAStale LoRAGauge
}

// LoRAGauge is an engine's vllm:lora_requests_info: the adapters of its
// running and waiting requests, and max_lora.
type LoRAGauge struct {
	Running, Waiting []string
	Max              int
}

// Policy is one router's placement policy.
type Policy interface {
	// Pick returns the endpoint (an index into eps, which is never empty)
	// for req at now and records the request as in flight there.
	Pick(now time.Time, req *Request, eps []Endpoint) int
	// FirstToken tells the policy that request id produced its first
	// token (its prefill is over).
	FirstToken(now time.Time, id int)
	// Done tells the policy that request id finished.
	Done(now time.Time, id int)
}

// Kind names a policy.
type Kind string

// Policies.
const (
	Dynamo Kind = "dynamo"
	LLMD   Kind = "llm-d"
	SGLang Kind = "sglang"
	AIBrix Kind = "aibrix"
	KubeAI Kind = "kubeai"
	// LLMDLoRA is llm-d's default profile with its LoRA affinity scorer.
	LLMDLoRA Kind = "llm-d-lora"
	// AIBrixLoRA is AIBrix's adapter routing with each adapter loaded on
	// one pod (ModelAdapter replicas: 1, the leastAdapters scheduler).
	AIBrixLoRA Kind = "aibrix-lora"
)

// Kinds lists the policies of the standard comparison, in report order
// (the LoRA peers, for LoRA workloads, are selected by name).
func Kinds() []Kind { return []Kind{Dynamo, LLMD, SGLang, AIBrix, KubeAI} }

// LoRAKinds lists the peers' LoRA-aware policies.
func LoRAKinds() []Kind { return []Kind{LLMDLoRA, AIBrixLoRA} }

// UsesKVEvents reports whether the policy reads Endpoint.Overlap (the
// caller need not score mirrors for the others).
func (k Kind) UsesKVEvents() bool { return k == Dynamo || k == LLMD || k == LLMDLoRA }

// UsesMetrics reports whether the policy reads Endpoint.Waiting and
// KVUsage.
func (k Kind) UsesMetrics() bool { return k == LLMD || k == LLMDLoRA }

// New builds a policy for n endpoints with the project's defaults; seed
// drives its tie-breaks. addrs (one per endpoint, may be nil) seed
// KubeAI's ring as endpoint names do.
func New(k Kind, n int, seed uint64, addrs []string) (Policy, error) {
	if n < 1 {
		return nil, fmt.Errorf("%s with %d endpoints: %w", k, n, ErrConfig)
	}
	rng := rand.New(rand.NewPCG(seed, 0x7065657273))
	switch k {
	case Dynamo:
		return newDynamo(n, rng), nil
	case LLMD:
		return newLLMD(n, rng), nil
	case SGLang:
		return newSGLang(n), nil
	case AIBrix:
		return newAIBrix(n, rng), nil
	case KubeAI:
		return newKubeAI(n, addrs), nil
	case LLMDLoRA:
		return newLLMDLoRA(rng), nil
	case AIBrixLoRA:
		return newAIBrixLoRA(n, newAIBrix(n, rng)), nil
	}
	return nil, fmt.Errorf("policy %q (want dynamo, llm-d, sglang, aibrix, kubeai, llm-d-lora or aibrix-lora): %w", k, ErrConfig)
}

// inflight is the per-endpoint count of requests a router sent and has
// not seen finish, which most of them balance on.
type inflight struct {
	load []int
	at   map[int]int // request id → endpoint
}

func newInflight(n int) inflight { return inflight{load: make([]int, n), at: map[int]int{}} }

func (f *inflight) add(id, ep int) {
	f.load[ep]++
	f.at[id] = ep
}

func (f *inflight) done(id int) (int, bool) {
	ep, ok := f.at[id]
	if ok {
		f.load[ep]--
		delete(f.at, id)
	}
	return ep, ok
}

// leastLoaded returns the endpoint with the fewest in-flight requests
// (lowest index on ties).
func (f *inflight) leastLoaded() int {
	best := 0
	for i, l := range f.load {
		if l < f.load[best] {
			best = i
		}
	}
	return best
}
