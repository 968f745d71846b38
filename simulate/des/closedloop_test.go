package des

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/peers"
	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/workload"
)

// In a closed loop of c clients exactly c requests are in flight until the
// trace runs out: the first c arrive at zero, and every later request
// arrives the moment an earlier one completes.
func TestRun_ClosedLoopKeepsConcurrencyInFlight(t *testing.T) {
	tr := sharedTrace(t, 60, 5)
	for _, c := range []int{1, 3} {
		res := run(t, tr, strategy.NameHard, 2, 64, 0, func(cfg *RunConfig) { cfg.Concurrency = c })
		if res.Concurrency != c || res.Rate != 0 {
			t.Fatalf("c=%d: result says concurrency %d rate %v", c, res.Concurrency, res.Rate)
		}
		if len(res.Routes) != len(tr.Requests) {
			t.Fatalf("c=%d: %d routes for %d requests", c, len(res.Routes), len(tr.Requests))
		}
		// The fleet's time-averaged in-flight requests add up to c while
		// the trace lasts (a little less over the drain at the end).
		var active float64
		for _, w := range res.PerWorker {
			active += w.MeanActive
		}
		if active > float64(c)+1e-9 || active < float64(c)*0.9 {
			t.Fatalf("c=%d: %.3f requests in flight on average; want about %d", c, active, c)
		}
	}
}

// With one client every request waits for the previous one: no two ever
// overlap, so no engine ever queues and nothing but cache state differs
// between the laws.
func TestRun_ClosedLoopOfOneNeverOverlaps(t *testing.T) {
	tr := sharedTrace(t, 40, 6)
	res := run(t, tr, strategy.NameHeadroom, 2, 64, 0, func(cfg *RunConfig) { cfg.Concurrency = 1 })
	for i, w := range res.PerWorker {
		if w.MaxRunning > 1 || w.MaxWaiting > 0 {
			t.Fatalf("worker %d ran %d at once and queued %d; want one request at a time", i, w.MaxRunning, w.MaxWaiting)
		}
	}
	if res.Spills != 0 {
		t.Fatalf("%d spills with one request in flight", res.Spills)
	}
}

