package des

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/saturation"
	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/workload"
)

// tinyPlan is a plan small enough for a unit test.
func tinyPlan(t testing.TB) Plan {
	return Plan{
		Scenarios: []Scenario{{
			Name:          "tiny",
			Trace:         TraceConfig{Spec: workload.SharedPrefix{Groups: 12, PromptsPerGroup: 2, SystemTokens: 64, QuestionTokens: 8, OutputTokens: 16}, Requests: 150, Seed: 1},
			Workers:       3,
			CachePressure: 1.5,
			Sweeps:        true,
		}},
		Strategies: []strategy.Strategy{mustStrategy(t, strategy.NameRR), mustStrategy(t, strategy.NameHard)},
		Loads:      []float64{0.5, 1},
		Reference:  strategy.NameHard,
		Factors:    []uint32{125, 200},
		Lambdas:    []uint32{32},
		Warmup:     0.2,
		Saturation: SaturationConfig{Precision: 0.25, Criterion: saturation.Criterion{MaxWaitP90: 500 * time.Millisecond}},
	}
}

// reversed runs the specs back to front: the outcome must not depend on
// the order an executor runs them in.
func reversed(specs []RunSpec) ([]*Result, error) {
	out := make([]*Result, len(specs))
	for i := len(specs) - 1; i >= 0; i-- {
		r, err := Run(specs[i].Trace, specs[i].Config)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

func TestPlanExecute_RunsEveryGroupAndIgnoresTheExecutorsOrder(t *testing.T) {
	p := tinyPlan(t)
	a, err := p.Execute(SerialExecutor, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Execute(reversed, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("serial and reversed executors gave different outcomes")
	}
	so := a[0]
	count := map[string]int{}
	for _, r := range so.Runs {
		count[r.Group+"/"+r.Result.Strategy]++
		if want := r.Load * so.Saturation.Rate; math.Abs(r.Result.Rate-want) > 1e-9 {
			t.Fatalf("%s at load %g ran at %g req/s; want %g", r.Result.Strategy, r.Load, r.Result.Rate, want)
		}
	}
	want := map[string]int{
		"strategies/rr": 2, "strategies/hard": 2,
		"epsilon/hard@125": 2, "epsilon/hard@200": 2, "epsilon/adaptive": 2,
		"lambda/soft@32": 2, "lambda/adaptive-soft": 2,
	}
	if !reflect.DeepEqual(count, want) {
		t.Fatalf("runs %v; want %v", count, want)
	}
	if so.Warmup != 30 || so.Requests != 150 {
		t.Fatalf("warm-up %d of %d requests; want 30 of 150", so.Warmup, so.Requests)
	}
	// NumBlocks = floor(working set / (pressure · workers)).
	if want := int(float64(so.DistinctBlocks) / (1.5 * 3)); so.Fleet.Engine.NumBlocks != want || so.Pressure != float64(so.DistinctBlocks)/float64(3*want) {
		t.Fatalf("%d blocks per worker, pressure %.2f (working set %d); want %d", so.Fleet.Engine.NumBlocks, so.Pressure, so.DistinctBlocks, want)
	}
	if so.PooledHitRate <= 0 || so.PooledHitRate > so.OracleHitRate || so.PooledLoad != 1 {
		t.Fatalf("pooled bound %v at load %v (oracle %v)", so.PooledHitRate, so.PooledLoad, so.OracleHitRate)
	}
}

func TestPlanValidate_ReportsEveryProblem(t *testing.T) {
	p := tinyPlan(t)
	p.Scenarios = append(p.Scenarios, Scenario{Name: "tiny", Workers: 40, CachePressure: -1})
	p.Reference = "none"
	p.Loads = []float64{0}
	p.Factors = []uint32{50}
	p.Lambdas = []uint32{0}
	p.Warmup = 1
	err := p.Validate()
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("got %v; want ErrConfig", err)
	}
	for _, want := range []string{"repeated", "40 workers", "cache pressure", "reference", "load 0", "factor 50", "lambda 0", "warmup"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestStandardPlan_IsValidAndNamesTheTargetScenarios(t *testing.T) {
	p := StandardPlan(3000, 1)
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range p.Scenarios {
		names = append(names, s.Name)
	}
	if !slices.Contains(names, ScenarioSharedPrefix) || !slices.Contains(names, ScenarioHotPrefix) {
		t.Fatalf("scenarios %v lack the targets' scenarios", names)
	}
	if !slices.Contains(p.Loads, 0.7) || p.Loads[0] != 0.3 || p.Loads[len(p.Loads)-1] != 1.1 {
		t.Fatalf("loads %v; want 30%%..110%% including 70%%", p.Loads)
	}
}

func TestDescribe_NamesTheWorkloadAndWorker(t *testing.T) {
	for _, tc := range []struct {
		give workload.Spec
		want string
	}{
		{workload.SharedPrefix{Groups: 64, PromptsPerGroup: 16}, "64 groups × 16 questions"},
		{workload.HotPrefix{Clients: 50}, "50 clients"},
		{workload.MultiTurn{Conversations: 3}, "3 conversations"},
		{workload.Mix{Parts: []workload.Part{{Weight: 2, Spec: workload.HotPrefix{Clients: 1}}}}, "mix: 2× (hot prefix"},
	} {
		if got := DescribeWorkload(tc.give); !strings.Contains(got, tc.want) {
			t.Errorf("got %q; want it to contain %q", got, tc.want)
		}
	}
	tr := hotTrace(t, 1, 1)
	if got := DescribeWorker(FleetFor(tr, 1, 77).Engine); !strings.Contains(got, "77 cache blocks of 16 tokens") {
		t.Errorf("got %q", got)
	}
}

func TestPlanExecute_KnownSaturationSkipsTheSearchAndGivesTheSameRuns(t *testing.T) {
	p := tinyPlan(t)
	searched, err := p.Execute(SerialExecutor, nil)
	if err != nil {
		t.Fatal(err)
	}
	q := tinyPlan(t)
	q.Strategies = []strategy.Strategy{mustStrategy(t, strategy.NameRR)} // no reference: every rate is known
	q.Factors, q.Lambdas = nil, nil
	q.Scenarios[0].Sweeps = false
	q.Known = map[string]saturation.Outcome{"tiny": searched[0].Saturation}
	var calls int
	counting := func(specs []RunSpec) ([]*Result, error) {
		for _, s := range specs {
			if s.Group == GroupSaturation {
				t.Fatalf("a saturation probe at %v req/s ran with a known rate", s.Config.Rate)
			}
		}
		calls++
		return SerialExecutor(specs)
	}
	known, err := q.Execute(counting, nil)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 1 || known[0].Saturation.Rate != searched[0].Saturation.Rate {
		t.Fatalf("%d executor calls, rate %v; want 1 call at %v", calls, known[0].Saturation.Rate, searched[0].Saturation.Rate)
	}
	for _, want := range searched[0].Runs {
		if want.Result.Strategy != strategy.NameRR || want.Group != GroupStrategies {
			continue
		}
		i := slices.IndexFunc(known[0].Runs, func(r RunOutcome) bool { return r.Load == want.Load })
		if i < 0 || !reflect.DeepEqual(known[0].Runs[i].Result, want.Result) {
			t.Fatalf("rr at %v: the run with a known rate differs from the searched one", want.Load)
		}
	}
	q.Known["tiny"] = saturation.Outcome{}
	if err := q.Validate(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "known saturation rate") {
		t.Fatalf("a zero known rate: %v", err)
	}
}
