package harness

import (
	"bufio"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/worker"
	"github.com/llbproject/llb/simulate/workload"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol*math.Max(1, math.Abs(b)) }

// syntheticRun is a hand-built run of five requests on two workers at time
// scale 0.5 (model time = wall / 0.5): one warm-up, three completed, one
// answered 503 by llb.
func syntheticRun(t *testing.T, name string) (*RunConfig, *raw) {
	t.Helper()
	s, err := strategy.ByName(name)
	if err != nil {
		t.Fatal(err)
	}
	e := engine.DefaultConfig()
	e.Latency.TimeScale = 0.5
	tr := &workload.Trace{BlockSize: 16}
	for i := range 5 {
		tr.Requests = append(tr.Requests, workload.TraceRequest{Seq: i, PromptTokens: 100, ReusableTokens: 64, OutputTokens: 10})
	}
	cfg := &RunConfig{Trace: tr, Strategy: s, Rate: 1, Warmup: 1, Fleet: FleetConfig{Workers: 2, Engine: e}, TTFTSLO: 700 * time.Millisecond}
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	ok := func(seq int, arrive, first, done float64, w int, route string, cached int) Record {
		r := ParseRoute(route)
		if r.Prefill != w {
			t.Fatalf("route %q is not on worker %d", route, w)
		}
		return Record{Seq: seq, Arrival: sec(arrive), Sent: sec(arrive) + time.Duration(seq+1)*time.Millisecond,
			FirstToken: sec(first), Done: sec(done), Status: 200, Route: r,
			PromptTokens: 100, CachedTokens: cached, CompletionTokens: 10}
	}
	r := &raw{
		records: []Record{
			ok(0, 1, 1.1, 2, 0, "tier=1.5 prefill=0 decode=-1", 0),
			ok(1, 2, 2.5, 3, 0, "tier=1.5 prefill=0 decode=-1 spill relief", 50),
			ok(2, 3, 3.2, 4, 1, "tier=sel sel=rr prefill=1 decode=-1", 0),
			{Seq: 3, Arrival: sec(4), Sent: sec(4), Done: sec(4.01), Status: 503, Failure: FailStatus,
				Route: ParseRoute("tier=none error=no_healthy_backend"), PromptTokens: -1, CachedTokens: -1, CompletionTokens: -1},
			ok(4, 5, 5.1, 6.5, 1, "tier=1.5 prefill=1 decode=-1 cold_seed", 100),
		},
		samples: []sample{
			{at: sec(1.5), waiting: []int{9, 9}},
			{at: sec(2.5), waiting: []int{1, 0}},
			{at: sec(3.5), waiting: []int{1, 1}},
			{at: sec(7), waiting: []int{5, 5}},
		},
		atWarm: counters{queries: []uint64{100, 0}, hits: []uint64{0, 0}},
		end:    counters{queries: []uint64{200, 300}, hits: []uint64{40, 100}},
		wall:   sec(5.5),
	}
	// The workers' queue waits (wall s): the warm-up's is left out, the
	// 503's never came.
	for i, w := range []float64{9, 0.1, 0.2, -1, 0.05} {
		r.records[i].QueueWait = sec(w)
	}
	return cfg, r
}

