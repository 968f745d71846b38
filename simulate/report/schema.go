package report

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
)

// SchemaVersion is the results schema version this package writes and
// reads. Bump it on an incompatible change.
const SchemaVersion = 1

// Line kinds.
const (
	// KindMeta is the dataset header (exactly one, first).
	KindMeta = "meta"
	// KindScenario describes one scenario (fleet, workload, saturation).
	KindScenario = "scenario"
	// KindRun is one measured run.
	KindRun = "run"
)

// Sources of a dataset.
const (
	// SourceDES is the discrete-event simulator (llbsim sweep).
	SourceDES = "des"
	// SourceHTTP is a load harness driving the real llbd over HTTP.
	SourceHTTP = "http"
)

// Meta is the dataset header: where the numbers come from.
type Meta struct {
	// Schema is SchemaVersion.
	Schema int `json:"schema"`
	// Source is SourceDES or SourceHTTP.
	Source string `json:"source"`
	// Generator names the producing command ("llbsim sweep").
	Generator string `json:"generator"`
	// Module, Commit and GoVersion identify the build (Commit may be "").
	Module    string `json:"module,omitempty"`
	Commit    string `json:"commit,omitempty"`
	GoVersion string `json:"go_version,omitempty"`
	// Seed is the workload seed every scenario used.
	Seed uint64 `json:"seed"`
	// Method is a paragraph on how the numbers were produced.
	Method string `json:"method,omitempty"`
	// Notes are caveats a reader must know (model limitations).
	Notes []string `json:"notes,omitempty"`
}

// Probe is one saturation-search probe.
type Probe struct {
	// Rate is the offered load (requests/s).
	Rate float64 `json:"rate"`
	// Stable is the verdict.
	Stable bool `json:"stable"`
	// QueueWaitP90 (s) and Throughput (requests/s) as measured.
	QueueWaitP90 float64 `json:"queue_wait_p90_s"`
	Throughput   float64 `json:"throughput_rps"`
}

// NewMeta is a dataset header for source, written by generator with seed:
// the schema version, the Go version, and the module and commit of the
// running build (commit, when given, wins over the build's VCS revision).
func NewMeta(source, generator string, seed uint64, commit string) Meta {
	m := Meta{Schema: SchemaVersion, Source: source, Generator: generator, Seed: seed, GoVersion: runtime.Version(), Commit: commit}
	if bi, ok := debug.ReadBuildInfo(); ok {
		m.Module = bi.Main.Path
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && m.Commit == "" {
				m.Commit = s.Value
			}
		}
	}
	return m
}

