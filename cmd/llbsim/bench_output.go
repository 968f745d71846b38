package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/llbproject/llb/simulate/des"
	"github.com/llbproject/llb/simulate/harness"
	"github.com/llbproject/llb/simulate/report"
	"github.com/llbproject/llb/simulate/saturation"
	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/worker"
)

// httpScenario is a scenario line's payload: the report schema plus what
// only the harness knows.
type httpScenario struct {
	report.Scenario
	// Harness holds the harness-only facts.
	Harness scenarioExtras `json:"harness"`
}

// scenarioExtras are a scenario's harness-only facts.
type scenarioExtras struct {
	TimeScale float64 `json:"time_scale"`
	// DecodeWorkers is the decode workers P/D strategies add (0 with
	// PDSameWorkers); PDSameWorkers runs P/D on the serving workers.
	DecodeWorkers int  `json:"decode_workers"`
	PDSameWorkers bool `json:"pd_same_workers,omitempty"`
	// Dialect is the engine the workers spoke as (absent: vLLM).
	Dialect string `json:"dialect,omitempty"`
	Seed    uint64 `json:"seed"`
	// Probes are the saturation probes with what only the harness has
	// (failed requests, a drain timeout); the schema's probes carry the rest.
	Probes []saturation.Probe `json:"probes,omitempty"`
	// PooledRun is the pooled-cache bound run, if measured.
	PooledRun *runExtras `json:"pooled_run,omitempty"`
}

// httpRun is a run line's payload: the report schema plus the harness's
// own figures.
type httpRun struct {
	report.Run
	// Harness holds the harness-only figures.
	Harness runExtras `json:"harness"`
}

// runExtras are a run's harness-only figures.
type runExtras struct {
	Completed      int            `json:"completed"`
	Errors         map[string]int `json:"errors"`
	E2EMax         float64        `json:"e2e_max_s"`
	TTFTMax        float64        `json:"ttft_max_s"`
	HitRateSource  string         `json:"hit_rate_source"`
	UsageHitRate   float64        `json:"usage_hit_rate"`
	CounterHitRate float64        `json:"counter_hit_rate"`
	// QueueWaitMean is the Little's-law estimate of the mean queue wait
	// (harness.Result.LittleQueueWait), MeanWaiting the mean sampled waiting
	// requests; the run's queue_wait_s holds the per-request figures.
	QueueWaitMean float64                `json:"queue_wait_mean_s"`
	MeanWaiting   float64                `json:"mean_waiting"`
	Retries       int                    `json:"retries"`
	Workers       []harness.WorkerResult `json:"workers"`
	Health        harness.Health         `json:"health"`
	Env           []string               `json:"env,omitempty"`
	// TTFTPrediction is llbd's prediction record over the measured window
	// (absent for a peer).
	TTFTPrediction *harness.TTFTPrediction `json:"ttft_prediction,omitempty"`
}

// envelope is one JSON line (report schema's line layout).
type envelope struct {
	Kind     string        `json:"kind"`
	Meta     *report.Meta  `json:"meta,omitempty"`
	Scenario *httpScenario `json:"scenario,omitempty"`
	Run      *httpRun      `json:"run,omitempty"`
}

