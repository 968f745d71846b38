package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// wordCache maps a word to its BPE ids. In front, a direct-mapped table
// of recent words read without a lock (one hash, one load, one compare:
// the common words of a request are found there); behind it, maps sharded
// so concurrent encodes rarely meet on a lock, where a full shard is
// cleared (words repeat, a cleared shard refills from the next requests).
// A word's hash picks both its slot and its shard.
type wordCache struct {
	seed     maphash.Seed
	perShard int
	hot      [hotSlots]atomic.Pointer[hotWord]
	shards   [cacheShards]cacheShard
}

// hotSlots is the front table's size (a power of two): the distinct words
// of a few 8k-token requests.
const hotSlots = 1 << 13

// hotWord is one cached word; never modified once stored. The front
// table and the shards share it, so promoting a word costs no allocation.
type hotWord struct {
	word string
	ids  []uint32
}

const cacheShards = 16

type cacheShard struct {
	mu sync.RWMutex
	m  map[string]*hotWord
}

// newWordCache bounds the cache to about capacity words.
func newWordCache(capacity int) *wordCache {
	c := &wordCache{seed: maphash.MakeSeed(), perShard: max(capacity/cacheShards, 1)}
	for i := range c.shards {
		c.shards[i].m = make(map[string]*hotWord)
	}
	return c
}

// hash is w's hash, for get and put.
func (c *wordCache) hash(w string) uint64 { return maphash.String(c.seed, w) }

// get returns w's ids (h: its hash). The slice is shared: callers copy it.
func (c *wordCache) get(w string, h uint64) ([]uint32, bool) {
	if e := c.hot[h%hotSlots].Load(); e != nil && e.word == w {
		return e.ids, true
	}
	s := &c.shards[(h/hotSlots)%cacheShards]
	s.mu.RLock()
	e, ok := s.m[w]
	s.mu.RUnlock()
	if !ok {
		return nil, false
	}
	c.hot[h%hotSlots].Store(e)
	return e.ids, true
}

// put records w's ids (h: its hash); ids is copied.
func (c *wordCache) put(w string, h uint64, ids []uint32) {
	s := &c.shards[(h/hotSlots)%cacheShards]
	e := &hotWord{word: strings.Clone(w), ids: append([]uint32(nil), ids...)}
	s.mu.Lock()
	if len(s.m) >= c.perShard {
		clear(s.m)
	}
	s.m[e.word] = e
	s.mu.Unlock()
	c.hot[h%hotSlots].Store(e)
}

// len counts the cached words.
func (c *wordCache) len() int {
	n := 0
	for i := range c.shards {
		s := &c.shards[i]
		s.mu.RLock()
		n += len(s.m)
		s.mu.RUnlock()
	}
	return n
}