// Issue 18's shape in miniature: two workers, a few prefix groups and
// four clients. LoxiLB's hard law caps an endpoint at ceil(1.75·L/2) with
// L the other requests in flight, so two requests on the holder of a
// prefix already "overload" it and relief spills copies; the headroom law
// keeps them with their prefix (K = 48/9 = 5 requests fit each cache).
func TestHeadroom_DoesNotSpillAtLightLoadWhereHardDoes(t *testing.T) {
	tr, err := NewTrace(TraceConfig{
		Name:     "light",
		Spec:     workload.SharedPrefix{Groups: 4, PromptsPerGroup: 4, SystemTokens: 128, QuestionTokens: 16, OutputTokens: 16},
		Requests: 200, Seed: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	res := map[string]*Result{}
	for _, s := range []string{strategy.NameHard, strategy.NameHeadroom} {
		res[s] = run(t, tr, s, 2, 48, 0, func(cfg *RunConfig) { cfg.Concurrency = 4; cfg.Warmup = 40 })
	}
	hard, room := res[strategy.NameHard], res[strategy.NameHeadroom]
	if hard.Spills == 0 {
		t.Fatal("hard never spilled; the scenario does not reproduce issue 18")
	}
	if room.Spills >= hard.Spills || room.HitRate <= hard.HitRate {
		t.Fatalf("headroom: %d spills, hit %.3f; hard: %d spills, hit %.3f; want fewer spills and more hits",
			room.Spills, room.HitRate, hard.Spills, hard.HitRate)
	}
}

// With ScrapeEvery the views carry the queue depth of the last scrape on
// the grid, not the engine's current one.
func TestQueued_HoldsTheLastScrape(t *testing.T) {
	tr := hotTrace(t, 1, 2)
	s, err := newSim(tr, RunConfig{Fleet: FleetFor(tr, 1, 64), Strategy: mustStrategy(t, strategy.NameRR), Rate: 1, ScrapeEvery: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w := &s.workers[0]
	for _, tc := range []struct {
		now     time.Duration
		waiting int
		want    uint32
	}{
		{0, 3, 3},                // first look: a scrape
		{9 * time.Second, 0, 3},  // same interval: stale
		{10 * time.Second, 1, 1}, // next grid point
		{25 * time.Second, 7, 7}, // a later one
		{29 * time.Second, 0, 7},
	} {
		if got := s.queued(w, tc.now, tc.waiting); got != tc.want {
			t.Fatalf("at %v with %d waiting: %d; want %d", tc.now, tc.waiting, got, tc.want)
		}
	}
	exact, err := newSim(tr, RunConfig{Fleet: FleetFor(tr, 1, 64), Strategy: mustStrategy(t, strategy.NameRR), Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	if got := exact.queued(&exact.workers[0], 9*time.Second, 5); got != 5 {
		t.Fatalf("without ScrapeEvery: %d; want the exact 5", got)
	}
}

func TestRun_RejectsBadClosedLoopConfigs(t *testing.T) {
	tr := hotTrace(t, 4, 2)
	for _, edit := range []func(*RunConfig){
		func(c *RunConfig) { c.Concurrency = -1 },
		func(c *RunConfig) { c.ScrapeEvery = -time.Second },
	} {
		cfg := RunConfig{Fleet: FleetFor(tr, 2, 64), Strategy: mustStrategy(t, strategy.NameHard), Rate: 1}
		edit(&cfg)
		if _, err := Run(tr, cfg); !errors.Is(err, ErrConfig) {
			t.Fatalf("got %v; want ErrConfig", err)
		}
	}
	// A closed loop needs no rate.
	cfg := RunConfig{Fleet: FleetFor(tr, 2, 64), Strategy: mustStrategy(t, strategy.NameHard), Concurrency: 2}
	if _, err := Run(tr, cfg); err != nil {
		t.Fatalf("closed loop without a rate: %v", err)
	}
}

func TestPlanExecute_ClosedLoopScenarioRunsEveryLevel(t *testing.T) {
	p := tinyPlan(t)
	p.Scenarios[0].Concurrency = []int{1, 4}
	p.Scenarios[0].Sweeps = true // ignored for a closed loop
	outs, err := p.Execute(SerialExecutor, nil)
	if err != nil {
		t.Fatal(err)
	}
	so := outs[0]
	if so.Saturation.Rate != 0 || len(so.Saturation.Probes) != 0 {
		t.Fatalf("a closed-loop scenario searched saturation: %+v", so.Saturation)
	}
	var got []string
	for _, r := range so.Runs {
		if r.Group != GroupStrategies || r.Load != 0 || r.Result.Concurrency != r.Concurrency {
			t.Fatalf("run %+v", r)
		}
		got = append(got, r.Result.Strategy+"@"+string(rune('0'+r.Concurrency)))
	}
	if want := []string{"rr@1", "rr@4", "hard@1", "hard@4"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("runs %v; want %v", got, want)
	}
	p.Scenarios[0].Concurrency = []int{0}
	if _, err := p.Execute(SerialExecutor, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("concurrency 0: %v; want ErrConfig", err)
	}
}

// A metrics-reading peer (llm-d) sees the engines' metrics as its endpoint
// picker last refreshed them, every peers.MetricsRefresh, when llb's own
// view is a scrape's; exactly when llb's is exact.
func TestPeerMetrics_HoldTheLastRefresh(t *testing.T) {
	tr := hotTrace(t, 1, 2)
	s, err := newSim(tr, RunConfig{Fleet: FleetFor(tr, 1, 64), Strategy: mustStrategy(t, strategy.NameRR), Rate: 1, ScrapeEvery: DefaultScrape})
	if err != nil {
		t.Fatal(err)
	}
	v := s.peerMetrics(0, 10*time.Millisecond) // the first look refreshes
	if v.waiting != 0 || v.at != 0 {
		t.Fatalf("first look: %+v; want the idle engine's metrics at grid 0", *v)
	}
	v.waiting = 9 // stands for a queue the refresh saw, gone since
	if got := s.peerMetrics(0, 49*time.Millisecond).waiting; got != 9 {
		t.Fatalf("within the refresh interval: %d waiting; want the refreshed 9", got)
	}
	if got := s.peerMetrics(0, peers.MetricsRefresh).waiting; got != 0 {
		t.Fatalf("at the next refresh: %d waiting; want the engine's 0", got)
	}

	exact, err := newSim(tr, RunConfig{Fleet: FleetFor(tr, 1, 64), Strategy: mustStrategy(t, strategy.NameRR), Rate: 1})
	if err != nil {
		t.Fatal(err)
	}
	exact.peerMetrics(0, 0).waiting = 9
	if got := exact.peerMetrics(0, time.Millisecond).waiting; got != 0 {
		t.Fatalf("without ScrapeEvery: %d waiting; want the engine's exact 0", got)
	}
}
