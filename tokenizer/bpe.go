package tokenizer

import (
	"container/heap"
	"sync"
	"unicode/utf8"
)

// bpe is the BPE model of a tokenizer.json. For a byte-level tokenizer the
// vocabulary is keyed by the raw bytes a token stands for (the
// byte-to-unicode spelling undone), so words are merged straight from the
// input bytes.
type bpe struct {
	// vocab maps a token's raw text to its id (byte-level: raw bytes).
	vocab map[string]uint32
	// merges maps a pair (left<<32 | right) to its rank and result.
	merges map[uint64]merge
	// byteLevel: initial symbols are bytes (byteIDs), not characters.
	byteLevel bool
	byteIDs   [256]int64 // -1 when the vocabulary lacks the byte
	// byteFallback: a character outside the vocabulary becomes its
	// <0xXX> byte tokens (sentencepiece style).
	byteFallback bool
	fallbackIDs  [256]int64
	// unk is the unknown token's id (-1: characters outside the
	// vocabulary are dropped, as tokenizers does without an unk token);
	// fuseUnk merges consecutive unknowns into one.
	unk     int64
	fuseUnk bool
	// ignoreMerges: a word that is itself in the vocabulary is one token.
	ignoreMerges bool

	cache   *wordCache
	scratch sync.Pool // *mergeScratch
}

// merge is one merge rule's rank (lower merges first) and result.
type merge struct{ rank, id uint32 }

func pairKey(a, b uint32) uint64 { return uint64(a)<<32 | uint64(b) }

// maxCachedWord bounds the words kept in the cache (bytes).
const maxCachedWord = 256

// encodeWord appends the ids of one pre-tokenized word.
func (m *bpe) encodeWord(word string, dst []uint32) []uint32 {
	if word == "" {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			return append(dst, id)
		}
	}
	cacheable := m.cache != nil && len(word) <= maxCachedWord
	if cacheable {
		if ids, ok := m.cache.get(word); ok {
			return append(dst, ids...)
		}
	}
	sc := m.scratch.Get().(*mergeScratch)
	syms := m.symbols(word, sc.syms[:0])
	syms = m.mergeAll(syms, sc)
	sc.syms = syms
	start := len(dst)
	dst = append(dst, syms...)
	m.scratch.Put(sc)
	if cacheable {
		m.cache.put(word, dst[start:])
	}
	return dst
}

// symbols returns the word's initial symbols.
func (m *bpe) symbols(word string, dst []uint32) []uint32 {
	if m.byteLevel {
		for i := 0; i < len(word); i++ {
			if id := m.byteIDs[word[i]]; id >= 0 {
				dst = append(dst, uint32(id))
			} else if m.unk >= 0 {
				dst = m.appendUnk(dst)
			}
		}
		return dst
	}
	unkRun := false
	for i := 0; i < len(word); {
		_, w := utf8.DecodeRuneInString(word[i:])
		if id, ok := m.vocab[word[i:i+w]]; ok {
			dst = append(dst, id)
			unkRun = false
		} else if fb, ok := m.fallback(word[i : i+w]); ok {
			for j := i; j < i+w; j++ {
				dst = append(dst, fb[j-i])
			}
			unkRun = false
		} else if m.unk >= 0 {
			if !(m.fuseUnk && unkRun) {
				dst = append(dst, uint32(m.unk))
			}
			unkRun = true
		}
		i += w
	}
	return dst
}

func (m *bpe) appendUnk(dst []uint32) []uint32 {
	if m.fuseUnk && len(dst) > 0 && dst[len(dst)-1] == uint32(m.unk) {
		return dst
	}
	return append(dst, uint32(m.unk))
}

// fallback returns the <0xXX> ids of ch's bytes when byte fallback is on
// and every one of them is in the vocabulary.
func (m *bpe) fallback(ch string) ([4]uint32, bool) {
	var out [4]uint32
	if !m.byteFallback || len(ch) > 4 {
		return out, false
	}
	for j := 0; j < len(ch); j++ {
		id := m.fallbackIDs[ch[j]]
		if id < 0 {
			return out, false
		}
		out[j] = uint32(id)
	}
	return out, true
}