// Scenario is one workload on one fleet.
type Scenario struct {
	// Name identifies the scenario; runs refer to it.
	Name string `json:"name"`
	// Description is one sentence.
	Description string `json:"description,omitempty"`
	// Workload describes the request stream (generator and sizes).
	Workload string `json:"workload"`
	// Workers is the fleet size.
	Workers int `json:"workers"`
	// Worker describes one worker (cache, batch limit, latency model).
	Worker string `json:"worker"`
	// CacheBlocksPerWorker and BlockSize size the caches.
	CacheBlocksPerWorker int `json:"cache_blocks_per_worker"`
	BlockSize            int `json:"block_size"`
	// Requests and Warmup: trace length and the leading requests left out
	// of the metrics.
	Requests int `json:"requests"`
	Warmup   int `json:"warmup"`
	// WorkingSetBlocks is the distinct blocks of the trace; Pressure is
	// WorkingSetBlocks / the fleet's cache blocks.
	WorkingSetBlocks int     `json:"working_set_blocks"`
	Pressure         float64 `json:"pressure"`
	// OracleHitRate is the bound over the measured requests.
	OracleHitRate float64 `json:"oracle_hit_rate"`
	// PooledHitRate is the pooled-cache bound: one worker holding the
	// whole fleet's cache serves the trace (at PooledLoad), so no routing
	// decision can lose locality; 0 when not measured.
	PooledHitRate float64 `json:"pooled_hit_rate,omitempty"`
	PooledLoad    float64 `json:"pooled_load,omitempty"`
	// SaturationRate is load 1.0 (requests/s), found with
	// SaturationStrategy; SaturationUnstable is the lowest unstable rate
	// probed; SaturationCriterion says what "stable" meant.
	SaturationRate      float64 `json:"saturation_rps"`
	SaturationUnstable  float64 `json:"saturation_unstable_rps,omitempty"`
	SaturationStrategy  string  `json:"saturation_strategy"`
	SaturationCriterion string  `json:"saturation_criterion"`
	// ArrivalSpan is how long the trace's arrivals last at the saturation
	// rate (s): a run much shorter than a few service times never reaches
	// steady state.
	ArrivalSpan float64 `json:"arrival_span_s"`
	// NativeRate is a recorded trace's own mean arrival rate
	// (requests/s), 0 for a generated workload: a run at rate r replays the
	// trace compressed r / NativeRate times in time.
	NativeRate float64 `json:"native_rps,omitempty"`
	// Probes are the saturation search's probes, by rate.
	Probes []Probe `json:"probes,omitempty"`
	// Concurrency, when set, marks a closed-loop scenario: its runs hold a
	// fixed number of requests in flight (Run.Concurrency) instead of an
	// offered rate, at these levels; it has no saturation rate.
	Concurrency []int `json:"concurrency,omitempty"`
}

