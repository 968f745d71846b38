// Package workload generates the request streams llb is measured on:
// SGLang's generated-shared-prefix groups with Zipf popularity, multi-turn
// chats with growing context and a session key, one hot prefix shared by
// many clients, and weighted mixes of them, arriving open-loop (Poisson or
// constant rate).
//
// Everything is pure and deterministic for a seeded *rand.Rand: no clock,
// no I/O. Prompts are sized in tokens of the simulated worker's tokenizer
// (simulate/tokenizer), and every request carries the number of its prompt
// tokens some earlier request of the stream already had — the reusable
// prefix an ideal router with an unbounded cache would hit (the oracle).
//
// A Trace is a stream generated once for a seed, with unit-rate arrival
// offsets, the oracle and the working set: the discrete-event simulator
// (simulate/des) and the load harness (simulate/harness) both replay
// NewTrace's traces, so the two run the same requests for a seed.
package workload

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/llbproject/llb/inventory"
)

// ErrConfig reports an invalid workload specification.
var ErrConfig = errors.New("workload: invalid configuration")

// Paths of the OpenAI endpoints requests target.
const (
	// PathCompletions is the completions endpoint.
	PathCompletions = "/v1/completions"
	// PathChat is the chat completions endpoint.
	PathChat = "/v1/chat/completions"
)

// Request is one generated request, ready to send.
type Request struct {
	// Seq is the request's position in its stream (from 0).
	Seq int
	// At is the arrival time, as an offset from the stream's start.
	At time.Duration
	// Path is the endpoint (PathCompletions or PathChat).
	Path string
	// Body is the JSON body.
	Body []byte
	// Header holds extra HTTP headers (X-Conversation-Id); nil when none.
	Header map[string]string
	// Workload names the generator ("shared_prefix", "multi_turn",
	// "hot_prefix").
	Workload string
	// Group is the shared-prefix group, conversation or client index.
	Group int
	// Session is the Tier-0 session key the request carries (user_id or
	// X-Conversation-Id), "" when none.
	Session string
	// PromptTokens is the prompt length in the worker tokenizer's tokens
	// (template and BOS included, exactly what the worker prefills).
	PromptTokens int
	// ReusableTokens is how many leading prompt tokens, in whole blocks,
	// an earlier request of the stream already had (capped like vLLM's
	// prefix cache, which always recomputes the last prompt token): the
	// best hit any router could get with unbounded caches.
	ReusableTokens int
	// OutputTokens is max_tokens.
	OutputTokens int
	// Tokens is the prompt as the worker tokenizes it, kept only when the
	// stream's KeepTokens is set (a discrete-event simulator submits them
	// to engines directly); nil otherwise.
	Tokens []uint32
	// LoRA is the LoRA adapter the request is for ("" for the base model):
	// its model field, and the lora_name its blocks hash with.
	LoRA string
}

// Item is what a Source produces: a request's content, before the stream
// stamps its arrival and oracle.
type Item struct {
	// Path is Request.Path.
	Path string
	// Body is Request.Body.
	Body []byte
	// Header is Request.Header.
	Header map[string]string
	// Workload is Request.Workload.
	Workload string
	// Group is Request.Group.
	Group int
	// Session is Request.Session.
	Session string
	// OutputTokens is Request.OutputTokens.
	OutputTokens int
	// Tokens is the prompt as the worker tokenizes it (for the oracle).
	Tokens []uint32
	// LoRA is Request.LoRA.
	LoRA string
}

// Source produces request contents, one after another. Sources are
// stateful and not safe for concurrent use.
type Source interface {
	// Next builds the next request's content, drawing randomness only
	// from r.
	Next(r *rand.Rand) (Item, error)
}

// Spec is a workload description that builds its Source.
type Spec interface {
	// Source validates the spec and builds a Source; r seeds the content
	// (system prompts, questions), so the same r state gives the same
	// stream.
	Source(r *rand.Rand) (Source, error)
}

