package peers

import (
	"cmp"
	"slices"
	"time"

	"github.com/llbproject/llb/ladder"
)

// SGLang's router cache_aware policy, the default of sgl-model-gateway
// (SMG; lightseekorg/smg docs/configuration/routing.md, "Cache-Aware
// Policy"), in its HTTP mode: an approximate radix tree of the request
// texts it routed, one tenant per worker.
//
//	loads: the router's own in-flight requests per worker
//	imbalanced ⇔ max − min > balance_abs_threshold ∧ max > balance_rel_threshold · min
//	imbalanced  → the least-loaded worker
//	otherwise   → the worker whose tree matches the longest prefix of the
//	              text, if matched chars / text chars > cache_threshold;
//	              else the worker with the smallest tree
//
// The text is then inserted into the chosen worker's tree, whichever path
// chose it. Every eviction interval each tree is cut back (least recently
// used first) to max tree size characters. The tree is the router's guess:
// it never hears of the engine's own evictions.
//
// Approximation: matches count whole 16-character chunks (a chained hash
// per chunk) instead of single characters; on prompts of thousands of
// characters the match rate differs by under 1 %.
const (
	sglangCacheThreshold   = 0.3
	sglangBalanceAbs       = 64
	sglangBalanceRel       = 1.5
	sglangEvictionInterval = 120 * time.Second
	sglangMaxTreeSize      = 1 << 26 // characters per tenant
	sglangChunk            = 16
)

// charTree is one worker's approximate tree: chained chunk hashes with
// their last access.
type charTree struct {
	chunks map[uint64]time.Time
	chars  int
}

type sglang struct {
	load      inflight
	trees     []charTree
	lastEvict time.Time
	started   bool
	keys      []uint64 // scratch
}

func newSGLang(n int) *sglang {
	s := &sglang{load: newInflight(n), trees: make([]charTree, n)}
	for i := range s.trees {
		s.trees[i].chunks = map[uint64]time.Time{}
	}
	return s
}

// chunkKeys appends the chained hashes of text's whole chunks of size c.
func chunkKeys(dst []uint64, text []byte, c int) []uint64 {
	var h uint64
	for i := 0; i+c <= len(text); i += c {
		h = ladder.XXH64(text[i:i+c], h)
		dst = append(dst, h)
	}
	return dst
}

// Pick implements Policy.
func (s *sglang) Pick(now time.Time, req *Request, eps []Endpoint) int {
	if !s.started {
		s.started, s.lastEvict = true, now
	}
	if now.Sub(s.lastEvict) >= sglangEvictionInterval {
		s.evict()
		s.lastEvict = now
	}
	n := len(eps)
	minL, maxL := s.load.load[0], s.load.load[0]
	for _, l := range s.load.load[1:n] {
		minL, maxL = min(minL, l), max(maxL, l)
	}
	s.keys = chunkKeys(s.keys[:0], req.Text, sglangChunk)
	var w int
	if maxL-minL > sglangBalanceAbs && float64(maxL) > sglangBalanceRel*float64(minL) {
		w = s.load.leastLoaded()
	} else {
		best, bestLen := 0, -1
		for i := range n {
			m := 0
			for _, k := range s.keys {
				if _, ok := s.trees[i].chunks[k]; !ok {
					break
				}
				m++
			}
			if m > bestLen {
				best, bestLen = i, m
			}
		}
		if len(req.Text) > 0 && float64(bestLen*sglangChunk)/float64(len(req.Text)) > sglangCacheThreshold {
			w = best
		} else {
			w = 0
			for i := 1; i < n; i++ {
				if s.trees[i].chars < s.trees[w].chars {
					w = i
				}
			}
		}
	}
	t := &s.trees[w]
	for _, k := range s.keys {
		if _, ok := t.chunks[k]; !ok {
			t.chars += sglangChunk
		}
		t.chunks[k] = now
	}
	s.load.add(req.ID, w)
	return w
}

// evict cuts every tree back to sglangMaxTreeSize characters, least
// recently used chunks first.
func (s *sglang) evict() {
	for i := range s.trees {
		t := &s.trees[i]
		if t.chars <= sglangMaxTreeSize {
			continue
		}
		type aged struct {
			k  uint64
			at time.Time
		}
		all := make([]aged, 0, len(t.chunks))
		for k, at := range t.chunks {
			all = append(all, aged{k, at})
		}
		slices.SortFunc(all, func(a, b aged) int {
			if c := a.at.Compare(b.at); c != 0 {
				return c
			}
			return cmp.Compare(a.k, b.k)
		})
		for _, a := range all {
			if t.chars <= sglangMaxTreeSize {
				break
			}
			delete(t.chunks, a.k)
			t.chars -= sglangChunk
		}
	}
}

// FirstToken implements Policy.
func (s *sglang) FirstToken(time.Time, int) {}

// Done implements Policy.
func (s *sglang) Done(_ time.Time, id int) { s.load.done(id) }
