package harness

import (
	"slices"
	"strconv"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/workload"
)

// Latency summarises a latency sample in model seconds: the exact mean and
// HdrHistogram percentiles (3 significant digits, microsecond resolution).
type Latency struct {
	Mean, P50, P90, P99, Max float64
}

// latencyHist records model-time latencies in microseconds.
type latencyHist struct {
	h   *hdrhistogram.Histogram
	sum float64
	n   int
}

func newLatencyHist() *latencyHist {
	return &latencyHist{h: hdrhistogram.New(1, int64(24*time.Hour/time.Microsecond), 3)}
}

func (l *latencyHist) record(seconds float64) {
	us := int64(seconds*1e6 + 0.5)
	_ = l.h.RecordValue(min(max(us, 1), l.h.HighestTrackableValue())) // clamped: cannot fail
	l.sum += seconds
	l.n++
}

func (l *latencyHist) summary() Latency {
	if l.n == 0 {
		return Latency{}
	}
	q := func(p float64) float64 { return float64(l.h.ValueAtPercentile(p)) / 1e6 }
	return Latency{Mean: l.sum / float64(l.n), P50: q(50), P90: q(90), P99: q(99), Max: float64(l.h.Max()) / 1e6}
}

// WorkerResult is one serving worker's share of a run.
type WorkerResult struct {
	// Requests is how many measured requests llbd routed to it (by the
	// prefill endpoint of X-Llb-Route).
	Requests int
	// TTFT summarises the TTFT of its completed measured requests.
	TTFT Latency
	// HitRate is its prefix-cache hit rate: per-request usage when
	// Result.HitRateSource is "usage", else its counter delta.
	HitRate float64
	// MeanActive is the time-averaged number of requests the harness had
	// in flight on it (sent to done) over the whole run.
	MeanActive float64
	// MaxWaiting is the longest engine waiting queue sampled.
	MaxWaiting int
}

// Health is how the harness itself fared: if it was the bottleneck, the
// run's figures are not the daemon's.
type Health struct {
	// DispatchLagP50, P99 and Max are how late requests were sent against
	// their open-loop schedule (wall milliseconds).
	DispatchLagP50, DispatchLagP99, DispatchLagMax float64
	// Wall is the run's wall time from the first send to the last answer
	// (seconds).
	Wall float64
	// HarnessCPU is the CPU time of the harness process (it hosts the
	// fleet's workers too) and DaemonCPU llbd's, over the run (seconds).
	HarnessCPU, DaemonCPU float64
	// DrainTimeout is true when requests were cut at the drain timeout.
	DrainTimeout bool
	// Overhead is what the path outside the workers' engines adds to TTFT
	// (wall milliseconds): the mean of first token − sent over every
	// completed request minus the workers' own mean TTFT
	// (vllm:time_to_first_token_seconds: request received to the first
	// token's engine time). It holds llbd (parsing, tokenizing through a
	// worker's /tokenize, hashing, routing, proxying), the loopback hops,
	// the workers' HTTP and driver lateness, and the harness's reading.
	// -1 when not measured (P/D rules, whose workers time both legs).
	Overhead float64
}

