package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/simulate/des"
	"github.com/llbproject/llb/simulate/report"
	"github.com/llbproject/llb/simulate/saturation"
	"github.com/llbproject/llb/simulate/strategy"
)

// ResultsFile is the JSON-lines results file a sweep writes into --out.
const ResultsFile = "results.jsonl"

// sweepFlags are the flags of "llbsim sweep".
type sweepFlags struct {
	out        string
	requests   int
	seed       uint64
	parallel   int
	quick      bool
	commit     string
	scenarios  []string
	strategies []string
	loads      []float64
	factors    []uint
	lambdas    []uint
	traces     string
	traceReqs  int
	satFrom    string
	slo        time.Duration
}

func newSweepCmd(stdout, stderr io.Writer) *cobra.Command {
	f := &sweepFlags{}
	cmd := &cobra.Command{
		Use:   "sweep",
		Short: "Run the discrete-event simulator's strategy, ε and λ sweeps and write the report",
		Long: `Run the standard sweep in the discrete-event simulator (simulate/des): for
each scenario, find the saturation rate of the hard law, then run every
strategy across the load ladder, and the ε (hard@factor) and λ (soft@λ)
sweeps with the adaptive laws beside them. Writes <out>/results.jsonl, the
markdown report <out>/README.md with its SVG figures, and prints the
summary table and the issue-7 targets. Deterministic for a seed: the same
flags give the same numbers, whatever --parallel is.`,
		Example: `  llbsim sweep --out report
  llbsim sweep --quick --out /tmp/r --scenarios shared-prefix`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSweep(f, stdout, stderr) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.out, "out", "report", "directory for results.jsonl, README.md and the SVG figures")
	fl.IntVarP(&f.requests, "requests", "n", 3000, "requests per trace")
	fl.Uint64Var(&f.seed, "seed", 1, "workload seed")
	fl.IntVar(&f.parallel, "parallel", runtime.NumCPU(), "runs simulated at once (each run is single-threaded)")
	fl.BoolVar(&f.quick, "quick", false, "a small smoke sweep: 600 requests, 3 loads, 3 factors, 2 lambdas")
	fl.StringVar(&f.commit, "commit", "", "source revision to record (default: the build's VCS revision, if any)")
	fl.StringSliceVar(&f.scenarios, "scenarios", nil, "scenarios to run (default all: the four of the first report, multi-turn, long-doc-qa, shared-prefix-replicas, each also on the step model (-step), and the light-load ones)")
	fl.StringSliceVar(&f.strategies, "strategies", nil, "strategies to compare (default the standard set; must include hard)")
	fl.Float64SliceVar(&f.loads, "loads", nil, "load ladder as fractions of saturation (default 0.3,0.5,0.7,0.9,1,1.1)")
	fl.UintSliceVar(&f.factors, "factors", nil, "ε sweep: LOXILB_KV_MEAN_LOAD_FACTOR values (default 100,125,150,175,200,250,300)")
	fl.UintSliceVar(&f.lambdas, "lambdas", nil, "λ sweep: LOXILB_KV_LOAD_PENALTY values (default 32,10000,50000,100000)")
	fl.StringVar(&f.traces, "traces", "", "directory holding the Mooncake traces (conversation_trace.jsonl, synthetic_trace.jsonl; `make traces` fetches them): adds their replays, mooncake-conversation and mooncake-synthetic, on both engine models")
	fl.IntVar(&f.traceReqs, "trace-requests", 0, "replay only the first N requests of each trace (0: all)")
	fl.DurationVar(&f.slo, "ttft-slo", 0, "TTFT objective of every scenario, for goodput and the share kept (slo_kept), and carried by the requests of a strategy named <law>+objective (default each scenario's own)")
	fl.StringVar(&f.satFrom, "saturation-from", "", "results of an earlier sweep of the same seed (file or directory): its scenarios' saturation rates are taken instead of searched (valid while hard and the traces are unchanged); hard need not be among --strategies when every scenario is found there")
	return cmd
}

