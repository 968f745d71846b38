package saturation

import (
	"math"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/workload"
)

func TestCapacityEstimate_FitsTheBatchAndTheCache(t *testing.T) {
	tr := &workload.Trace{BlockSize: 16}
	for range 4 {
		tr.Requests = append(tr.Requests, workload.TraceRequest{PromptTokens: 100, OutputTokens: 28}) // 8 blocks each
	}
	eng := engine.DefaultConfig()
	eng.Latency.PrefillOverhead = 10 * time.Millisecond
	eng.Latency.PrefillPerToken = time.Millisecond
	eng.Latency.InterTokenLatency = 5 * time.Millisecond // service: 10 + 100 + 140 = 250 ms
	tests := []struct {
		name       string
		blocks     int
		seqs       int
		timeScale  float64
		wantPerSec float64
	}{
		{"batch-bound", 1000, 4, 1, 2 * 4 / 0.25},
		{"cache-bound", 24, 64, 1, 2 * 3 / 0.25},
		{"engine clock at half speed", 1000, 4, 2, 2 * 4 / 0.5},
		{"a request larger than the cache", 4, 64, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := eng
			e.NumBlocks, e.MaxNumSeqs = tt.blocks, tt.seqs
			if got := CapacityEstimate(tr, 2, &e, tt.timeScale); math.Abs(got-tt.wantPerSec) > 1e-9 {
				t.Fatalf("got %v req/s; want %v", got, tt.wantPerSec)
			}
		})
	}
	if got := CapacityEstimate(&workload.Trace{BlockSize: 16}, 2, &eng, 1); got != 1 {
		t.Fatalf("empty trace: got %v; want 1", got)
	}
}
