package tokenizer

import (
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

	// cuts say where a long word can be cut into pieces that merge
	// independently (see cutPoints); nil for byte-level models, whose
	// pre-tokenizer already cuts words.
	cuts    []cutRune
	cache   *wordCache
	scratch sync.Pool // *mergeScratch
}

// cutRune is a rune before which a word may be cut, unless the rune
// before it is one of after (no token spells after[i] followed by r, so
// no merge can join the two sides).
type cutRune struct {
	r     rune
	after map[rune]bool
}

// merge is one merge rule's rank (lower merges first) and result.
type merge struct{ rank, id uint32 }

func pairKey(a, b uint32) uint64 { return uint64(a)<<32 | uint64(b) }

// maxCachedWord bounds the words kept in the cache (bytes).
const maxCachedWord = 256

// encodeWord appends the ids of one pre-tokenized word. A word too long
// for the cache (a sentencepiece model without a pre-tokenizer sees the
// whole text as one word) is cut where no merge can cross, and each
// piece is encoded (and cached) on its own: the result is the same,
// since a merge inside one piece never depends on another.
func (m *bpe) encodeWord(word string, dst []uint32) []uint32 {
	if len(word) > maxCachedWord && m.cuts != nil {
		start, prev := 0, rune(-1)
		for i, r := range word {
			if i > start && m.cutBefore(prev, r) {
				dst = m.encodePiece(word[start:i], dst)
				start = i
			}
			prev = r
		}
		return m.encodePiece(word[start:], dst)
	}
	return m.encodePiece(word, dst)
}

// cutBefore reports whether a word may be cut between prev and r.
func (m *bpe) cutBefore(prev, r rune) bool {
	for i := range m.cuts {
		if c := &m.cuts[i]; c.r == r {
			return !c.after[prev]
		}
	}
	return false
}

// cutPoints finds, for each of runes, the runes that precede it inside
// some token of vocab: everywhere else a word may be cut before it.
func cutPoints(vocab map[string]uint32, runes ...rune) []cutRune {
	cuts := make([]cutRune, len(runes))
	for i, r := range runes {
		cuts[i] = cutRune{r: r, after: map[rune]bool{}}
	}
	for tok := range vocab {
		prev := rune(-1)
		for _, r := range tok {
			for i := range cuts {
				if cuts[i].r == r && prev >= 0 {
					cuts[i].after[prev] = true
				}
			}
			prev = r
		}
	}
	return cuts
}

// encodePiece appends the ids of a word or of a piece of one.
func (m *bpe) encodePiece(word string, dst []uint32) []uint32 {
	if word == "" {
		return dst
	}
	cacheable := m.cache != nil && len(word) <= maxCachedWord
	var h uint64
	if cacheable {
		// The cache first, the vocabulary (ignore_merges) second: the
		// cache's front table is cheaper to probe than the large map.
		h = m.cache.hash(word)
		if ids, ok := m.cache.get(word, h); ok {
			return append(dst, ids...)
		}
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[word]; ok {
			if cacheable {
				one := [1]uint32{id}
				m.cache.put(word, h, one[:])
			}
			return append(dst, id)
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
		m.cache.put(word, h, dst[start:])
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

// mergeHeap orders candidate merges by rank, then position: a binary
// min-heap kept by hand (container/heap would box every candidate).
type mergeHeap []mergeCand

type mergeCand struct {
	rank uint32
	pos  int32
}

func (c mergeCand) less(d mergeCand) bool {
	return c.rank < d.rank || (c.rank == d.rank && c.pos < d.pos)
}

func (h *mergeHeap) push(c mergeCand) {
	*h = append(*h, c)
	a := *h
	i := len(a) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !a[i].less(a[p]) {
			break
		}
		a[i], a[p] = a[p], a[i]
		i = p
	}
}

func (h *mergeHeap) pop() mergeCand {
	a := *h
	top := a[0]
	n := len(a) - 1
	a[0] = a[n]
	a = a[:n]
	*h = a
	a.down(0)
	return top
}

func (h mergeHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && h[r].less(h[l]) {
			m = r
		}
		if !h[m].less(h[i]) {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// init orders an unordered heap in O(n).
func (h mergeHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
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
	sc.h.init()
	for len(sc.h) > 0 {
		c := sc.h.pop()
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
				sc.h.push(mergeCand{rank: mg.rank, pos: p})
			}
		}
		if k := next[i]; k >= 0 {
			if mg, ok := m.merges[pairKey(syms[i], syms[k])]; ok {
				sc.h.push(mergeCand{rank: mg.rank, pos: i})
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
