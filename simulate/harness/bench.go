package harness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/llbproject/llb/simulate/des"
	"github.com/llbproject/llb/simulate/saturation"
	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/worker"
	"github.com/llbproject/llb/simulate/workload"
)

// Scenario is a workload on a fleet: what every strategy of a comparison
// shares.
type Scenario struct {
	// Name labels the scenario in results ("shared-prefix").
	Name string
	// Description is one sentence for the report.
	Description string
	// Workload is the request generator; its requests must stream
	// (Options.Stream), since TTFT is the first SSE event carrying a token.
	Workload workload.Spec
	// Requests is the trace length (>= 2).
	Requests int
	// Seed seeds the content and the arrival gaps.
	Seed uint64
	// Warmup is the fraction of the trace sent and served but left out of
	// the metrics (0 <= Warmup < 1).
	Warmup float64
	// Fleet is the fleet every run starts afresh.
	Fleet FleetConfig
	// CachePressure, when > 0, sizes each worker's cache so that the
	// trace's working set (distinct blocks) is this many times the fleet's
	// cache: NumBlocks = DistinctBlocks / (CachePressure · Workers), never
	// below what the largest request needs (simulate/des sizes it the same
	// way). When 0, Fleet.Engine.NumBlocks is used as is.
	CachePressure float64
}

// Validate reports every problem at once.
func (s *Scenario) Validate() error {
	var errs []error
	if s.Name == "" {
		errs = append(errs, errors.New("scenario without a name"))
	}
	if s.Workload == nil {
		errs = append(errs, errors.New("no workload"))
	}
	if s.Requests < 2 {
		errs = append(errs, fmt.Errorf("%d requests (want >= 2)", s.Requests))
	}
	if !(s.Warmup >= 0 && s.Warmup < 1) {
		errs = append(errs, fmt.Errorf("warmup fraction %v (want 0 <= w < 1)", s.Warmup))
	}
	if s.CachePressure < 0 || math.IsNaN(s.CachePressure) || math.IsInf(s.CachePressure, 0) {
		errs = append(errs, fmt.Errorf("cache pressure %v (want >= 0)", s.CachePressure))
	}
	if err := s.Fleet.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("scenario %q: %w: %w", s.Name, ErrConfig, errors.Join(errs...))
}

// Bench is a side-by-side comparison: every strategy at every load of a
// scenario, each run on a fresh fleet and a fresh llbd.
type Bench struct {
	// Scenario is the workload and fleet.
	Scenario Scenario
	// Strategies are compared side by side, in order.
	Strategies []strategy.Strategy
	// Rates are absolute offered loads (requests per model second). Set
	// either Rates or Loads.
	Rates []float64
	// Loads are fractions of the saturation rate: SaturationRate when
	// given, else found by FindSaturation with Reference.
	Loads []float64
	// Concurrency are closed-loop client counts (RunConfig.Concurrency):
	// the whole trace at each, no saturation search. Set exactly one of
	// Rates, Loads and Concurrency.
	Concurrency []int
	// Duration, when > 0, bounds each run to the requests arriving within
	// this much model time at its rate (a prefix of the trace, warm-up the
	// same fraction of it); Scenario.Requests caps it. 0 sends the whole
	// trace at every rate.
	Duration time.Duration
	// SaturationRate is a known load 1.0 (requests per model second); 0
	// searches it when Loads are used.
	SaturationRate float64
	// Reference names the strategy the saturation search runs (default
	// "hard", llb's default law).
	Reference string
	// Saturation tunes the search.
	Saturation SaturationConfig
	// Daemon is where llbd comes from.
	Daemon DaemonSource
	// Replicas runs every run on several llbd processes (see Replicas).
	Replicas Replicas
	// WorkDir receives llbd state dirs and logs.
	WorkDir string
	// TTFTSLO is the goodput objective (default 2s model time).
	TTFTSLO time.Duration
	// KeepRecords keeps every request's record in the results.
	KeepRecords bool
	// Pooled adds the pooled-cache bound when loads are used: one worker
	// holding the whole fleet's cache and batch serves the trace (round
	// robin over one endpoint) at PooledLoad, so no routing decision can
	// lose locality; what LRU caching keeps of the working set.
	Pooled bool
	// Events, when set, receives progress: phase lines and per-run
	// request counts.
	Events Events
}

