package harness

import (
	"math"
	"testing"

	"github.com/llbproject/llb/simulate/des"
	"github.com/llbproject/llb/simulate/workload"
)

func TestNewTrace_IsTheDiscreteEventSimulatorsTraceForTheSameSeed(t *testing.T) {
	specs := []struct {
		name string
		spec workload.Spec
	}{
		{"shared prefix", workload.SharedPrefix{Groups: 6, PromptsPerGroup: 4, SystemTokens: 200, QuestionTokens: 24, OutputTokens: 8, ZipfAlpha: 1.1}},
		{"hot prefix", workload.HotPrefix{Clients: 5, PrefixTokens: 120, SuffixTokens: 10, OutputTokens: 4}},
		{"multi-turn", workload.MultiTurn{Conversations: 3, Turns: 3, SystemTokens: 50, HistoryTokens: 60, QuestionTokens: 10, AnswerTokens: 6}},
	}
	for _, tt := range specs {
		t.Run(tt.name, func(t *testing.T) {
			const n, seed = 80, 7
			got, err := NewTrace(tt.spec, n, seed, 16)
			if err != nil {
				t.Fatal(err)
			}
			want, err := des.NewTrace(des.TraceConfig{Spec: tt.spec, Requests: n, Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			if got.DistinctBlocks != want.DistinctBlocks || got.PromptTokens != want.PromptTokens || got.OutputTokens != want.OutputTokens {
				t.Fatalf("working set %d, tokens %d/%d; des has %d, %d/%d",
					got.DistinctBlocks, got.PromptTokens, got.OutputTokens, want.DistinctBlocks, want.PromptTokens, want.OutputTokens)
			}
			for i := range n {
				g, w := got.Requests[i], want.Requests[i]
				if math.Abs(g.UnitAt-w.UnitAt) > 1e-6 || g.PromptTokens != w.PromptTokens || g.ReusableTokens != w.ReusableTokens ||
					g.OutputTokens != w.OutputTokens || g.Group != w.Group || g.Workload != w.Workload {
					t.Fatalf("request %d: %+v; des has at %v, %d prompt, %d reusable, %d out, group %d %s",
						i, g, w.UnitAt, w.PromptTokens, w.ReusableTokens, w.OutputTokens, w.Group, w.Workload)
				}
			}
			if !near(got.OracleHitRate(n/5), want.OracleHitRate(n/5), 1e-12) {
				t.Fatalf("oracle %v; des has %v", got.OracleHitRate(n/5), want.OracleHitRate(n/5))
			}
		})
	}
}

func TestNewTrace_ArrivalsArePoissonAtUnitRate(t *testing.T) {
	tr, err := NewTrace(workload.HotPrefix{Clients: 3, PrefixTokens: 16, SuffixTokens: 2, OutputTokens: 1}, 4000, 3, 16)
	if err != nil {
		t.Fatal(err)
	}
	mean := tr.UnitDuration() / float64(len(tr.Requests)-1)
	if math.Abs(mean-1) > 0.05 {
		t.Fatalf("mean gap %v at unit rate; want 1 ± 5%%", mean)
	}
	for i := 1; i < len(tr.Requests); i++ {
		if tr.Requests[i].UnitAt < tr.Requests[i-1].UnitAt {
			t.Fatalf("arrival %d before %d", i, i-1)
		}
	}
	if tr.MaxBlocks != 2 { // BOS + 16 + "\n" + 2 tokens + 1 output = 21 tokens
		t.Fatalf("max blocks %d; want 2", tr.MaxBlocks)
	}
}
