// Package engine is the simulated vLLM engine core: a prefix cache of KV
// blocks with vLLM's hash contract and LRU free queue, a running batch
// bounded by max-num-seqs with a FIFO waiting queue, a latency model, and the
// P/D (NIXL) roles. It produces exactly the KV events vLLM's block pool
// would publish.
//
// The engine is a pure, synchronous state machine in the etcd-raft manner:
// no goroutines, no clock, no I/O. Time comes in as an argument to every
// call, so the HTTP worker drives it in real time (a timer to NextEventTime)
// and a discrete-event simulator drives it in virtual time (jumping to
// NextEventTime). Outputs are values: Progress per changed request from
// Advance, KV events from TakeEvents. An Engine is not safe for concurrent
// use; it belongs to one owner.
package engine

import (
	"container/heap"
	"fmt"
	"time"

	"github.com/llbproject/llb/inventory"
)

// phase is where a request is in its life.
type phase uint8

const (
	phaseWaiting phase = iota
	phaseRunning
	phaseDone
)

// seqState is one request inside the engine.
type seqState struct {
	t       Ticket
	req     Request
	digests []inventory.Digest
	phase   phase
	remote  bool // honoured RemoteDecode
	pulled  bool // honoured RemotePrefill

	blocks []int32 // full prompt blocks, then private blocks
	nFull  int

	nextAt  time.Time // next token time while running
	heapIdx int
	dirty   bool
	prog    Progress
}

// lease is a finished prefill leg's blocks, pinned for the decode side.
type lease struct {
	id      string
	blocks  []int32
	expires time.Time
	gone    bool // released before expiry (lazy removal from the FIFO)
}

// Stats is a snapshot of the engine's gauges and counters.
type Stats struct {
	// Running and Waiting are the batch and queue sizes.
	Running, Waiting int
	// Leases is the number of prefill legs holding blocks for a decode side.
	Leases int
	// NumBlocks is the cache capacity; BlocksInUse are held by running
	// requests or leases; CachedBlocks are findable by hash.
	NumBlocks, BlocksInUse, CachedBlocks int
	// PrefixQueries and PrefixHits count prompt tokens looked up and found
	// (vllm:prefix_cache_queries/hits).
	PrefixQueries, PrefixHits uint64
	// Submitted, Finished, Aborted and Rejected count requests.
	Submitted, Finished, Aborted, Rejected uint64
	// RemoteDecodeLegs counts prefill legs that returned kv_transfer_params.
	RemoteDecodeLegs uint64
	// RemotePrefillLegs counts decode legs served from pulled blocks.
	RemotePrefillLegs uint64
	// RemoteParamsIgnored counts kv_transfer_params the role does not honour.
	RemoteParamsIgnored uint64
	// LeasesReleased and LeasesExpired count how leases ended.
	LeasesReleased, LeasesExpired uint64
	// BlocksStored and BlocksRemoved count blocks named by emitted events.
	BlocksStored, BlocksRemoved uint64
	// PendingEvents is the number of KV events not yet taken.
	PendingEvents int
}

// KVUsage is the fraction of blocks in use (vllm:kv_cache_usage_perc).
func (s Stats) KVUsage() float64 {
	if s.NumBlocks == 0 {
		return 0
	}
	return float64(s.BlocksInUse) / float64(s.NumBlocks)
}

// Engine is the simulated engine core. See the package comment.
type Engine struct {
	cfg    Config
	hasher *Hasher
	pool   pool
	now    time.Time

	next    Ticket
	reqs    map[Ticket]*seqState
	waiting []*seqState // FIFO; aborted entries are skipped lazily
	nWait   int
	running runHeap

	leases  []*lease // FIFO == expiry order (constant lease, monotone clock)
	leaseBy map[string]*lease

	dirty []*seqState
	st    Stats
}