// Result is one run's measurements. Latencies and rates are in model time.
type Result struct {
	// Strategy, Mode, FactorPct and Lambda identify the run (Mode "" when
	// Tier 1.5 is off; FactorPct and Lambda 0 when left at llbd's default).
	Strategy, Mode    string
	FactorPct, Lambda uint32
	// Rate is the offered load (requests per model second; 0 in a closed
	// loop); TimeScale the workers' time scale.
	Rate, TimeScale float64
	// Concurrency is the closed loop's client count (0 open-loop).
	Concurrency int
	// Requests is the number of measured requests, Warmup the leading
	// requests left out, Completed the measured requests that finished
	// with a full stream.
	Requests, Warmup, Completed int
	// Errors counts measured requests that did not complete, by HTTP
	// status ("503") or failure kind ("transport", "timeout", "short",
	// "broken_stream", "not_stream").
	Errors map[string]int
	// TTFT and E2E over completed measured requests (model seconds).
	TTFT, E2E Latency
	// Throughput is completed measured requests per model second from the
	// first measured arrival to the last measured completion; TokensPerSec
	// the output tokens per model second; Goodput the completed requests
	// per model second whose TTFT met TTFTSLO (seconds).
	Throughput, TokensPerSec, Goodput, TTFTSLO float64
	// SLOKept is the share of measured requests that completed with a
	// TTFT within TTFTSLO (for a strategy whose requests carry it,
	// Strategy.Objective: the objective kept; a refused request is not).
	SLOKept float64
	// TTFTPrediction is how close llbd's TTFT predictions came over the
	// measured window (zero for a peer).
	TTFTPrediction TTFTPrediction
	// HitRate is the fleet's prefix-cache hit rate over the measured
	// requests (cached prompt tokens / prompt tokens, vLLM's
	// prefix_cache_hits / queries), from HitRateSource: "usage" (each
	// completed measured request's usage.prompt_tokens_details, exact
	// over the measured set; single-pool rules) or "counters" (the
	// serving workers' counter deltas from the first measured send to the
	// end, which also count late-admitted warm-up requests; P/D rules,
	// whose client-visible usage is the decode leg's).
	HitRate       float64
	HitRateSource string
	// UsageHitRate and CounterHitRate are both estimates (UsageHitRate -1
	// when not every completed measured request reported usage).
	UsageHitRate, CounterHitRate float64
	// CounterQueries and CounterHits are the deltas behind CounterHitRate:
	// prompt tokens the serving workers looked up and found from the first
	// measured send to the end. Engines count a prompt when they admit it,
	// so the window holds the measured requests and every warm-up request
	// admitted after that send (llbd may still be routing the warm-up when
	// the first measured request leaves).
	CounterQueries, CounterHits uint64
	// OracleHitRate is the bound over the measured requests (every
	// reusable prefix hit).
	OracleHitRate float64
	// TierMix counts measured requests by deciding stage (X-Llb-Route).
	TierMix map[string]int
	// Spills, Reliefs, ColdSeeds, Saturated and BoundWalks count measured
	// requests whose route carries the flag; Retries sums llbd's retries.
	Spills, Reliefs, ColdSeeds, Saturated, BoundWalks, Retries int
	// QueueWait summarises the engine queue wait (model seconds) the
	// workers reported for each completed measured request (Record.QueueWait:
	// admission minus arrival at the engine, both legs of a P/D request);
	// QueueWaitMissing counts completed measured requests that reported
	// none. Its P90 is what saturation.Criterion judges.
	QueueWait        Latency
	QueueWaitMissing int
	// LittleQueueWait is an estimate of the mean queue wait by Little's
	// law: the sampled waiting queues' area over the measured window (first
	// measured arrival to last measured completion) divided by the measured
	// requests, in model seconds; MeanWaiting is the mean sampled waiting
	// requests over that window. A cross-check on QueueWait.Mean that also
	// counts the tail of warm-up requests queued in the window.
	LittleQueueWait, MeanWaiting float64
	// LoadSkew and ServedSkew are max/mean of the workers' MeanActive and
	// of their measured request counts.
	LoadSkew, ServedSkew float64
	// Hottest is the worker with the highest MeanActive; HottestTTFTP90 its
	// TTFT p90 (model seconds).
	Hottest        int
	HottestTTFTP90 float64
	// Sessions counts the run's multi-turn conversations with at least two
	// completed turns (warm-up included: a conversation spans it);
	// SessionsKept those whose completed turns all went to one prefill
	// endpoint (Tier 0's promise; with replicas, whichever replica each
	// turn reached).
	Sessions, SessionsKept int
	// Workers are the serving workers' own results, by endpoint index.
	Workers []WorkerResult
	// Health is the harness's own health.
	Health Health
	// Records holds every request's record when RunConfig.KeepRecords.
	Records []Record
}

