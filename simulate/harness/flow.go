package harness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/workload"
)

// Tenants and priority classes through the real daemon. A flow run sends
// one trace whose requests are dealt to streams — a tenant (GIE's
// x-gateway-inference-fairness-id) and a class (X-Llb-Priority) each — at a
// P/D rule with an admission cap and parking queues, and measures each
// stream on its own: what llbd's admission gate and admission queue
// (ladder.FlowQueue, fed by the router actor) make of them.

// Headers a flow run's requests carry (gateway's).
const (
	flowTenantHeader = "X-Gateway-Inference-Fairness-Id"
	flowClassHeader  = "X-Llb-Priority"
)

// FlowStream is one tenant's requests of one class.
type FlowStream struct {
	// Tenant is the fairness id ("" sends none: the anonymous tenant).
	Tenant string
	// Class is the priority class, sent as X-Llb-Priority.
	Class ladder.Class
	// Weight is the stream's share of the trace's arrivals (> 0),
	// relative to the other streams'.
	Weight float64
}

// FlowTrace is a trace dealt to streams.
type FlowTrace struct {
	// Trace carries each request's tenant and class headers.
	Trace *workload.Trace
	// Stream is each request's stream index.
	Stream []int
}

// DealTrace deals tr's requests to streams at random in proportion to
// their weights (seeded): independent marking of the arrivals, so at
// rate r stream i is itself a Poisson process at r·w_i/Σw when tr's
// arrivals are. The requests get their stream's headers; tr is not
// changed.
func DealTrace(tr *workload.Trace, streams []FlowStream, seed uint64) (*FlowTrace, error) {
	var total float64
	for i, s := range streams {
		if !(s.Weight > 0) {
			return nil, fmt.Errorf("flow stream %d: weight %v (want > 0): %w", i, s.Weight, ErrConfig)
		}
		total += s.Weight
	}
	if len(streams) == 0 {
		return nil, fmt.Errorf("flow: no streams: %w", ErrConfig)
	}
	rng := rand.New(rand.NewPCG(seed, 0x7e4a47))
	out := *tr
	out.Requests = slices.Clone(tr.Requests)
	ft := &FlowTrace{Trace: &out, Stream: make([]int, len(out.Requests))}
	for i := range out.Requests {
		u, si := rng.Float64()*total, 0
		for si < len(streams)-1 && u >= streams[si].Weight {
			u -= streams[si].Weight
			si++
		}
		ft.Stream[i] = si
		r := &out.Requests[i]
		h := make(map[string]string, len(r.Header)+2)
		for k, v := range r.Header {
			h[k] = v
		}
		h[flowClassHeader] = streams[si].Class.String()
		if t := streams[si].Tenant; t != "" {
			h[flowTenantHeader] = t
		}
		r.Header = h
	}
	return ft, nil
}

// Only keeps the requests of the streams keep names, at their arrival
// times: at the same rate they arrive exactly when they did in the whole
// trace. warmup is the whole trace's warm-up count; Only returns the kept
// requests among it.
func (ft *FlowTrace) Only(warmup int, keep ...int) (*FlowTrace, int) {
	out := *ft.Trace
	out.Requests = nil
	sub := &FlowTrace{Trace: &out}
	kept := 0
	for i := range ft.Trace.Requests {
		if !slices.Contains(keep, ft.Stream[i]) {
			continue
		}
		if i < warmup {
			kept++
		}
		r := ft.Trace.Requests[i]
		r.Seq = len(out.Requests)
		out.Requests = append(out.Requests, r)
		sub.Stream = append(sub.Stream, ft.Stream[i])
	}
	return sub, kept
}

// FlowStreamResult is one stream's measured requests.
type FlowStreamResult struct {
	// Requests were sent; Answered completed with a full stream; Parked
	// of those waited in an admission queue (tier=resume).
	Requests, Answered, Parked int
	// Shed were refused with 429 (all capped and sheddable, queues full,
	// displaced); TimedOut waited past the park deadline (504); Failed
	// ended otherwise.
	Shed, TimedOut, Failed int
	// TTFT of the answered requests (model seconds), from arrival.
	TTFT Latency
	// Throughput is answered requests per model second over the run's
	// measured window.
	Throughput float64
}

// FlowStreams splits res's measured records by stream (res must keep its
// records: RunConfig.KeepRecords).
func FlowStreams(res *Result, ft *FlowTrace, n int) ([]FlowStreamResult, error) {
	if len(res.Records) != len(ft.Stream) {
		return nil, fmt.Errorf("flow: %d records for %d requests (keep records): %w", len(res.Records), len(ft.Stream), ErrRun)
	}
	out := make([]FlowStreamResult, n)
	ttfts := make([]*latencyHist, n)
	for i := range ttfts {
		ttfts[i] = newLatencyHist()
	}
	var first, last time.Duration
	for i := res.Warmup; i < len(res.Records); i++ {
		rec, s := &res.Records[i], &out[ft.Stream[i]]
		if first == 0 || rec.Arrival < first {
			first = rec.Arrival
		}
		last = max(last, rec.Done)
		s.Requests++
		switch {
		case rec.OK():
			s.Answered++
			if rec.Route.Tier == "resume" {
				s.Parked++
			}
			ttfts[ft.Stream[i]].record((rec.FirstToken - rec.Arrival).Seconds() / res.TimeScale)
		case rec.Status == 429:
			s.Shed++
		case rec.Status == 504:
			s.TimedOut++
		default:
			s.Failed++
		}
	}
	window := (last - first).Seconds() / res.TimeScale
	for i := range out {
		out[i].TTFT = ttfts[i].summary()
		if window > 0 {
			out[i].Throughput = float64(out[i].Answered) / window
		}
	}
	return out, nil
}

// RunFlow runs base over ft (base.Trace is replaced) and splits the
// outcome by stream.
func RunFlow(ctx context.Context, base RunConfig, ft *FlowTrace, streams int) (*Result, []FlowStreamResult, error) {
	base.Trace, base.KeepRecords = ft.Trace, true
	res, err := Run(ctx, base)
	if err != nil {
		return nil, nil, err
	}
	per, err := FlowStreams(res, ft, streams)
	return res, per, err
}
