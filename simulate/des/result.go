package des

import (
	"slices"
	"time"

	"github.com/llbproject/llb/ladder"
)

// Latency summarises a latency sample (seconds).
type Latency struct {
	// Mean, P50, P90 and P99 are in seconds; percentiles are nearest-rank
	// over the exact sample.
	Mean, P50, P90, P99 float64
}

// summarize sorts xs in place and returns its summary.
func summarize(xs []float64) Latency {
	if len(xs) == 0 {
		return Latency{}
	}
	slices.Sort(xs)
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return Latency{Mean: sum / float64(len(xs)), P50: quantile(xs, 0.50), P90: quantile(xs, 0.90), P99: quantile(xs, 0.99)}
}

// quantile is the nearest-rank q-quantile of sorted xs.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.999999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// WorkerResult is one worker's share of a run (measured requests only,
// except MaxRunning and MeanActive, which cover the whole run).
type WorkerResult struct {
	// Requests is how many measured requests the worker served.
	Requests int
	// TTFT summarises their time to first token.
	TTFT Latency
	// HitRate is their prefix-cache hit rate (cached / prompt tokens).
	HitRate float64
	// MeanActive is the time-averaged count of llb's in-flight requests on
	// the worker over the run (its load).
	MeanActive float64
	// MaxRunning is the largest running batch the engine reported.
	MaxRunning int
	// MaxWaiting is the longest waiting queue the engine reported.
	MaxWaiting int
}

// Result is one run's measurements. Everything in it is a pure function of
// the trace and the run config: the same inputs give an identical Result.
type Result struct {
	// Trace, Strategy, Mode, FactorPct and Lambda identify the run; Mode
	// is "" when Tier 1.5 is off.
	Trace, Strategy, Mode string
	FactorPct, Lambda     uint32
	// Seed is the trace seed.
	Seed uint64
	// Workers is the fleet size.
	Workers int
	// Rate is the offered load (requests/s); 0 in a closed loop.
	Rate float64
	// Concurrency is the closed loop's client count; 0 for open-loop
	// arrivals.
	Concurrency int
	// Requests and Warmup: measured requests and the warm-up left out.
	Requests, Warmup int
	// TTFT, E2E and QueueWait (admission − arrival) over measured requests.
	TTFT, E2E, QueueWait Latency
	// Throughput is measured requests per second of the measured window
	// (first measured arrival to last measured completion); TokensPerSec is
	// output tokens per second of that window.
	Throughput, TokensPerSec float64
	// TTFTPredError summarises the relative error of llb's TTFT
	// predictions over measured requests, |predicted − actual| / actual
	// (ladder.TTFTRelError); zero for peers. TTFTPredBias is the median of
	// the signed error (positive: predicted later than came).
	TTFTPredError Latency
	TTFTPredBias  float64
	// Goodput is measured requests per second whose TTFT met TTFTSLO;
	// SLOKept is their share of the measured requests (with a strategy
	// whose requests carry the objective, strategy.Objective: the
	// objective kept).
	Goodput, SLOKept float64
	// TTFTSLO is the objective goodput used (seconds).
	TTFTSLO float64
	// HitRate is the engines' prefix-cache hit rate over measured requests
	// (cached prompt tokens / prompt tokens, vllm:prefix_cache_hits /
	// queries); OracleHitRate is the bound over the same requests.
	HitRate, OracleHitRate float64
	// TierMix counts measured decisions by deciding stage ("1.5",
	// "sel:rr", "0", "1", "2").
	TierMix map[string]int
	// Spills, Reliefs, ColdSeeds, Saturated and BoundWalks count measured
	// decisions carrying the flag.
	Spills, Reliefs, ColdSeeds, Saturated, BoundWalks int
	// KVDecisions counts measured decisions where the Tier-1.5 law ran;
	// MeanFactorPct, MeanLambda and MeanKVLoad average the law's effective
	// (1+ε)·100, λ and L over them (adaptive modes vary them with L).
	KVDecisions                           int
	MeanFactorPct, MeanLambda, MeanKVLoad float64
	// LoadSkew is max/mean of the workers' MeanActive; ServedSkew is
	// max/mean of their measured request counts (1 is perfectly even).
	LoadSkew, ServedSkew float64
	// Hottest is the worker with the highest MeanActive (lowest index on
	// ties); HottestTTFTP90 is its TTFT p90 (seconds).
	Hottest        int
	HottestTTFTP90 float64
	// Workers' own results, by index.
	PerWorker []WorkerResult
	// Makespan is the virtual time from the first arrival to the last
	// completion.
	Makespan time.Duration
	// Events is the number of engine steps and arrivals the run processed.
	Events int64
	// MirrorVerified counts stored KV-event runs whose keys the mirrors
	// re-derived and matched (the hash contract held); MirrorBlocks is the
	// blocks the mirrors held at the end, summed.
	MirrorVerified uint64
	MirrorBlocks   int
	// Routes holds every request's route, warm-up included, when
	// RunConfig.RecordRoutes is set; nil otherwise.
	Routes []Route
}

// Route is one request's routing decision and outcome.
type Route struct {
	// Seq is the request's position in the trace.
	Seq int
	// Worker is the worker that served it.
	Worker int
	// Decision is the decision's X-Llb-Route form, e.g.
	// "tier=1.5 prefill=2 decode=-1 spill relief".
	Decision string
	// Tier and Flags are the decision's stage and trade-offs.
	Tier  ladder.Tier
	Flags ladder.Flags
	// Overlap is the chosen worker's Tier-1.5 overlap in blocks (0 when
	// Tier 1.5 is off).
	Overlap uint32
	// CachedTokens is what the engine served from its prefix cache.
	CachedTokens int
	// TTFT and E2E are the request's latencies; Queue is how long it
	// waited for admission (a batch slot or blocks; on the step model also
	// the step boundary).
	TTFT, E2E, Queue time.Duration
	// Arrive is its arrival offset from the run's start.
	Arrive time.Duration
}
