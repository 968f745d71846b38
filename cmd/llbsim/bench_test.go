package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/llbproject/llb/simulate/harness"
	"github.com/llbproject/llb/simulate/report"
	"github.com/llbproject/llb/simulate/worker"
	"github.com/llbproject/llb/simulate/workload"
)

// parseBench parses bench flags and builds the bench.
func parseBench(t *testing.T, args ...string) (*harness.Bench, error) {
	t.Helper()
	f := &benchFlags{}
	var out, errOut bytes.Buffer
	cmd := benchCommand(f, &out, &errOut)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return f.bench(cmd.Flags())
}

func TestBenchFlags_PresetsMirrorTheSimulatorsScenariosAndFlagsOverrideThem(t *testing.T) {
	tests := []struct {
		name         string
		args         []string
		wantWorkers  int
		wantPressure float64
		wantBlocks   int
		wantSeqs     int
		wantFactor   float64
		wantLoads    []float64
		wantRates    []float64
		check        func(t *testing.T, b *harness.Bench)
	}{
		{
			name: "default is shared-prefix at 70% of saturation", args: nil,
			wantWorkers: 8, wantPressure: 1.5, wantBlocks: 31250, wantSeqs: 256, wantFactor: 2, wantLoads: []float64{0.7},
			check: func(t *testing.T, b *harness.Bench) {
				sp, ok := b.Scenario.Workload.(workload.SharedPrefix)
				if !ok || !sp.Stream || sp.Groups != 64 || sp.SystemTokens != 2048 || sp.OutputTokens != 256 || sp.ZipfAlpha != 0 {
					t.Fatalf("workload %#v: want a streaming shared-prefix with the generator's defaults", b.Scenario.Workload)
				}
				names := make([]string, len(b.Strategies))
				for i, s := range b.Strategies {
					names[i] = s.Name
				}
				if !slices.Equal(names, harness.DefaultStrategyNames()) || b.Reference != "hard" || !b.Pooled {
					t.Fatalf("strategies %q reference %q pooled %v", names, b.Reference, b.Pooled)
				}
			},
		},
		{
			name: "hot-prefix", args: []string{"--scenario", "hot-prefix", "--time-scale", "2"},
			wantWorkers: 8, wantPressure: 0, wantBlocks: 4096, wantSeqs: 32, wantFactor: 2, wantLoads: []float64{0.7},
			check: func(t *testing.T, b *harness.Bench) {
				if b.Scenario.Fleet.TimeScale() != 2 {
					t.Fatalf("time scale %v; want 2", b.Scenario.Fleet.TimeScale())
				}
			},
		},
		{
			name: "contended workers, the factor overridden", args: []string{"--scenario", "shared-prefix-contended", "--time-factor-under-load", "3"},
			wantWorkers: 8, wantPressure: 1.5, wantBlocks: 31250, wantSeqs: 16, wantFactor: 3, wantLoads: []float64{0.7},
		},
		{
			name: "zipf preset, shape flags", args: []string{"--scenario", "shared-prefix-zipf", "--groups", "10", "--output-tokens", "64", "--workers", "4", "--cache-blocks", "900"},
			wantWorkers: 4, wantPressure: 0, wantBlocks: 900, wantSeqs: 256, wantFactor: 2, wantLoads: []float64{0.7},
			check: func(t *testing.T, b *harness.Bench) {
				sp := b.Scenario.Workload.(workload.SharedPrefix)
				if sp.ZipfAlpha != 1.2 || sp.Groups != 10 || sp.OutputTokens != 64 {
					t.Fatalf("workload %+v", sp)
				}
			},
		},
		{
			name: "absolute rates and a mix", args: []string{"--scenario", "mix", "--mix", "shared-prefix:3,multi-turn", "--rates", "5,10", "--strategies", "rr,hard@150"},
			wantWorkers: 8, wantPressure: 1.5, wantBlocks: 31250, wantSeqs: 256, wantFactor: 2, wantRates: []float64{5, 10},
			check: func(t *testing.T, b *harness.Bench) {
				m := b.Scenario.Workload.(workload.Mix)
				if len(m.Parts) != 2 || m.Parts[0].Weight != 3 || m.Parts[1].Weight != 1 {
					t.Fatalf("mix %+v", m)
				}
				if _, ok := m.Parts[1].Spec.(workload.MultiTurn); !ok {
					t.Fatalf("second part %T; want multi-turn", m.Parts[1].Spec)
				}
				if len(b.Strategies) != 2 || b.Strategies[1].FactorPct != 150 {
					t.Fatalf("strategies %+v", b.Strategies)
				}
			},
		},
		{
			name: "the LoRA scenario and its peers", args: []string{"--scenario", "lora", "--strategies", "headroom,llm-d-lora,aibrix-lora"},
			wantWorkers: 8, wantPressure: 0, wantBlocks: 8192, wantSeqs: 64, wantFactor: 2, wantLoads: []float64{0.7},
			check: func(t *testing.T, b *harness.Bench) {
				l, ok := b.Scenario.Workload.(workload.LoRAAdapters)
				if !ok || !l.Stream || l.Adapters != 32 {
					t.Fatalf("workload %#v: want the DES's streaming LoRA workload", b.Scenario.Workload)
				}
				fl := b.Scenario.Fleet
				if len(fl.LoRAs) != 32 || fl.LoRAs[0] != "lora-0" || fl.Engine.MaxLoRAs != 4 || fl.Engine.LoRASwapIn == 0 {
					t.Fatalf("fleet serves %d adapters, max-loras %d, swap-in %v; want 32, 4 and the DES's swap-in", len(fl.LoRAs), fl.Engine.MaxLoRAs, fl.Engine.LoRASwapIn)
				}
				if len(b.Strategies) != 3 || b.Strategies[2].Peer != "aibrix-lora" {
					t.Fatalf("strategies %+v", b.Strategies)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := parseBench(t, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			sc := b.Scenario
			e := sc.Fleet.Engine
			if sc.Fleet.Workers != tt.wantWorkers || sc.CachePressure != tt.wantPressure || e.NumBlocks != tt.wantBlocks ||
				e.MaxNumSeqs != tt.wantSeqs || e.Latency.TimeFactorUnderLoad != tt.wantFactor {
				t.Fatalf("workers %d pressure %v blocks %d seqs %d factor %v; want %d %v %d %d %v",
					sc.Fleet.Workers, sc.CachePressure, e.NumBlocks, e.MaxNumSeqs, e.Latency.TimeFactorUnderLoad,
					tt.wantWorkers, tt.wantPressure, tt.wantBlocks, tt.wantSeqs, tt.wantFactor)
			}
			if !slices.Equal(b.Loads, tt.wantLoads) || !slices.Equal(b.Rates, tt.wantRates) {
				t.Fatalf("loads %v rates %v; want %v %v", b.Loads, b.Rates, tt.wantLoads, tt.wantRates)
			}
			if tt.check != nil {
				tt.check(t, b)
			}
		})
	}
}

func TestBenchCommand_RejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--scenario", "nope"},
		{"--strategies", "rr,nope"},
		{"--rates", "5", "--loads", "0.7"},
		{"--loads", "0"},
		{"--llbd", "/bin/true", "--attach", "127.0.0.1:1"},
		{"--progress", "sometimes"},
		{"--scenario", "mix", "--mix", "mix:1"},
		{"--scenario", "mix", "--mix", "shared-prefix:x"},
		{"--warmup", "1"},
		{"--requests", "1"},
		{"--workers", "40"},
		{"--reference", "nope"},
		{"--dialect", "tgi"},
		{"--dialect", "sglang", "--pd-same-workers"},
		{"--dialect", "trtllm", "--strategies", "llm-d"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			root := newRootCmd(&out, &errOut)
			root.SetArgs(append([]string{"bench"}, args...))
			err := root.Execute()
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Fatalf("err %v; want a usage error (exit 2)", err)
			}
		})
	}
}