// New builds an Engine from a validated configuration.
func New(cfg Config) (*Engine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	h, err := NewHasher(cfg.Hash, cfg.BlockSize)
	if err != nil {
		return nil, err
	}
	return &Engine{
		cfg:     cfg,
		hasher:  h,
		pool:    newPool(cfg.NumBlocks),
		reqs:    make(map[Ticket]*seqState),
		leaseBy: make(map[string]*lease),
	}, nil
}

// Config returns the engine's configuration.
func (e *Engine) Config() Config { return e.cfg }

// Hasher returns the engine's (concurrency-safe) block hasher, for callers
// that hash prompts in parallel before Submit.
func (e *Engine) Hasher() *Hasher { return e.hasher }

// Submit queues a request at time now (after processing everything due
// before now) and admits it at once if the batch and the cache have room.
// A request that can never run (empty, too long for MaxModelLen or for the
// whole cache, wrong digest count) is ErrInvalidRequest; a full queue is
// ErrQueueFull. Neither changes any state but the Rejected counter.
func (e *Engine) Submit(now time.Time, req Request) (Ticket, error) {
	e.advance(now)
	s, err := e.prepare(req)
	if err != nil {
		e.st.Rejected++
		return 0, err
	}
	if e.cfg.MaxWaiting > 0 && e.nWait >= e.cfg.MaxWaiting {
		e.st.Rejected++
		return 0, fmt.Errorf("submit %q: %d waiting: %w", req.ID, e.nWait, ErrQueueFull)
	}
	e.next++
	s.t = e.next
	s.prog.Ticket = s.t
	e.reqs[s.t] = s
	e.waiting = append(e.waiting, s)
	e.nWait++
	e.st.Submitted++
	e.markDirty(s)
	e.admitWaiting(e.now)
	return s.t, nil
}

// prepare validates req and builds its state (digests included).
func (e *Engine) prepare(req Request) (*seqState, error) {
	bs := e.cfg.BlockSize
	switch {
	case len(req.Tokens) == 0:
		return nil, fmt.Errorf("submit %q: empty prompt: %w", req.ID, ErrInvalidRequest)
	case req.MaxTokens < 1:
		return nil, fmt.Errorf("submit %q: max tokens %d (want >= 1): %w", req.ID, req.MaxTokens, ErrInvalidRequest)
	case len(req.Tokens)+req.MaxTokens > e.cfg.MaxModelLen:
		return nil, fmt.Errorf("submit %q: %d prompt + %d output tokens exceed max model len %d: %w",
			req.ID, len(req.Tokens), req.MaxTokens, e.cfg.MaxModelLen, ErrInvalidRequest)
	case ceilDiv(len(req.Tokens)+req.MaxTokens, bs) > e.cfg.NumBlocks:
		return nil, fmt.Errorf("submit %q: needs %d blocks, the cache has %d: %w",
			req.ID, ceilDiv(len(req.Tokens)+req.MaxTokens, bs), e.cfg.NumBlocks, ErrInvalidRequest)
	}
	if err := req.Extra.Validate(); err != nil {
		return nil, fmt.Errorf("submit %q: %w: %w", req.ID, ErrInvalidRequest, err)
	}
	s := &seqState{req: req, heapIdx: -1}
	if req.RemoteDecode {
		if e.cfg.Role.ServesRemoteDecode() {
			s.remote = true
		} else {
			e.st.RemoteParamsIgnored++
		}
	}
	if req.RemotePrefill != nil {
		if e.cfg.Role.AcceptsRemotePrefill() {
			s.pulled = true
		} else {
			e.st.RemoteParamsIgnored++
		}
	}
	if s.pulled {
		return s, nil // the prompt's blocks are private: no lookup, no digests
	}
	nb := len(req.Tokens) / bs
	switch {
	case req.Digests == nil:
		d, err := e.hasher.AppendDigests(make([]inventory.Digest, 0, nb), req.Tokens, req.Extra)
		if err != nil {
			return nil, fmt.Errorf("submit %q: %w: %w", req.ID, ErrInvalidRequest, err)
		}
		s.digests = d
	case len(req.Digests) != nb:
		return nil, fmt.Errorf("submit %q: %d digests for %d full blocks: %w", req.ID, len(req.Digests), nb, ErrInvalidRequest)
	default:
		s.digests = req.Digests
	}
	return s, nil
}

