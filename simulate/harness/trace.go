package harness

import (
	"fmt"
	"math/rand/v2"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/simulate/workload"
)

// The PCG stream selectors simulate/des uses for a trace's content and its
// arrival gaps ("content", "arrival"): keeping them equal makes a harness
// trace and a simulated trace of the same seed the same requests at the
// same moments.
const (
	contentStream = 0x636f6e74656e74
	arrivalStream = 0x6172726976616c
)

// TraceRequest is one request of a trace, ready to send.
type TraceRequest struct {
	// Seq is the request's position in the trace.
	Seq int
	// UnitAt is the arrival offset in model seconds at 1 request per
	// second; at rate r the request arrives at UnitAt/r.
	UnitAt float64
	// Path, Body and Header are the HTTP request.
	Path   string
	Body   []byte
	Header map[string]string
	// Workload and Group are the generator's labels.
	Workload string
	Group    int
	// PromptTokens, ReusableTokens (the oracle's reusable prefix) and
	// OutputTokens come from the workload stream.
	PromptTokens, ReusableTokens, OutputTokens int
}

// Trace is a generated request sequence, shared read-only by every run of a
// comparison.
type Trace struct {
	// Seed is the seed it was generated from.
	Seed uint64
	// BlockSize is the KV block size the oracle and the working set count
	// in.
	BlockSize int
	// Requests in arrival order.
	Requests []TraceRequest
	// DistinctBlocks is the working set: distinct prefix-chained blocks
	// over the whole trace.
	DistinctBlocks int
	// MaxBlocks is the most blocks one request needs (prompt and output),
	// the smallest cache that can serve every request.
	MaxBlocks int
	// PromptTokens and OutputTokens are the trace's totals.
	PromptTokens, OutputTokens int64
}

// NewTrace generates n requests of spec for seed, with unit-rate Poisson
// arrival offsets, counting blocks of blockSize tokens.
func NewTrace(spec workload.Spec, n int, seed uint64, blockSize int) (*Trace, error) {
	if spec == nil || n < 1 {
		return nil, fmt.Errorf("trace of %d requests (want a spec and >= 1): %w", n, ErrConfig)
	}
	keys, err := inventory.NewTokenHasher(blockSize)
	if err != nil {
		return nil, fmt.Errorf("trace: %w: %w", ErrConfig, err)
	}
	content := rand.New(rand.NewPCG(seed, contentStream))
	gaps := rand.New(rand.NewPCG(seed, arrivalStream))
	src, err := spec.Source(content)
	if err != nil {
		return nil, fmt.Errorf("trace: %w: %w", ErrConfig, err)
	}
	// The stream's own arrivals are unused: gaps come from their own
	// generator so content does not depend on the arrival process.
	stream, err := workload.NewStream(src, workload.Constant{Rate: 1}, blockSize)
	if err != nil {
		return nil, fmt.Errorf("trace: %w: %w", ErrConfig, err)
	}
	stream.KeepTokens = true
	unit := workload.Poisson{Rate: 1}
	t := &Trace{Seed: seed, BlockSize: blockSize, Requests: make([]TraceRequest, 0, n)}
	seen := make(map[uint64]struct{})
	var chain []uint64
	at := 0.0
	for i := range n {
		w, err := stream.Next(content)
		if err != nil {
			return nil, fmt.Errorf("trace: %w: %w", ErrConfig, err)
		}
		if i > 0 {
			at += unit.Gap(gaps).Seconds()
		}
		chain = keys.AppendBlockKeys(chain[:0], w.Tokens, inventory.ExtraKeys{})
		for _, k := range chain {
			seen[k] = struct{}{}
		}
		t.MaxBlocks = max(t.MaxBlocks, (w.PromptTokens+w.OutputTokens+blockSize-1)/blockSize)
		t.Requests = append(t.Requests, TraceRequest{
			Seq: i, UnitAt: at, Path: w.Path, Body: w.Body, Header: w.Header,
			Workload: w.Workload, Group: w.Group,
			PromptTokens: w.PromptTokens, ReusableTokens: w.ReusableTokens, OutputTokens: w.OutputTokens,
		})
		t.PromptTokens += int64(w.PromptTokens)
		t.OutputTokens += int64(w.OutputTokens)
	}
	t.DistinctBlocks = len(seen)
	return t, nil
}

// OracleHitRate is the oracle bound over requests [from, len): every
// reusable prefix hit (workload.OracleHitRate's unit: reusable prompt
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

// UnitDuration is the arrival span at 1 request per second (model
// seconds).
func (t *Trace) UnitDuration() float64 {
	if len(t.Requests) == 0 {
		return 0
	}
	return t.Requests[len(t.Requests)-1].UnitAt
}

// Prefix returns a trace of the first n requests (sharing storage).
func (t *Trace) Prefix(n int) *Trace {
	if n >= len(t.Requests) {
		return t
	}
	out := *t
	out.Requests = t.Requests[:n]
	// Totals and the working set describe the whole generated trace; a
	// prefix keeps them as upper bounds.
	return &out
}