func TestBenchFlags_DialectNamesTheWorkersEngine(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want worker.Dialect
	}{
		{nil, worker.DialectVLLM},
		{[]string{"--dialect", "sglang"}, worker.DialectSGLang},
		{[]string{"--dialect", "trtllm", "--engine", "step"}, worker.DialectTRTLLM},
	} {
		b, err := parseBench(t, tt.args...)
		if err != nil {
			t.Fatal(err)
		}
		if got := b.Scenario.Fleet.Dialect; got != tt.want {
			t.Fatalf("%q: dialect %q; want %q", tt.args, got, tt.want)
		}
	}
}

// fakeOutcome is a measured-looking outcome for output tests.
func fakeOutcome(t *testing.T, name string, strategies ...string) (*harness.Bench, *harness.Outcome) {
	t.Helper()
	b, err := parseBench(t, "--scenario", "shared-prefix", "--name", name, "--strategies", strings.Join(strategies, ","))
	if err != nil {
		t.Fatal(err)
	}
	out := &harness.Outcome{Info: harness.ScenarioInfo{Scenario: b.Scenario, Warmup: 2, SaturationRate: 20, OracleHitRate: 0.9, Pressure: 1.5}}
	for i, s := range strategies {
		out.Runs = append(out.Runs, harness.RunOutcome{Load: 0.7, Result: &harness.Result{
			Strategy: s, Rate: 14, Requests: 8, Completed: 8, HitRate: 0.5 + 0.1*float64(i), OracleHitRate: 0.9,
			TTFT: harness.Latency{P50: 0.1, P90: 0.2 + float64(i), P99: 0.3 + float64(i)}, TierMix: map[string]int{"1.5": 8},
			Workers: []harness.WorkerResult{{Requests: 8}}, Errors: map[string]int{},
		}})
	}
	return b, out
}

