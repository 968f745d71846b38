package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/llbproject/llb/simulate/des"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/harness"
	"github.com/llbproject/llb/simulate/saturation"
	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/worker"
	"github.com/llbproject/llb/simulate/workload"
)

// benchFlags are the flags of "llbsim bench".
type benchFlags struct {
	scenario string
	name     string
	traces   string

	// workload shape; 0 keeps the scenario's (or the generator's) default
	shape shapeFlags

	// fleet
	workers, decodeWorkers    int
	cacheBlocks               int
	cachePressure             float64
	maxNumSeqs, blockSize     int
	timeScale                 float64
	prefillOverhead, perToken time.Duration
	itl                       time.Duration
	timeFactor                float64
	engineModel               string
	dialect                   string
	baseIP                    string
	workerPort                int
	pdSame                    bool

	// load
	rates       []float64
	loads       []float64
	concurrency []int
	saturation  float64
	reference   string
	satRequests int
	satMaxWait  time.Duration
	satPrec     float64
	satProbes   int
	requests    int
	duration    time.Duration
	warmup      float64
	seed        uint64
	slo         time.Duration
	strategies  []string

	// daemon and output
	llbd        string
	attach      string
	replicas    int
	clusterEtcd []string
	logLevel    string
	workDir     string
	out         string
	appendTo    bool
	records     string
	progress    string
	commit      string
	pooled      bool
}

func newBenchCmd(stdout, stderr io.Writer) *cobra.Command {
	return benchCommand(&benchFlags{}, stdout, stderr)
}

