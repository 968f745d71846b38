package tokenizer

import (
	"hash/maphash"
	"strings"
	"sync"
)

// wordCache maps a word to its BPE ids. It is sharded so concurrent
// encodes rarely meet on a lock; a full shard is cleared (words repeat, a
// cleared shard refills from the next requests).
type wordCache struct {
	seed     maphash.Seed
	perShard int
	shards   [cacheShards]cacheShard
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

func (c *wordCache) shard(w string) *cacheShard {
	return &c.shards[maphash.String(c.seed, w)%cacheShards]
}

func (c *wordCache) get(w string) ([]uint32, bool) {
	s := c.shard(w)
	s.mu.RLock()
	ids, ok := s.m[w]
	s.mu.RUnlock()
	return ids, ok
}

func (c *wordCache) put(w string, ids []uint32) {
	s := c.shard(w)
	v := append([]uint32(nil), ids...)
	k := strings.Clone(w)
	s.mu.Lock()
	if len(s.m) >= c.perShard {
		clear(s.m)
	}
	s.m[k] = v
	s.mu.Unlock()
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