// plan builds the sweep plan from the flags.
func (f *sweepFlags) plan() (des.Plan, error) {
	if f.requests < 10 {
		return des.Plan{}, &usageError{fmt.Errorf("--requests %d (want >= 10)", f.requests)}
	}
	if f.parallel < 1 {
		return des.Plan{}, &usageError{fmt.Errorf("--parallel %d (want >= 1)", f.parallel)}
	}
	n := f.requests
	if f.quick {
		n = min(n, 600)
	}
	p := des.StandardPlan(n, f.seed)
	if f.traces != "" {
		if f.traceReqs < 0 {
			return p, &usageError{fmt.Errorf("--trace-requests %d (want >= 0)", f.traceReqs)}
		}
		traces, missing, err := des.TraceScenarios(f.traces, f.traceReqs)
		if err != nil {
			return p, err
		}
		if len(missing) > 0 {
			return p, &usageError{fmt.Errorf("--traces: %s missing (make traces fetches them)", strings.Join(missing, ", "))}
		}
		p.Scenarios = append(p.Scenarios, traces...)
	}
	if f.quick {
		p.Loads = []float64{0.5, 0.7, 1.0}
		p.Factors = []uint32{125, 175, 300}
		p.Lambdas = []uint32{32, 50000}
		p.Saturation.Precision = 0.1
	}
	if len(f.scenarios) > 0 {
		var keep []des.Scenario
		for _, name := range f.scenarios {
			all := append(p.Scenarios, des.LoRAScenarios(n, f.seed)...) // the LoRA scenario runs on demand
			i := slices.IndexFunc(all, func(s des.Scenario) bool { return s.Name == name })
			if i < 0 {
				return p, &usageError{fmt.Errorf("--scenarios: unknown scenario %q", name)}
			}
			keep = append(keep, all[i])
		}
		p.Scenarios = keep
	}
	if len(f.strategies) > 0 {
		p.Strategies = p.Strategies[:0]
		for _, name := range f.strategies {
			s, err := strategy.ByName(name)
			if err != nil {
				return p, &usageError{fmt.Errorf("--strategies: %w", err)}
			}
			p.Strategies = append(p.Strategies, s)
		}
	}
	if len(f.loads) > 0 {
		p.Loads = f.loads
	}
	if f.slo < 0 {
		return p, &usageError{fmt.Errorf("--ttft-slo %v (want > 0)", f.slo)}
	}
	if f.slo > 0 {
		p.TTFTSLO = f.slo
		for i := range p.Scenarios {
			p.Scenarios[i].TTFTSLO = f.slo
		}
	}
	if f.satFrom != "" {
		d, err := readResults(f.satFrom)
		if err != nil {
			return p, &usageError{fmt.Errorf("--saturation-from: %w", err)}
		}
		if d.Meta.Seed != f.seed {
			return p, &usageError{fmt.Errorf("--saturation-from: results of seed %d, this sweep's is %d", d.Meta.Seed, f.seed)}
		}
		p.Known = map[string]saturation.Outcome{}
		for i := range d.Scenarios {
			if o, ok := d.Scenarios[i].Saturation(p.Saturation.Criterion.WithDefaults()); ok && o.Strategy == p.Reference {
				p.Known[d.Scenarios[i].Name] = o
			}
		}
	}
	if len(f.factors) > 0 {
		p.Factors = toU32(f.factors)
	}
	if len(f.lambdas) > 0 {
		p.Lambdas = toU32(f.lambdas)
	}
	if err := p.Validate(); err != nil {
		return p, &usageError{err}
	}
	return p, nil
}

func toU32(v []uint) []uint32 {
	out := make([]uint32, len(v))
	for i, x := range v {
		out[i] = uint32(x)
	}
	return out
}

func runSweep(f *sweepFlags, stdout, stderr io.Writer) error {
	plan, err := f.plan()
	if err != nil {
		return err
	}
	start := time.Now()
	pool := &runPool{workers: f.parallel}
	outs, err := plan.Execute(pool.execute, func(s string) {
		fmt.Fprintf(stderr, "llbsim sweep: %6.1fs %s\n", time.Since(start).Seconds(), s)
	})
	if err != nil {
		return err
	}
	wall := time.Since(start)
	ds := dataset(outs, f.seed, f.commit)
	if err := writeResults(f.out, ds); err != nil {
		return err
	}
	files, err := report.Write(f.out, ds, report.DefaultTargets())
	if err != nil {
		return err
	}
	cal, err := calibrationFigures()
	if err != nil {
		return err
	}
	more, err := report.WriteCalibration(f.out, cal)
	if err != nil {
		return err
	}
	files = append(files, more...)
	if err := report.WriteSummary(stdout, ds, report.DefaultTargets()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %s/%s and %d report files; %d runs, %d simulated requests in %.1fs wall (%.0f simulated requests/s on %d workers)\n",
		f.out, ResultsFile, len(files), pool.runs.Load(), pool.requests.Load(), wall.Seconds(),
		float64(pool.requests.Load())/wall.Seconds(), f.parallel)
	return nil
}

// writeResults writes the dataset as JSON lines into dir.
func writeResults(dir string, ds *report.Dataset) (err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("results dir: %w", err)
	}
	path := filepath.Join(dir, ResultsFile)
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	defer func() {
		if cerr := fh.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("results: close %s: %w", path, cerr)
		}
	}()
	return report.WriteJSONL(fh, ds)
}

// runPool executes independent simulation runs on a fixed number of
// goroutines. Results come back in spec order, so the outcome does not
// depend on the scheduling.
type runPool struct {
	workers  int
	runs     atomic.Int64
	requests atomic.Int64
}