// Stream stamps a Source's items with open-loop arrival times and the
// oracle's reusable-prefix count.
type Stream struct {
	// KeepTokens makes every Request carry its prompt tokens.
	KeepTokens bool

	src      Source
	arrivals Arrivals
	keys     *inventory.TokenHasher
	seen     map[uint64]struct{}
	chain    []uint64
	seq      int
	at       time.Duration
}

// NewStream builds a stream. blockSize is the workers' KV block size in
// tokens (the oracle counts whole blocks).
func NewStream(src Source, arrivals Arrivals, blockSize int) (*Stream, error) {
	if src == nil || arrivals == nil {
		return nil, fmt.Errorf("stream needs a source and arrivals: %w", ErrConfig)
	}
	if err := arrivals.Validate(); err != nil {
		return nil, err
	}
	keys, err := inventory.NewTokenHasher(blockSize)
	if err != nil {
		return nil, fmt.Errorf("stream block size: %w: %w", ErrConfig, err)
	}
	return &Stream{src: src, arrivals: arrivals, keys: keys, seen: make(map[uint64]struct{})}, nil
}

// Next returns the next request of the stream.
func (s *Stream) Next(r *rand.Rand) (Request, error) {
	it, err := s.src.Next(r)
	if err != nil {
		return Request{}, fmt.Errorf("request %d: %w", s.seq, err)
	}
	if s.seq > 0 {
		s.at += s.arrivals.Gap(r)
	}
	req := Request{
		Seq: s.seq, At: s.at, Path: it.Path, Body: it.Body, Header: it.Header,
		Workload: it.Workload, Group: it.Group, Session: it.Session,
		PromptTokens: len(it.Tokens), OutputTokens: it.OutputTokens, LoRA: it.LoRA,
	}
	req.ReusableTokens = s.reusable(it.Tokens, it.LoRA)
	if s.KeepTokens {
		req.Tokens = it.Tokens
	}
	s.seq++
	return req, nil
}

// DistinctBlocks is the stream's working set so far: the distinct
// prefix-chained blocks of every request it returned.
func (s *Stream) DistinctBlocks() int { return len(s.seen) }

// reusable counts the leading blocks already seen and records all blocks.
func (s *Stream) reusable(tokens []uint32, lora string) int {
	bs := s.keys.BlockSize()
	s.chain = s.keys.AppendBlockKeys(s.chain[:0], tokens, inventory.ExtraKeys{LoRAName: lora})
	limit := 0
	if len(tokens) > 0 {
		limit = (len(tokens) - 1) / bs // vLLM never hits the last prompt token
	}
	hit := 0
	for hit < len(s.chain) && hit < limit {
		if _, ok := s.seen[s.chain[hit]]; !ok {
			break
		}
		hit++
	}
	for _, k := range s.chain {
		s.seen[k] = struct{}{}
	}
	return hit * bs
}

// Generate builds spec's source from r and returns its first n requests.
func Generate(r *rand.Rand, spec Spec, arrivals Arrivals, blockSize, n int) ([]Request, error) {
	if n < 0 {
		return nil, fmt.Errorf("generate %d requests: %w", n, ErrConfig)
	}
	src, err := spec.Source(r)
	if err != nil {
		return nil, err
	}
	s, err := NewStream(src, arrivals, blockSize)
	if err != nil {
		return nil, err
	}
	out := make([]Request, 0, n)
	for range n {
		req, err := s.Next(r)
		if err != nil {
			return out, err
		}
		out = append(out, req)
	}
	return out, nil
}

// OracleHitRate is the fraction of prompt tokens the oracle reuses over
// reqs: sum(ReusableTokens) / sum(PromptTokens), the unit of
// vllm:prefix_cache_hits / queries.
func OracleHitRate(reqs []Request) float64 {
	var hit, all int
	for _, r := range reqs {
		hit += r.ReusableTokens
		all += r.PromptTokens
	}
	if all == 0 {
		return 0
	}
	return float64(hit) / float64(all)
}
