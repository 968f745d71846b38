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

	// Step model (SchedStep) only.
	computed   int    // prompt tokens computed (cache hit included)
	registered int    // leading full prompt blocks published as cached
	fresh      []bool // fresh[i]: prompt block i was allocated, not found cached
	chunk      int    // prompt tokens this step computes; 0 for a decode

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
	// OffloadedBlocks is the number of blocks the CPU offload tier holds;
	// LoadedBlocks counts prompt blocks loaded from it instead of computed.
	OffloadedBlocks int
	LoadedBlocks    uint64
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
	// RunningLoRAs and WaitingLoRAs are the adapters of the running and
	// waiting requests, comma-joined in name order (the
	// vllm:lora_requests_info labels); LoRASwaps counts adapters swapped
	// into a GPU slot.
	RunningLoRAs, WaitingLoRAs string
	LoRASwaps                  uint64
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

	// Step model (SchedStep) only: the running batch in admission order,
	// and the step under way (stepping) with its end and its requests.
	batch    []*seqState
	stepping bool
	stepEnd  time.Time
	sched    []*seqState

	dirty   []*seqState
	scratch []int32      // allocatePrompt's per-block lookup results
	offload *offloadTier // nil without CPU offloading
	// blockedHead is the queue head whose admission last failed for want
	// of free blocks, and blockedFree the free count then: until blocks are
	// freed (the count changes) the same attempt would fail the same way,
	// so it is not re-run at every event.
	blockedHead *seqState
	blockedFree int
	st          Stats
	lora        loraState
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
		offload: newOffloadTier(cfg.OffloadBlocks),
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
		if e.cfg.KVRole.ServesRemoteDecode() {
			s.remote = true
		} else {
			e.st.RemoteParamsIgnored++
		}
	}
	if req.RemotePrefill != nil {
		if e.cfg.KVRole.AcceptsRemotePrefill() {
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
		if e.cfg.Scheduler == SchedStep {
			e.dropFromBatch(s)
		} else {
			heap.Remove(&e.running, s.heapIdx)
		}
		e.loraLeave(s)
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
			e.pool.inUse, e.runningLen(), len(e.leaseBy), ErrBlocksInUse)
	}
	e.pool.reset()
	e.offload.reset()
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
	switch {
	case e.stepping:
		t, ok = e.stepEnd, true
	case e.running.Len() > 0:
		t, ok = e.running.items[0].nextAt, true
	}
	if l := e.firstLease(); l != nil && (!ok || l.expires.Before(t)) {
		t, ok = l.expires, true
	}
	return t, ok
}

// TakeEvents appends the pending KV events (oldest first) to dst and
// forgets them: one call per engine step gives one EventBatch. The events'
// slices stay valid until the next TakeEvents call (the engine reuses their
// storage then), so encode or copy them before taking more.
func (e *Engine) TakeEvents(dst []inventory.Event) []inventory.Event {
	dst = append(dst, e.pool.events...)
	e.pool.takeEvents()
	return dst
}

// PendingEvents is the number of KV events TakeEvents would return.
func (e *Engine) PendingEvents() int { return len(e.pool.events) }

// Stats returns a snapshot of the gauges and counters.
func (e *Engine) Stats() Stats {
	s := e.st
	s.Running = e.runningLen()
	s.Waiting = e.nWait
	s.Leases = len(e.leaseBy)
	s.NumBlocks = e.cfg.NumBlocks
	s.BlocksInUse = e.pool.inUse
	s.CachedBlocks = e.pool.cachedBlocks()
	s.OffloadedBlocks = e.offload.len()
	s.BlocksStored, s.BlocksRemoved = e.pool.stored, e.pool.removed
	s.PendingEvents = len(e.pool.events)
	s.RunningLoRAs, s.WaitingLoRAs = e.loraLabels()
	s.LoRASwaps = e.lora.swaps
	return s
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