// Abort cancels a waiting or running request at now, freeing its blocks.
// Its final Progress (Finish = FinishAbort) comes out of the next Advance.
func (e *Engine) Abort(now time.Time, t Ticket) error {
	e.advance(now)
	s, ok := e.reqs[t]
	if !ok || s.phase == phaseDone {
		return fmt.Errorf("abort ticket %d: %w", t, ErrUnknownRequest)
	}
	switch s.phase {
	case phaseWaiting:
		e.nWait--
	case phaseRunning:
		heap.Remove(&e.running, s.heapIdx)
		e.pool.releaseAll(s.blocks)
		s.blocks = nil
	}
	s.phase = phaseDone
	s.prog.Done, s.prog.DoneAt, s.prog.Finish = true, e.now, FinishAbort
	e.st.Aborted++
	e.markDirty(s)
	e.admitWaiting(e.now)
	return nil
}

// ReleaseLease ends a prefill leg's lease when the decode side has pulled
// its blocks. blockIDs, when non-nil, must equal the leased ids (a decode
// side sending someone else's ids is ErrInvalidRequest). It returns the
// number of blocks released. An unknown or expired id is ErrUnknownRequest.
func (e *Engine) ReleaseLease(now time.Time, requestID string, blockIDs []int) (int, error) {
	e.advance(now)
	l, ok := e.leaseBy[requestID]
	if !ok {
		return 0, fmt.Errorf("release lease %q: %w", requestID, ErrUnknownRequest)
	}
	if blockIDs != nil && !sameBlocks(l.blocks, blockIDs) {
		return 0, fmt.Errorf("release lease %q: block ids %v do not match the leased %v: %w", requestID, blockIDs, l.blocks, ErrInvalidRequest)
	}
	n := len(l.blocks)
	e.endLease(l)
	e.st.LeasesReleased++
	e.admitWaiting(e.now)
	return n, nil
}

// Reset drops every cached block and records AllBlocksCleared, as
// POST /reset_prefix_cache does. Like vLLM it refuses (ErrBlocksInUse) while
// any block is held.
func (e *Engine) Reset(now time.Time) error {
	e.advance(now)
	if e.pool.inUse > 0 {
		return fmt.Errorf("reset prefix cache: %d blocks held by %d running requests and %d leases: %w",
			e.pool.inUse, e.running.Len(), len(e.leaseBy), ErrBlocksInUse)
	}
	e.pool.reset()
	return nil
}

// Advance processes everything due at or before now (token emissions,
// completions, lease expiries, admissions they make room for) and appends
// the Progress of every request that changed since the last Advance to dst.
// Events are processed at their own times, not at now, so a virtual-time
// driver can call Advance with large steps and lose no precision.
func (e *Engine) Advance(now time.Time, dst []Progress) []Progress {
	e.advance(now)
	for _, s := range e.dirty {
		s.dirty = false
		dst = append(dst, s.prog)
		if s.phase == phaseDone {
			delete(e.reqs, s.t)
		}
	}
	clear(e.dirty)
	e.dirty = e.dirty[:0]
	return dst
}

// NextEventTime is when the engine next changes state by itself (a token, a
// completion, a lease expiry); ok is false when nothing is scheduled.
// Progress already pending (from Submit or Abort) is not an event: call
// Advance after them.
func (e *Engine) NextEventTime() (t time.Time, ok bool) {
	if e.running.Len() > 0 {
		t, ok = e.running.items[0].nextAt, true
	}
	if l := e.firstLease(); l != nil && (!ok || l.expires.Before(t)) {
		t, ok = l.expires, true
	}
	return t, ok
}

