package harness

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/des"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/workload"
)

// excerptSpec is the Mooncake replay of the test excerpt (48 requests of
// the conversation trace's shape: every prompt starts with hash id 0).
func excerptSpec(t *testing.T) workload.Mooncake {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "workload", "testdata", "mooncake_excerpt.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bt, err := workload.ReadMooncake(f, "mooncake_excerpt.jsonl", 0)
	if err != nil {
		t.Fatal(err)
	}
	return workload.Mooncake{Options: workload.Options{Stream: true}, Trace: bt}
}

// The harness replays a recorded trace through the real daemon: the
// simulator's requests at the recorded moments compressed to the run's
// rate, shared hash ids served from the workers' caches, and llbd's TTFT
// predictions compared.
func TestRun_MooncakeExcerptThroughTheRealDaemon(t *testing.T) {
	spec := excerptSpec(t)
	n := len(spec.Trace.Requests)
	eng := engine.DefaultConfig()
	eng.Scheduler = engine.SchedStep
	eng.MaxModelLen = des.TraceMaxModelLen
	eng.Latency.TimeScale = 0.25
	sc := Scenario{Name: "mooncake-excerpt", Workload: spec, Requests: n, Seed: 1, Warmup: 0.25,
		Fleet: FleetConfig{Workers: 2, BaseIP: "127.0.9.2", Engine: eng}}
	tr, info, err := sc.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	sim, err := des.NewTrace(des.TraceConfig{Spec: spec, Requests: n, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Recorded arrivals, compressed: UnitAt is the recorded offset times
	// the trace's own mean rate, the simulator's to the bit.
	rate := spec.Trace.NativeRate()
	for i, r := range tr.Requests {
		want := spec.Trace.Requests[i].At.Seconds() * rate
		if math.Abs(r.UnitAt-want) > 1e-9 || r.UnitAt != sim.Trace.Requests[i].UnitAt {
			t.Fatalf("request %d arrives at unit time %v; want the recorded %v (simulator %v)", i, r.UnitAt, want, sim.Trace.Requests[i].UnitAt)
		}
	}
	s, _ := strategy.ByName(strategy.NameHeadroom)
	const speedup = 3 // the trace at 3× its recorded rate
	res, err := Run(context.Background(), RunConfig{
		Trace: tr, Strategy: s, Rate: speedup * rate, Warmup: info.Warmup,
		Fleet: info.Scenario.Fleet, Daemon: DaemonSource{Bin: llbdBin(t)}, WorkDir: t.TempDir(), KeepRecords: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	checkRun(t, res)
	for _, rec := range res.Records {
		// Arrival is wall time: the recorded offset compressed 3×, at the
		// workers' time scale.
		want := time.Duration(float64(spec.Trace.Requests[rec.Seq].At) / speedup * eng.Latency.TimeScale)
		if d := rec.Arrival - want; d < -time.Millisecond || d > time.Millisecond {
			t.Fatalf("request %d scheduled at %v; want the recorded %v compressed 3× (%v)", rec.Seq, rec.Arrival, spec.Trace.Requests[rec.Seq].At, want)
		}
		if rec.PromptTokens != spec.Trace.Requests[rec.Seq].InputTokens {
			t.Fatalf("request %d: %d prompt tokens; want the recorded input_length %d", rec.Seq, rec.PromptTokens, spec.Trace.Requests[rec.Seq].InputTokens)
		}
	}
	if res.TTFTPrediction.Compared == 0 {
		t.Fatalf("prediction %+v: want llbd's TTFT predictions compared over the measured window", res.TTFTPrediction)
	}
	t.Logf("hit rate %.3f (oracle %.3f), ttft p50 %.3f p90 %.3f s, predictions within 20/50 %%: %.2f/%.2f of %d",
		res.HitRate, res.OracleHitRate, res.TTFT.P50, res.TTFT.P90, res.TTFTPrediction.Within20, res.TTFTPrediction.Within50, res.TTFTPrediction.Compared)
}