// benchCommand builds the command around f (tests read f after parsing).
func benchCommand(f *benchFlags, stdout, stderr io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Drive the real llbd in front of a simulated fleet and compare routing strategies",
		Long: `Build llbd from ./cmd/llbd (or take --llbd), and for every strategy start a
fresh simulated fleet on loopback addresses and a fresh llbd with the
strategy's environment (LOXILB_KV_LB_MODE is a process setting), post the
strategy's rule through the REST API, and drive the scenario's trace at the
rule's VIP open-loop (Poisson arrivals). Per request it measures TTFT (the
first SSE event carrying a token), end-to-end latency, status and the route
from X-Llb-Route; per run throughput, TTFT/E2E percentiles, errors by status,
the fleet's prefix-cache hit rate and the oracle bound, tier mix, spills and
cold seeds, per-worker load, and the harness's own dispatch lag and CPU.

Every strategy replays the same trace (same seed: the same requests at the
same model times as "llbsim sweep" simulates). Rates are in requests per
model second and latencies in model seconds: the workers run at
--time-scale × real time, and wall figures are divided by it.

With --loads the rates are fractions of the saturation rate of --reference,
found by a quick search (fresh runs at geometric steps, then bisection;
stable = the p90 of the engine queue wait the workers report per request
within --sat-max-wait and every request completed, the criterion "llbsim
sweep" judges by too) unless --saturation gives it.

Results are JSON lines in the report schema of "llbsim report" (source
"http"; each run line also carries a "harness" object), and a table.`,
		Example: `  llbsim bench --scenario shared-prefix --loads 0.7 --requests 1200
  llbsim bench --scenario hot-prefix --time-scale 2 --loads 0.7 --append --out bench/results.jsonl
  llbsim bench --scenario shared-prefix --rates 5,10,15 --strategies rr,chwbl,hard`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.shape.warnDeprecated(cmd.Flags(), stderr)
			return runBench(cmd.Context(), f, cmd.Flags(), stdout, stderr)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.scenario, "scenario", "shared-prefix", "preset: "+strings.Join(scenarioNames(), ", "))
	fl.StringVar(&f.name, "name", "", "scenario name in the results (default the preset's)")
	fl.StringVar(&f.traces, "traces", "traces/mooncake", "directory holding the Mooncake traces the mooncake-* presets replay (make traces)")

	f.shape.register(fl)

	def := engine.DefaultConfig()
	fl.IntVar(&f.workers, "workers", 0, "serving workers (default 8)")
	fl.IntVar(&f.decodeWorkers, "decode-workers", 0, "decode workers P/D strategies add to the serving (prefill) workers, sized never to queue (default --workers)")
	fl.BoolVar(&f.pdSame, "pd-same-workers", false, "run P/D strategies on the serving workers themselves (kv_both engines listed as prefill and decode) instead of adding decode workers")
	fl.IntVar(&f.cacheBlocks, "cache-blocks", 0, "KV cache blocks per worker (default: sized by --cache-pressure, else the preset's)")
	fl.Float64Var(&f.cachePressure, "cache-pressure", 0, "size caches so the trace's working set is this many times the fleet's cache (shared-prefix default 1.5)")
	fl.IntVar(&f.maxNumSeqs, "max-num-seqs", 0, "batch limit per worker (default 256; hot-prefix 32)")
	fl.IntVar(&f.blockSize, "block-size", def.BlockSize, "KV block size in tokens")
	fl.Float64Var(&f.timeScale, "time-scale", 1, "workers' latency model runs at this multiple of real time (>1 slower, <1 faster)")
	fl.StringVar(&f.engineModel, "engine", "lf", "workers' engine model: lf (llm-d-inference-sim's per-request clocks) or step (vLLM V1's step loop with chunked prefill, Llama-3.1-8B on an H100)")
	fl.StringVar(&f.dialect, "dialect", "vllm", "engine the workers speak as and the rules name (kvEngineType): vllm, sglang (page hash, events over ZMQ, bootstrap-room P/D) or trtllm (events drained from POST /kv_cache_events, context_only/generation_only P/D, completions sent as token ids; real TensorRT-LLM's tokens_per_block is 32: --block-size 32)")
	fl.DurationVar(&f.prefillOverhead, "prefill-overhead", def.Latency.PrefillOverhead, "fixed prefill cost (model time)")
	fl.DurationVar(&f.perToken, "prefill-per-token", def.Latency.PrefillPerToken, "prefill cost per uncached token (model time)")
	fl.DurationVar(&f.itl, "itl", def.Latency.InterTokenLatency, "inter-token latency (model time)")
	fl.Float64Var(&f.timeFactor, "time-factor-under-load", def.Latency.TimeFactorUnderLoad, "slowdown at max-num-seqs running requests")
	fl.StringVar(&f.baseIP, "base-ip", harness.DefaultBaseIP, "first worker's loopback address")
	fl.IntVar(&f.workerPort, "worker-port", 8000, "every worker's API port (each has its own address); fixed so the CHWBL ring is the same in every run; 0 picks free ports")

	fl.Float64SliceVar(&f.rates, "rates", nil, "absolute offered loads, requests per model second (instead of --loads)")
	fl.Float64SliceVar(&f.loads, "loads", nil, "offered loads as fractions of saturation (default 0.7 unless --rates or --concurrency)")
	fl.IntSliceVar(&f.concurrency, "concurrency", nil, "closed-loop client counts (requests in flight) instead of --loads or --rates; the light-load presets default to 1,2,4,8,12,16,24,32,48")
	fl.Float64Var(&f.saturation, "saturation", 0, "known saturation rate (req/s, model time); 0 searches it")
	fl.StringVar(&f.reference, "reference", strategy.NameHard, "strategy whose saturation rate is load 1.0")
	fl.IntVar(&f.satRequests, "sat-requests", 0, "requests per saturation probe (default min(--requests, 600))")
	fl.DurationVar(&f.satMaxWait, "sat-max-wait", saturation.DefaultMaxWaitP90, "stability criterion: p90 of the engine queue wait per request (model time)")
	fl.Float64Var(&f.satPrec, "sat-precision", 0.1, "stop the search when unstable/stable - 1 is below this")
	fl.IntVar(&f.satProbes, "sat-probes", 8, "most saturation probes")
	fl.IntVarP(&f.requests, "requests", "n", 1200, "requests per run (the trace length; with --duration, the cap)")
	fl.DurationVar(&f.duration, "duration", 0, "model time of arrivals per run instead of a request count (capped by --requests)")
	fl.Float64Var(&f.warmup, "warmup", 0.2, "fraction of each run's requests left out of the metrics")
	fl.Uint64Var(&f.seed, "seed", 1, "workload seed")
	fl.DurationVar(&f.slo, "ttft-slo", harness.DefaultTTFTSLO, "goodput objective (model time)")
	fl.StringSliceVar(&f.strategies, "strategies", harness.DefaultStrategyNames(), "strategies side by side: rr, chwbl, tier1, off, hard, soft, adaptive, adaptive-soft, headroom, hard+chwbl, pd-hard, hard@<pct>, soft@<lambda>, or a peer: dynamo, llm-d, sglang, aibrix, kubeai (and, for the lora preset, llm-d-lora, aibrix-lora)")

	fl.StringVar(&f.llbd, "llbd", "", "llbd binary (default: go build ./cmd/llbd into the work dir)")
	fl.StringVar(&f.attach, "attach", "", "REST address of a running llbd to use instead (its environment is its own: only strategies it was started for are meaningful)")
	fl.StringVar(&f.logLevel, "llbd-log-level", "warn", "llbd --log-level (info logs every request, which costs CPU)")
	fl.IntVar(&f.replicas, "replicas", 1, "llbd processes per run, the requests spread round-robin over them (each on its own 127.0.77.x address with --data-bind)")
	fl.StringSliceVar(&f.clusterEtcd, "cluster-etcd", nil, "with --replicas > 1: etcd client URLs; the replicas then run as one router (cluster mode), else independently")
	fl.StringVar(&f.workDir, "work-dir", "", "directory for llbd state dirs and logs (default a temp dir, removed unless a run fails)")
	fl.StringVarP(&f.out, "out", "o", "bench/results.jsonl", "results file (JSON lines, report schema)")
	fl.BoolVar(&f.appendTo, "append", false, "add this scenario to --out (replacing its earlier runs) instead of overwriting it")
	fl.StringVar(&f.records, "records", "", "also write every request's record as JSON lines to this file")
	fl.StringVar(&f.progress, "progress", "auto", "progress bars: auto (when stderr is a terminal), on, off")
	fl.StringVar(&f.commit, "commit", "", "source revision to record (default the build's)")
	fl.BoolVar(&f.pooled, "pooled", true, "with --loads, also measure the pooled-cache bound (one worker with the whole fleet's cache and batch)")
	return cmd
}

