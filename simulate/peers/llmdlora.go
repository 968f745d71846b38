package peers

import (
	"math/rand/v2"
	"slices"
	"time"
)

// llm-d's endpoint picker with its LoRA affinity scorer, in the default
// scheduling profile of llm-d-inference-scheduler
// (test/integration/epp/testdata/default-config.yaml): queue-scorer,
// kv-cache-utilization-scorer, prefix-cache-scorer and lora-affinity-scorer,
// each with the default weight 1, then the max-score picker.
//
//	queue_w  = (max q − q_w) / (max q − min q), 1 when all equal
//	kv_w     = 1 − KV-cache usage
//	prefix_w = matched leading blocks / the request's blocks (from the KV
//	           events here; the default prefix-cache scorer indexes the
//	           prefixes it routed itself, which tracks the same blocks)
//	lora_w   = 1.0 the adapter is active (running) on the pod
//	           0.8 the pod can take one more adapter (active + waiting
//	               adapters < max_lora)
//	           0.6 the adapter is waiting there
//	           0   otherwise
//	           (pkg/epp/framework/plugins/scheduling/scorer/loraaffinity)
//	pick       argmax queue + kv + prefix + lora, ties at random
//
// The pods' adapters come from vllm:lora_requests_info as the picker reads
// it (pkg/epp/backend/metrics/metrics.go getLatestLoraMetric): the series
// with the newest timestamp among those naming some adapter — a series with
// both labels empty is skipped, so a pod that went idle keeps showing the
// adapters it last ran (Endpoint.LoRAStale carries that view).
type llmdLoRA struct {
	rng   *rand.Rand
	score []float64
}

func newLLMDLoRA(rng *rand.Rand) *llmdLoRA { return &llmdLoRA{rng: rng} }

// Pick implements Policy.
func (l *llmdLoRA) Pick(_ time.Time, req *Request, eps []Endpoint) int {
	if cap(l.score) < len(eps) {
		l.score = make([]float64, len(eps))
	}
	score := l.score[:len(eps)]
	minQ, maxQ := eps[0].Waiting, eps[0].Waiting
	for _, e := range eps[1:] {
		minQ, maxQ = min(minQ, e.Waiting), max(maxQ, e.Waiting)
	}
	for w, e := range eps {
		queue := 1.0
		if maxQ > minQ {
			queue = float64(maxQ-e.Waiting) / float64(maxQ-minQ)
		}
		prefix := 0.0
		if n := len(req.Chain); n > 0 {
			prefix = float64(min(e.Overlap, n)) / float64(n)
		}
		score[w] = -(queue + (1 - e.KVUsage) + prefix + loraAffinity(req.Adapter, &e.LoRAStale))
	}
	return argminRandom(score, l.rng)
}

// loraAffinity is llm-d's lora-affinity-scorer for adapter on a pod.
func loraAffinity(adapter string, g *LoRAGauge) float64 {
	active := slices.Contains(g.Running, adapter)
	waiting := slices.Contains(g.Waiting, adapter)
	switch {
	case active:
		return 1.0
	case len(g.Running)+len(g.Waiting) < g.Max:
		return 0.8
	case waiting:
		return 0.6
	}
	return 0
}

// FirstToken implements Policy.
func (l *llmdLoRA) FirstToken(time.Time, int) {}

// Done implements Policy.
func (l *llmdLoRA) Done(time.Time, int) {}
