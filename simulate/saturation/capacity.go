package saturation

import (
	"math"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/workload"
)

// CapacityEstimate is a rough capacity (requests per second) of workers
// engines configured as eng serving trace t, to start a search from: per
// worker, as many requests as fit both the batch limit and the cache
// without any sharing, each held for an uncached prefill plus its decode at
// the unloaded inter-token latency. The latency model's durations are
// multiplied by timeScale: 1 gives requests per model second,
// eng.Latency.TimeScale requests per second of the engines' own clock. It
// returns 1 when the trace or the fleet gives nothing to go on.
func CapacityEstimate(t *workload.Trace, workers int, eng *engine.Config, timeScale float64) float64 {
	if len(t.Requests) == 0 {
		return 1
	}
	prompt, out := t.MeanTokens()
	lat := eng.Latency
	service := (lat.PrefillOverhead.Seconds() + prompt*lat.PrefillPerToken.Seconds() + out*lat.InterTokenLatency.Seconds()) * timeScale
	perWorker := min(float64(eng.MaxNumSeqs), float64(eng.NumBlocks)/math.Ceil((prompt+out)/float64(t.BlockSize)))
	if service <= 0 || perWorker < 1 {
		return 1
	}
	return float64(workers) * perWorker / service
}
