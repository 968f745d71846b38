package engine

import (
	"container/list"

	"github.com/llbproject/llb/inventory"
)

// offloadTier is vLLM's KV offloading to CPU memory (OffloadingConnector
// with a CPU primary tier, LRU eviction): every block the GPU prefix cache
// stores is copied to CPU memory too, published as a BlockStored with
// medium "CPU" — tokenless and parentless, the GPU block's hash and block
// size, as the connector's take_events does — and evicted least recently
// used first (a BlockRemoved with medium "CPU"). A prompt whose prefix runs
// past the GPU cache into blocks held in CPU memory loads them instead of
// recomputing: they count as cached tokens (vLLM's num_cached_tokens
// includes a connector's external hits) and are stored on the GPU again.
//
// Invariant: len(byKey) == lru.Len() <= capacity.
type offloadTier struct {
	capacity int
	lru      *list.List // of inventory.Digest, front = most recently used
	byKey    map[uint64]*list.Element
}

func newOffloadTier(capacity int) *offloadTier {
	if capacity <= 0 {
		return nil
	}
	return &offloadTier{capacity: capacity, lru: list.New(), byKey: make(map[uint64]*list.Element, capacity)}
}

// has reports whether key is held (nil tier: never).
func (o *offloadTier) has(key uint64) bool {
	if o == nil {
		return false
	}
	_, ok := o.byKey[key]
	return ok
}

// len is the number of blocks held.
func (o *offloadTier) len() int {
	if o == nil {
		return 0
	}
	return o.lru.Len()
}

// store copies a run of GPU blocks to CPU memory and records the events:
// one BlockRemoved per block evicted to make room, then one BlockStored of
// the blocks that were not held yet (held ones only become most recent).
func (o *offloadTier) store(p *pool, digests []inventory.Digest, bs int) {
	if o == nil {
		return
	}
	var keys []uint64
	var digs []inventory.Digest
	for _, d := range digests {
		k := d.Key()
		if el, ok := o.byKey[k]; ok {
			o.lru.MoveToFront(el)
			continue
		}
		if o.lru.Len() >= o.capacity {
			old := o.lru.Back()
			od := old.Value.(inventory.Digest)
			o.lru.Remove(old)
			delete(o.byKey, od.Key())
			p.events = append(p.events, inventory.Event{
				Kind: inventory.EventBlockRemoved, BlockHashes: []uint64{od.Key()}, BlockDigests: []inventory.Digest{od},
				Medium: inventory.MediumCPU, HasMedium: true,
			})
		}
		o.byKey[k] = o.lru.PushFront(d)
		keys = append(keys, k)
		digs = append(digs, d)
	}
	if len(keys) == 0 {
		return
	}
	p.events = append(p.events, inventory.Event{
		Kind: inventory.EventBlockStored, BlockHashes: keys, BlockDigests: digs, BlockSize: bs,
		Medium: inventory.MediumCPU, HasMedium: true,
	})
}

// reset forgets every block (the CPU tier is cleared with the GPU cache).
func (o *offloadTier) reset() {
	if o == nil {
		return
	}
	o.lru.Init()
	clear(o.byKey)
}