// Events receives a bench's progress. Any field may be nil.
type Events struct {
	// Phase is one line per phase ("hard at 70% (11.3 req/s)").
	Phase func(line string)
	// RunStart announces a run of total requests; Request reports each
	// completion (from many goroutines); RunEnd closes the run.
	RunStart func(label string, total int)
	Request  func(done int)
	RunEnd   func(label string, r *Result)
	// Probe reports each saturation probe.
	Probe func(p saturation.Probe)
}

// ScenarioInfo describes a scenario as run.
type ScenarioInfo struct {
	// Scenario as configured, with Fleet.Engine.NumBlocks resolved.
	Scenario Scenario
	// Warmup is the number of warm-up requests.
	Warmup int
	// DistinctBlocks, MaxBlocks, PromptTokens, OutputTokens describe the
	// trace; Pressure is DistinctBlocks / the fleet's cache blocks.
	DistinctBlocks, MaxBlocks  int
	PromptTokens, OutputTokens int64
	Pressure                   float64
	// OracleHitRate is the oracle bound over the measured requests.
	OracleHitRate float64
	// UnitDuration is the arrival span at 1 request per model second.
	UnitDuration float64
	// Saturation is the search's outcome (nil when the rate was given or
	// absolute rates were used); SaturationRate is load 1.0 (0 with
	// absolute rates).
	Saturation     *saturation.Outcome
	SaturationRate float64
	// Pooled is the pooled-cache bound run (nil unless Bench.Pooled),
	// at PooledLoad.
	Pooled     *Result
	PooledLoad float64
}

// DefaultStrategyNames is the side-by-side set: the catalogue
// (simulate/strategy) without hard+chwbl and pd-hard.
func DefaultStrategyNames() []string {
	return []string{strategy.NameRR, strategy.NameCHWBL, strategy.NameTier1, strategy.NameOff, strategy.NameHard,
		strategy.NameSoft, strategy.NameAdaptive, strategy.NameAdaptiveSoft}
}

// PooledLoad is the load the pooled-cache bound runs at: 0.7 when the
// loads hold it, else their middle step (as simulate/des chooses).
func PooledLoad(loads []float64) float64 {
	for _, l := range loads {
		if math.Abs(l-0.7) < 1e-9 {
			return l
		}
	}
	return loads[len(loads)/2]
}

// RunOutcome is one run with its load.
type RunOutcome struct {
	// Load is the fraction of saturation (0 with absolute rates and in a
	// closed loop).
	Load float64
	// Concurrency is the closed loop's client count (0 open-loop).
	Concurrency int
	// Result is the run's measurement.
	Result *Result
}

// Outcome is a bench's results.
type Outcome struct {
	// Info describes the scenario and trace.
	Info ScenarioInfo
	// Runs in execution order: rate by rate, strategy by strategy.
	Runs []RunOutcome
}