// measure turns a driven run into its Result.
func measure(c *RunConfig, r *raw) *Result {
	tr := c.Trace
	scale := c.Fleet.TimeScale()
	model := func(d time.Duration) float64 { return d.Seconds() / scale }
	n := c.Fleet.Workers
	res := &Result{
		Strategy: c.Strategy.Name, Mode: c.Strategy.Mode(), FactorPct: c.Strategy.FactorPct, Lambda: c.Strategy.Lambda,
		Rate: c.Rate, Concurrency: c.Concurrency, TimeScale: scale, Warmup: c.Warmup, Requests: len(r.records) - c.Warmup,
		TTFTSLO: c.TTFTSLO.Seconds(), OracleHitRate: tr.OracleHitRate(c.Warmup),
		Errors: map[string]int{}, TierMix: map[string]int{}, Workers: make([]WorkerResult, n),
		UsageHitRate: -1,
	}
	if c.Concurrency > 0 {
		res.Rate = 0
	}
	ttft, e2e, wait := newLatencyHist(), newLatencyHist(), newLatencyHist()
	perTTFT := make([]*latencyHist, n)
	for i := range perTTFT {
		perTTFT[i] = newLatencyHist()
	}
	lag := make([]float64, 0, len(r.records))
	perCached, perPrompt := make([]int64, n), make([]int64, n)
	var cached, prompt, outTokens int64
	usageAll := true
	good := 0
	first, last := r.records[c.Warmup].Arrival, time.Duration(0)
	activeArea := make([]time.Duration, n)
	var runEnd time.Duration
	res.Sessions, res.SessionsKept = sessionAffinity(tr.Requests, r.records)
	for i := range r.records {
		rec := &r.records[i]
		if rec.Sent > 0 {
			lag = append(lag, float64(rec.Sent-rec.Arrival)/float64(time.Millisecond))
		}
		runEnd = max(runEnd, rec.Done)
		w := rec.Route.Prefill
		if w >= 0 && w < n && rec.Sent > 0 {
			activeArea[w] += rec.Done - rec.Sent
		}
		if i < c.Warmup {
			continue
		}
		res.TierMix[tierOf(rec)]++
		countIf(&res.Spills, rec.Route.Spill)
		countIf(&res.Reliefs, rec.Route.Relief)
		countIf(&res.ColdSeeds, rec.Route.ColdSeed)
		countIf(&res.Saturated, rec.Route.Saturated)
		countIf(&res.BoundWalks, rec.Route.BoundWalk)
		res.Retries += rec.Route.Retries
		if w >= 0 && w < n {
			res.Workers[w].Requests++
		}
		if !rec.OK() {
			res.Errors[errorKey(rec)]++
			continue
		}
		res.Completed++
		f := model(rec.FirstToken - rec.Arrival)
		ttft.record(f)
		e2e.record(model(rec.Done - rec.Arrival))
		if f <= res.TTFTSLO {
			good++
		}
		if rec.QueueWait >= 0 {
			wait.record(model(rec.QueueWait))
		} else {
			res.QueueWaitMissing++
		}
		last = max(last, rec.Done)
		req := &tr.Requests[i]
		outTokens += int64(req.OutputTokens)
		if w >= 0 && w < n {
			perTTFT[w].record(f)
		}
		if rec.CachedTokens < 0 || rec.PromptTokens <= 0 {
			usageAll = false
			continue
		}
		cached += int64(rec.CachedTokens)
		prompt += int64(rec.PromptTokens)
		if w >= 0 && w < n {
			perCached[w] += int64(rec.CachedTokens)
			perPrompt[w] += int64(rec.PromptTokens)
		}
	}
	res.TTFT, res.E2E, res.QueueWait = ttft.summary(), e2e.summary(), wait.summary()
	if res.Requests > 0 {
		res.SLOKept = float64(good) / float64(res.Requests)
	}
	if r.predOK {
		res.TTFTPrediction = r.predEnd.since(r.predWarm)
	}
	if window := model(last - first); window > 0 && res.Completed > 0 {
		res.Throughput = float64(res.Completed) / window
		res.TokensPerSec = float64(outTokens) / window
		res.Goodput = float64(good) / window
	}

	// Hit rates: the exact per-request figure when every completed
	// measured request reported usage on a single-pool rule, else the
	// counters.
	var dq, dh uint64
	perCounter := make([]float64, n)
	for i := range n {
		q, h := r.end.queries[i]-r.atWarm.queries[i], r.end.hits[i]-r.atWarm.hits[i]
		dq, dh = dq+q, dh+h
		if q > 0 {
			perCounter[i] = float64(h) / float64(q)
		}
	}
	res.CounterQueries, res.CounterHits = dq, dh
	if dq > 0 {
		res.CounterHitRate = float64(dh) / float64(dq)
	}
	if usageAll && prompt > 0 {
		res.UsageHitRate = float64(cached) / float64(prompt)
	}
	if c.Strategy.Shape == strategy.ShapePool && res.UsageHitRate >= 0 {
		res.HitRate, res.HitRateSource = res.UsageHitRate, "usage"
		for i := range n {
			if perPrompt[i] > 0 {
				res.Workers[i].HitRate = float64(perCached[i]) / float64(perPrompt[i])
			}
		}
	} else {
		res.HitRate, res.HitRateSource = res.CounterHitRate, "counters"
		for i := range n {
			res.Workers[i].HitRate = perCounter[i]
		}
	}

	// Queue wait by Little's law over the measured window's samples.
	var waitSum float64
	var nSamples int
	for _, s := range r.samples {
		for i, q := range s.waiting {
			res.Workers[i].MaxWaiting = max(res.Workers[i].MaxWaiting, q)
		}
		if s.at < first || s.at > last {
			continue
		}
		tot := 0
		for _, q := range s.waiting {
			tot += q
		}
		waitSum += float64(tot)
		nSamples++
	}
	if nSamples > 0 && res.Requests > 0 {
		// Little's law over the window: the waiting-queue area ∫q dt is
		// the sum of the waits of the requests that queued in it (the
		// measured ones, plus a tail of warm-up ones), so the mean wait is
		// mean(q)·T / N.
		res.MeanWaiting = waitSum / float64(nSamples)
		res.LittleQueueWait = res.MeanWaiting * model(last-first) / float64(res.Requests)
	}

	// Load: time-averaged in-flight per worker over the whole run.
	span := (runEnd - r.records[0].Arrival).Seconds()
	var sumActive, maxActive float64
	var sumServed, maxServed int
	for i := range n {
		w := &res.Workers[i]
		w.TTFT = perTTFT[i].summary()
		if span > 0 {
			w.MeanActive = activeArea[i].Seconds() / span
		}
		sumActive += w.MeanActive
		if w.MeanActive > maxActive {
			maxActive, res.Hottest = w.MeanActive, i
		}
		sumServed += w.Requests
		maxServed = max(maxServed, w.Requests)
	}
	if sumActive > 0 {
		res.LoadSkew = maxActive / (sumActive / float64(n))
	}
	if sumServed > 0 {
		res.ServedSkew = float64(maxServed) / (float64(sumServed) / float64(n))
	}
	res.HottestTTFTP90 = res.Workers[res.Hottest].TTFT.P90

	slices.Sort(lag)
	res.Health = Health{
		Wall: r.wall.Seconds(), HarnessCPU: r.harnessCPU.Seconds(), DaemonCPU: r.daemonCPU.Seconds(),
		DrainTimeout: r.drainTimeout, Overhead: -1,
	}
	if r.workerTTFTOK && r.workerTTFT.count > 0 {
		var sum time.Duration
		var n int
		for i := range r.records {
			if rec := &r.records[i]; rec.OK() {
				sum += rec.FirstToken - rec.Sent
				n++
			}
		}
		if n > 0 {
			res.Health.Overhead = (sum.Seconds()/float64(n) - r.workerTTFT.sum/float64(r.workerTTFT.count)) * 1e3
		}
	}
	if len(lag) > 0 {
		res.Health.DispatchLagP50 = nearestRank(lag, 0.50)
		res.Health.DispatchLagP99 = nearestRank(lag, 0.99)
		res.Health.DispatchLagMax = lag[len(lag)-1]
	}
	if c.KeepRecords {
		res.Records = r.records
	}
	return res
}

