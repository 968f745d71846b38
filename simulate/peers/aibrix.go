package peers

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// AIBrix's prefix-cache router (vllm-project/aibrix
// pkg/plugins/gateway/algorithms/README.md, "Prefix Cache Aware"), with
// its defaults: the character tokenizer, 128-character blocks, 200000
// blocks in the prefix table, imbalance at a running-request difference
// above 16, and a standard-deviation factor of 2.
//
//	imbalanced ⇔ max running − min running > 16  → the pod with the fewest
//	                                               (ties at random)
//	otherwise, among the pods whose table holds leading blocks of the
//	request (sorted by matched share desc, running asc), the first with
//	running ≤ mean + 2·σ of the running counts; none → the fewest running
//
// The router adds the request's block hashes for the chosen pod after
// routing: like SGLang's tree, the table records what was routed, not what
// the engines hold. Running counts are the router's own in-flight
// requests.
const (
	aibrixBlockChars   = 128
	aibrixMaxBlocks    = 200000
	aibrixImbalanceAbs = 16
	aibrixStdFactor    = 2.0
)

type aibrix struct {
	rng   *rand.Rand
	load  inflight
	table map[uint64]map[int]time.Time // block hash → pod → last routed
	keys  []uint64
}

func newAIBrix(n int, rng *rand.Rand) *aibrix {
	return &aibrix{rng: rng, load: newInflight(n), table: map[uint64]map[int]time.Time{}}
}

// Pick implements Policy.
func (a *aibrix) Pick(now time.Time, req *Request, eps []Endpoint) int {
	n := len(eps)
	run := a.load.load[:n]
	minR, maxR := slices.Min(run), slices.Max(run)
	a.keys = chunkKeys(a.keys[:0], req.Text, aibrixBlockChars)
	w := -1
	if maxR-minR <= aibrixImbalanceAbs && len(a.keys) > 0 {
		var mean, sq float64
		for _, r := range run {
			mean += float64(r)
		}
		mean /= float64(n)
		for _, r := range run {
			sq += (float64(r) - mean) * (float64(r) - mean)
		}
		limit := mean + aibrixStdFactor*math.Sqrt(sq/float64(n))
		type cand struct{ pod, matched int }
		var cands []cand
		for p := range n {
			m := 0
			for _, k := range a.keys {
				if _, ok := a.table[k][p]; !ok {
					break
				}
				m++
			}
			if m > 0 {
				cands = append(cands, cand{p, m})
			}
		}
		slices.SortStableFunc(cands, func(x, y cand) int {
			if x.matched != y.matched {
				return y.matched - x.matched
			}
			return run[x.pod] - run[y.pod]
		})
		for _, c := range cands {
			if float64(run[c.pod]) <= limit {
				w = c.pod
				break
			}
		}
	}
	if w < 0 {
		// selectPodWithLeastRequestCount: the fewest running, ties at random.
		least := make([]float64, n)
		for i, r := range run {
			least[i] = float64(r)
		}
		w = argminRandom(least, a.rng)
	}
	for _, k := range a.keys {
		pods := a.table[k]
		if pods == nil {
			pods = map[int]time.Time{}
			a.table[k] = pods
		}
		pods[w] = now
	}
	if len(a.table) > aibrixMaxBlocks {
		a.evict()
	}
	a.load.add(req.ID, w)
	return w
}

// evict drops the least recently routed tenth of the table.
func (a *aibrix) evict() {
	type aged struct {
		k  uint64
		at time.Time
	}
	all := make([]aged, 0, len(a.table))
	for k, pods := range a.table {
		var last time.Time
		for _, at := range pods {
			if at.After(last) {
				last = at
			}
		}
		all = append(all, aged{k, last})
	}
	slices.SortFunc(all, func(x, y aged) int {
		if c := x.at.Compare(y.at); c != 0 {
			return c
		}
		return cmp.Compare(x.k, y.k)
	})
	for _, e := range all[:len(all)/10+1] {
		delete(a.table, e.k)
	}
}

// FirstToken implements Policy.
func (a *aibrix) FirstToken(time.Time, int) {}

// Done implements Policy.
func (a *aibrix) Done(_ time.Time, id int) { a.load.done(id) }
