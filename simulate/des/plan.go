package des

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/saturation"
	"github.com/llbproject/llb/simulate/strategy"
)

// Run groups: which comparison a run belongs to.
const (
	// GroupStrategies is the side-by-side strategy comparison.
	GroupStrategies = "strategies"
	// GroupEpsilon is the hard-law ε sweep (hard@<pct>, plus adaptive).
	GroupEpsilon = "epsilon"
	// GroupLambda is the soft-law λ sweep (soft@<λ>, plus adaptive-soft).
	GroupLambda = "lambda"
	// GroupSaturation marks saturation-search probes.
	GroupSaturation = "saturation"
	// GroupPooled marks the pooled-cache bound run.
	GroupPooled = "pooled"
)

// Scenario is a trace on a fleet: one section of the report.
type Scenario struct {
	// Name labels the scenario; the trace takes it too.
	Name string
	// Description is one sentence for the report.
	Description string
	// Trace describes the workload (its Name is overwritten by Name).
	Trace TraceConfig
	// Workers is the fleet size.
	Workers int
	// CachePressure, when > 0, sizes each worker's cache so that the
	// trace's working set (distinct blocks) is this many times the fleet's
	// cache: NumBlocks = DistinctBlocks / (CachePressure · Workers), never
	// below what the largest request needs. When 0, Engine.NumBlocks is
	// used as is.
	CachePressure float64
	// Engine is the worker configuration; zero means engine.DefaultConfig
	// with the trace's block size and hash.
	Engine *EngineOverrides
	// Sweeps runs the ε and λ sweeps on this scenario too.
	Sweeps bool
	// Model is the engines' scheduler: llm-d-inference-sim's load-factor
	// model (the zero value) or vLLM V1's step model.
	Model engine.Scheduler
	// Replicas is the number of router replicas (RunConfig.Replicas); 0
	// or 1 is one router.
	Replicas int
	// ThinkTime turns multi-turn conversations into sessions
	// (RunConfig.ThinkTime).
	ThinkTime time.Duration
	// TTFTSLO overrides the plan's goodput objective for this scenario.
	TTFTSLO time.Duration
	// Concurrency, when set, makes the scenario a closed-loop ladder: every
	// strategy runs at each of these client counts (RunConfig.Concurrency)
	// instead of the plan's load ladder, and there is no saturation search,
	// no pooled-cache bound and no sweep.
	Concurrency []int
}

// EngineOverrides are the worker settings a scenario may change; zero
// fields keep the engine defaults.
type EngineOverrides struct {
	// NumBlocks is the cache size when CachePressure is 0.
	NumBlocks int
	// MaxNumSeqs is the batch limit.
	MaxNumSeqs int
	// TimeFactorUnderLoad is the latency model's slowdown at a full batch
	// (engine.Latency.TimeFactorUnderLoad).
	TimeFactorUnderLoad float64
	// MaxModelLen is the longest prompt plus output (--max-model-len).
	MaxModelLen int
	// MaxLoRAs is --max-loras (engine.Config.MaxLoRAs) and LoRASwapIn an
	// adapter's swap-in time (engine.Config.LoRASwapIn).
	MaxLoRAs   int
	LoRASwapIn time.Duration
}

// Plan is a whole sweep: scenarios × strategies × loads, plus the ε and λ
// sweeps, every load a fraction of one reference strategy's saturation
// rate on that scenario.
type Plan struct {
	// Scenarios to run.
	Scenarios []Scenario
	// Strategies compared side by side at every load.
	Strategies []strategy.Strategy
	// Loads are fractions of saturation (e.g. 0.3 … 1.1).
	Loads []float64
	// Reference names the strategy whose saturation rate is load 1.0.
	Reference string
	// Factors are the static LOXILB_KV_MEAN_LOAD_FACTOR values of the ε
	// sweep (hard@<pct>); the sweep adds adaptive.
	Factors []uint32
	// Lambdas are the static LOXILB_KV_LOAD_PENALTY values of the λ sweep
	// (soft@<λ>); the sweep adds adaptive-soft.
	Lambdas []uint32
	// Warmup is the fraction of each trace's requests left out of the
	// metrics (0 ≤ Warmup < 1).
	Warmup float64
	// TTFTSLO is the goodput objective; 0 means DefaultTTFTSLO.
	TTFTSLO time.Duration
	// Saturation tunes the saturation search.
	Saturation SaturationConfig
	// ScrapeEvery is llb's engine-metrics scrape interval in every run
	// (RunConfig.ScrapeEvery); 0 reads the engines exactly.
	ScrapeEvery time.Duration
	// Known are saturation outcomes found before (an earlier sweep of the
	// same seed), by scenario: a scenario found here skips the search and
	// takes its rate. Only valid while the reference strategy and the
	// trace are the same as when it was found. When every scenario is
	// known the reference need not be among Strategies.
	Known map[string]saturation.Outcome
}