// benchMeta is the dataset header of a bench results file.
func benchMeta(seed uint64, commit string) report.Meta {
	m := report.NewMeta(report.SourceHTTP, "llbsim bench", seed, commit)
	m.Method = strings.Join([]string{
		"Every number here was measured through the real llbd binary (built from ./cmd/llbd) over HTTP: `simulate/harness` starts, for every strategy, a fresh in-process simulated fleet (`simulate/fleet`, one loopback address per worker; vLLM's dialect unless the scenario's harness.dialect names SGLang's or TensorRT-LLM's: real ZMQ KV events, or for TensorRT-LLM events llbd drains over HTTP) and a fresh llbd process with the strategy's environment (LOXILB_KV_LB_MODE is a process setting), posts the strategy's rule through the REST API, and sends the scenario's trace to the rule's VIP open-loop at Poisson arrival times.",
		"All strategies of a scenario replay the same trace (the same requests at the same model times as `llbsim sweep` simulates for the seed).",
		"TTFT is the first SSE event carrying a token − the scheduled arrival; E2E is the end of the stream − the arrival. The hit rate is vLLM's prefix_cache_hits / queries over the measured requests: from each response's usage.prompt_tokens_details.cached_tokens on single-pool rules, from the workers' counter deltas on P/D rules. Tier mix, spills and cold seeds come from X-Llb-Route.",
		"Rates are requests per model second and latencies model seconds: the workers' latency model runs at time_scale × real time and wall figures are divided by it.",
		"Load 100% is the highest rate of a quick search (fresh runs at geometric steps of the reference strategy, then bisection) that is stable by the simulator's criterion (simulate/saturation.Criterion): the p90 of the engine queue wait the workers report for each measured request (admission − arrival at the engine, both legs of a P/D request) stays within the bound, and every request completes.",
	}, " ")
	m.Notes = []string{
		"llbd's and the harness's own overheads are real wall time, so they are divided by the time scale too (at time scale 1 they count in full).",
		"P/D strategies (tier1, pd-hard) run the engine's P/D protocol through llbd (vLLM's two legs over NIXL; SGLang's two legs at once, meeting in a bootstrap room; TensorRT-LLM's context then generation leg): by default on the serving workers as prefill endpoints plus decode_workers separate decode workers sized never to queue (more hardware in all, and prefill caches free of decode legs), or with pd_same_workers (vLLM only) on the serving workers themselves (kv_both engines listed as prefill and decode, whose decode legs hold unshared copies of the prompt's blocks in the same caches). Their TTFT includes the prefill leg, the KV pull and the decode leg's first token.",
		"The harness, the fleet and llbd share the machine's CPUs; each run records the harness's dispatch lag and the CPU seconds of the harness process (fleet included) and of llbd.",
	}
	return m
}

// scenarioLine converts the bench's scenario into the report schema.
func scenarioLine(b *harness.Bench, out *harness.Outcome) httpScenario {
	in := &out.Info
	sc := in.Scenario
	s := httpScenario{Scenario: report.Scenario{
		Name: sc.Name, Description: sc.Description,
		Workload: des.DescribeWorkload(sc.Workload), Workers: sc.Fleet.Workers, Worker: des.DescribeWorker(sc.Fleet.Engine),
		CacheBlocksPerWorker: sc.Fleet.Engine.NumBlocks, BlockSize: sc.Fleet.Engine.BlockSize,
		Requests: sc.Requests, Warmup: in.Warmup, WorkingSetBlocks: in.DistinctBlocks, Pressure: in.Pressure,
		OracleHitRate: in.OracleHitRate, SaturationRate: in.SaturationRate, SaturationStrategy: b.Reference,
		Concurrency: b.Concurrency,
	}}
	s.Harness = scenarioExtras{TimeScale: sc.Fleet.TimeScale(), DecodeWorkers: sc.Fleet.DecodeWorkers, PDSameWorkers: sc.Fleet.PDSameWorkers, Seed: sc.Seed}
	if d := sc.Fleet.Dialect; d != "" && d != worker.DialectVLLM {
		s.Harness.Dialect = string(d)
	}
	if !sc.Fleet.PDSameWorkers && s.Harness.DecodeWorkers == 0 {
		s.Harness.DecodeWorkers = sc.Fleet.Workers
	}
	if s.SaturationStrategy == "" && len(b.Concurrency) == 0 {
		s.SaturationStrategy = strategy.NameHard
	}
	if len(b.Concurrency) > 0 {
		s.SaturationStrategy = ""
	}
	if sat := in.Saturation; sat != nil {
		s.SetSaturation(sat)
		s.SaturationRate = in.SaturationRate
		s.Harness.Probes = sat.Probes
	} else if in.SaturationRate > 0 {
		s.SaturationCriterion = "given (--saturation)"
	}
	if in.SaturationRate > 0 {
		s.ArrivalSpan = in.UnitDuration / in.SaturationRate
	}
	if in.Pooled != nil {
		s.PooledHitRate, s.PooledLoad = in.Pooled.HitRate, in.PooledLoad
		x := extrasOf(in.Pooled, nil)
		s.Harness.PooledRun = &x
	}
	return s
}

