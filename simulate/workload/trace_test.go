package workload

import (
	"errors"
	"math"
	"reflect"
	"testing"
)

func TestNewTrace_ArrivalsAndContentAreSeparateStreams(t *testing.T) {
	spec := SharedPrefix{Groups: 3, PromptsPerGroup: 2, SystemTokens: 32, QuestionTokens: 8, OutputTokens: 2}
	poisson, err := NewTrace(TraceConfig{Spec: spec, Requests: 50, Seed: 5, BlockSize: 16, KeepTokens: true})
	if err != nil {
		t.Fatal(err)
	}
	constant, err := NewTrace(TraceConfig{Spec: spec, Requests: 50, Seed: 5, BlockSize: 16, KeepTokens: true, Arrivals: ArriveConstant})
	if err != nil {
		t.Fatal(err)
	}
	for i := range poisson.Requests {
		p, c := poisson.Requests[i], constant.Requests[i]
		if !reflect.DeepEqual(p.Tokens, c.Tokens) || !reflect.DeepEqual(p.Body, c.Body) || p.Group != c.Group {
			t.Fatalf("request %d: the arrival process changed the content", i)
		}
		if c.UnitAt != float64(i) {
			t.Fatalf("constant request %d at %v; want %d", i, c.UnitAt, i)
		}
		if i > 0 && p.UnitAt < poisson.Requests[i-1].UnitAt {
			t.Fatalf("poisson arrivals go backwards at %d", i)
		}
	}
	if poisson.UnitDuration() <= 0 || constant.UnitDuration() != 49 {
		t.Fatalf("unit durations %v and %v", poisson.UnitDuration(), constant.UnitDuration())
	}
}

func TestNewTrace_IsTheSameForASeed(t *testing.T) {
	spec := MultiTurn{Conversations: 3, Turns: 3, SystemTokens: 50, HistoryTokens: 60, QuestionTokens: 10, AnswerTokens: 6}
	cfg := TraceConfig{Spec: spec, Requests: 30, Seed: 9, BlockSize: 16}
	a, err := NewTrace(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewTrace(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two traces of one seed differ")
	}
	cfg.Seed++
	c, err := NewTrace(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(a.Requests, c.Requests) {
		t.Fatal("two seeds gave the same trace")
	}
}

func TestNewTrace_PoissonArrivalsAtUnitRate(t *testing.T) {
	tr, err := NewTrace(TraceConfig{Spec: HotPrefix{Clients: 3, PrefixTokens: 16, SuffixTokens: 2, OutputTokens: 1}, Requests: 4000, Seed: 3, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	mean := tr.UnitDuration() / float64(len(tr.Requests)-1)
	if math.Abs(mean-1) > 0.05 {
		t.Fatalf("mean gap %v at unit rate; want 1 ± 5%%", mean)
	}
	if tr.Requests[0].Tokens != nil {
		t.Fatal("tokens kept without KeepTokens")
	}
}

func TestNewTrace_CountsTheWorkingSetTheOracleAndTheLargestRequest(t *testing.T) {
	// One group, one question: every request is the same 3-block prompt
	// (BOS + 32 + 2 + 15 tokens = 50 → 3 full blocks) plus 2 output
	// tokens (52 tokens → 4 blocks).
	tr, err := NewTrace(TraceConfig{Spec: SharedPrefix{Groups: 1, PromptsPerGroup: 1, SystemTokens: 32, QuestionTokens: 15, OutputTokens: 2},
		Requests: 4, Seed: 1, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	if tr.DistinctBlocks != 3 || tr.MaxBlocks != 4 || tr.PromptTokens != 200 || tr.OutputTokens != 8 {
		t.Fatalf("working set %d, max blocks %d, tokens %d/%d; want 3, 4, 200/8", tr.DistinctBlocks, tr.MaxBlocks, tr.PromptTokens, tr.OutputTokens)
	}
	// The first request reuses nothing; the others all 3 blocks (48 of 50
	// tokens, the last token is always recomputed).
	if got, want := tr.OracleHitRate(0), 3*48.0/(4*50); got != want {
		t.Fatalf("oracle over all %v; want %v", got, want)
	}
	if got := tr.OracleHitRate(1); got != 48.0/50 {
		t.Fatalf("oracle after warm-up %v; want %v", got, 48.0/50)
	}
	if p, o := tr.MeanTokens(); p != 50 || o != 2 {
		t.Fatalf("mean tokens %v/%v; want 50/2", p, o)
	}
}

func TestTrace_CacheBlocksSizesForThePressureButFitsTheLargestRequest(t *testing.T) {
	tr := &Trace{DistinctBlocks: 1200, MaxBlocks: 30}
	tests := []struct {
		pressure float64
		workers  int
		want     int
	}{
		{1.5, 8, 100},
		{1, 4, 300},
		{50, 8, 30},
	}
	for _, tt := range tests {
		if got := tr.CacheBlocks(tt.pressure, tt.workers); got != tt.want {
			t.Errorf("CacheBlocks(%v, %d) = %d; want %d", tt.pressure, tt.workers, got, tt.want)
		}
	}
}

func TestTrace_PrefixSharesStorageAndKeepsTheWholeTracesBounds(t *testing.T) {
	tr, err := NewTrace(TraceConfig{Spec: HotPrefix{Clients: 2, PrefixTokens: 32, SuffixTokens: 4, OutputTokens: 1}, Requests: 10, Seed: 1, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	p := tr.Prefix(4)
	if len(p.Requests) != 4 || &p.Requests[0] != &tr.Requests[0] || p.DistinctBlocks != tr.DistinctBlocks || p.PromptTokens != tr.PromptTokens {
		t.Fatalf("prefix %+v of %+v", p, tr)
	}
	if tr.Prefix(10) != tr || tr.Prefix(20) != tr {
		t.Fatal("a prefix as long as the trace is not the trace")
	}
}

func TestNewTrace_RejectsBadConfigs(t *testing.T) {
	spec := HotPrefix{}
	tests := []struct {
		name string
		give TraceConfig
	}{
		{"no spec", TraceConfig{Requests: 1, BlockSize: 16}},
		{"no requests", TraceConfig{Spec: spec, BlockSize: 16}},
		{"unknown arrivals", TraceConfig{Spec: spec, Requests: 1, BlockSize: 16, Arrivals: 9}},
		{"no block size", TraceConfig{Spec: spec, Requests: 1}},
		{"bad workload", TraceConfig{Spec: HotPrefix{Clients: -1}, Requests: 1, BlockSize: 16}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewTrace(tt.give); !errors.Is(err, ErrConfig) {
				t.Fatalf("got %v; want ErrConfig", err)
			}
		})
	}
}