// naiveMergeMax is the word length up to which mergeAll rescans pairs
// instead of keeping a heap.
const naiveMergeMax = 24

// mergeAll applies merges to syms: always the pair of lowest rank, the
// leftmost among equals, until no pair merges (tokenizers' merge_word).
func (m *bpe) mergeAll(syms []uint32, sc *mergeScratch) []uint32 {
	if len(syms) <= naiveMergeMax {
		return m.mergeNaive(syms)
	}
	return m.mergeHeap(syms, sc)
}

// mergeNaive rescans every pair per merge: O(n²), fastest for short words.
func (m *bpe) mergeNaive(syms []uint32) []uint32 {
	for len(syms) > 1 {
		best, bestAt := merge{rank: ^uint32(0)}, -1
		for i := 0; i+1 < len(syms); i++ {
			if mg, ok := m.merges[pairKey(syms[i], syms[i+1])]; ok && mg.rank < best.rank {
				best, bestAt = mg, i
			}
		}
		if bestAt < 0 {
			break
		}
		syms[bestAt] = best.id
		syms = append(syms[:bestAt+1], syms[bestAt+2:]...)
	}
	return syms
}

// mergeScratch is reusable state for one word's merge.
type mergeScratch struct {
	syms       []uint32
	prev, next []int32
	h          mergeHeap
}

// mergeHeap orders candidate merges by rank, then position.
type mergeHeap []mergeCand

type mergeCand struct {
	rank uint32
	pos  int32
}

func (h mergeHeap) Len() int { return len(h) }
func (h mergeHeap) Less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}
func (h mergeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *mergeHeap) Push(x any)   { *h = append(*h, x.(mergeCand)) }
func (h *mergeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// mergeHeap merges long words in O(n log n): symbols form a linked list,
// candidates sit in a heap and are dropped when stale.
func (m *bpe) mergeHeap(syms []uint32, sc *mergeScratch) []uint32 {
	n := len(syms)
	sc.prev, sc.next = grow(sc.prev, n), grow(sc.next, n)
	prev, next := sc.prev, sc.next
	sc.h = sc.h[:0]
	for i := 0; i < n; i++ {
		prev[i], next[i] = int32(i-1), int32(i+1)
		if i+1 < n {
			if mg, ok := m.merges[pairKey(syms[i], syms[i+1])]; ok {
				sc.h = append(sc.h, mergeCand{rank: mg.rank, pos: int32(i)})
			}
		}
	}
	next[n-1] = -1
	const dead = ^uint32(0)
	heap.Init(&sc.h)
	for sc.h.Len() > 0 {
		c := heap.Pop(&sc.h).(mergeCand)
		i := c.pos
		if syms[i] == dead || next[i] < 0 {
			continue
		}
		j := next[i]
		mg, ok := m.merges[pairKey(syms[i], syms[j])]
		if !ok || mg.rank != c.rank {
			continue // stale: a neighbour merged since
		}
		syms[i] = mg.id
		syms[j] = dead
		next[i] = next[j]
		if next[j] >= 0 {
			prev[next[j]] = i
		}
		if p := prev[i]; p >= 0 {
			if mg, ok := m.merges[pairKey(syms[p], syms[i])]; ok {
				heap.Push(&sc.h, mergeCand{rank: mg.rank, pos: p})
			}
		}
		if k := next[i]; k >= 0 {
			if mg, ok := m.merges[pairKey(syms[i], syms[k])]; ok {
				heap.Push(&sc.h, mergeCand{rank: mg.rank, pos: i})
			}
		}
	}
	out := syms[:0]
	for i := int32(0); i >= 0; i = next[i] {
		out = append(out, syms[i])
	}
	return out
}

func grow(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n)
	}
	return s[:n]
}