func TestWriteBenchResults_AppendReplacesOnlyItsOwnScenario(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r", "results.jsonl")
	write := func(appendTo bool, b *harness.Bench, out *harness.Outcome) {
		t.Helper()
		if err := writeBenchResults(&benchFlags{out: path, appendTo: appendTo, seed: 1}, b, out); err != nil {
			t.Fatal(err)
		}
	}
	b1, o1 := fakeOutcome(t, "shared-prefix", "rr", "hard")
	write(false, b1, o1)
	b2, o2 := fakeOutcome(t, "hot-prefix", "off", "hard")
	write(true, b2, o2)
	b3, o3 := fakeOutcome(t, "shared-prefix", "chwbl")
	write(true, b3, o3)

	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	ds, err := report.ReadJSONL(fh)
	if err != nil {
		t.Fatalf("the results do not read in the report schema: %v", err)
	}
	if ds.Meta.Source != report.SourceHTTP || ds.Meta.Generator != "llbsim bench" || len(ds.Scenarios) != 2 {
		t.Fatalf("meta %+v, %d scenarios; want an http dataset with 2 scenarios", ds.Meta, len(ds.Scenarios))
	}
	var got []string
	for _, r := range ds.Runs {
		got = append(got, r.Scenario+"/"+r.Strategy)
	}
	want := []string{"hot-prefix/off", "hot-prefix/hard", "shared-prefix/chwbl"}
	if !slices.Equal(got, want) {
		t.Fatalf("runs %q; want %q", got, want)
	}
	// The harness-only figures ride along on each run line.
	raw, _ := os.ReadFile(path)
	if n := bytes.Count(raw, []byte(`"harness":{"completed":8`)); n != 3 {
		t.Fatalf("%d run lines carry harness figures; want 3", n)
	}
	// Appending to a file of another seed is refused.
	if err := writeBenchResults(&benchFlags{out: path, appendTo: true, seed: 2}, b3, o3); err == nil || !strings.Contains(err.Error(), "seed") {
		t.Fatalf("append with another seed: %v; want a refusal", err)
	}
}