// TakeEvents appends the pending KV events (oldest first) to dst and
// forgets them: one call per engine step gives one EventBatch.
func (e *Engine) TakeEvents(dst []inventory.Event) []inventory.Event {
	dst = append(dst, e.pool.events...)
	clear(e.pool.events)
	e.pool.events = e.pool.events[:0]
	return dst
}

// Stats returns a snapshot of the gauges and counters.
func (e *Engine) Stats() Stats {
	s := e.st
	s.Running = e.running.Len()
	s.Waiting = e.nWait
	s.Leases = len(e.leaseBy)
	s.NumBlocks = e.cfg.NumBlocks
	s.BlocksInUse = e.pool.inUse
	s.CachedBlocks = e.pool.cachedBlocks()
	s.BlocksStored, s.BlocksRemoved = e.pool.stored, e.pool.removed
	s.PendingEvents = len(e.pool.events)
	return s
}

// advance moves the clock to now, processing due events in time order.
func (e *Engine) advance(now time.Time) {
	if now.Before(e.now) {
		now = e.now // the clock never runs backwards
	}
	for {
		t, ok := e.NextEventTime()
		if !ok || t.After(now) {
			break
		}
		e.now = t
		if l := e.firstLease(); l != nil && !l.expires.After(t) && (e.running.Len() == 0 || l.expires.Before(e.running.items[0].nextAt)) {
			e.endLease(l)
			e.st.LeasesExpired++
		} else {
			e.step(e.running.items[0], t)
		}
		e.admitWaiting(t)
	}
	e.now = now
}

// step emits one token of a running request at t.
func (e *Engine) step(s *seqState, t time.Time) {
	s.prog.Generated++
	if s.prog.Generated == 1 {
		s.prog.FirstTokenAt = t
	}
	e.markDirty(s)
	if s.prog.Generated >= s.req.MaxTokens {
		heap.Remove(&e.running, s.heapIdx)
		e.finish(s, t)
		return
	}
	s.nextAt = t.Add(e.scaled(e.cfg.Latency.InterTokenLatency, e.loadFactor(e.running.Len())))
	heap.Fix(&e.running, s.heapIdx)
}

// finish completes a request that generated all its tokens.
func (e *Engine) finish(s *seqState, t time.Time) {
	s.phase = phaseDone
	s.prog.Done, s.prog.DoneAt, s.prog.Finish = true, t, FinishLength
	e.st.Finished++
	if !s.remote {
		e.pool.releaseAll(s.blocks)
		s.blocks = nil
		return
	}
	full := s.blocks[:s.nFull]
	e.pool.releaseAll(s.blocks[s.nFull:])
	ids := make([]int, len(full))
	for i, id := range full {
		ids[i] = int(id)
	}
	s.prog.Remote = &RemoteParams{EngineID: e.cfg.EngineID, RequestID: s.req.ID, BlockIDs: ids, NumTokens: len(s.req.Tokens)}
	e.st.RemoteDecodeLegs++
	s.blocks = nil
	if len(full) == 0 {
		return
	}
	if old, dup := e.leaseBy[s.req.ID]; dup {
		e.endLease(old) // a reused request id replaces the older lease
	}
	l := &lease{id: s.req.ID, blocks: full, expires: t.Add(e.cfg.KVLease)}
	e.leases = append(e.leases, l)
	e.leaseBy[l.id] = l
}

// admitWaiting admits queued requests in FIFO order while the batch and the
// cache have room; the head blocks the queue (FCFS, as vLLM's scheduler).
func (e *Engine) admitWaiting(t time.Time) {
	for e.running.Len() < e.cfg.MaxNumSeqs && len(e.waiting) > 0 {
		s := e.waiting[0]
		if s.phase != phaseWaiting { // aborted while waiting
			e.popWaiting()
			continue
		}
		if !e.admit(s, t) {
			return
		}
		e.popWaiting()
		e.nWait--
	}
}