func TestMeasure_SummarisesASyntheticRunInModelTime(t *testing.T) {
	cfg, r := syntheticRun(t, "hard")
	res := measure(cfg, r)
	if res.Requests != 4 || res.Completed != 3 || res.Warmup != 1 {
		t.Fatalf("requests %d completed %d warmup %d; want 4 3 1", res.Requests, res.Completed, res.Warmup)
	}
	if len(res.Errors) != 1 || res.Errors["503"] != 1 {
		t.Fatalf("errors %v; want map[503:1]", res.Errors)
	}
	// TTFTs in model time: (2.5-2)/0.5 = 1.0, (3.2-3)/0.5 = 0.4, (5.1-5)/0.5 = 0.2.
	if !near(res.TTFT.Mean, 1.6/3, 1e-9) || !near(res.TTFT.P50, 0.4, 1e-3) || !near(res.TTFT.P90, 1.0, 1e-3) || !near(res.TTFT.Max, 1.0, 1e-3) {
		t.Fatalf("ttft %+v; want mean 0.533, p50 0.4, p90 1.0", res.TTFT)
	}
	// E2E: 2, 2, 3 model seconds.
	if !near(res.E2E.P90, 3, 1e-3) || !near(res.E2E.Mean, 7.0/3, 1e-9) {
		t.Fatalf("e2e %+v; want p90 3, mean 2.333", res.E2E)
	}
	// Window: first measured arrival 2s to last completion 6.5s wall = 9
	// model seconds; one of three TTFTs (1.0) misses the 0.7 s SLO.
	if !near(res.Throughput, 3.0/9, 1e-9) || !near(res.Goodput, 2.0/9, 1e-9) || !near(res.TokensPerSec, 30.0/9, 1e-9) {
		t.Fatalf("throughput %v goodput %v tokens/s %v; want 0.333 0.222 3.333", res.Throughput, res.Goodput, res.TokensPerSec)
	}
	// Usage over the measured completed requests: 150 / 300; counters
	// over the window: 140 / 400. A single pool reports usage.
	if res.HitRateSource != "usage" || !near(res.HitRate, 0.5, 1e-9) || !near(res.UsageHitRate, 0.5, 1e-9) || !near(res.CounterHitRate, 0.35, 1e-9) {
		t.Fatalf("hit %v from %s (usage %v, counters %v); want 0.5 from usage, counters 0.35", res.HitRate, res.HitRateSource, res.UsageHitRate, res.CounterHitRate)
	}
	if !near(res.OracleHitRate, 0.64, 1e-9) {
		t.Fatalf("oracle %v; want 0.64", res.OracleHitRate)
	}
	if res.TierMix["1.5"] != 2 || res.TierMix["sel:rr"] != 1 || res.TierMix["none"] != 1 || res.Spills != 1 || res.Reliefs != 1 || res.ColdSeeds != 1 {
		t.Fatalf("tiers %v spills %d reliefs %d cold seeds %d; want 1.5:2 sel:rr:1 none:1, 1, 1, 1", res.TierMix, res.Spills, res.Reliefs, res.ColdSeeds)
	}
	// Per-request queue waits of the three completed measured requests, in
	// model time: 0.2, 0.4, 0.1 s.
	if !near(res.QueueWait.P90, 0.4, 1e-3) || !near(res.QueueWait.Mean, 0.7/3, 1e-9) || res.QueueWaitMissing != 0 {
		t.Fatalf("queue wait %+v (%d missing); want p90 0.4, mean 0.233, none missing", res.QueueWait, res.QueueWaitMissing)
	}
	// Little's law: samples in [2s, 6.5s] hold 1 and 2 waiting (mean 1.5)
	// over 4.5 wall s = 9 model s: 13.5 request-seconds of waiting shared by
	// the 4 measured requests, W = 3.375 s.
	if !near(res.MeanWaiting, 1.5, 1e-9) || !near(res.LittleQueueWait, 3.375, 1e-9) {
		t.Fatalf("mean waiting %v Little queue wait %v; want 1.5 and 3.375", res.MeanWaiting, res.LittleQueueWait)
	}
	if res.Workers[0].MaxWaiting != 9 || res.Workers[1].MaxWaiting != 9 {
		t.Fatalf("max waiting %d %d; want 9 9 (over the whole run)", res.Workers[0].MaxWaiting, res.Workers[1].MaxWaiting)
	}
	// In flight (sent to done) over the 5.5 s run: worker 0 ≈ 2/5.5,
	// worker 1 ≈ 2.5/5.5 — the hottest, whose TTFTs are 0.4 and 0.2.
	w0, w1 := res.Workers[0], res.Workers[1]
	if w0.Requests != 1 || w1.Requests != 2 || !near(w0.MeanActive, 2.0/5.5, 0.01) || !near(w1.MeanActive, 2.5/5.5, 0.01) {
		t.Fatalf("workers %+v %+v; want 1 and 2 requests, mean active 0.364 and 0.455", w0, w1)
	}
	if res.Hottest != 1 || !near(res.HottestTTFTP90, 0.4, 1e-3) || !near(res.LoadSkew, w1.MeanActive/((w0.MeanActive+w1.MeanActive)/2), 1e-9) {
		t.Fatalf("hottest %d p90 %v skew %v; want worker 1, 0.4", res.Hottest, res.HottestTTFTP90, res.LoadSkew)
	}
	if !near(w0.HitRate, 0.5, 1e-9) || !near(w1.HitRate, 0.5, 1e-9) {
		t.Fatalf("worker hit rates %v %v; want 0.5 0.5 (usage)", w0.HitRate, w1.HitRate)
	}
	// Dispatch lag: 1..5 ms for the four sent late, 0 for the 503.
	if !near(res.Health.DispatchLagMax, 5, 1e-9) || !near(res.Health.DispatchLagP50, 2, 1e-9) {
		t.Fatalf("lag %+v; want max 5 ms, p50 2 ms", res.Health)
	}
}