func TestBenchCommand_DrivesTheRealDaemonAndWritesAReportableFile(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs llbd")
	}
	dir := t.TempDir()
	results, records := filepath.Join(dir, "results.jsonl"), filepath.Join(dir, "records.jsonl")
	common := []string{"--workers", "2", "--cache-blocks", "3000", "--max-num-seqs", "32", "--time-scale", "0.05",
		"--requests", "30", "--loads", "0.7", "--saturation", "14", "--output-tokens", "8", "--worker-port", "0", "--base-ip", "127.0.8.2", "--out", results, "--progress", "off", "--work-dir", filepath.Join(dir, "work")}
	runs := [][]string{
		append([]string{"bench", "--scenario", "shared-prefix", "--groups", "3", "--prompts-per-group", "3", "--system-tokens", "200",
			"--question-tokens", "20", "--strategies", "rr,chwbl,headroom", "--records", records}, common...),
		append([]string{"bench", "--scenario", "hot-prefix", "--clients", "4", "--prefix-tokens", "200", "--suffix-tokens", "10",
			"--strategies", "off,headroom", "--pooled=false", "--append"}, common...),
	}
	for _, args := range runs {
		var out, errOut bytes.Buffer
		root := newRootCmd(&out, &errOut)
		root.SetArgs(args)
		if err := root.Execute(); err != nil {
			t.Fatalf("%q: %v\n%s", args, err, errOut.String())
		}
		for _, want := range []string{"strategy", "targets (issues 7, 16 and 18)", "wrote " + results} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("output lacks %q:\n%s", want, out.String())
			}
		}
	}
	fh, err := os.Open(results)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := report.ReadJSONL(fh)
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Scenarios) != 2 || len(ds.Runs) != 5 {
		t.Fatalf("%d scenarios, %d runs; want 2 and 5", len(ds.Scenarios), len(ds.Runs))
	}
	for _, r := range ds.Runs {
		if r.Requests != 24 || r.Load != 0.7 || math.Abs(r.Rate-9.8) > 1e-9 || r.TTFT.P90 <= 0 || r.HitRate <= 0 || r.Throughput <= 0 {
			t.Fatalf("run %s/%s: %d requests at load %v (%v req/s), ttft p90 %v, hit %v, throughput %v",
				r.Scenario, r.Strategy, r.Requests, r.Load, r.Rate, r.TTFT.P90, r.HitRate, r.Throughput)
		}
	}
	if sp, _ := ds.Scenario("shared-prefix"); sp.PooledHitRate <= 0 || sp.SaturationRate != 14 {
		t.Fatalf("shared-prefix scenario %+v: want the pooled-cache bound measured and saturation 14", sp)
	}
	if hp, _ := ds.Scenario("hot-prefix"); hp.PooledHitRate != 0 {
		t.Fatalf("hot-prefix pooled bound %v; want none (--pooled=false)", hp.PooledHitRate)
	}
	// Every request of the first bench has a record.
	rf, err := os.Open(records)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	n := 0
	for sc := bufio.NewScanner(rf); sc.Scan(); n++ {
	}
	if n != 90 {
		t.Fatalf("%d records; want 90 (3 strategies × 30 requests)", n)
	}
	// The report package reads the targets off the harness's results.
	found := 0
	for _, r := range report.DefaultTargets().Evaluate(ds) {
		if !r.Missing {
			found++
		}
	}
	if found != 4 {
		t.Fatalf("%d of the targets found their runs; want all 4", found)
	}
}

