package des

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/engine"
)

// The tenant and class scenarios, on the admission simulator
// (RunFlow):
//
//   - capacity: one tenant at 3× what the fleet can take; the answered
//     rate is the capacity C every load below is a fraction of.
//   - flood: tenant b sends C/6 alone, then with tenant a sending 5× as
//     much (120 % of C together, both standard): b's TTFT p90 with the
//     flood against alone.
//   - classes: critical 20 %, standard 50 %, sheddable 30 % of the
//     traffic at 70–150 % of C: each class's TTFT p90, answered and shed;
//     the critical class's p90 at 130 % against 70 %.
//   - fairness: a at 2.5·C and b at 0.6·C, both over their share of one
//     class: their service in tokens per second and the largest gap
//     between their counters' growth while both had requests parked,
//     against the bound 2·U + K·M (ladder/flow.go).

// FlowPlan shapes the scenarios.
type FlowPlan struct {
	// Workers engines (the step model: vLLM V1's loop calibrated to
	// Llama-3.1-8B on an H100) of MaxNumSeqs each, behind a per-endpoint
	// cap of Cap and parking queues of 64.
	Workers, MaxNumSeqs, Cap int
	// Duration and Warmup of every run; Seeds are the runs of each point
	// (medians are reported).
	Duration, Warmup time.Duration
	Seeds            []int64
	// Loads are the class scenario's loads, in fractions of C.
	Loads []float64
}

// StandardFlowPlan is what `llbsim flow` runs.
func StandardFlowPlan() FlowPlan {
	return FlowPlan{Workers: 4, MaxNumSeqs: 64, Cap: 32, Duration: 120 * time.Second, Warmup: 20 * time.Second,
		Seeds: []int64{1, 2, 3}, Loads: []float64{0.7, 0.8, 1.0, 1.2, 1.3, 1.5}}
}

// FlowReport is the scenarios' outcome.
type FlowReport struct {
	Plan     FlowPlan
	Capacity float64
	// FloodAlone and FloodShared are tenant b's TTFT p90 (s) per seed;
	// FloodRatio their medians' ratio; FloodShedB b's requests shed in the
	// shared runs.
	FloodAlone, FloodShared []float64
	FloodRatio              float64
	FloodShedB              int
	// Classes are the class scenario's rows (first seed), by load.
	Classes []FlowClassRow
	// CriticalRatio is the critical class's TTFT p90 at 130 % over 70 %
	// (medians over the seeds).
	CriticalRatio float64
	// Fairness is the fairness scenario (first seed).
	FairA, FairB     FlowStreamResult
	FairGap, FairU   uint64
	FairK, FairM     int
	FairBound        uint64
	FairBacklogSecs  float64
	FairBacklogSpans int
}

// FlowClassRow is one load of the class scenario.
type FlowClassRow struct {
	Load    float64
	Classes [ladder.NumClasses]FlowStreamResult
}

func (p *FlowPlan) engine() engine.Config {
	e := engine.DefaultConfig()
	e.Scheduler = engine.SchedStep
	e.MaxNumSeqs = p.MaxNumSeqs
	return e
}

func flowStream(tenant string, c ladder.Class, rate float64) FlowStream {
	return FlowStream{Tenant: tenant, Class: c, Rate: rate, PromptMin: 200, PromptMax: 1000, OutputMin: 50, OutputMax: 250}
}

