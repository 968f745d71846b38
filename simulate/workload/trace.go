package workload

import (
	"fmt"
	"math/rand/v2"
)

// The PCG stream selectors of a trace's two generators ("content",
// "arrival"): the content does not depend on the arrival process, and a
// trace of a seed is the same for every tool that replays it.
const (
	contentStream = 0x636f6e74656e74
	arrivalStream = 0x6172726976616c
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

// TraceConfig describes a trace: a seeded workload and its size.
type TraceConfig struct {
	// Spec is the workload. Required.
	Spec Spec
	// Requests is the number of requests (>= 1).
	Requests int
	// Seed seeds the content and the arrival gaps (separate streams), so a
	// trace is the same for every strategy, every rate and every tool.
	Seed uint64
	// Arrivals is the arrival process at 1 request/s; a run scales it to
	// its rate.
	Arrivals ArrivalKind
	// BlockSize is the KV block size in tokens the oracle, the working set
	// and MaxBlocks count in (1..inventory.MaxBlockSize).
	BlockSize int
	// KeepTokens makes every request carry its prompt tokens (a
	// discrete-event simulator submits them to engines directly).
	KeepTokens bool
}

// TraceRequest is one request of a trace.
type TraceRequest struct {
	// Seq is the request's position in the trace.
	Seq int
	// UnitAt is the arrival offset in seconds at 1 request/s; at rate r
	// the request arrives at UnitAt/r.
	UnitAt float64
	// Path, Body and Header are the HTTP request (Request's).
	Path   string
	Body   []byte
	Header map[string]string
	// Workload and Group are the generator's labels.
	Workload string
	Group    int
	// PromptTokens, ReusableTokens (the oracle's reusable prefix) and
	// OutputTokens are Request's.
	PromptTokens, ReusableTokens, OutputTokens int
	// Tokens is the prompt as the worker tokenizes it; nil unless
	// TraceConfig.KeepTokens.
	Tokens []uint32
	// LoRA is the request's adapter ("" for the base model).
	LoRA string
}

// Trace is a generated request sequence with unit-rate arrival offsets. It
// is immutable once built and may be shared by concurrent runs.
type Trace struct {
	// Seed is the seed it was generated from.
	Seed uint64
	// BlockSize is the block size the oracle, the working set and
	// MaxBlocks count in.
	BlockSize int
	// Requests in arrival order.
	Requests []TraceRequest
	// DistinctBlocks is the working set: distinct prefix-chained blocks
	// over the whole trace (what an ideal fleet would have to hold to
	// reuse every reusable prefix).
	DistinctBlocks int
	// MaxBlocks is the most blocks one request needs (prompt and output),
	// the smallest cache that can serve every request.
	MaxBlocks int
	// PromptTokens and OutputTokens are the trace's totals.
	PromptTokens, OutputTokens int64
}

// Recorded is a Spec that replays a recorded trace: its requests carry
// their own arrival times, which a Trace uses instead of its arrival
// process.
type Recorded interface {
	Spec
	// UnitArrivals are the requests' arrival offsets in seconds at a mean
	// rate of 1 request/s, nondecreasing from 0, one per request.
	UnitArrivals() []float64
}

// NewTrace generates a trace: the content from one PCG stream of the seed,
// the arrival gaps from another, so the content does not depend on the
// arrival process. A Recorded spec's requests arrive at its own times.
func NewTrace(cfg TraceConfig) (*Trace, error) {
	switch {
	case cfg.Spec == nil:
		return nil, fmt.Errorf("trace: no workload spec: %w", ErrConfig)
	case cfg.Requests < 1:
		return nil, fmt.Errorf("trace: %d requests (want >= 1): %w", cfg.Requests, ErrConfig)
	case cfg.Arrivals > ArriveConstant:
		return nil, fmt.Errorf("trace: arrival kind %d: %w", cfg.Arrivals, ErrConfig)
	}
	var recorded []float64
	if rec, ok := cfg.Spec.(Recorded); ok {
		recorded = rec.UnitArrivals()
		if cfg.Requests > len(recorded) {
			return nil, fmt.Errorf("trace: %d requests of a recorded trace of %d: %w", cfg.Requests, len(recorded), ErrConfig)
		}
	}
	content := rand.New(rand.NewPCG(cfg.Seed, contentStream))
	gaps := rand.New(rand.NewPCG(cfg.Seed, arrivalStream))
	src, err := cfg.Spec.Source(content)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	// The stream's own arrivals are unused: the gaps come from their own
	// generator, in float seconds.
	stream, err := NewStream(src, Constant{Rate: 1}, cfg.BlockSize)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	stream.KeepTokens = cfg.KeepTokens
	bs := cfg.BlockSize
	t := &Trace{Seed: cfg.Seed, BlockSize: bs, Requests: make([]TraceRequest, 0, cfg.Requests)}
	at := 0.0
	for i := range cfg.Requests {
		w, err := stream.Next(content)
		if err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		switch {
		case recorded != nil:
			at = recorded[i]
		case i > 0:
			if cfg.Arrivals == ArriveConstant {
				at++
			} else {
				at += gaps.ExpFloat64()
			}
		}
		t.Requests = append(t.Requests, TraceRequest{
			Seq: i, UnitAt: at, Path: w.Path, Body: w.Body, Header: w.Header,
			Workload: w.Workload, Group: w.Group,
			PromptTokens: w.PromptTokens, ReusableTokens: w.ReusableTokens, OutputTokens: w.OutputTokens,
			Tokens: w.Tokens, LoRA: w.LoRA,
		})
		t.MaxBlocks = max(t.MaxBlocks, (w.PromptTokens+w.OutputTokens+bs-1)/bs)
		t.PromptTokens += int64(w.PromptTokens)
		t.OutputTokens += int64(w.OutputTokens)
	}
	t.DistinctBlocks = stream.DistinctBlocks()
	return t, nil
}

// OracleHitRate is the oracle bound over requests [from, len): every
// reusable prefix hit, in OracleHitRate's unit (reusable prompt tokens /
// prompt tokens).
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

// UnitDuration is the arrival span at 1 request/s (seconds).
func (t *Trace) UnitDuration() float64 {
	if len(t.Requests) == 0 {
		return 0
	}
	return t.Requests[len(t.Requests)-1].UnitAt
}

// MeanTokens returns the mean prompt and output tokens per request of
// Requests (0, 0 when empty); unlike the totals, it follows a Prefix.
func (t *Trace) MeanTokens() (prompt, output float64) {
	if len(t.Requests) == 0 {
		return 0, 0
	}
	for i := range t.Requests {
		prompt += float64(t.Requests[i].PromptTokens)
		output += float64(t.Requests[i].OutputTokens)
	}
	n := float64(len(t.Requests))
	return prompt / n, output / n
}

// CacheBlocks is the per-worker cache size (blocks) at which the working
// set is pressure times the cache of workers workers, never below
// MaxBlocks: DistinctBlocks / (pressure · workers), rounded down.
func (t *Trace) CacheBlocks(pressure float64, workers int) int {
	return max(int(float64(t.DistinctBlocks)/(pressure*float64(workers))), t.MaxBlocks)
}

// Prefix returns a trace of the first n requests, sharing storage. The
// totals, DistinctBlocks and MaxBlocks still describe the whole generated
// trace (upper bounds for the prefix).
func (t *Trace) Prefix(n int) *Trace {
	if n >= len(t.Requests) {
		return t
	}
	out := *t
	out.Requests = t.Requests[:n]
	return &out
}