// A light-load preset runs a closed loop: every strategy at each client
// count, the runs labelled with it, and issue 18's targets read off them.
func TestBenchCommand_ClosedLoopPreset(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs llbd")
	}
	dir := t.TempDir()
	results := filepath.Join(dir, "results.jsonl")
	var out, errOut bytes.Buffer
	root := newRootCmd(&out, &errOut)
	root.SetArgs([]string{"bench", "--scenario", "light-load", "--concurrency", "1,3", "--strategies", "chwbl,headroom",
		"--requests", "20", "--output-tokens", "4", "--time-scale", "0.05", "--worker-port", "0", "--base-ip", "127.0.8.20",
		"--out", results, "--progress", "off", "--work-dir", filepath.Join(dir, "work")})
	if err := root.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "c=3") {
		t.Fatalf("table lacks the client counts:\n%s", out.String())
	}
	fh, err := os.Open(results)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := report.ReadJSONL(fh)
	fh.Close()
	if err != nil {
		t.Fatal(err)
	}
	sc, ok := ds.Scenario("light-load")
	if !ok || !slices.Equal(sc.Concurrency, []int{1, 3}) || sc.Workers != 4 || sc.CacheBlocksPerWorker != 170 {
		t.Fatalf("scenario %+v; want light-load's 4 workers of 170 blocks at c=1,3", sc)
	}
	var got []string
	for _, r := range ds.Runs {
		if r.Requests != 16 || r.Rate != 0 || r.Load != 0 || r.TTFT.P90 <= 0 || r.Throughput <= 0 {
			t.Fatalf("run %s c=%d: %d requests, rate %v, load %v, ttft p90 %v, throughput %v", r.Strategy, r.Concurrency, r.Requests, r.Rate, r.Load, r.TTFT.P90, r.Throughput)
		}
		got = append(got, fmt.Sprintf("%s@%d", r.Strategy, r.Concurrency))
	}
	if want := []string{"chwbl@1", "headroom@1", "chwbl@3", "headroom@3"}; !slices.Equal(got, want) {
		t.Fatalf("runs %q; want %q", got, want)
	}
	found := 0
	for _, r := range report.DefaultTargets().Evaluate(ds) {
		if !r.Missing && r.Scenario == "light-load" {
			found++
		}
	}
	if found != 2 {
		t.Fatalf("%d light-load targets found their runs; want 2", found)
	}
}

func TestBenchFlags_TracePresetsReplayTheTraceFromTracesDir(t *testing.T) {
	dir := t.TempDir()
	raw, err := os.ReadFile(filepath.Join("..", "..", "simulate", "workload", "testdata", "mooncake_excerpt.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "conversation_trace.jsonl"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := parseBench(t, "--scenario", "mooncake-conversation", "--traces", dir, "--engine", "step")
	if err != nil {
		t.Fatal(err)
	}
	m, ok := b.Scenario.Workload.(workload.Mooncake)
	if !ok || !m.Stream || len(m.Trace.Requests) != 48 {
		t.Fatalf("workload %#v: want the 48-request excerpt, streaming", b.Scenario.Workload)
	}
	eng := b.Scenario.Fleet.Engine
	if b.Scenario.Requests != 48 || b.Scenario.Fleet.Workers != 8 || eng.NumBlocks != 31250 || eng.MaxModelLen != 196608 || b.Scenario.CachePressure != 0 {
		t.Fatalf("%d requests on %d workers of %d blocks, max-model-len %d, pressure %v", b.Scenario.Requests, b.Scenario.Fleet.Workers, eng.NumBlocks, eng.MaxModelLen, b.Scenario.CachePressure)
	}
	b, err = parseBench(t, "--scenario", "mooncake-conversation", "--traces", dir, "--requests", "10")
	if err != nil || len(b.Scenario.Workload.(workload.Mooncake).Trace.Requests) != 10 || b.Scenario.Requests != 10 {
		t.Fatalf("--requests 10: %v", err)
	}
	_, err = parseBench(t, "--scenario", "mooncake-synthetic", "--traces", dir)
	var usage *usageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "make traces") {
		t.Fatalf("a missing trace: %v; want a usage error pointing at make traces", err)
	}
}