// runBench builds the bench from the flags, runs it and writes the results.
func runBench(ctx context.Context, f *benchFlags, fs *pflag.FlagSet, stdout, stderr io.Writer) error {
	b, err := f.bench(fs)
	if err != nil {
		return err
	}
	work := f.workDir
	if work == "" {
		if work, err = os.MkdirTemp("", "llbsim-bench-"); err != nil {
			return fmt.Errorf("work dir: %w", err)
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	b.WorkDir = work
	switch {
	case f.attach != "":
		b.Daemon.Attach = f.attach
	case f.llbd != "":
		b.Daemon.Bin = f.llbd
	default:
		fmt.Fprintln(stderr, "llbsim bench: building llbd")
		if b.Daemon.Bin, err = harness.BuildDaemon(ctx, work, ""); err != nil {
			return err
		}
	}
	b.Daemon.LogLevel = f.logLevel
	prog := newBenchProgress(stderr, f.progress)
	b.Events = prog.events()
	started := time.Now()
	out, runErr := b.Execute(ctx)
	prog.close()
	if out == nil {
		return runErr
	}
	if runErr != nil {
		fmt.Fprintf(stderr, "llbsim bench: %v (llbd logs kept in %s)\n", runErr, work)
	} else if f.workDir == "" {
		_ = os.RemoveAll(work)
	}
	if len(out.Runs) > 0 || out.Info.Saturation != nil {
		if err := writeBenchResults(f, b, out); err != nil {
			return errors.Join(runErr, err)
		}
		if f.records != "" {
			if err := writeRecords(f.records, out); err != nil {
				return errors.Join(runErr, err)
			}
		}
		printBenchTable(stdout, b, out, f.out)
		fmt.Fprintf(stdout, "\nwrote %s; %d runs in %.0fs wall\n", f.out, len(out.Runs), time.Since(started).Seconds())
	}
	return runErr
}

// scenarioPreset is a named starting point; flags change what they set.
type scenarioPreset struct {
	description string
	workload    string
	zipf        float64
	workers     int
	pressure    float64
	blocks      int
	seqs        int
	timeFactor  float64
	// shape presets a shared-prefix workload's sizes (zero fields keep the
	// generator's defaults); closed makes it a closed-loop preset run at
	// des.LightLoadConcurrency unless --concurrency, --loads or --rates.
	shape  workload.SharedPrefix
	closed bool
	// trace names a recorded trace's file (des.MooncakeTraces) that
	// --traces holds: the workload replays it, its first --requests.
	trace       string
	maxModelLen int
	// spec, when set, is the workload itself (the LoRA preset's), and
	// loras the adapters every worker serves, batching at most maxLoRAs
	// at once and paying loraSwapIn to swap one into a GPU slot.
	spec       workload.Spec
	loras      []string
	maxLoRAs   int
	loraSwapIn time.Duration
}

// benchPresets mirror simulate/des's standard scenarios, so a bench run
// and a sweep of the same seed measure the same thing.
func benchPresets() map[string]scenarioPreset {
	presets := map[string]scenarioPreset{
		"shared-prefix": {
			description: "SGLang generated-shared-prefix defaults under cache pressure: the working set is 1.5× the fleet's KV cache.",
			workload:    "shared-prefix", workers: 8, pressure: 1.5,
		},
		"shared-prefix-zipf": {
			description: "As shared-prefix, with Zipf(1.2) group popularity: a few system prompts carry most of the traffic.",
			workload:    "shared-prefix", workers: 8, pressure: 1.5, zipf: 1.2,
		},
		"shared-prefix-contended": {
			description: "As shared-prefix, on compute-contended workers (batch limit 16, 4× slower at a full batch): load raises latency continuously.",
			workload:    "shared-prefix", workers: 8, pressure: 1.5, seqs: 16, timeFactor: 4,
		},
		"hot-prefix": {
			description: "One hot preamble shared by every client: pure affinity herds everything onto one worker.",
			workload:    "hot-prefix", workers: 8, blocks: 4096, seqs: 32,
		},
		"multi-turn": {
			description: "Multi-round chats with a session key and growing context (vLLM production-stack multi-round QA).",
			workload:    "multi-turn", workers: 8, pressure: 1.5,
		},
		"mix": {
			description: "A weighted mix of shared-prefix, hot-prefix and multi-turn traffic.",
			workload:    "mix", workers: 8, pressure: 1.5,
		},
	}
	for _, mt := range des.MooncakeTraces() {
		presets[mt.Scenario] = scenarioPreset{description: mt.Description, workload: "mooncake", workers: 8,
			blocks: engine.DefaultConfig().NumBlocks, trace: mt.File, maxModelLen: des.TraceMaxModelLen}
	}
	for _, sc := range des.LoRAScenarios(0, 0) {
		spec := sc.Trace.Spec.(workload.LoRAAdapters)
		presets[sc.Name] = scenarioPreset{description: sc.Description, workload: "lora", workers: sc.Workers,
			blocks: sc.Engine.NumBlocks, seqs: sc.Engine.MaxNumSeqs, spec: spec, loras: spec.Names(),
			maxLoRAs: sc.Engine.MaxLoRAs, loraSwapIn: sc.Engine.LoRASwapIn}
	}
	for _, sc := range des.LightLoadScenarios(0, 0) {
		sp := sc.Trace.Spec.(workload.SharedPrefix)
		presets[sc.Name] = scenarioPreset{description: sc.Description, workload: "shared-prefix",
			workers: sc.Workers, blocks: sc.Engine.NumBlocks, shape: sp, closed: true}
	}
	return presets
}

// traceSpec reads the first --requests requests of a recorded trace file
// from --traces.
func (f *benchFlags) traceSpec(file string) (workload.Spec, error) {
	path := filepath.Join(f.traces, file)
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--traces: %w (make traces fetches the Mooncake traces)", err)
	}
	defer fh.Close()
	bt, err := workload.ReadMooncake(fh, file, f.requests)
	if err != nil {
		return nil, err
	}
	return workload.Mooncake{Options: workload.Options{Stream: true}, Trace: bt}, nil
}

func scenarioNames() []string {
	presets := benchPresets()
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// bench builds the harness.Bench from the flags (fs tells which were set).
func (f *benchFlags) bench(fs *pflag.FlagSet) (*harness.Bench, error) {
	p, ok := benchPresets()[f.scenario]
	if !ok {
		return nil, &usageError{fmt.Errorf("--scenario %q (want one of %s)", f.scenario, strings.Join(scenarioNames(), ", "))}
	}
	if p.zipf > 0 && !f.shape.zipfChanged(fs) {
		f.shape.zipfAlpha = p.zipf
	}
	if p.timeFactor > 0 && !fs.Changed("time-factor-under-load") {
		f.timeFactor = p.timeFactor
	}
	for _, d := range []struct {
		flag  string
		dst   *int
		value int
	}{
		{"groups", &f.shape.groups, p.shape.Groups}, {"prompts-per-group", &f.shape.promptsPerGroup, p.shape.PromptsPerGroup},
		{"system-tokens", &f.shape.systemTokens, p.shape.SystemTokens}, {"question-tokens", &f.shape.questionTokens, p.shape.QuestionTokens},
		{"output-tokens", &f.shape.outputTokens, p.shape.OutputTokens},
	} {
		if d.value > 0 && !fs.Changed(d.flag) {
			*d.dst = d.value
		}
	}
	var spec workload.Spec
	var err error
	switch {
	case p.spec != nil:
		spec = p.spec
	case p.trace != "":
		spec, err = f.traceSpec(p.trace)
	default:
		spec, err = f.shape.spec(p.workload, workload.Options{Stream: true})
	}
	if err != nil {
		return nil, &usageError{err}
	}
	if m, ok := spec.(workload.Mooncake); ok {
		f.requests = min(f.requests, len(m.Trace.Requests))
	}
	eng := engine.DefaultConfig()
	eng.BlockSize = f.blockSize
	eng.Latency.PrefillOverhead, eng.Latency.PrefillPerToken = f.prefillOverhead, f.perToken
	eng.Latency.InterTokenLatency, eng.Latency.TimeFactorUnderLoad = f.itl, f.timeFactor
	eng.Latency.TimeScale = f.timeScale
	sched, err := engine.ParseScheduler(f.engineModel)
	if err != nil {
		return nil, &usageError{fmt.Errorf("--engine: %w", err)}
	}
	eng.Scheduler = sched
	dialect, err := worker.ParseDialect(f.dialect)
	if err != nil {
		return nil, &usageError{fmt.Errorf("--dialect: %w", err)}
	}
	if p.seqs > 0 {
		eng.MaxNumSeqs = p.seqs
	}
	if p.maxModelLen > 0 {
		eng.MaxModelLen = p.maxModelLen
	}
	eng.MaxLoRAs, eng.LoRASwapIn = p.maxLoRAs, p.loraSwapIn
	if f.maxNumSeqs > 0 {
		eng.MaxNumSeqs = f.maxNumSeqs
	}
	pressure := p.pressure
	if p.blocks > 0 {
		eng.NumBlocks = p.blocks
	}
	switch {
	case f.cacheBlocks > 0:
		eng.NumBlocks, pressure = f.cacheBlocks, 0
	case fs.Changed("cache-pressure"):
		pressure = f.cachePressure
	}
	workers := p.workers
	if f.workers > 0 {
		workers = f.workers
	}
	name := f.scenario
	if f.name != "" {
		name = f.name
	}
	strategies, err := strategy.ByNames(f.strategies)
	if err != nil {
		return nil, &usageError{err}
	}
	b := &harness.Bench{
		Scenario: harness.Scenario{
			Name: name, Description: p.description, Workload: spec,
			Requests: f.requests, Seed: f.seed, Warmup: f.warmup, CachePressure: pressure,
			Fleet: harness.FleetConfig{Workers: workers, DecodeWorkers: f.decodeWorkers, PDSameWorkers: f.pdSame, BaseIP: f.baseIP, HTTPPort: f.workerPort, Engine: eng, LoRAs: p.loras,
				Dialect: dialect},
		},
		Strategies: strategies, Rates: f.rates, Loads: f.loads, Concurrency: f.concurrency, SaturationRate: f.saturation,
		Reference: f.reference, Duration: f.duration, TTFTSLO: f.slo, KeepRecords: f.records != "", Pooled: f.pooled,
		Saturation: harness.SaturationConfig{
			Criterion: saturation.Criterion{MaxWaitP90: f.satMaxWait}, Precision: f.satPrec, MaxProbes: f.satProbes, Requests: f.satRequests,
		},
	}
	if len(b.Rates) == 0 && len(b.Loads) == 0 && len(b.Concurrency) == 0 {
		if p.closed {
			b.Concurrency = des.LightLoadConcurrency
		} else {
			b.Loads = []float64{0.7}
		}
	}
	if b.Saturation.Requests == 0 {
		b.Saturation.Requests = min(f.requests, 600)
	}
	if _, err := strategy.ByName(f.reference); err != nil {
		return nil, &usageError{fmt.Errorf("--reference: %w", err)}
	}
	if f.progress != "auto" && f.progress != "on" && f.progress != "off" {
		return nil, &usageError{fmt.Errorf("--progress %q (want auto, on or off)", f.progress)}
	}
	if f.llbd != "" && f.attach != "" {
		return nil, &usageError{errors.New("--llbd and --attach exclude each other")}
	}
	if f.replicas < 1 || (f.replicas > 1 && f.attach != "") || (len(f.clusterEtcd) > 0 && f.replicas < 2) {
		return nil, &usageError{errors.New("--replicas: at least 1; more than 1 needs llbd started by llbsim (no --attach); --cluster-etcd needs --replicas 2 or more")}
	}
	b.Replicas.N = f.replicas
	if len(f.clusterEtcd) > 0 {
		b.Replicas.Cluster = &harness.ClusterConfig{Etcd: f.clusterEtcd}
	}
	b.WorkDir, b.Daemon.Bin = "validate", "validate" // filled in by runBench
	if err := b.Validate(); err != nil {
		return nil, &usageError{err}
	}
	b.WorkDir, b.Daemon.Bin = "", ""
	return b, nil
}

// writeRecords writes every run's per-request records as JSON lines.
func writeRecords(path string, out *harness.Outcome) (err error) {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("records: %w", err)
		}
	}
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("records: %w", err)
	}
	defer func() {
		if cerr := fh.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("records: %w", cerr)
		}
	}()
	return encodeRecords(fh, out)
}