// runLine converts one run into the report schema.
func runLine(scenario string, ro harness.RunOutcome, s *strategy.Strategy) httpRun {
	r := ro.Result
	lat := func(l harness.Latency) report.Latency {
		return report.Latency{Mean: l.Mean, P50: l.P50, P90: l.P90, P99: l.P99}
	}
	out := httpRun{Run: report.Run{
		Scenario: scenario, Group: report.GroupStrategies, Strategy: r.Strategy, Mode: r.Mode,
		FactorPct: r.FactorPct, Lambda: r.Lambda, Load: ro.Load, Rate: r.Rate, Concurrency: ro.Concurrency, Requests: r.Requests,
		TTFT: lat(r.TTFT), E2E: lat(r.E2E), QueueWait: lat(r.QueueWait),
		Throughput: r.Throughput, TokensPerSec: r.TokensPerSec, Goodput: r.Goodput, TTFTSLO: r.TTFTSLO, SLOKept: r.SLOKept,
		HitRate: r.HitRate, OracleHitRate: r.OracleHitRate, TierMix: r.TierMix,
		Spills: r.Spills, Reliefs: r.Reliefs, ColdSeeds: r.ColdSeeds, Saturated: r.Saturated, BoundWalks: r.BoundWalks,
		LoadSkew: r.LoadSkew, ServedSkew: r.ServedSkew, Hottest: r.Hottest, HottestTTFTP90: r.HottestTTFTP90,
	}}
	for _, w := range r.Workers {
		out.Workers = append(out.Workers, report.Worker{Requests: w.Requests, TTFTP90: w.TTFT.P90, HitRate: w.HitRate, MeanActive: w.MeanActive})
	}
	var env []string
	if s != nil {
		env = s.EnvList()
	}
	out.Harness = extrasOf(r, env)
	return out
}

func extrasOf(r *harness.Result, env []string) runExtras {
	x := runExtras{
		Completed: r.Completed, Errors: r.Errors, E2EMax: r.E2E.Max, TTFTMax: r.TTFT.Max,
		HitRateSource: r.HitRateSource, UsageHitRate: r.UsageHitRate, CounterHitRate: r.CounterHitRate,
		QueueWaitMean: r.LittleQueueWait, MeanWaiting: r.MeanWaiting, Retries: r.Retries,
		Workers: r.Workers, Health: r.Health, Env: env,
	}
	if r.TTFTPrediction.Compared > 0 {
		p := r.TTFTPrediction
		x.TTFTPrediction = &p
	}
	return x
}

// benchLines renders the bench's scenario and runs as JSON lines (no meta).
func benchLines(b *harness.Bench, out *harness.Outcome) ([][]byte, error) {
	var lines [][]byte
	sc := scenarioLine(b, out)
	l, err := json.Marshal(envelope{Kind: report.KindScenario, Scenario: &sc})
	if err != nil {
		return nil, fmt.Errorf("encode scenario: %w", err)
	}
	lines = append(lines, l)
	byName := map[string]*strategy.Strategy{}
	for i := range b.Strategies {
		byName[b.Strategies[i].Name] = &b.Strategies[i]
	}
	for _, ro := range out.Runs {
		s := byName[ro.Result.Strategy]
		if b.Daemon.Attach != "" {
			s = nil // an attached llbd runs with its own environment, not the strategy's
		}
		run := runLine(sc.Name, ro, s)
		l, err := json.Marshal(envelope{Kind: report.KindRun, Run: &run})
		if err != nil {
			return nil, fmt.Errorf("encode run: %w", err)
		}
		lines = append(lines, l)
	}
	return lines, nil
}