func TestMeasure_PDRulesReadTheHitRateFromTheCounters(t *testing.T) {
	cfg, r := syntheticRun(t, "tier1")
	res := measure(cfg, r)
	if res.HitRateSource != "counters" || !near(res.HitRate, 0.35, 1e-9) {
		t.Fatalf("hit %v from %s; want 0.35 from counters (a P/D client sees the decode leg's usage)", res.HitRate, res.HitRateSource)
	}
	if !near(res.Workers[0].HitRate, 0.4, 1e-9) || !near(res.Workers[1].HitRate, 1.0/3, 1e-9) {
		t.Fatalf("worker hit rates %v %v; want 0.4 and 0.333 (counter deltas)", res.Workers[0].HitRate, res.Workers[1].HitRate)
	}
}

func TestMeasure_MissingUsageFallsBackToTheCounters(t *testing.T) {
	cfg, r := syntheticRun(t, "rr")
	r.records[2].CachedTokens = -1
	res := measure(cfg, r)
	if res.HitRateSource != "counters" || res.UsageHitRate != -1 {
		t.Fatalf("source %s usage %v; want counters and -1", res.HitRateSource, res.UsageHitRate)
	}
}

func TestParseHistTotals_AddsTheSeriesOfOneHistogram(t *testing.T) {
	text := `# HELP ignored
vllm:time_to_first_token_seconds_bucket{model_name="m",engine="0",le="0.1"} 3
vllm:time_to_first_token_seconds_sum{model_name="m",engine="0"} 0.25
vllm:time_to_first_token_seconds_count{model_name="m",engine="0"} 4
vllm:time_to_first_token_seconds_sum{model_name="lora",engine="0"} 0.5
vllm:time_to_first_token_seconds_count{model_name="lora",engine="0"} 1
vllm:e2e_request_latency_seconds_sum{model_name="m",engine="0"} 99
`
	_, ttftSeries := ttftSource(worker.DialectVLLM)
	got, err := parseHistTotals(bufio.NewScanner(strings.NewReader(text)), ttftSeries)
	if err != nil || got.sum != 0.75 || got.count != 5 {
		t.Fatalf("got %+v (%v); want sum 0.75 count 5", got, err)
	}
	if _, err := parseHistTotals(bufio.NewScanner(strings.NewReader(ttftSeries+"_sum{} x\n")), ttftSeries); err == nil {
		t.Fatal("a bad value parsed")
	}
}

func TestSessionAffinity_CountsConversationsWhoseTurnsShareOnePrefill(t *testing.T) {
	reqs := []workload.TraceRequest{
		{Workload: "multi_turn", Group: 1}, {Workload: "multi_turn", Group: 2}, {Workload: "multi_turn", Group: 1},
		{Workload: "multi_turn", Group: 2}, {Workload: "multi_turn", Group: 3}, {Workload: "shared_prefix", Group: 1},
		{Workload: "multi_turn", Group: 4}, {Workload: "multi_turn", Group: 4},
	}
	rec := func(p int, fail string) Record { return Record{Route: Route{Prefill: p}, Failure: fail} }
	recs := []Record{
		rec(0, ""), rec(1, ""), rec(0, ""), // conversation 1 kept on 0
		rec(2, ""),                      // conversation 2 split (1, then 2)
		rec(3, ""),                      // conversation 3: one turn, not counted
		rec(5, ""),                      // not a conversation
		rec(1, ""), rec(2, FailTimeout), // conversation 4: the failed turn does not count
	}
	sessions, kept := sessionAffinity(reqs, recs)
	if sessions != 2 || kept != 1 {
		t.Fatalf("got %d sessions, %d kept; want 2 and 1 (conversation 4 has one completed turn)", sessions, kept)
	}
}