// Latency is a latency summary in seconds.
type Latency struct {
	Mean float64 `json:"mean"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
}

// Worker is one worker's share of a run.
type Worker struct {
	// Requests served (measured).
	Requests int `json:"requests"`
	// TTFTP90 is their TTFT p90 (s).
	TTFTP90 float64 `json:"ttft_p90_s"`
	// HitRate is their prefix-cache hit rate.
	HitRate float64 `json:"hit_rate"`
	// MeanActive is the time-averaged in-flight count.
	MeanActive float64 `json:"mean_active"`
}

// Run is one measured run: a strategy at one load on one scenario. A load
// harness fills what it can measure and leaves the rest zero (MeanKVLoad,
// per-worker MeanActive, ...).
type Run struct {
	// Scenario names the scenario.
	Scenario string `json:"scenario"`
	// Group is the comparison: "strategies", "epsilon" or "lambda".
	Group string `json:"group"`
	// Strategy names the routing policy ("hard", "hard@150", ...); Mode is
	// the Tier-1.5 law ("" when off); FactorPct and Lambda the static knobs.
	Strategy  string `json:"strategy"`
	Mode      string `json:"mode,omitempty"`
	FactorPct uint32 `json:"factor_pct,omitempty"`
	Lambda    uint32 `json:"lambda,omitempty"`
	// Load is the fraction of the scenario's saturation rate; Rate the
	// offered load (requests/s). Both are 0 in a closed loop.
	Load float64 `json:"load"`
	Rate float64 `json:"rate_rps"`
	// Concurrency is the closed loop's client count (requests in flight);
	// 0 for open-loop runs.
	Concurrency int `json:"concurrency,omitempty"`
	// Requests measured.
	Requests int `json:"requests"`
	// TTFT, E2E and QueueWait summaries.
	TTFT      Latency `json:"ttft_s"`
	E2E       Latency `json:"e2e_s"`
	QueueWait Latency `json:"queue_wait_s"`
	// Throughput (requests/s), TokensPerSec (output) and Goodput
	// (requests/s within TTFTSLO seconds).
	Throughput   float64 `json:"throughput_rps"`
	TokensPerSec float64 `json:"tokens_per_s"`
	Goodput      float64 `json:"goodput_rps"`
	TTFTSLO      float64 `json:"ttft_slo_s"`
	// HitRate (engines) and OracleHitRate (bound) over measured requests.
	HitRate       float64 `json:"hit_rate"`
	OracleHitRate float64 `json:"oracle_hit_rate"`
	// TierMix counts decisions by deciding stage.
	TierMix map[string]int `json:"tier_mix,omitempty"`
	// Decision flags counted over measured requests.
	Spills     int `json:"spills"`
	Reliefs    int `json:"reliefs"`
	ColdSeeds  int `json:"cold_seeds"`
	Saturated  int `json:"saturated"`
	BoundWalks int `json:"bound_walks"`
	// KVDecisions counts decisions where the law ran; the means are the
	// law's effective factor, λ and load L over them.
	KVDecisions   int     `json:"kv_decisions"`
	MeanFactorPct float64 `json:"mean_factor_pct,omitempty"`
	MeanLambda    float64 `json:"mean_lambda,omitempty"`
	MeanKVLoad    float64 `json:"mean_kv_load,omitempty"`
	// LoadSkew and ServedSkew are max/mean across workers of the
	// time-averaged in-flight count and of requests served.
	LoadSkew   float64 `json:"load_skew"`
	ServedSkew float64 `json:"served_skew"`
	// Hottest is the most loaded worker; HottestTTFTP90 its TTFT p90 (s).
	Hottest        int     `json:"hottest"`
	HottestTTFTP90 float64 `json:"hottest_ttft_p90_s"`
	// Workers are the per-worker figures.
	Workers []Worker `json:"workers,omitempty"`
	// TTFTPredError summarises the relative error of llb's TTFT
	// predictions, |predicted − actual| / actual (nil for peers and for
	// runs that compared none).
	TTFTPredError *Latency `json:"ttft_pred_error,omitempty"`
	// SLOKept is the share of measured requests whose TTFT met TTFTSLO
	// (the objective kept, for a strategy whose requests carry it); absent
	// in results written before it was recorded.
	SLOKept float64 `json:"slo_kept,omitempty"`
}

// Dataset is everything a report is made from.
type Dataset struct {
	// Meta is the header.
	Meta Meta
	// Scenarios in file order.
	Scenarios []Scenario
	// Runs in file order.
	Runs []Run
}

// ErrSchema reports a results file this package cannot read.
var ErrSchema = errors.New("report: bad results file")

// line is the JSON-lines envelope: a kind and exactly one payload.
type line struct {
	Kind     string    `json:"kind"`
	Meta     *Meta     `json:"meta,omitempty"`
	Scenario *Scenario `json:"scenario,omitempty"`
	Run      *Run      `json:"run,omitempty"`
}

// WriteJSONL writes d as JSON lines: the meta line, then one line per
// scenario, then one per run.
func WriteJSONL(w io.Writer, d *Dataset) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	meta := d.Meta
	meta.Schema = SchemaVersion
	if err := enc.Encode(line{Kind: KindMeta, Meta: &meta}); err != nil {
		return fmt.Errorf("write meta: %w", err)
	}
	for i := range d.Scenarios {
		if err := enc.Encode(line{Kind: KindScenario, Scenario: &d.Scenarios[i]}); err != nil {
			return fmt.Errorf("write scenario %q: %w", d.Scenarios[i].Name, err)
		}
	}
	for i := range d.Runs {
		if err := enc.Encode(line{Kind: KindRun, Run: &d.Runs[i]}); err != nil {
			return fmt.Errorf("write run %d: %w", i, err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write results: %w", err)
	}
	return nil
}

// ReadJSONL reads a dataset written by WriteJSONL (or by a harness
// following the same schema). Problems wrap ErrSchema.
func ReadJSONL(r io.Reader) (*Dataset, error) {
	d := &Dataset{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	n, sawMeta := 0, false
	for sc.Scan() {
		n++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("line %d: %w: %w", n, ErrSchema, err)
		}
		switch {
		case l.Kind == KindMeta && l.Meta != nil:
			if sawMeta {
				return nil, fmt.Errorf("line %d: second meta line: %w", n, ErrSchema)
			}
			if l.Meta.Schema != SchemaVersion {
				return nil, fmt.Errorf("line %d: schema %d (this build reads %d): %w", n, l.Meta.Schema, SchemaVersion, ErrSchema)
			}
			d.Meta, sawMeta = *l.Meta, true
		case l.Kind == KindScenario && l.Scenario != nil:
			d.Scenarios = append(d.Scenarios, *l.Scenario)
		case l.Kind == KindRun && l.Run != nil:
			d.Runs = append(d.Runs, *l.Run)
		default:
			return nil, fmt.Errorf("line %d: kind %q without its payload: %w", n, l.Kind, ErrSchema)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read results: %w", err)
	}
	if !sawMeta {
		return nil, fmt.Errorf("no meta line: %w", ErrSchema)
	}
	return d, d.Validate()
}

// Validate checks the dataset's internal references: unique scenario
// names, every run naming a known scenario, finite numbers.
func (d *Dataset) Validate() error {
	var errs []error
	names := map[string]bool{}
	for _, s := range d.Scenarios {
		if s.Name == "" || names[s.Name] {
			errs = append(errs, fmt.Errorf("scenario name %q empty or repeated", s.Name))
		}
		names[s.Name] = true
	}
	for i := range d.Runs {
		r := &d.Runs[i]
		if !names[r.Scenario] {
			errs = append(errs, fmt.Errorf("run %d names unknown scenario %q", i, r.Scenario))
		}
		if r.Strategy == "" {
			errs = append(errs, fmt.Errorf("run %d has no strategy", i))
		}
		for _, v := range []float64{r.Load, r.Rate, r.TTFT.P90, r.HitRate, r.Throughput} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				errs = append(errs, fmt.Errorf("run %d (%s) holds a non-finite number", i, r.Strategy))
				break
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrSchema, errors.Join(errs...))
}

// Scenario returns the named scenario.
func (d *Dataset) Scenario(name string) (Scenario, bool) {
	for _, s := range d.Scenarios {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Select returns the runs of a scenario and group, in file order.
func (d *Dataset) Select(scenario, group string) []Run {
	var out []Run
	for _, r := range d.Runs {
		if r.Scenario == scenario && r.Group == group {
			out = append(out, r)
		}
	}
	return out
}

// closed reports whether scenario is a closed-loop one.
func (d *Dataset) closed(scenario string) bool {
	s, ok := d.Scenario(scenario)
	return ok && len(s.Concurrency) > 0
}

// Merge joins datasets of one source and seed into one: the first one's
// header, every scenario and run in order. A scenario may appear in one
// dataset only. When a later dataset comes from another commit, a note
// names its scenarios and commit, so the page says which build measured
// what.
func Merge(ds ...*Dataset) (*Dataset, error) {
	if len(ds) == 0 {
		return nil, fmt.Errorf("merge: no datasets: %w", ErrSchema)
	}
	out := &Dataset{Meta: ds[0].Meta}
	out.Meta.Notes = slices.Clone(out.Meta.Notes)
	for i, d := range ds {
		if d.Meta.Source != out.Meta.Source || d.Meta.Seed != out.Meta.Seed {
			return nil, fmt.Errorf("merge: dataset %d is %s seed %d, the first %s seed %d: %w", i, d.Meta.Source, d.Meta.Seed, out.Meta.Source, out.Meta.Seed, ErrSchema)
		}
		if i > 0 && d.Meta.Commit != out.Meta.Commit {
			names := make([]string, len(d.Scenarios))
			for j, s := range d.Scenarios {
				names[j] = s.Name
			}
			out.Meta.Notes = append(out.Meta.Notes, fmt.Sprintf("Scenarios %s were measured by %s at commit %s (the others at %s).",
				strings.Join(names, ", "), d.Meta.Generator, d.Meta.Commit, out.Meta.Commit))
		}
		out.Scenarios = append(out.Scenarios, d.Scenarios...)
		out.Runs = append(out.Runs, d.Runs...)
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("merge: %w", err)
	}
	return out, nil
}