// execute implements des.Executor.
func (p *runPool) execute(specs []des.RunSpec) ([]*des.Result, error) {
	out := make([]*des.Result, len(specs))
	errs := make([]error, len(specs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(p.workers, len(specs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(specs) {
					return
				}
				out[i], errs[i] = des.Run(specs[i].Trace, specs[i].Config)
				p.runs.Add(1)
				p.requests.Add(int64(len(specs[i].Trace.Requests)))
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// dataset converts a plan's outcome into the report schema.
func dataset(outs []des.ScenarioOutcome, seed uint64, commit string) *report.Dataset {
	meta := report.NewMeta(report.SourceDES, "llbsim sweep", seed, commit)
	meta.Method, meta.Notes = des.Method(), des.Caveats()
	ds := &report.Dataset{Meta: meta}
	for _, so := range outs {
		sc := report.Scenario{
			Name: so.Scenario.Name, Description: so.Scenario.Description,
			Workload: des.DescribeWorkload(so.Scenario.Trace.Spec),
			Workers:  so.Fleet.Workers, Worker: des.DescribeWorker(so.Fleet.Engine),
			CacheBlocksPerWorker: so.Fleet.Engine.NumBlocks, BlockSize: so.Fleet.Engine.BlockSize,
			Requests: so.Requests, Warmup: so.Warmup,
			WorkingSetBlocks: so.DistinctBlocks, Pressure: so.Pressure, OracleHitRate: so.OracleHitRate,
			PooledHitRate: so.PooledHitRate, PooledLoad: so.PooledLoad,
			Concurrency: so.Scenario.Concurrency, NativeRate: so.Scenario.NativeRate(),
		}
		if len(so.Scenario.Concurrency) == 0 {
			sc.SetSaturation(&so.Saturation)
		}
		if sc.SaturationRate > 0 {
			sc.ArrivalSpan = so.UnitDuration / sc.SaturationRate
		}
		ds.Scenarios = append(ds.Scenarios, sc)
		for _, ro := range so.Runs {
			ds.Runs = append(ds.Runs, runRecord(so.Scenario.Name, ro))
		}
	}
	return ds
}

// runRecord converts one simulated run into the report schema.
func runRecord(scenario string, ro des.RunOutcome) report.Run {
	r := ro.Result
	lat := func(l des.Latency) report.Latency {
		return report.Latency{Mean: l.Mean, P50: l.P50, P90: l.P90, P99: l.P99}
	}
	out := report.Run{
		Scenario: scenario, Group: ro.Group, Strategy: r.Strategy, Mode: r.Mode,
		FactorPct: r.FactorPct, Lambda: r.Lambda, Load: ro.Load, Rate: r.Rate, Concurrency: ro.Concurrency, Requests: r.Requests,
		TTFT: lat(r.TTFT), E2E: lat(r.E2E), QueueWait: lat(r.QueueWait),
		Throughput: r.Throughput, TokensPerSec: r.TokensPerSec, Goodput: r.Goodput, TTFTSLO: r.TTFTSLO, SLOKept: r.SLOKept,
		HitRate: r.HitRate, OracleHitRate: r.OracleHitRate, TierMix: r.TierMix,
		Spills: r.Spills, Reliefs: r.Reliefs, ColdSeeds: r.ColdSeeds, Saturated: r.Saturated, BoundWalks: r.BoundWalks,
		KVDecisions: r.KVDecisions, MeanFactorPct: r.MeanFactorPct, MeanLambda: r.MeanLambda, MeanKVLoad: r.MeanKVLoad,
		LoadSkew: r.LoadSkew, ServedSkew: r.ServedSkew, Hottest: r.Hottest, HottestTTFTP90: r.HottestTTFTP90,
	}
	if r.TTFTPredError.P90 > 0 {
		e := lat(r.TTFTPredError)
		out.TTFTPredError = &e
	}
	for _, w := range r.PerWorker {
		out.Workers = append(out.Workers, report.Worker{Requests: w.Requests, TTFTP90: w.TTFT.P90, HitRate: w.HitRate, MeanActive: w.MeanActive})
	}
	return out
}

// calibrationFigures measures the engine models against their references
// (des.EngineCalibration) in the report's terms.
func calibrationFigures() ([]report.CalibrationFigure, error) {
	cs, err := des.EngineCalibration()
	if err != nil {
		return nil, fmt.Errorf("engine calibration: %w", err)
	}
	out := make([]report.CalibrationFigure, len(cs))
	for i, c := range cs {
		f := report.CalibrationFigure{File: c.File, Title: c.Title, XLabel: c.XLabel, YLabel: c.YLabel, Note: c.Note}
		for _, cu := range c.Curves {
			s := report.Series{Name: cu.Name, Reference: cu.Reference}
			for _, p := range cu.Points {
				s.X, s.Y = append(s.X, p.X), append(s.Y, p.Y)
			}
			f.Series = append(f.Series, s)
		}
		out[i] = f
	}
	return out, nil
}