// writeBenchResults writes (or, with --append, merges) the results file:
// one meta line, the scenario lines, the run lines. Appending keeps the
// file's other scenarios verbatim and replaces this scenario's lines.
func writeBenchResults(f *benchFlags, b *harness.Bench, out *harness.Outcome) error {
	lines, err := benchLines(b, out)
	if err != nil {
		return err
	}
	name := out.Info.Scenario.Name
	var keepScen, keepRuns [][]byte
	meta := benchMeta(f.seed, f.commit)
	if f.appendTo {
		old, err := os.ReadFile(f.out)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return fmt.Errorf("results: %w", err)
		default:
			if keepScen, keepRuns, err = otherScenarios(old, name, &meta); err != nil {
				return fmt.Errorf("%s: %w", f.out, err)
			}
		}
	}
	ml, err := json.Marshal(envelope{Kind: report.KindMeta, Meta: &meta})
	if err != nil {
		return fmt.Errorf("encode meta: %w", err)
	}
	var buf bytes.Buffer
	buf.Write(ml)
	buf.WriteByte('\n')
	for _, group := range [][][]byte{keepScen, lines[:1], keepRuns, lines[1:]} {
		for _, l := range group {
			buf.Write(l)
			buf.WriteByte('\n')
		}
	}
	// The file must read back in the report schema.
	if _, err := report.ReadJSONL(bytes.NewReader(buf.Bytes())); err != nil {
		return fmt.Errorf("results do not read back: %w", err)
	}
	if dir := filepath.Dir(f.out); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("results: %w", err)
		}
	}
	tmp := f.out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	if err := os.Rename(tmp, f.out); err != nil {
		return fmt.Errorf("results: %w", err)
	}
	return nil
}

// otherScenarios splits an existing results file into the scenario and
// run lines of scenarios other than name. It refuses a file that is not an
// HTTP-harness dataset; meta's seed must match.
func otherScenarios(data []byte, name string, meta *report.Meta) (scen, runs [][]byte, err error) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		l := bytes.TrimSpace(sc.Bytes())
		if len(l) == 0 {
			continue
		}
		var e struct {
			Kind     string       `json:"kind"`
			Meta     *report.Meta `json:"meta"`
			Scenario *struct {
				Name string `json:"name"`
			} `json:"scenario"`
			Run *struct {
				Scenario string `json:"scenario"`
			} `json:"run"`
		}
		if err := json.Unmarshal(l, &e); err != nil {
			return nil, nil, fmt.Errorf("unreadable line: %w", err)
		}
		switch {
		case e.Kind == report.KindMeta && e.Meta != nil:
			if e.Meta.Source != report.SourceHTTP {
				return nil, nil, fmt.Errorf("source %q: only an llbsim bench file can be appended to", e.Meta.Source)
			}
			if e.Meta.Seed != meta.Seed {
				return nil, nil, fmt.Errorf("seed %d differs from --seed %d", e.Meta.Seed, meta.Seed)
			}
		case e.Kind == report.KindScenario && e.Scenario != nil:
			if e.Scenario.Name != name {
				scen = append(scen, slices.Clone(l))
			}
		case e.Kind == report.KindRun && e.Run != nil:
			if e.Run.Scenario != name {
				runs = append(runs, slices.Clone(l))
			}
		default:
			return nil, nil, fmt.Errorf("line of kind %q without its payload", e.Kind)
		}
	}
	return scen, runs, sc.Err()
}

// encodeRecords writes every run's records as JSON lines.
func encodeRecords(w io.Writer, out *harness.Outcome) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, ro := range out.Runs {
		r := ro.Result
		for i := range r.Records {
			rec := &r.Records[i]
			line := struct {
				Strategy    string  `json:"strategy"`
				Rate        float64 `json:"rate_rps"`
				Concurrency int     `json:"concurrency,omitempty"`
				*harness.Record
			}{r.Strategy, r.Rate, r.Concurrency, rec}
			if err := enc.Encode(line); err != nil {
				return fmt.Errorf("records: %w", err)
			}
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("records: %w", err)
	}
	return nil
}