// Validate reports every problem of the plan at once.
func (p *Plan) Validate() error {
	var errs []error
	if len(p.Scenarios) == 0 {
		errs = append(errs, errors.New("no scenarios"))
	}
	names := map[string]bool{}
	for _, sc := range p.Scenarios {
		if sc.Name == "" || names[sc.Name] {
			errs = append(errs, fmt.Errorf("scenario name %q empty or repeated", sc.Name))
		}
		names[sc.Name] = true
		if sc.Workers < 1 || sc.Workers >= 32 {
			errs = append(errs, fmt.Errorf("scenario %q: %d workers (want 1..31)", sc.Name, sc.Workers))
		}
		if sc.CachePressure < 0 || math.IsInf(sc.CachePressure, 0) || math.IsNaN(sc.CachePressure) {
			errs = append(errs, fmt.Errorf("scenario %q: cache pressure %v (want >= 0)", sc.Name, sc.CachePressure))
		}
		for _, c := range sc.Concurrency {
			if c < 1 {
				errs = append(errs, fmt.Errorf("scenario %q: concurrency %d (want >= 1)", sc.Name, c))
			}
		}
	}
	ref := false
	for i := range p.Strategies {
		if err := validateStrategy(&p.Strategies[i]); err != nil {
			errs = append(errs, err)
		}
		ref = ref || p.Strategies[i].Name == p.Reference
	}
	if !ref && !p.allKnown() {
		errs = append(errs, fmt.Errorf("reference strategy %q is not among the strategies", p.Reference))
	}
	if len(p.Loads) == 0 {
		errs = append(errs, errors.New("no loads"))
	}
	for _, l := range p.Loads {
		if !(l > 0) || math.IsInf(l, 0) {
			errs = append(errs, fmt.Errorf("load %v (want > 0)", l))
		}
	}
	for _, f := range p.Factors {
		if f < 100 || f > 1000 {
			errs = append(errs, fmt.Errorf("factor %d (want 100..1000)", f))
		}
	}
	for _, l := range p.Lambdas {
		if l < 1 || l > 100000 {
			errs = append(errs, fmt.Errorf("lambda %d (want 1..100000)", l))
		}
	}
	for name, k := range p.Known {
		if !(k.Rate > 0) || math.IsInf(k.Rate, 0) {
			errs = append(errs, fmt.Errorf("scenario %q: known saturation rate %v (want > 0)", name, k.Rate))
		}
	}
	if !(p.Warmup >= 0 && p.Warmup < 1) {
		errs = append(errs, fmt.Errorf("warmup fraction %v (want 0 <= w < 1)", p.Warmup))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("plan: %w: %w", ErrConfig, errors.Join(errs...))
}

// ScenarioOutcome is one scenario's share of a plan's results.
type ScenarioOutcome struct {
	// Scenario as run.
	Scenario Scenario
	// Fleet as built (cache size resolved).
	Fleet Fleet
	// Requests, DistinctBlocks, PromptTokens, OutputTokens and
	// OracleHitRate describe the trace (oracle over the measured part).
	Requests, Warmup, DistinctBlocks int
	PromptTokens, OutputTokens       int64
	OracleHitRate                    float64
	// Pressure is DistinctBlocks / the fleet's cache blocks.
	Pressure float64
	// UnitDuration is the trace's arrival span at 1 request/s (seconds);
	// divide by a rate for the span at that rate.
	UnitDuration float64
	// Saturation is the reference strategy's saturation search.
	Saturation saturation.Outcome
	// PooledHitRate is the pooled-cache bound: the hit rate of ONE worker
	// holding the whole fleet's cache (and batch), serving the trace at
	// PooledLoad — what LRU caching can keep of the working set when no
	// routing decision can lose locality. Compare it with the oracle,
	// which assumes an unbounded cache.
	PooledHitRate, PooledLoad float64
	// Runs are every run of the scenario, in plan order.
	Runs []RunOutcome
}

// RunOutcome is one run with its labels.
type RunOutcome struct {
	// Group is GroupStrategies, GroupEpsilon or GroupLambda.
	Group string
	// Load is the fraction of saturation (0 in a closed-loop scenario).
	Load float64
	// Concurrency is the closed loop's client count (0 for open-loop
	// runs).
	Concurrency int
	// Result is the run's measurement.
	Result *Result
}

// Execute runs the plan: per scenario, build the trace, size the fleet,
// find the reference strategy's saturation rate, then run every
// strategy (and the sweeps) at every load. progress, when non-nil, gets one
// line per phase. The outcome is deterministic for the plan whatever the
// executor's parallelism.
func (p *Plan) Execute(exec Executor, progress func(string)) ([]ScenarioOutcome, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	say := func(format string, args ...any) {
		if progress != nil {
			progress(fmt.Sprintf(format, args...))
		}
	}
	var ref strategy.Strategy
	for _, s := range p.Strategies {
		if s.Name == p.Reference {
			ref = s
		}
	}
	out := make([]ScenarioOutcome, 0, len(p.Scenarios))
	for _, sc := range p.Scenarios {
		tc := sc.Trace
		tc.Name = sc.Name
		say("%s: generating and hashing %d requests", sc.Name, tc.Requests)
		tr, err := NewTrace(tc)
		if err != nil {
			return out, err
		}
		tr.DropBodies()
		fleet, err := sc.Fleet(tr)
		if err != nil {
			return out, err
		}
		warm := int(p.Warmup * float64(len(tr.Requests)))
		so := ScenarioOutcome{
			Scenario: sc, Fleet: fleet, Requests: len(tr.Requests), Warmup: warm,
			DistinctBlocks: tr.DistinctBlocks, PromptTokens: tr.PromptTokens, OutputTokens: tr.OutputTokens,
			OracleHitRate: tr.OracleHitRate(warm),
			Pressure:      float64(tr.DistinctBlocks) / float64(fleet.CacheBlocks()),
			UnitDuration:  tr.UnitDuration(),
		}
		slo := p.TTFTSLO
		if sc.TTFTSLO > 0 {
			slo = sc.TTFTSLO
		}
		base := RunConfig{Fleet: fleet, Strategy: ref, Warmup: warm, TTFTSLO: slo, Replicas: sc.Replicas, ThinkTime: sc.ThinkTime, ScrapeEvery: p.ScrapeEvery}
		if len(sc.Concurrency) > 0 {
			if err := p.closedLoop(exec, tr, base, &so, say); err != nil {
				return out, err
			}
			out = append(out, so)
			continue
		}
		if known, ok := p.Known[sc.Name]; ok {
			so.Saturation = known
			say("%s: saturation %.3g req/s as found before", sc.Name, known.Rate)
		} else {
			say("%s: searching the saturation rate of %s", sc.Name, ref.Name)
			so.Saturation, err = FindSaturation(tr, base, p.Saturation, exec)
			if err != nil {
				return out, err
			}
			say("%s: saturation %.3g req/s (unstable at %.3g)", sc.Name, so.Saturation.Rate, so.Saturation.Unstable)
		}

		var specs []RunSpec
		add := func(group string, s strategy.Strategy) {
			for _, l := range p.Loads {
				rc := base
				rc.Strategy = s
				rc.Rate = l * so.Saturation.Rate
				specs = append(specs, RunSpec{Trace: tr, Config: rc, Scenario: sc.Name, Group: group, Load: l})
			}
		}
		pooled := base
		pooled.Fleet = fleet
		pooled.Fleet.Workers = 1
		pooled.Fleet.Engine.NumBlocks = fleet.CacheBlocks()
		pooled.Fleet.Engine.MaxNumSeqs = fleet.Workers * fleet.Engine.MaxNumSeqs
		pooled.Fleet.Engine.MaxNumBatchedTokens = fleet.Workers * fleet.Engine.MaxNumBatchedTokens
		pooled.Fleet.Engine.MaxLoRAs = fleet.Workers * fleet.Engine.MaxLoRAs
		pooled.Replicas = 0
		pooled.Strategy, _ = strategy.ByName(strategy.NameRR)
		so.PooledLoad = pooledLoad(p.Loads)
		pooled.Rate = so.PooledLoad * so.Saturation.Rate
		specs = append(specs, RunSpec{Trace: tr, Config: pooled, Scenario: sc.Name, Group: GroupPooled, Load: so.PooledLoad})
		for _, s := range p.Strategies {
			add(GroupStrategies, s)
		}
		if sc.Sweeps {
			for _, f := range p.Factors {
				add(GroupEpsilon, strategy.HardWithFactor(f))
			}
			if len(p.Factors) > 0 {
				adaptive, _ := strategy.ByName(strategy.NameAdaptive)
				add(GroupEpsilon, adaptive)
			}
			for _, l := range p.Lambdas {
				add(GroupLambda, strategy.SoftWithLambda(l))
			}
			if len(p.Lambdas) > 0 {
				adaptiveSoft, _ := strategy.ByName(strategy.NameAdaptiveSoft)
				add(GroupLambda, adaptiveSoft)
			}
		}
		say("%s: %d runs", sc.Name, len(specs))
		res, err := exec(specs)
		if err != nil {
			return out, err
		}
		for i, r := range res {
			if specs[i].Group == GroupPooled {
				so.PooledHitRate = r.HitRate
				continue
			}
			so.Runs = append(so.Runs, RunOutcome{Group: specs[i].Group, Load: specs[i].Load, Result: r})
		}
		out = append(out, so)
	}
	return out, nil
}

// allKnown reports whether every open-loop scenario's saturation is
// Known (a closed-loop scenario has none to search).
func (p *Plan) allKnown() bool {
	for _, sc := range p.Scenarios {
		if _, ok := p.Known[sc.Name]; !ok && len(sc.Concurrency) == 0 {
			return false
		}
	}
	return true
}

// closedLoop runs every strategy of the plan at each of the scenario's
// client counts.
func (p *Plan) closedLoop(exec Executor, tr *Trace, base RunConfig, so *ScenarioOutcome, say func(string, ...any)) error {
	var specs []RunSpec
	var levels []int
	for _, s := range p.Strategies {
		for _, c := range so.Scenario.Concurrency {
			rc := base
			rc.Strategy, rc.Concurrency = s, c
			specs = append(specs, RunSpec{Trace: tr, Config: rc, Scenario: so.Scenario.Name, Group: GroupStrategies})
			levels = append(levels, c)
		}
	}
	say("%s: %d closed-loop runs", so.Scenario.Name, len(specs))
	res, err := exec(specs)
	if err != nil {
		return err
	}
	for i, r := range res {
		so.Runs = append(so.Runs, RunOutcome{Group: specs[i].Group, Concurrency: levels[i], Result: r})
	}
	return nil
}

// pooledLoad is the load the pooled-cache bound runs at: 0.7 when the
// ladder has it, else the ladder's middle step.
func pooledLoad(loads []float64) float64 {
	for _, l := range loads {
		if math.Abs(l-0.7) < 1e-9 {
			return l
		}
	}
	return loads[len(loads)/2]
}

// Fleet builds the scenario's fleet for trace t.
func (sc *Scenario) Fleet(t *Trace) (Fleet, error) {
	f := FleetFor(t, sc.Workers, 0)
	if o := sc.Engine; o != nil {
		if o.NumBlocks > 0 {
			f.Engine.NumBlocks = o.NumBlocks
		}
		if o.MaxNumSeqs > 0 {
			f.Engine.MaxNumSeqs = o.MaxNumSeqs
		}
		if o.TimeFactorUnderLoad > 0 {
			f.Engine.Latency.TimeFactorUnderLoad = o.TimeFactorUnderLoad
		}
		if o.MaxModelLen > 0 {
			f.Engine.MaxModelLen = o.MaxModelLen
		}
		f.Engine.MaxLoRAs, f.Engine.LoRASwapIn = o.MaxLoRAs, o.LoRASwapIn
	}
	f.Engine.Scheduler = sc.Model
	if sc.CachePressure > 0 {
		f.Engine.NumBlocks = t.CacheBlocks(sc.CachePressure, sc.Workers)
	}
	if err := f.Engine.Validate(); err != nil {
		return f, fmt.Errorf("scenario %q: %w: %w", sc.Name, ErrConfig, err)
	}
	return f, nil
}