// popWaiting drops the queue head.
func (e *Engine) popWaiting() {
	e.waiting[0] = nil
	e.waiting = e.waiting[1:]
	if len(e.waiting) == 0 {
		e.waiting = nil // let the backing array go
	}
}

// admit allocates s's blocks and starts it at t; false when the cache
// cannot hold it yet.
func (e *Engine) admit(s *seqState, t time.Time) bool {
	bs := e.cfg.BlockSize
	total := ceilDiv(len(s.req.Tokens)+s.req.MaxTokens, bs)
	var dur time.Duration
	if s.pulled {
		if e.pool.free < total {
			return false
		}
		s.blocks = make([]int32, 0, total)
		for range total {
			s.blocks = append(s.blocks, e.pool.allocate())
		}
		lat := e.cfg.Latency
		dur = e.scaled(lat.KVTransferOverhead+time.Duration(s.req.RemotePrefill.Blocks)*lat.KVTransferPerBlock, 1)
		s.prog.PulledRemote = true
		e.st.RemotePrefillLegs++
	} else {
		hit, ok := e.allocatePrompt(s, total)
		if !ok {
			return false
		}
		s.prog.CachedTokens = hit * bs
		e.st.PrefixQueries += uint64(len(s.req.Tokens))
		e.st.PrefixHits += uint64(hit * bs)
		lat := e.cfg.Latency
		uncached := len(s.req.Tokens) - hit*bs
		dur = e.scaled(lat.PrefillOverhead+time.Duration(uncached)*lat.PrefillPerToken, e.loadFactor(e.running.Len()+1))
	}
	s.phase = phaseRunning
	s.prog.Admitted, s.prog.AdmittedAt = true, t
	s.nextAt = t.Add(dur)
	heap.Push(&e.running, s)
	e.markDirty(s)
	return true
}

// allocatePrompt finds the cached prefix, pins it, allocates and caches the
// new full blocks (recording BlockStored runs) and the private blocks. It
// returns the number of hit blocks, or false (and changes nothing) when the
// free queue is too short.
func (e *Engine) allocatePrompt(s *seqState, total int) (int, bool) {
	bs := e.cfg.BlockSize
	nb := len(s.digests)
	// vLLM always recomputes at least the last prompt token.
	maxHit := min(nb, (len(s.req.Tokens)-1)/bs)
	hit := 0
	for hit < maxHit {
		if _, ok := e.pool.lookup(s.digests[hit].Key()); !ok {
			break
		}
		hit++
	}
	// Blocks past the hit that are still cached (their prefix was evicted
	// out of order) are reused, not duplicated.
	existing := make([]int32, nb)
	pinnedFree, need := 0, total-nb
	for i := range nb {
		id, ok := e.pool.lookup(s.digests[i].Key())
		if i >= hit && !ok {
			need++
			continue
		}
		existing[i] = id
		if e.pool.blocks[id].refs == 0 {
			pinnedFree++
		}
	}
	if e.pool.free-pinnedFree < need {
		return 0, false
	}
	// Pin what is cached, then allocate every new block (evictions first,
	// as vLLM's get_new_blocks), then cache the new full blocks.
	s.blocks = make([]int32, 0, total)
	for i := range nb {
		id := existing[i]
		if id != 0 {
			e.pool.touch(id)
		} else {
			id = e.pool.allocate()
		}
		s.blocks = append(s.blocks, id)
	}
	for len(s.blocks) < total {
		s.blocks = append(s.blocks, e.pool.allocate())
	}
	s.nFull = nb
	runStart := -1
	for i := range nb {
		if existing[i] == 0 {
			e.pool.cache(s.blocks[i], s.digests[i])
			if runStart < 0 {
				runStart = i
			}
		} else if runStart >= 0 {
			e.recordStored(s, runStart, i)
			runStart = -1
		}
	}
	if runStart >= 0 {
		e.recordStored(s, runStart, nb)
	}
	return hit, true
}

