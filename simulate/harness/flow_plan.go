package harness

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/saturation"
	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/workload"
)

// The tenant and class scenarios of the admission simulator (des.FlowPlan)
// through the real daemon: a P/D rule with a per-prefill-endpoint cap,
// parking queues and llbd's default critical headroom, in front of prefill
// workers (the bottleneck: long prompts) and decode workers that never
// queue (FleetConfig.DecodeWorkers); tenants and classes named by headers.
// llbd's cap holds a request on its prefill endpoint for the prefill leg,
// so it bounds what the prefill engines run: the admission gate is what
// keeps their TTFT in check, as a P/D operator sets it.
//
//   - capacity: a closed loop of twice the slots' clients; its answered
//     rate is the capacity C every load is a fraction of.
//   - flood: tenant b at 0.2·C alone, then with tenant a sending 5× as much
//     (120 % of C together, both standard) — the same b requests at the
//     same moments: b's TTFT p90 with the flood against alone.
//   - classes: critical 20 %, standard 50 %, sheddable 30 % of one
//     tenant's traffic at each load: each class's TTFT p90, answered and
//     refused; the critical class's p90 at 130 % against 70 %.
//   - fairness: a at 2.5·C and b at 0.6·C, both over their half of one
//     class: the rate each is answered at (the requests are alike, so
//     the service in tokens is in the same proportion).

// FlowPlan shapes the scenarios.
type FlowPlan struct {
	// Fleet is the prefill workers and their decode workers.
	Fleet FleetConfig
	// Cap is the per-prefill-endpoint in-flight cap, QueueDepth the
	// parking queue per endpoint and MaxPark the park deadline (model
	// time).
	Cap, QueueDepth int
	MaxPark         time.Duration
	// Spec is the workload.
	Spec workload.Spec
	// Duration is each run's length in model time at its rate; the first
	// WarmupFrac of its requests are left out of the measurement.
	Duration   time.Duration
	WarmupFrac float64
	// Seeds are the flood's runs (medians are reported); the classes run
	// on the first.
	Seeds []uint64
	// Loads are the class scenario's loads, in fractions of C.
	Loads []float64
	// Fairness runs the fairness scenario (first seed).
	Fairness bool
	// Daemon and WorkDir are the runs' (RunConfig's).
	Daemon  DaemonSource
	WorkDir string
	// Progress, when set, hears about each run as it starts.
	Progress func(what string)
}

// FlowStrategy is the rule the scenarios run: P/D, Tier 2 (min-load).
var FlowStrategy = strategy.Strategy{Name: "pd-flow", Shape: strategy.ShapePD, Selector: ladder.SelRR}

// StandardFlowPlan is what `llbsim flow --harness` runs: two prefill
// workers of max-num-seqs 64 behind a cap of 12 (at cap plus headroom the
// latency model slows a prefill by a fifth), 4096-token prompts and
// 16-token answers, at a quarter of real time (the shared machine's
// scheduling delays shrink fourfold in model time).
func StandardFlowPlan() FlowPlan {
	return FlowPlan{
		Fleet: FleetConfig{Workers: 2, Engine: FlowEngine(4)}, Cap: 12, QueueDepth: 64, MaxPark: 30 * time.Second,
		Spec:     FlowSpec(),
		Duration: 30 * time.Second, WarmupFrac: 0.15, Seeds: []uint64{1, 2, 3},
		Loads: []float64{0.7, 1.0, 1.3, 1.5}, Fairness: true,
	}
}

// FlowSpec is the scenarios' workload: unshared 4096-token prompts
// (completions, streamed), 16-token answers.
func FlowSpec() workload.Spec {
	return workload.SharedPrefix{Options: workload.Options{Stream: true}, Groups: 1 << 20, PromptsPerGroup: 1,
		SystemTokens: 4032, QuestionTokens: 64, OutputTokens: 16}
}

// FlowEngine is the prefill workers' engine: the default latency model (8B
// on an H100) at timeScale (1 is real time), max-num-seqs 64.
func FlowEngine(timeScale float64) engine.Config {
	e := engine.DefaultConfig()
	e.MaxNumSeqs = 64
	e.Latency.TimeScale = timeScale
	return e
}

