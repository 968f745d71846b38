package harness

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/workload"
)

func TestScenarioPrepare_SizesTheCachesFromTheWorkingSet(t *testing.T) {
	sc := Scenario{
		Name: "sp", Workload: workload.SharedPrefix{Groups: 8, PromptsPerGroup: 4, SystemTokens: 256, QuestionTokens: 32, OutputTokens: 16},
		Requests: 200, Seed: 1, Warmup: 0.25, CachePressure: 1.5,
		Fleet: FleetConfig{Workers: 4, Engine: smallEngine(1, 8)},
	}
	tr, info, err := sc.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	want := max(tr.DistinctBlocks*2/(3*4), tr.MaxBlocks)
	if got := info.Scenario.Fleet.Engine.NumBlocks; got < want-1 || got > want+1 {
		t.Fatalf("cache %d blocks per worker; want about %d (working set %d / (1.5 × 4))", got, want, tr.DistinctBlocks)
	}
	if info.Pressure < 1.45 || info.Pressure > 1.55 || info.Warmup != 50 {
		t.Fatalf("pressure %v warm-up %d; want 1.5 and 50", info.Pressure, info.Warmup)
	}
	if sc.Fleet.Engine.NumBlocks != 1 {
		t.Fatal("Prepare changed the caller's scenario")
	}
}

func TestBench_ValidateReportsEveryProblem(t *testing.T) {
	b := Bench{Rates: []float64{1}, Loads: []float64{0.5, -1}, Concurrency: []int{2, 0}, Duration: -time.Second}
	err := b.Validate()
	if !errors.Is(err, ErrConfig) {
		t.Fatalf("err %v; want ErrConfig", err)
	}
	for _, want := range []string{"no strategies", "give one of", "rate or load -1", "concurrency 0", "duration", "work dir", "no llbd", "scenario without a name"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

func TestBench_DurationSendsThePrefixArrivingInTime(t *testing.T) {
	rr, _ := strategy.ByName(strategy.NameRR)
	b := Bench{
		Scenario: Scenario{
			Name: "sp", Workload: workload.SharedPrefix{Options: workload.Options{Stream: true}, Groups: 2, PromptsPerGroup: 2, SystemTokens: 64, QuestionTokens: 8, OutputTokens: 4},
			Requests: 500, Seed: 1, Warmup: 0.2,
			Fleet: FleetConfig{Workers: 2, BaseIP: "127.0.9.2", Engine: smallEngine(2000, 32)},
		},
		Strategies: []strategy.Strategy{rr}, Rates: []float64{20, 40}, Duration: time.Second,
		Daemon: DaemonSource{Bin: llbdBin(t)}, WorkDir: t.TempDir(),
	}
	var labels []string
	b.Events.RunStart = func(label string, total int) { labels = append(labels, label) }
	out, err := b.Execute(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Runs) != 2 || len(labels) != 2 {
		t.Fatalf("%d runs, %d announced; want 2", len(out.Runs), len(labels))
	}
	for i, want := range []int{20, 40} { // one model second of arrivals at each rate
		r := out.Runs[i].Result
		if got := r.Requests + r.Warmup; got != want || r.Warmup != want/5 || r.Completed != r.Requests {
			t.Fatalf("rate %v: %d requests (%d warm-up, %d completed); want %d, %d warm-up, all completed", r.Rate, got, r.Warmup, r.Completed, want, want/5)
		}
	}
}

func TestDefaultStrategyNames_AreTheIssueSevenSet(t *testing.T) {
	got := DefaultStrategyNames()
	want := []string{"rr", "chwbl", "tier1", "off", "hard", "soft", "adaptive", "adaptive-soft"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q; want %q", got, want)
	}
	if _, err := strategy.ByNames(got); err != nil {
		t.Fatal(err)
	}
}