// tierOf is a record's tier-mix key ("none" when the route is missing).
func tierOf(rec *Record) string {
	if !rec.Route.OK {
		return "none"
	}
	return rec.Route.Tier
}

// errorKey names a failure: the HTTP status for FailStatus, else the kind.
func errorKey(rec *Record) string {
	if rec.Failure == FailStatus {
		return strconv.Itoa(rec.Status)
	}
	return rec.Failure
}

func countIf(n *int, b bool) {
	if b {
		*n++
	}
}

// nearestRank is the nearest-rank q-quantile of sorted xs.
func nearestRank(sorted []float64, q float64) float64 {
	i := int(q*float64(len(sorted))+0.999999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// sessionAffinity counts the multi-turn conversations with two or more
// completed turns, and those whose completed turns share one prefill.
func sessionAffinity(reqs []workload.TraceRequest, recs []Record) (sessions, kept int) {
	first := map[int]int{}
	turns := map[int]int{}
	split := map[int]bool{}
	for i := range recs {
		if i >= len(reqs) || reqs[i].Workload != "multi_turn" || !recs[i].OK() || recs[i].Route.Prefill < 0 {
			continue
		}
		g, p := reqs[i].Group, recs[i].Route.Prefill
		if turns[g] == 0 {
			first[g] = p
		} else if p != first[g] {
			split[g] = true
		}
		turns[g]++
	}
	for g, n := range turns {
		if n < 2 {
			continue
		}
		sessions++
		if !split[g] {
			kept++
		}
	}
	return sessions, kept
}
