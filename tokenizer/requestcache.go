package tokenizer

import (
	"container/list"
	"sync"
)

// requestCache is an LRU of token sequences bounded by bytes. Keys are
// 128-bit hashes of the exact /tokenize request body, so a long prompt costs
// 16 bytes of key, not its text. Safe for concurrent use.
type requestCache struct {
	mu       sync.Mutex
	maxBytes int64
	bytes    int64
	ll       *list.List // front = most recent; values are *requestEntry
	m        map[[16]byte]*list.Element
}

type requestEntry struct {
	key    [16]byte
	tokens []uint32
}

// requestEntryOverhead approximates the per-entry bookkeeping in bytes (list
// element, map slot, entry header).
const requestEntryOverhead = 128

func newRequestCache(maxBytes int64) *requestCache {
	return &requestCache{maxBytes: maxBytes, ll: list.New(), m: make(map[[16]byte]*list.Element)}
}

func entrySize(tokens []uint32) int64 { return int64(4*len(tokens) + requestEntryOverhead) }

// appendGet appends the cached tokens for key to dst.
func (c *requestCache) appendGet(key [16]byte, dst []uint32) ([]uint32, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.m[key]
	if !ok {
		return dst, false
	}
	c.ll.MoveToFront(el)
	return append(dst, el.Value.(*requestEntry).tokens...), true
}

// put stores a private copy of tokens, evicting least-recently used
// entries beyond the byte bound. Entries larger than the bound are not kept.
func (c *requestCache) put(key [16]byte, tokens []uint32) {
	size := entrySize(tokens)
	if size > c.maxBytes {
		return
	}
	own := append([]uint32(nil), tokens...)
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[key]; ok {
		c.ll.MoveToFront(el)
		return
	}
	c.m[key] = c.ll.PushFront(&requestEntry{key: key, tokens: own})
	c.bytes += size
	for c.bytes > c.maxBytes {
		el := c.ll.Back()
		e := el.Value.(*requestEntry)
		c.ll.Remove(el)
		delete(c.m, e.key)
		c.bytes -= entrySize(e.tokens)
	}
}

// stats returns the entry count and byte total.
func (c *requestCache) stats() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m), c.bytes
}