// recordStored records one BlockStored event for s's new full blocks
// [from, to), in prefix order, with the parent hash of block from-1.
func (e *Engine) recordStored(s *seqState, from, to int) {
	bs := e.cfg.BlockSize
	ev := inventory.Event{
		Kind:         inventory.EventBlockStored,
		BlockHashes:  make([]uint64, 0, to-from),
		BlockDigests: s.digests[from:to:to],
		TokenIDs:     s.req.Tokens[from*bs : to*bs : to*bs],
		BlockSize:    bs,
		Medium:       inventory.MediumGPU, HasMedium: true,
		ExtraKeys: make([]any, to-from), HasExtraKeys: true,
		GroupIdx: 0, HasGroupIdx: true,
		SpecKind: inventory.SpecFullAttention, HasSpecKind: true,
	}
	for i := from; i < to; i++ {
		ev.BlockHashes = append(ev.BlockHashes, s.digests[i].Key())
		if t := s.req.Extra.BlockTuple(i, bs); t != nil {
			ev.ExtraKeys[i-from] = t
		}
	}
	if from > 0 {
		ev.HasParent = true
		ev.ParentDigest = s.digests[from-1]
		ev.Parent = ev.ParentDigest.Key()
	}
	if s.req.Extra.LoRAName != "" {
		ev.LoRAName, ev.HasLoRAName = s.req.Extra.LoRAName, true
		ev.LoRAID, ev.HasLoRAID = int64(s.req.LoRAID), s.req.LoRAID != 0
	}
	e.pool.events = append(e.pool.events, ev)
	e.pool.stored += uint64(to - from)
}

// endLease releases a lease's blocks and forgets it.
func (e *Engine) endLease(l *lease) {
	e.pool.releaseAll(l.blocks)
	l.gone = true
	delete(e.leaseBy, l.id)
}

// firstLease is the oldest live lease (nil if none), dropping ended ones.
func (e *Engine) firstLease() *lease {
	for len(e.leases) > 0 && e.leases[0].gone {
		e.leases[0] = nil
		e.leases = e.leases[1:]
	}
	if len(e.leases) == 0 {
		e.leases = nil
		return nil
	}
	return e.leases[0]
}

// loadFactor is llm-d-inference-sim's time factor for n running requests.
func (e *Engine) loadFactor(n int) float64 {
	if e.cfg.MaxNumSeqs <= 1 || n <= 1 {
		return 1
	}
	return 1 + (e.cfg.Latency.TimeFactorUnderLoad-1)*float64(n-1)/float64(e.cfg.MaxNumSeqs-1)
}

// scaled applies the load factor and the time scale to d.
func (e *Engine) scaled(d time.Duration, factor float64) time.Duration {
	return time.Duration(float64(d) * factor * e.cfg.Latency.TimeScale)
}

// markDirty queues s's Progress for the next Advance.
func (e *Engine) markDirty(s *seqState) {
	if !s.dirty {
		s.dirty = true
		e.dirty = append(e.dirty, s)
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func sameBlocks(a []int32, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if int(a[i]) != b[i] {
			return false
		}
	}
	return true
}

// runHeap orders running requests by next event time, then ticket.
type runHeap struct{ items []*seqState }

func (h *runHeap) Len() int { return len(h.items) }
func (h *runHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if !a.nextAt.Equal(b.nextAt) {
		return a.nextAt.Before(b.nextAt)
	}
	return a.t < b.t
}
func (h *runHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].heapIdx = i
	h.items[j].heapIdx = j
}
func (h *runHeap) Push(x any) {
	s := x.(*seqState)
	s.heapIdx = len(h.items)
	h.items = append(h.items, s)
}
func (h *runHeap) Pop() any {
	n := len(h.items) - 1
	s := h.items[n]
	h.items[n] = nil
	h.items = h.items[:n]
	s.heapIdx = -1
	return s
}