// Validate reports every problem at once.
func (b *Bench) Validate() error {
	var errs []error
	if err := b.Scenario.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(b.Strategies) == 0 {
		errs = append(errs, errors.New("no strategies"))
	}
	for i := range b.Strategies {
		if err := b.Scenario.Fleet.serves(&b.Strategies[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if n := min(len(b.Rates), 1) + min(len(b.Loads), 1) + min(len(b.Concurrency), 1); n != 1 {
		errs = append(errs, errors.New("give one of absolute rates, loads (fractions of saturation) or closed-loop concurrency levels"))
	}
	for _, c := range b.Concurrency {
		if c < 1 {
			errs = append(errs, fmt.Errorf("concurrency %d (want >= 1)", c))
		}
	}
	for _, r := range append(append([]float64{}, b.Rates...), b.Loads...) {
		if !(r > 0) || math.IsInf(r, 0) {
			errs = append(errs, fmt.Errorf("rate or load %v (want > 0)", r))
		}
	}
	if b.Duration < 0 {
		errs = append(errs, fmt.Errorf("duration %v (want >= 0)", b.Duration))
	}
	if b.SaturationRate < 0 {
		errs = append(errs, fmt.Errorf("saturation rate %v (want >= 0)", b.SaturationRate))
	}
	if b.WorkDir == "" {
		errs = append(errs, errors.New("no work dir"))
	}
	if b.Daemon.Bin == "" && b.Daemon.Attach == "" {
		errs = append(errs, errors.New("no llbd: give a binary or an address to attach to"))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("bench: %w: %w", ErrConfig, errors.Join(errs...))
}

// Prepare generates the scenario's trace and resolves the fleet's cache
// size.
func (s *Scenario) Prepare() (*workload.Trace, ScenarioInfo, error) {
	if err := s.Validate(); err != nil {
		return nil, ScenarioInfo{}, err
	}
	trt := s.Fleet.Dialect == worker.DialectTRTLLM
	tr, err := workload.NewTrace(workload.TraceConfig{Spec: s.Workload, Requests: s.Requests, Seed: s.Seed, BlockSize: s.Fleet.Engine.BlockSize,
		KeepTokens: trt})
	if err != nil {
		return nil, ScenarioInfo{}, fmt.Errorf("scenario %q: %w: %w", s.Name, ErrConfig, err)
	}
	if trt {
		if tr, err = tokenIDPrompts(tr); err != nil {
			return nil, ScenarioInfo{}, fmt.Errorf("scenario %q: %w", s.Name, err)
		}
	}
	sc := *s
	if sc.CachePressure > 0 {
		sc.Fleet.Engine.NumBlocks = tr.CacheBlocks(sc.CachePressure, sc.Fleet.Workers)
	}
	if err := sc.Fleet.Validate(); err != nil {
		return nil, ScenarioInfo{}, err
	}
	warm := int(sc.Warmup * float64(len(tr.Requests)))
	info := ScenarioInfo{
		Scenario: sc, Warmup: warm,
		DistinctBlocks: tr.DistinctBlocks, MaxBlocks: tr.MaxBlocks,
		PromptTokens: tr.PromptTokens, OutputTokens: tr.OutputTokens,
		Pressure:      float64(tr.DistinctBlocks) / float64(sc.Fleet.Workers*sc.Fleet.Engine.NumBlocks),
		OracleHitRate: tr.OracleHitRate(warm),
		UnitDuration:  tr.UnitDuration(),
	}
	return tr, info, nil
}

// Execute runs the bench: the trace, the saturation search when loads
// need one, then every strategy at every rate. A run that fails stops the
// bench; the runs done so far are returned with the error.
func (b *Bench) Execute(ctx context.Context) (*Outcome, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	ev := b.Events
	phase := func(format string, args ...any) {
		if ev.Phase != nil {
			ev.Phase(fmt.Sprintf(format, args...))
		}
	}
	tr, info, err := b.Scenario.Prepare()
	if err != nil {
		return nil, err
	}
	out := &Outcome{Info: info}
	phase("%s: %d requests (%d warm-up), working set %d blocks = %.2f× the fleet's %d×%d, oracle hit rate %.3f",
		b.Scenario.Name, len(tr.Requests), info.Warmup, info.DistinctBlocks, info.Pressure,
		info.Scenario.Fleet.Workers, info.Scenario.Fleet.Engine.NumBlocks, info.OracleHitRate)
	base := RunConfig{
		Trace: tr, Warmup: info.Warmup, Fleet: info.Scenario.Fleet, Daemon: b.Daemon, Replicas: b.Replicas, WorkDir: b.WorkDir,
		TTFTSLO: b.TTFTSLO, KeepRecords: b.KeepRecords,
	}
	if slices.ContainsFunc(b.Strategies, func(s strategy.Strategy) bool { return s.IsPeer() }) {
		// The peers' routers read the routing keys from the same trace as
		// the simulator derives them.
		dt, err := des.NewTrace(des.TraceConfig{Name: b.Scenario.Name, Spec: b.Scenario.Workload, Requests: b.Scenario.Requests,
			Seed: b.Scenario.Seed, BlockSize: info.Scenario.Fleet.Engine.BlockSize, Hash: info.Scenario.Fleet.Engine.Hash})
		if err != nil {
			return nil, fmt.Errorf("peer routing keys: %w", err)
		}
		base.PeerKeys = dt.Keys
	}
	type step struct {
		load, rate float64
		conc       int
	}
	var steps []step
	switch {
	case len(b.Concurrency) > 0:
		for _, c := range b.Concurrency {
			steps = append(steps, step{conc: c})
		}
	case len(b.Rates) > 0:
		for _, r := range b.Rates {
			steps = append(steps, step{rate: r})
		}
	default:
		satRate := b.SaturationRate
		if satRate == 0 {
			ref := b.Reference
			if ref == "" {
				ref = strategy.NameHard
			}
			s, err := strategy.ByName(ref)
			if err != nil {
				return out, fmt.Errorf("bench reference: %w: %w", ErrConfig, err)
			}
			rc := base
			rc.Strategy = s
			rc.KeepRecords = false
			phase("%s: searching the saturation rate of %s", b.Scenario.Name, ref)
			sat, err := FindSaturation(ctx, rc, b.Saturation, func(p saturation.Probe) {
				phase("  probe %.3g req/s: stable=%v queue wait p90 %.3fs throughput %.3g req/s failed %d", p.Rate, p.Stable, p.QueueWaitP90, p.Throughput, p.Failed)
				if ev.Probe != nil {
					ev.Probe(p)
				}
			})
			out.Info.Saturation = &sat
			if err != nil {
				return out, err
			}
			satRate = sat.Rate
			phase("%s: saturation %.3g req/s (unstable at %.3g)", b.Scenario.Name, sat.Rate, sat.Unstable)
		}
		out.Info.SaturationRate = satRate
		for _, l := range b.Loads {
			steps = append(steps, step{load: l, rate: l * satRate})
		}
	}
	if b.Pooled && len(b.Loads) > 0 {
		rc := base
		rc.Fleet.Workers = 1
		rc.Fleet.Engine.NumBlocks = base.Fleet.Workers * base.Fleet.Engine.NumBlocks
		rc.Fleet.Engine.MaxNumSeqs = base.Fleet.Workers * base.Fleet.Engine.MaxNumSeqs
		rc.Strategy, _ = strategy.ByName(strategy.NameRR)
		rc.KeepRecords = false
		out.Info.PooledLoad = PooledLoad(b.Loads)
		rc.Rate = out.Info.PooledLoad * out.Info.SaturationRate
		label := fmt.Sprintf("%s pooled-cache bound at %.0f%% (%.3g req/s)", b.Scenario.Name, 100*out.Info.PooledLoad, rc.Rate)
		if ev.RunStart != nil {
			ev.RunStart(label, len(tr.Requests))
		}
		rc.Progress = ev.Request
		res, err := Run(ctx, rc)
		if err != nil {
			return out, fmt.Errorf("%s: %w", label, err)
		}
		if ev.RunEnd != nil {
			ev.RunEnd(label, res)
		}
		out.Info.Pooled = res
	}
	for _, st := range steps {
		for _, s := range b.Strategies {
			rc := base
			rc.Strategy, rc.Rate, rc.Concurrency = s, st.rate, st.conc
			rc.Progress = ev.Request
			if b.Duration > 0 && st.conc == 0 {
				n := max(2, min(len(tr.Requests), int(math.Ceil(st.rate*b.Duration.Seconds()))))
				rc.Trace = tr.Prefix(n)
				rc.Warmup = int(b.Scenario.Warmup * float64(n))
			}
			label := fmt.Sprintf("%s %s at %.3g req/s", b.Scenario.Name, s.Name, st.rate)
			switch {
			case st.conc > 0:
				label = fmt.Sprintf("%s %s with %d in flight", b.Scenario.Name, s.Name, st.conc)
			case st.load > 0:
				label = fmt.Sprintf("%s %s at %.0f%% (%.3g req/s)", b.Scenario.Name, s.Name, 100*st.load, st.rate)
			}
			if ev.RunStart != nil {
				ev.RunStart(label, len(rc.Trace.Requests))
			}
			res, err := Run(ctx, rc)
			if err != nil {
				return out, fmt.Errorf("%s: %w", label, err)
			}
			if ev.RunEnd != nil {
				ev.RunEnd(label, res)
			}
			out.Runs = append(out.Runs, RunOutcome{Load: st.load, Concurrency: st.conc, Result: res})
		}
	}
	return out, nil
}