// FlowReport is the scenarios' outcome.
type FlowReport struct {
	Plan FlowPlan
	// Capacity is C (answered requests per model second).
	Capacity float64
	// FloodAlone and FloodShared are tenant b's TTFT p90 (model s) per
	// seed, FloodRatio their medians' ratio; FloodB and FloodA the first
	// seed's shared run, by tenant.
	FloodAlone, FloodShared []float64
	FloodRatio              float64
	FloodA, FloodB          FlowStreamResult
	// Classes are the class scenario's rows, by load.
	Classes []FlowClassRow
	// CriticalRatio is the critical class's TTFT p90 at 130 % over 70 %.
	CriticalRatio float64
	// FairA and FairB are the fairness scenario's tenants (zero without
	// it).
	FairA, FairB FlowStreamResult
	// Wall is the plan's wall time.
	Wall time.Duration
}

// FlowClassRow is one load of the class scenario.
type FlowClassRow struct {
	Load    float64
	Classes [ladder.NumClasses]FlowStreamResult
}

func (p *FlowPlan) base() RunConfig {
	f := p.Fleet
	f.PDSameWorkers = false
	return RunConfig{
		Strategy: FlowStrategy, Fleet: f, Daemon: p.Daemon, WorkDir: p.WorkDir,
		RuleArgs: map[string]any{
			"fc_prefill_max_inflight": p.Cap, "fc_max_queue_depth": p.QueueDepth,
			"fc_max_queue_wait_ms": max(1, int64(float64(p.MaxPark.Milliseconds())*f.TimeScale())),
		},
		// Parked requests wait up to MaxPark; nothing else should take
		// long.
		RequestTimeout: time.Duration(float64(p.MaxPark+time.Minute) * f.TimeScale()),
	}
}

// trace is a trace of rate·Duration requests (at least 50).
func (p *FlowPlan) trace(rate float64, seed uint64) (*workload.Trace, int, error) {
	n := max(50, int(math.Round(rate*p.Duration.Seconds())))
	tr, err := workload.NewTrace(workload.TraceConfig{Spec: p.Spec, Requests: n, Seed: seed, BlockSize: p.Fleet.Engine.BlockSize})
	if err != nil {
		return nil, 0, fmt.Errorf("flow trace: %w", err)
	}
	return tr, int(p.WarmupFrac * float64(n)), nil
}

func (p *FlowPlan) progress(format string, args ...any) {
	if p.Progress != nil {
		p.Progress(fmt.Sprintf(format, args...))
	}
}

// Capacity measures C: a closed loop of twice the cap's slots.
func (p *FlowPlan) Capacity(ctx context.Context) (float64, error) {
	eng := p.Fleet.Engine
	eng.MaxNumSeqs = min(eng.MaxNumSeqs, p.Cap)
	tr, warm, err := p.trace(1, p.Seeds[0])
	if err != nil {
		return 0, err
	}
	guess := saturation.CapacityEstimate(tr, p.Fleet.Workers, &eng, 1)
	if tr, warm, err = p.trace(guess, p.Seeds[0]); err != nil {
		return 0, err
	}
	c := p.base()
	c.Trace, c.Warmup, c.Concurrency = tr, warm, 2*p.Cap*p.Fleet.Workers
	p.progress("capacity: closed loop of %d clients, %d requests", c.Concurrency, len(tr.Requests))
	res, err := Run(ctx, c)
	if err != nil {
		return 0, fmt.Errorf("flow capacity: %w", err)
	}
	if res.Completed < res.Requests*9/10 {
		return 0, fmt.Errorf("flow capacity: %d of %d answered (errors %v): %w", res.Completed, res.Requests, res.Errors, ErrRun)
	}
	return res.Throughput, nil
}

