package peers

import (
	"math/rand/v2"
	"time"
)

// Dynamo's KV router, as ai-dynamo/dynamo documents it
// (docs/router/kv_cache_routing.md, "Cost Calculation" and "Worker
// Selection"; the frontend's --router-mode kv):
//
//	prefill_blocks_w = (active prefill tokens on w + the request's tokens w has not cached) / block_size
//	decode_blocks_w  = the active blocks on w, the request's own included
//	cost_w           = overlap_score_weight · prefill_blocks_w + decode_blocks_w
//
// The lowest cost wins (--router-temperature 0, the default: no softmax
// sampling); equal costs are broken at random. A request's prefill tokens
// count against its worker until its first token (MarkPrefillCompleted),
// its blocks until it ends (Free); a block shared by several active
// sequences on a worker counts once (the router's ActiveSequences). The
// cached overlap comes from the workers' KV events (--kv-events, the
// default).
const (
	// dynamoOverlapWeight is --kv-overlap-score-weight's default.
	dynamoOverlapWeight = 1.0
)

type dynamoReq struct {
	ep       int
	prefill  float64 // tokens still to prefill, until the first token
	chain    []uint64
	private  int // blocks beyond the shared chain: the partial last block and the output
	prefDone bool
}

type dynamo struct {
	rng     *rand.Rand
	prefill []float64          // active prefill tokens per worker
	blocks  []map[uint64]int32 // active chain blocks per worker, reference-counted
	private []int              // active private blocks per worker
	reqs    map[int]*dynamoReq
	cost    []float64 // scratch
}

func newDynamo(n int, rng *rand.Rand) *dynamo {
	d := &dynamo{rng: rng, prefill: make([]float64, n), blocks: make([]map[uint64]int32, n), private: make([]int, n),
		reqs: map[int]*dynamoReq{}, cost: make([]float64, n)}
	for i := range d.blocks {
		d.blocks[i] = map[uint64]int32{}
	}
	return d
}

// Pick implements Policy.
func (d *dynamo) Pick(_ time.Time, req *Request, eps []Endpoint) int {
	bs := float64(max(req.BlockSize, 1))
	private := privateBlocks(req)
	for w := range eps {
		overlap := min(eps[w].Overlap, len(req.Chain))
		uncached := float64(req.PromptTokens - overlap*req.BlockSize)
		newBlocks := 0
		for _, k := range req.Chain {
			if d.blocks[w][k] == 0 {
				newBlocks++
			}
		}
		decode := float64(len(d.blocks[w]) + d.private[w] + newBlocks + private)
		d.cost[w] = dynamoOverlapWeight*(d.prefill[w]+uncached)/bs + decode
	}
	w := argminRandom(d.cost[:len(eps)], d.rng)
	overlap := min(eps[w].Overlap, len(req.Chain))
	r := &dynamoReq{ep: w, prefill: float64(req.PromptTokens - overlap*req.BlockSize), chain: req.Chain, private: private}
	d.reqs[req.ID] = r
	d.prefill[w] += r.prefill
	for _, k := range req.Chain {
		d.blocks[w][k]++
	}
	d.private[w] += private
	return w
}

// FirstToken implements Policy: the request's prefill is complete.
func (d *dynamo) FirstToken(_ time.Time, id int) {
	if r, ok := d.reqs[id]; ok && !r.prefDone {
		r.prefDone = true
		d.prefill[r.ep] -= r.prefill
	}
}

// Done implements Policy: the request's blocks are freed.
func (d *dynamo) Done(now time.Time, id int) {
	r, ok := d.reqs[id]
	if !ok {
		return
	}
	d.FirstToken(now, id)
	for _, k := range r.chain {
		if d.blocks[r.ep][k]--; d.blocks[r.ep][k] <= 0 {
			delete(d.blocks[r.ep], k)
		}
	}
	d.private[r.ep] -= r.private
	delete(d.reqs, id)
}

// privateBlocks is how many blocks a request needs beyond its full prompt
// blocks: the partial last prompt block and its output.
func privateBlocks(req *Request) int {
	bs := max(req.BlockSize, 1)
	rest := req.PromptTokens - len(req.Chain)*bs + req.OutputTokens
	return (rest + bs - 1) / bs
}

// argminRandom returns the index of the smallest value, ties broken at
// random with rng.
func argminRandom(xs []float64, rng *rand.Rand) int {
	best, ties := 0, 1
	for i := 1; i < len(xs); i++ {
		switch {
		case xs[i] < xs[best]:
			best, ties = i, 1
		case xs[i] == xs[best]:
			ties++
			if rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	return best
}
