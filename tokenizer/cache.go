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

// hotWord is one front-table entry; never modified once stored.
type hotWord struct {
	word string
	ids  []uint32
}

const cacheShards = 16

type cacheShard struct {
	mu sync.RWMutex
	m  map[string][]uint32
}

// newWordCache bounds the cache to about capacity words.
func newWordCache(capacity int) *wordCache {
	c := &wordCache{seed: maphash.MakeSeed(), perShard: max(capacity/cacheShards, 1)}
	for i := range c.shards {
		c.shards[i].m = make(map[string][]uint32)
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
	ids, ok := s.m[w]
	s.mu.RUnlock()
	if ok {
		// A clone: the entry keeps no reference to the caller's text.
		c.hot[h%hotSlots].Store(&hotWord{word: strings.Clone(w), ids: ids})
	}
	return ids, ok
}

// put records w's ids (h: its hash); ids is copied.
func (c *wordCache) put(w string, h uint64, ids []uint32) {
	s := &c.shards[(h/hotSlots)%cacheShards]
	v := append([]uint32(nil), ids...)
	k := strings.Clone(w)
	s.mu.Lock()
	if len(s.m) >= c.perShard {
		clear(s.m)
	}
	s.m[k] = v
	s.mu.Unlock()
	c.hot[h%hotSlots].Store(&hotWord{word: k, ids: v})
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