// Flood runs the flood scenario on one seed at capacity c: b's result
// alone, and a's and b's together.
func (p *FlowPlan) Flood(ctx context.Context, c float64, seed uint64) (alone, a, b FlowStreamResult, err error) {
	rate := 1.2 * c
	tr, warm, err := p.trace(rate, seed)
	if err != nil {
		return alone, a, b, err
	}
	streams := []FlowStream{{Tenant: "a", Class: ladder.ClassStandard, Weight: 5}, {Tenant: "b", Class: ladder.ClassStandard, Weight: 1}}
	ft, err := DealTrace(tr, streams, seed)
	if err != nil {
		return alone, a, b, err
	}
	rc := p.base()
	rc.Rate = rate
	bOnly, bWarm := ft.Only(warm, 1)
	rc.Warmup = bWarm
	p.progress("flood seed %d: b alone, %d requests at %.1f/s", seed, len(bOnly.Trace.Requests), rate/6)
	_, per, err := RunFlow(ctx, rc, bOnly, len(streams))
	if err != nil {
		return alone, a, b, fmt.Errorf("flood alone: %w", err)
	}
	alone = per[1]
	rc.Warmup = warm
	p.progress("flood seed %d: a and b, %d requests at %.1f/s", seed, len(tr.Requests), rate)
	if _, per, err = RunFlow(ctx, rc, ft, len(streams)); err != nil {
		return alone, a, b, fmt.Errorf("flood shared: %w", err)
	}
	return alone, per[0], per[1], nil
}

// ClassesAt runs the class scenario at load·c on one seed.
func (p *FlowPlan) ClassesAt(ctx context.Context, c, load float64, seed uint64) (FlowClassRow, error) {
	rate := load * c
	row := FlowClassRow{Load: load}
	tr, warm, err := p.trace(rate, seed)
	if err != nil {
		return row, err
	}
	streams := []FlowStream{{Tenant: "t", Class: ladder.ClassCritical, Weight: 0.2}, {Tenant: "t", Class: ladder.ClassStandard, Weight: 0.5},
		{Tenant: "t", Class: ladder.ClassSheddable, Weight: 0.3}}
	ft, err := DealTrace(tr, streams, seed)
	if err != nil {
		return row, err
	}
	rc := p.base()
	rc.Rate, rc.Warmup = rate, warm
	p.progress("classes at %.0f %%: %d requests at %.1f/s", 100*load, len(tr.Requests), rate)
	_, per, err := RunFlow(ctx, rc, ft, len(streams))
	if err != nil {
		return row, fmt.Errorf("classes at %.0f %%: %w", 100*load, err)
	}
	for i, s := range streams {
		row.Classes[s.Class.Index()] = per[i]
	}
	return row, nil
}

// Fair runs the fairness scenario on one seed at capacity c: a at 2.5·c
// and b at 0.6·c, both standard.
func (p *FlowPlan) Fair(ctx context.Context, c float64, seed uint64) (a, b FlowStreamResult, err error) {
	rate := 3.1 * c
	tr, warm, err := p.trace(rate, seed)
	if err != nil {
		return a, b, err
	}
	streams := []FlowStream{{Tenant: "a", Class: ladder.ClassStandard, Weight: 2.5}, {Tenant: "b", Class: ladder.ClassStandard, Weight: 0.6}}
	ft, err := DealTrace(tr, streams, seed)
	if err != nil {
		return a, b, err
	}
	rc := p.base()
	rc.Rate, rc.Warmup = rate, warm
	p.progress("fairness: %d requests at %.1f/s", len(tr.Requests), rate)
	_, per, err := RunFlow(ctx, rc, ft, len(streams))
	if err != nil {
		return a, b, fmt.Errorf("fairness: %w", err)
	}
	return per[0], per[1], nil
}

// RunFlowPlan runs every scenario of p.
func RunFlowPlan(ctx context.Context, p FlowPlan) (*FlowReport, error) {
	start := time.Now()
	if len(p.Seeds) == 0 {
		return nil, fmt.Errorf("flow plan without seeds: %w", ErrConfig)
	}
	rep := &FlowReport{Plan: p}
	c, err := p.Capacity(ctx)
	if err != nil {
		return nil, err
	}
	rep.Capacity = c
	for i, seed := range p.Seeds {
		alone, a, b, err := p.Flood(ctx, c, seed)
		if err != nil {
			return nil, err
		}
		rep.FloodAlone, rep.FloodShared = append(rep.FloodAlone, alone.TTFT.P90), append(rep.FloodShared, b.TTFT.P90)
		if i == 0 {
			rep.FloodA, rep.FloodB = a, b
		}
	}
	rep.FloodRatio = medianOf(rep.FloodShared) / medianOf(rep.FloodAlone)
	var lo, hi float64
	for _, load := range p.Loads {
		row, err := p.ClassesAt(ctx, c, load, p.Seeds[0])
		if err != nil {
			return nil, err
		}
		rep.Classes = append(rep.Classes, row)
		switch crit := row.Classes[ladder.ClassCritical.Index()].TTFT.P90; load {
		case 0.7:
			lo = crit
		case 1.3:
			hi = crit
		}
	}
	if lo > 0 {
		rep.CriticalRatio = hi / lo
	}
	if p.Fairness {
		if rep.FairA, rep.FairB, err = p.Fair(ctx, c, p.Seeds[0]); err != nil {
			return nil, err
		}
	}
	rep.Wall = time.Since(start)
	return rep, nil
}

