package peers

import (
	"math/rand/v2"
	"time"
)

// llm-d's precise prefix-cache aware scheduling, as its guide deploys the
// endpoint picker (llm-d/llm-d guides/precise-prefix-cache-aware,
// gaie-kv-events/values.yaml; llm-d-inference-scheduler v0.7): three
// scorers summed with weights, then the max-score picker.
//
//	prefix_w = matched leading blocks / the request's blocks   (precise-prefix-cache-scorer, weight 3)
//	kv_w     = 1 − KV-cache usage                               (kv-cache-utilization-scorer, weight 2)
//	queue_w  = (max q − q_w) / (max q − min q), 1 when all equal (queue-scorer, weight 2)
//	pick       argmax 3·prefix + 2·kv + 2·queue, ties at random
//
// The prefix index is fed by the workers' KV events; with
// speculativeIndexing (on in the guide) the picker also indexes the
// routed request's blocks on its pod at once, for 2 s, until the events
// confirm them. Queue and KV usage are the pods' scraped
// vllm:num_requests_waiting and vllm:kv_cache_usage_perc (the endpoint
// picker refreshes them every 50 ms).
const (
	llmdPrefixWeight = 3.0
	llmdKVWeight     = 2.0
	llmdQueueWeight  = 2.0
	// llmdSpeculativeTTL is how long a speculative index entry lives.
	llmdSpeculativeTTL = 2 * time.Second
)

// MetricsRefresh is how often llm-d's endpoint picker refreshes the pods'
// metrics (the inference extension's --refresh-metrics-interval, 50 ms by
// default): Endpoint.Waiting and KVUsage are that old at most.
const MetricsRefresh = 50 * time.Millisecond

type llmd struct {
	rng   *rand.Rand
	spec  []map[uint64]time.Time // speculative entries per pod: block key → expiry
	picks int
	score []float64
}

func newLLMD(n int, rng *rand.Rand) *llmd {
	l := &llmd{rng: rng, spec: make([]map[uint64]time.Time, n), score: make([]float64, n)}
	for i := range l.spec {
		l.spec[i] = map[uint64]time.Time{}
	}
	return l
}

// Pick implements Policy.
func (l *llmd) Pick(now time.Time, req *Request, eps []Endpoint) int {
	minQ, maxQ := eps[0].Waiting, eps[0].Waiting
	for _, e := range eps[1:] {
		minQ, maxQ = min(minQ, e.Waiting), max(maxQ, e.Waiting)
	}
	for w, e := range eps {
		prefix := 0.0
		if n := len(req.Chain); n > 0 {
			prefix = float64(max(min(e.Overlap, n), l.speculative(now, w, req.Chain))) / float64(n)
		}
		queue := 1.0
		if maxQ > minQ {
			queue = float64(maxQ-e.Waiting) / float64(maxQ-minQ)
		}
		// max-score picker: negate for argmin.
		l.score[w] = -(llmdPrefixWeight*prefix + llmdKVWeight*(1-e.KVUsage) + llmdQueueWeight*queue)
	}
	w := argminRandom(l.score[:len(eps)], l.rng)
	until := now.Add(llmdSpeculativeTTL)
	for _, k := range req.Chain {
		l.spec[w][k] = until
	}
	if l.picks++; l.picks%256 == 0 {
		l.sweep(now)
	}
	return w
}

// speculative is how many leading chain blocks pod w holds speculatively.
func (l *llmd) speculative(now time.Time, w int, chain []uint64) int {
	n := 0
	for _, k := range chain {
		if exp, ok := l.spec[w][k]; !ok || now.After(exp) {
			break
		}
		n++
	}
	return n
}

// sweep drops expired speculative entries.
func (l *llmd) sweep(now time.Time) {
	for _, m := range l.spec {
		for k, exp := range m {
			if now.After(exp) {
				delete(m, k)
			}
		}
	}
}

// FirstToken implements Policy (llm-d's scorers keep no per-request state).
func (l *llmd) FirstToken(time.Time, int) {}

// Done implements Policy.
func (l *llmd) Done(time.Time, int) {}
