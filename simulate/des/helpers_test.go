package des

import (
	"testing"

	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/workload"
)

// hotTrace is a tiny hot-prefix trace: every request shares a 128-token
// preamble (8 blocks, longer than the CHWBL prefix span), constant arrivals.
func hotTrace(t testing.TB, n, outputTokens int) *Trace {
	t.Helper()
	tr, err := NewTrace(TraceConfig{
		Name:     "hot",
		Spec:     workload.HotPrefix{Clients: 3, PrefixTokens: 128, SuffixTokens: 8, OutputTokens: outputTokens},
		Requests: n, Seed: 7, Arrivals: workload.ArriveConstant,
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// sharedTrace is a small shared-prefix trace with Poisson arrivals.
func sharedTrace(t testing.TB, n int, seed uint64) *Trace {
	t.Helper()
	tr, err := NewTrace(TraceConfig{
		Name:     "shared",
		Spec:     workload.SharedPrefix{Groups: 6, PromptsPerGroup: 4, SystemTokens: 96, QuestionTokens: 16, OutputTokens: 24, ZipfAlpha: 1},
		Requests: n, Seed: seed,
	})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// mustStrategy returns a named strategy.
func mustStrategy(t testing.TB, name string) strategy.Strategy {
	t.Helper()
	s, err := strategy.ByName(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// run runs trace tr on n workers of blocks cache blocks each.
func run(t testing.TB, tr *Trace, name string, workers, blocks int, rate float64, tweak func(*RunConfig)) *Result {
	t.Helper()
	cfg := RunConfig{Fleet: FleetFor(tr, workers, blocks), Strategy: mustStrategy(t, name), Rate: rate, RecordRoutes: true}
	if tweak != nil {
		tweak(&cfg)
	}
	res, err := Run(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// workersOf lists the worker of every route.
func workersOf(rs []Route) []int {
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = r.Worker
	}
	return out
}