func medianOf(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// Markdown renders the report.
func (r *FlowReport) Markdown() string {
	var b strings.Builder
	p := &r.Plan
	e := &p.Fleet.Engine
	fmt.Fprintf(&b, "Fleet: %d simulated vLLM prefill workers (max-num-seqs %d, time scale %g) and as many decode workers behind llbd, a P/D rule with cap %d per prefill endpoint (critical headroom 25 %%), queues %d, park %v; %v runs (model time), the first %.0f %% of each left out; seeds %v.\n\n",
		p.Fleet.Workers, e.MaxNumSeqs, e.Latency.TimeScale, p.Cap, p.QueueDepth, p.MaxPark, p.Duration, 100*p.WarmupFrac, p.Seeds)
	fmt.Fprintf(&b, "Capacity C = %.1f requests/s.\n\n", r.Capacity)
	fmt.Fprintf(&b, "**Flood** (b at 0.2·C; a at 5× b, 120 %% of C together, both standard; the same b requests alone and with the flood):\n\n| seed | b alone TTFT p90 | b with the flood | ratio |\n|---|---|---|---|\n")
	for i := range r.FloodAlone {
		fmt.Fprintf(&b, "| %d | %.0f ms | %.0f ms | %.2f |\n", p.Seeds[i], 1000*r.FloodAlone[i], 1000*r.FloodShared[i], r.FloodShared[i]/r.FloodAlone[i])
	}
	fmt.Fprintf(&b, "\nMedian ratio **%.2f×** (target ≤ 1.3×). Seed %d with the flood: a answered %d of %d (%d parked, %d refused), b %d of %d (%d parked, %d refused).\n\n",
		r.FloodRatio, p.Seeds[0], r.FloodA.Answered, r.FloodA.Requests, r.FloodA.Parked, r.FloodA.Shed+r.FloodA.TimedOut,
		r.FloodB.Answered, r.FloodB.Requests, r.FloodB.Parked, r.FloodB.Shed+r.FloodB.TimedOut)
	fmt.Fprintf(&b, "**Classes** (one tenant: critical 20 %%, standard 50 %%, sheddable 30 %%; seed %d):\n\n| load | critical p90 | answered / refused | standard p90 | answered / refused | sheddable p90 | answered / refused |\n|---|---|---|---|---|---|---|\n", p.Seeds[0])
	for _, row := range r.Classes {
		fmt.Fprintf(&b, "| %.0f %% |", 100*row.Load)
		for _, c := range row.Classes {
			fmt.Fprintf(&b, " %.0f ms | %d / %d |", 1000*c.TTFT.P90, c.Answered, c.Shed+c.TimedOut+c.Failed)
		}
		b.WriteByte('\n')
	}
	if r.CriticalRatio > 0 {
		fmt.Fprintf(&b, "\nCritical TTFT p90 at 130 %% over 70 %%: **%.2f×** (target ≤ 1.2×).\n", r.CriticalRatio)
	}
	if fa, fb := r.FairA, r.FairB; fa.Requests > 0 {
		fmt.Fprintf(&b, "\n**Fairness** (a at 2.5·C and b at 0.6·C, one class; seed %d): a answered %.1f requests/s (%d of %d, %d refused, %d timed out), b %.1f/s (%d of %d, %d refused, %d timed out): b's share of the service **%.2f** (an even split is 0.50).\n",
			p.Seeds[0], fa.Throughput, fa.Answered, fa.Requests, fa.Shed, fa.TimedOut, fb.Throughput, fb.Answered, fb.Requests, fb.Shed, fb.TimedOut, fb.Throughput/(fa.Throughput+fb.Throughput))
	}
	fmt.Fprintf(&b, "\n(%v of wall time)\n", r.Wall.Round(time.Second))
	return b.String()
}
