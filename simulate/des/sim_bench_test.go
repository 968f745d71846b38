package des

import (
	"fmt"
	"testing"

	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/workload"
)

// BenchmarkRun measures whole simulation runs and reports simulated
// requests per wall second — the figure that says how many sweeps fit in
// a minute. The trace is the standard shared-prefix scenario's shape
// (2048-token system prompts, 128-token questions, 256 output tokens) on 8
// workers at pressure 1.5, at 70 % of the hard law's saturation (20 req/s).
func BenchmarkRun(b *testing.B) {
	tr, err := NewTrace(TraceConfig{
		Name:     "bench",
		Spec:     workload.SharedPrefix{Groups: 64, PromptsPerGroup: 16, SystemTokens: 2048, QuestionTokens: 128, OutputTokens: 256},
		Requests: 1000, Seed: 1,
	})
	if err != nil {
		b.Fatal(err)
	}
	fleet := FleetFor(tr, 8, int(float64(tr.DistinctBlocks)/(1.5*8)))
	for _, name := range []string{strategy.NameRR, strategy.NameCHWBL, strategy.NameHard, strategy.NameAdaptiveSoft, strategy.NameTier1} {
		b.Run(fmt.Sprintf("strategy=%s/requests=%d", name, len(tr.Requests)), func(b *testing.B) {
			cfg := RunConfig{Fleet: fleet, Strategy: mustStrategy(b, name), Rate: 20, Warmup: 200}
			b.ReportAllocs()
			var events int64
			for b.Loop() {
				res, err := Run(tr, cfg)
				if err != nil {
					b.Fatal(err)
				}
				events = res.Events
			}
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N*len(tr.Requests))/sec, "sim-req/s")
			b.ReportMetric(float64(int64(b.N)*events)/sec, "events/s")
		})
	}
}

// BenchmarkNewTrace measures generating and hashing a trace (once per
// scenario; shared by every run).
func BenchmarkNewTrace(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := NewTrace(TraceConfig{
			Name:     "bench",
			Spec:     workload.SharedPrefix{Groups: 64, PromptsPerGroup: 16, SystemTokens: 2048, QuestionTokens: 128, OutputTokens: 256},
			Requests: 200, Seed: 1,
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*200)/b.Elapsed().Seconds(), "requests/s")
}