// printBenchTable prints the runs side by side, the harness's health and,
// from the whole results file, issue 7's targets.
func printBenchTable(w io.Writer, b *harness.Bench, out *harness.Outcome, resultsFile string) {
	in := &out.Info
	sc := in.Scenario
	dialect := sc.Fleet.Dialect
	if dialect == "" {
		dialect = worker.DialectVLLM
	}
	fmt.Fprintf(w, "\n%s: %d %s workers × %d blocks (working set %.2f× the fleet cache), max-num-seqs %d, engine %s, time scale %g; oracle hit rate %.3f",
		sc.Name, sc.Fleet.Workers, dialect, sc.Fleet.Engine.NumBlocks, in.Pressure, sc.Fleet.Engine.MaxNumSeqs, sc.Fleet.Engine.Scheduler, sc.Fleet.TimeScale(), in.OracleHitRate)
	if in.SaturationRate > 0 {
		fmt.Fprintf(w, "; saturation %.3g req/s", in.SaturationRate)
	}
	if in.Pooled != nil {
		fmt.Fprintf(w, "; pooled-cache bound %.3f", in.Pooled.HitRate)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  (model seconds; kept: share of requests within the TTFT objective; pred ±20/50%: share of llbd's TTFT predictions within 20 and 50 % of its measured TTFT; ovh: wall ms llbd and the loopback path add to TTFT over the workers' own; cpu h/d: CPU seconds of the harness with the fleet / of llbd)")
	fmt.Fprintf(w, "  %-14s %5s %6s %8s %8s %8s %8s %6s %7s %6s %6s %6s %11s %5s %5s %8s %5s %-22s %7s %7s %9s\n",
		"strategy", "load", "req/s", "ttft p50", "ttft p90", "ttft p99", "e2e p90", "hit", "of orac", "thru", "errors", "kept", "pred ±20/50", "spill", "cold", "hot p90", "skew", "tiers", "lag p99", "ovh", "cpu h/d")
	for _, ro := range out.Runs {
		r := ro.Result
		load := "-"
		switch {
		case ro.Concurrency > 0:
			load = fmt.Sprintf("c=%d", ro.Concurrency)
		case ro.Load > 0:
			load = fmt.Sprintf("%.0f%%", 100*ro.Load)
		}
		errs := r.Requests - r.Completed
		ovh := "-"
		if r.Health.Overhead >= 0 {
			ovh = fmt.Sprintf("%.1fms", r.Health.Overhead)
		}
		pred := "-"
		if p := r.TTFTPrediction; p.Compared > 0 {
			pred = fmt.Sprintf("%.0f/%.0f%%", 100*p.Within20, 100*p.Within50)
		}
		fmt.Fprintf(w, "  %-14s %5s %6.3g %8.3f %8.3f %8.3f %8.3f %6.3f %7s %6.3g %6d %5.1f%% %11s %5d %5d %8.3f %5.2f %-22s %5.1fms %7s %4.1f/%.1f\n",
			r.Strategy, load, r.Rate, r.TTFT.P50, r.TTFT.P90, r.TTFT.P99, r.E2E.P90, r.HitRate, report.RatioPct(r.HitRate, r.OracleHitRate),
			r.Throughput, errs, 100*r.SLOKept, pred, r.Spills, r.ColdSeeds, r.HottestTTFTP90, r.LoadSkew, tierList(r.TierMix),
			r.Health.DispatchLagP99, ovh, r.Health.HarnessCPU, r.Health.DaemonCPU)
		if len(r.Errors) > 0 {
			fmt.Fprintf(w, "  %-14s errors by status/kind: %v\n", "", r.Errors)
		}
	}
	if resultsFile == "" {
		return
	}
	fh, err := os.Open(resultsFile)
	if err != nil {
		return
	}
	ds, err := report.ReadJSONL(fh)
	_ = fh.Close()
	if err != nil {
		return
	}
	fmt.Fprintf(w, "\ntargets (issues 7, 16 and 18), read from %s:\n", resultsFile)
	for _, r := range report.DefaultTargets().Evaluate(ds) {
		fmt.Fprintf(w, "  %s\n", r)
	}
}

// tierList renders a tier mix compactly for the table, largest first
// ("1.5:92 sel:rr:8").
func tierList(m map[string]int) string {
	shares := report.TierShares(m)
	if len(shares) == 0 {
		return "-"
	}
	parts := make([]string, len(shares))
	for i, s := range shares {
		parts[i] = fmt.Sprintf("%s:%.0f", s.Tier, s.Pct)
	}
	return strings.Join(parts, " ")
}
