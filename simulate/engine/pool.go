package engine

import (
	"github.com/llbproject/llb/inventory"
)

// pool is the KV block pool with vLLM's prefix-cache semantics
// (vllm/v1/core/block_pool.py): one free queue holds every block no running
// request references, uncached and cached alike, in eviction order; a
// cached block stays findable by its key until it is popped for reuse, and
// popping it evicts it (one BlockRemoved event). Blocks are freed to the
// tail, so the least recently freed block is reused first.
//
// Invariant: a block is in the free queue iff refs == 0; byKey maps a key to
// a block iff that block is cached; free counts the queue, inUse counts
// blocks with refs > 0, and free + inUse == the number of blocks.
type pool struct {
	blocks []blockMeta // index = physical block id; [0] is the queue sentinel (vLLM's null block)
	byKey  map[uint64]int32
	free   int
	inUse  int
	events []inventory.Event // pending KV events, oldest first

	// Storage the pending BlockRemoved events alias (one key and one digest
	// per evicted block), reused after takeEvents.
	remKeys []uint64
	remDigs []inventory.Digest

	stored, removed uint64 // blocks named by emitted events
}

// blockMeta is one physical block.
type blockMeta struct {
	prev, next int32 // free-queue links (valid while refs == 0)
	refs       int32
	cached     bool
	digest     inventory.Digest
}

// newPool builds a pool of n blocks (ids 1..n), all free and uncached.
func newPool(n int) pool {
	p := pool{blocks: make([]blockMeta, n+1), byKey: make(map[uint64]int32, n)}
	p.blocks[0].prev, p.blocks[0].next = 0, 0
	for id := int32(1); id <= int32(n); id++ {
		p.pushTail(id)
	}
	return p
}

// pushTail appends a block to the free queue.
func (p *pool) pushTail(id int32) {
	last := p.blocks[0].prev
	p.blocks[id].prev, p.blocks[id].next = last, 0
	p.blocks[last].next = id
	p.blocks[0].prev = id
	p.free++
}

// unlink removes a block from the free queue.
func (p *pool) unlink(id int32) {
	b := &p.blocks[id]
	p.blocks[b.prev].next = b.next
	p.blocks[b.next].prev = b.prev
	b.prev, b.next = 0, 0
	p.free--
}

// lookup finds the cached block with key.
func (p *pool) lookup(key uint64) (int32, bool) {
	id, ok := p.byKey[key]
	return id, ok
}

// touch takes a reference on a (cached) block, taking it out of the free
// queue if nobody held it.
func (p *pool) touch(id int32) {
	b := &p.blocks[id]
	if b.refs == 0 {
		p.unlink(id)
		p.inUse++
	}
	b.refs++
}

// allocate pops the head of the free queue with one reference, evicting it
// from the cache (a BlockRemoved event) if it was cached. The caller checks
// that free > 0.
func (p *pool) allocate() int32 {
	id := p.blocks[0].next
	p.unlink(id)
	b := &p.blocks[id]
	if b.cached {
		p.evict(id)
	}
	b.refs = 1
	p.inUse++
	return id
}

// allocateN allocates n blocks (allocate) and returns them; false, taking
// none, when fewer than n are free.
func (p *pool) allocateN(n int) ([]int32, bool) {
	if p.free < n {
		return nil, false
	}
	ids := make([]int32, 0, n)
	for range n {
		ids = append(ids, p.allocate())
	}
	return ids, true
}

// evict forgets a cached block and records the BlockRemoved event.
func (p *pool) evict(id int32) {
	b := &p.blocks[id]
	key := b.digest.Key()
	delete(p.byKey, key)
	p.remKeys = append(p.remKeys, key)
	p.remDigs = append(p.remDigs, b.digest)
	n := len(p.remKeys)
	p.events = append(p.events, inventory.Event{
		Kind:         inventory.EventBlockRemoved,
		BlockHashes:  p.remKeys[n-1 : n : n],
		BlockDigests: p.remDigs[n-1 : n : n],
		Medium:       inventory.MediumGPU, HasMedium: true,
		GroupIdx: 0, HasGroupIdx: true,
	})
	p.removed++
	b.cached = false
	b.digest = inventory.Digest{}
}

// takeEvents forgets the pending events and recycles their storage.
func (p *pool) takeEvents() {
	clear(p.events)
	p.events = p.events[:0]
	p.remKeys = p.remKeys[:0]
	p.remDigs = p.remDigs[:0]
}

// cache registers a freshly allocated block under its digest.
func (p *pool) cache(id int32, d inventory.Digest) {
	b := &p.blocks[id]
	b.cached = true
	b.digest = d
	p.byKey[d.Key()] = id
}

// release drops one reference; a block nobody holds goes to the queue tail.
func (p *pool) release(id int32) {
	b := &p.blocks[id]
	b.refs--
	if b.refs == 0 {
		p.inUse--
		p.pushTail(id)
	}
}

// releaseAll releases blocks in reverse order, as vLLM frees a request's
// blocks (its last block becomes the first eviction candidate).
func (p *pool) releaseAll(ids []int32) {
	for i := len(ids) - 1; i >= 0; i-- {
		p.release(ids[i])
	}
}

// cachedBlocks is the number of blocks findable by key.
func (p *pool) cachedBlocks() int { return len(p.byKey) }

// reset forgets every cached block and records AllBlocksCleared. The
// caller checks that no block is in use.
func (p *pool) reset() {
	for _, id := range p.byKey {
		p.blocks[id].cached = false
		p.blocks[id].digest = inventory.Digest{}
	}
	clear(p.byKey)
	p.events = append(p.events, inventory.Event{Kind: inventory.EventAllBlocksCleared})
}
