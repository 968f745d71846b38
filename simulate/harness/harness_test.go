package harness

import (
	"context"
	"github.com/llbproject/llb/simulate/des"
	"math/bits"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/workload"
)

// daemonBuild is the llbd binary shared by the package's tests.
var daemonBuild struct {
	once     sync.Once
	bin, dir string
	err      error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if daemonBuild.dir != "" {
		_ = os.RemoveAll(daemonBuild.dir)
	}
	os.Exit(code)
}

// llbdBin builds llbd once per test binary.
func llbdBin(t *testing.T) string {
	t.Helper()
	daemonBuild.once.Do(func() {
		daemonBuild.dir, daemonBuild.err = os.MkdirTemp("", "harness-llbd-")
		if daemonBuild.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		daemonBuild.bin, daemonBuild.err = BuildDaemon(ctx, daemonBuild.dir, "")
	})
	if daemonBuild.err != nil {
		t.Fatal(daemonBuild.err)
	}
	return daemonBuild.bin
}

// smallEngine is a fast worker model: a 0.05 time scale, short prompts.
func smallEngine(blocks, seqs int) engine.Config {
	e := engine.DefaultConfig()
	e.NumBlocks, e.MaxNumSeqs = blocks, seqs
	e.Latency.TimeScale = 0.05
	return e
}

// smokeTrace is a small shared-prefix trace: 4 groups of 4 questions.
func smokeSpec() workload.SharedPrefix {
	return workload.SharedPrefix{Options: workload.Options{Stream: true}, Groups: 4, PromptsPerGroup: 4, SystemTokens: 256, QuestionTokens: 32, OutputTokens: 12}
}