func (p *FlowPlan) run(seed int64, streams ...FlowStream) (*FlowResult, error) {
	return RunFlow(FlowConfig{Workers: p.Workers, Engine: p.engine(), Cap: p.Cap, Depth: ladder.MaxQueueDepthPerEP,
		MaxPark: 30 * time.Second, Streams: streams, Duration: p.Duration, Warmup: p.Warmup, Seed: seed})
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// RunFlowPlan runs every scenario of p.
func RunFlowPlan(p FlowPlan) (*FlowReport, error) {
	rep := &FlowReport{Plan: p}
	// A first guess (every slot turning over once a second), then 3× what
	// that run answered: the fleet is saturated, so it answers C.
	capRes, err := p.run(p.Seeds[0], flowStream("a", ladder.ClassStandard, float64(p.Workers*p.Cap)))
	if err != nil {
		return nil, err
	}
	if capRes, err = p.run(p.Seeds[0], flowStream("a", ladder.ClassStandard, 3*capRes.Throughput)); err != nil {
		return nil, err
	}
	c := capRes.Throughput
	rep.Capacity = c

	for _, seed := range p.Seeds {
		alone, err := p.run(seed, flowStream("b", ladder.ClassStandard, 1.2*c/6))
		if err != nil {
			return nil, err
		}
		shared, err := p.run(seed, flowStream("a", ladder.ClassStandard, 5*1.2*c/6), flowStream("b", ladder.ClassStandard, 1.2*c/6))
		if err != nil {
			return nil, err
		}
		rep.FloodAlone = append(rep.FloodAlone, alone.Streams[0].TTFT.P90)
		rep.FloodShared = append(rep.FloodShared, shared.Streams[1].TTFT.P90)
		rep.FloodShedB += shared.Streams[1].Shed
	}
	rep.FloodRatio = median(rep.FloodShared) / median(rep.FloodAlone)

	crit := map[float64][]float64{}
	for si, seed := range p.Seeds {
		for _, load := range p.Loads {
			r := load * c
			res, err := p.run(seed, flowStream("t", ladder.ClassCritical, 0.2*r), flowStream("t", ladder.ClassStandard, 0.5*r),
				flowStream("t", ladder.ClassSheddable, 0.3*r))
			if err != nil {
				return nil, err
			}
			crit[load] = append(crit[load], res.Streams[0].TTFT.P90)
			if si == 0 {
				rep.Classes = append(rep.Classes, FlowClassRow{Load: load, Classes: [ladder.NumClasses]FlowStreamResult{res.Streams[0], res.Streams[1], res.Streams[2]}})
			}
		}
	}
	if lo, hi := crit[0.7], crit[1.3]; len(lo) > 0 && len(hi) > 0 {
		rep.CriticalRatio = median(hi) / median(lo)
	}

	fair, err := p.run(p.Seeds[0], flowStream("a", ladder.ClassStandard, 2.5*c), flowStream("b", ladder.ClassStandard, 0.6*c))
	if err != nil {
		return nil, err
	}
	ci := ladder.ClassStandard.Index()
	rep.FairA, rep.FairB = fair.Streams[0], fair.Streams[1]
	rep.FairGap, rep.FairU, rep.FairK, rep.FairM = fair.MaxGap[ci], uint64(fair.U), fair.MaxInflight, fair.MaxOutput
	rep.FairBound = 2*rep.FairU + uint64(rep.FairK)*uint64(rep.FairM)
	rep.FairBacklogSecs, rep.FairBacklogSpans = fair.BacklogSecondsTotal, fair.BacklogIntervals
	return rep, nil
}

// Markdown renders the report.
func (r *FlowReport) Markdown() string {
	var b strings.Builder
	p := &r.Plan
	fmt.Fprintf(&b, "Fleet: %d workers (step model), max-num-seqs %d, cap %d per endpoint (critical headroom 25 %%), queues 64, park 30 s; %v runs, %v warm-up, seeds %v.\n\n",
		p.Workers, p.MaxNumSeqs, p.Cap, p.Duration, p.Warmup, p.Seeds)
	fmt.Fprintf(&b, "Capacity C = %.1f requests/s (prompts 200–1000 tokens, outputs 50–250).\n\n", r.Capacity)
	fmt.Fprintf(&b, "**Flood** (b at C/6 = its share ÷ 3; a at 5× b, 120 %% of C together):\n\n| seed | b alone TTFT p90 | b with the flood | ratio |\n|---|---|---|---|\n")
	for i := range r.FloodAlone {
		fmt.Fprintf(&b, "| %d | %.0f ms | %.0f ms | %.2f |\n", p.Seeds[i], 1000*r.FloodAlone[i], 1000*r.FloodShared[i], r.FloodShared[i]/r.FloodAlone[i])
	}
	fmt.Fprintf(&b, "\nMedian ratio **%.2f×** (target ≤ 1.3×); b's requests shed with the flood: %d.\n\n", r.FloodRatio, r.FloodShedB)
	fmt.Fprintf(&b, "**Classes** (critical 20 %%, standard 50 %%, sheddable 30 %%; seed %d):\n\n| load | critical p90 | answered / shed | standard p90 | answered / shed | sheddable p90 | answered / shed |\n|---|---|---|---|---|---|---|\n", p.Seeds[0])
	for _, row := range r.Classes {
		fmt.Fprintf(&b, "| %.0f %% |", 100*row.Load)
		for _, c := range row.Classes {
			fmt.Fprintf(&b, " %.0f ms | %d / %d |", 1000*c.TTFT.P90, c.Answered, c.Shed+c.TimedOut)
		}
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "\nCritical TTFT p90 at 130 %% over 70 %% (median of the seeds): **%.2f×** (target ≤ 1.2×).\n\n", r.CriticalRatio)
	fmt.Fprintf(&b, "**Fairness** (a at 2.5·C and b at 0.6·C, one class): a served %.0f tokens/s, b %.0f. Both had requests parked for %.1f s over %d spans; the largest gap between their counters' growth over such a span was **%d tokens**, against the bound 2·U + K·M = 2·%d + %d·%d = %d.\n",
		r.FairA.TokensPerSec, r.FairB.TokensPerSec, r.FairBacklogSecs, r.FairBacklogSpans, r.FairGap, r.FairU, r.FairK, r.FairM, r.FairBound)
	return b.String()
}