func smokeTrace(t *testing.T, n int) *workload.Trace {
	t.Helper()
	tr, err := workload.NewTrace(workload.TraceConfig{Spec: smokeSpec(), Requests: n, Seed: 1, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// checkRun asserts what every healthy run must show.
func checkRun(t *testing.T, res *Result) {
	t.Helper()
	if res.Completed != res.Requests || len(res.Errors) != 0 || res.Health.DrainTimeout {
		t.Fatalf("%d of %d completed, errors %v, drain timeout %v", res.Completed, res.Requests, res.Errors, res.Health.DrainTimeout)
	}
	served := 0
	for _, w := range res.Workers {
		served += w.Requests
	}
	if served != res.Requests {
		t.Fatalf("workers served %d; want all %d measured requests attributed by X-Llb-Route", served, res.Requests)
	}
	for _, rec := range res.Records {
		if !rec.Route.OK || rec.Status != 200 || rec.FirstToken < rec.Sent || rec.Done < rec.FirstToken || rec.Sent < rec.Arrival {
			t.Fatalf("record %+v: want a route, 200, arrival <= sent <= first token <= done", rec)
		}
		if rec.QueueWait < 0 || rec.QueueWait > rec.Done-rec.Sent {
			t.Fatalf("record %+v: want the workers' queue wait, within the request's time", rec)
		}
	}
	if res.QueueWaitMissing != 0 || res.QueueWait.P90 < 0 {
		t.Fatalf("queue wait %+v, %d requests without one: want every completed request's (what saturation judges)", res.QueueWait, res.QueueWaitMissing)
	}
	if !(res.TTFT.P50 > 0 && res.TTFT.P50 <= res.TTFT.P90 && res.TTFT.P90 <= res.TTFT.P99 && res.TTFT.P99 <= res.E2E.Max) {
		t.Fatalf("ttft %+v e2e %+v: want 0 < p50 <= p90 <= p99 <= e2e max", res.TTFT, res.E2E)
	}
	if res.Throughput <= 0 || res.HitRate <= 0 || res.HitRate > res.OracleHitRate+1e-9 {
		t.Fatalf("throughput %v, hit rate %v (oracle %v): want > 0 and the hit rate within the oracle", res.Throughput, res.HitRate, res.OracleHitRate)
	}
}

func TestRun_KVExactHardThroughTheRealDaemon(t *testing.T) {
	s, _ := strategy.ByName(strategy.NameHard)
	const warmup = 12
	// At a quarter of real time a KV event's trip from a worker to llbd's
	// index (wall milliseconds, more on a loaded machine) stays short
	// against the model time between a group's requests; at 0.05 it is
	// not, and Tier 1.5 finds no overlap for prefixes already computed.
	eng := smallEngine(4000, 32)
	eng.Latency.TimeScale = 0.25
	res, err := Run(context.Background(), RunConfig{
		Trace: smokeTrace(t, 60), Strategy: s, Rate: 10, Warmup: warmup,
		Fleet:  FleetConfig{Workers: 2, BaseIP: "127.0.9.2", Engine: eng},
		Daemon: DaemonSource{Bin: llbdBin(t)}, WorkDir: t.TempDir(), KeepRecords: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, res)
	if res.Mode != "hard" || res.TierMix["1.5"] < res.Requests/2 {
		t.Fatalf("mode %q tier mix %v: want Tier 1.5 to decide most of %d requests", res.Mode, res.TierMix, res.Requests)
	}
	// The client sees the first token after the worker timed it, and the
	// path outside the engines is a part of what the client waited.
	var seen time.Duration
	for _, rec := range res.Records {
		seen += rec.FirstToken - rec.Sent
	}
	seenMs := float64(seen) / float64(len(res.Records)) / float64(time.Millisecond)
	if !(res.Health.Overhead > 0 && res.Health.Overhead < seenMs) {
		t.Fatalf("overhead %v ms; want the harness's TTFT (mean %v ms) above the workers' own", res.Health.Overhead, seenMs)
	}
	if res.HitRateSource != "usage" {
		t.Fatalf("hit rate %v from %s; want usage on a single-pool rule", res.HitRate, res.HitRateSource)
	}
	// The engines' counters take in exactly the measured requests' usage
	// and that of the warm-up requests admitted after the first measured
	// send (how many depends on how fast llbd routed the warm-up).
	if late, ok := lateWarmup(res, warmup); !ok {
		t.Fatalf("counters %d/%d (rate %v) are not the measured usage (rate %v) plus some warm-up requests'",
			res.CounterHits, res.CounterQueries, res.CounterHitRate, res.UsageHitRate)
	} else {
		t.Logf("hit rate %.4f from usage, %.4f from counters that count %d late warm-up requests", res.UsageHitRate, res.CounterHitRate, late)
	}
}

// lateWarmup finds how many of the warm-up records' usage, added to the
// measured records', make up the counter deltas exactly; false when no
// subset of them does.
func lateWarmup(res *Result, warmup int) (int, bool) {
	var q, h int64
	for _, rec := range res.Records[warmup:] {
		q += int64(rec.PromptTokens)
		h += int64(rec.CachedTokens)
	}
	extraQ, extraH := int64(res.CounterQueries)-q, int64(res.CounterHits)-h
	for set := 0; set < 1<<warmup; set++ {
		var sq, sh int64
		for i := range warmup {
			if set&(1<<i) != 0 {
				sq += int64(res.Records[i].PromptTokens)
				sh += int64(res.Records[i].CachedTokens)
			}
		}
		if sq == extraQ && sh == extraH {
			return bits.OnesCount(uint(set)), true
		}
	}
	return 0, false
}

func TestRun_TierOneOnAPDRuleThroughTheRealDaemon(t *testing.T) {
	tests := []struct {
		name          string
		same          bool
		decodeWorkers int
		// wantDecode reports whether a decode endpoint index is right.
		wantDecode func(int) bool
	}{
		{"on the serving workers (kv_both, listed twice)", true, 0, func(d int) bool { return d == 2 || d == 3 }},
		{"with a separate decode worker", false, 1, func(d int) bool { return d == 2 }},
		{"with as many decode workers as prefill workers", false, 0, func(d int) bool { return d == 2 || d == 3 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := strategy.ByName(strategy.NameTier1)
			res, err := Run(context.Background(), RunConfig{
				Trace: smokeTrace(t, 40), Strategy: s, Rate: 10, Warmup: 8,
				Fleet:  FleetConfig{Workers: 2, DecodeWorkers: tt.decodeWorkers, PDSameWorkers: tt.same, Engine: smallEngine(4000, 32)},
				Daemon: DaemonSource{Bin: llbdBin(t)}, WorkDir: t.TempDir(), KeepRecords: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			checkRun(t, res)
			for _, rec := range res.Records {
				if !tt.wantDecode(rec.Route.Decode) || rec.Route.Prefill < 0 || rec.Route.Prefill > 1 {
					t.Fatalf("route %+v: want a prefill of 0..1 and a decode endpoint after them", rec.Route)
				}
			}
			if res.HitRateSource != "counters" || res.TierMix["1"] == 0 {
				t.Fatalf("hit rate from %s, tiers %v: want counters (P/D) and Tier-1 trie decisions", res.HitRateSource, res.TierMix)
			}
		})
	}
}

func TestRun_AttachedDaemonServesTheRunAndLosesTheRuleAfterIt(t *testing.T) {
	d, err := StartDaemon(context.Background(), DaemonConfig{Bin: llbdBin(t), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := d.Stop(10 * time.Second); err != nil {
			t.Error(err)
		}
	}()
	s, _ := strategy.ByName(strategy.NameRR)
	res, err := Run(context.Background(), RunConfig{
		Trace: smokeTrace(t, 20), Strategy: s, Rate: 10, Warmup: 4,
		Fleet:  FleetConfig{Workers: 2, BaseIP: "127.0.9.2", Engine: smallEngine(4000, 32)},
		Daemon: DaemonSource{Attach: d.Addr}, WorkDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.TierMix["sel:rr"] != res.Requests || res.Completed != res.Requests {
		t.Fatalf("tiers %v, %d of %d completed: want round robin for all", res.TierMix, res.Completed, res.Requests)
	}
	code, body, err := d.do(context.Background(), "GET", "/netlox/v1/config/loadbalancer/all", nil)
	if err != nil || code != 200 || strings.Contains(string(body), "llbsim-bench") {
		t.Fatalf("after the run: %d %s (%v); want the bench rule deleted from the attached daemon", code, body, err)
	}
}

// A peer strategy runs its router's policy behind the harness's own proxy
// on the VIP, in place of llbd: llm-d reads the workers' KV events over
// real ZMQ into mirrors and their queue and usage, and routes most of a
// shared-prefix trace to where its prefix is cached.
func TestRun_PeerPolicyThroughItsOwnProxy(t *testing.T) {
	s, err := strategy.ByName("llm-d")
	if err != nil {
		t.Fatal(err)
	}
	tr := smokeTrace(t, 60)
	dt, err := des.NewTrace(des.TraceConfig{Name: "smoke", Spec: smokeSpec(), Requests: 60, Seed: 1, BlockSize: 16,
		Hash: smallEngine(4000, 32).Hash})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), RunConfig{
		Trace: tr, Strategy: s, Rate: 10, Warmup: 12, PeerKeys: dt.Keys,
		Fleet:   FleetConfig{Workers: 2, BaseIP: "127.0.9.2", Engine: smallEngine(4000, 32)},
		WorkDir: t.TempDir(), KeepRecords: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, res)
	if res.TierMix["peer:llm-d"] != res.Requests {
		t.Fatalf("tier mix %v: want every one of %d requests routed by llm-d's policy", res.TierMix, res.Requests)
	}
	if res.HitRate < 0.5 {
		t.Fatalf("hit rate %v: want llm-d's prefix scorer to find the cached prefixes", res.HitRate)
	}
}
