package engine

import (
	"container/heap"
	"slices"
	"time"

	"github.com/llbproject/llb/inventory"
)

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
		switch l := e.firstLease(); {
		case l != nil && !l.expires.After(t) && e.leaseFirst(l):
			e.endLease(l)
			e.st.LeasesExpired++
		case e.stepping:
			e.finishStep(t)
		default:
			e.step(e.running.items[0], t)
		}
		e.admitWaiting(t)
	}
	e.now = now
}

// leaseFirst reports whether lease l expires before the next batch event.
func (e *Engine) leaseFirst(l *lease) bool {
	switch {
	case e.stepping:
		return l.expires.Before(e.stepEnd)
	case e.running.Len() > 0:
		return l.expires.Before(e.running.items[0].nextAt)
	}
	return true
}

// runningLen is the running batch's size under either model.
func (e *Engine) runningLen() int {
	if e.cfg.Scheduler == SchedStep {
		return len(e.batch)
	}
	return e.running.Len()
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
	e.loraLeave(s)
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
// The step model admits only when it schedules a step: an idle engine
// starts one at t.
func (e *Engine) admitWaiting(t time.Time) {
	if e.cfg.Scheduler == SchedStep {
		if !e.stepping {
			e.startStep(t)
		}
		return
	}
	for i := 0; e.running.Len() < e.cfg.MaxNumSeqs && i < len(e.waiting); {
		s := e.waiting[i]
		if s.phase != phaseWaiting { // aborted while waiting
			e.removeWaiting(i)
			continue
		}
		if !e.loraFits(s) {
			i++ // vLLM skips it: its adapter would be one too many
			continue
		}
		if s == e.blockedHead && e.pool.free == e.blockedFree {
			return // nothing was freed since this head last failed to fit
		}
		if !e.admit(s, t) {
			e.blockedHead, e.blockedFree = s, e.pool.free
			return
		}
		e.blockedHead = nil
		e.removeWaiting(i)
		e.nWait--
	}
}

// removeWaiting drops waiting request i (the head, or one the LoRA limit
// had the scheduler skip past).
func (e *Engine) removeWaiting(i int) {
	if i == 0 {
		e.popWaiting()
		return
	}
	e.waiting = slices.Delete(e.waiting, i, i+1)
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
		blocks, ok := e.pool.allocateN(total)
		if !ok {
			return false
		}
		s.blocks = blocks
		lat := e.cfg.Latency
		dur = e.scaled(lat.KVTransferOverhead+time.Duration(s.req.RemotePrefill.Blocks)*lat.KVTransferPerBlock, 1)
		s.prog.PulledRemote = true
		e.st.RemotePrefillLegs++
	} else {
		hit, loaded, ok := e.allocatePrompt(s, total, false)
		if !ok {
			return false
		}
		s.prog.CachedTokens = hit * bs
		e.st.PrefixQueries += uint64(len(s.req.Tokens))
		e.st.PrefixHits += uint64(hit * bs)
		e.st.LoadedBlocks += uint64(loaded)
		lat := e.cfg.Latency
		uncached := len(s.req.Tokens) - hit*bs
		// Blocks loaded from CPU memory cost a transfer each, not a prefill.
		dur = e.scaled(lat.PrefillOverhead+time.Duration(uncached)*lat.PrefillPerToken+time.Duration(loaded)*lat.KVTransferPerBlock,
			e.loadFactor(e.running.Len()+1))
	}
	dur += e.scaled(e.loraJoin(s), 1)
	s.phase = phaseRunning
	s.prog.Admitted, s.prog.AdmittedAt = true, t
	s.nextAt = t.Add(dur)
	heap.Push(&e.running, s)
	e.markDirty(s)
	return true
}

// allocatePrompt finds the cached prefix, pins it, allocates and caches the
// new full blocks (recording BlockStored runs) and the private blocks. It
// returns the number of hit blocks — GPU hits, continued by blocks loaded
// from the CPU offload tier — and how many of them were loaded, or false
// (and changes nothing) when the free queue is too short. With deferCache
// (the step model) the new full blocks are not cached yet: s.fresh marks
// them, and they are cached (and copied to the offload tier) as the steps
// that compute them end (registerComputed).
func (e *Engine) allocatePrompt(s *seqState, total int, deferCache bool) (int, int, bool) {
	bs := e.cfg.BlockSize
	nb := len(s.digests)
	// vLLM always recomputes at least the last prompt token. Blocks past
	// the hit that are still cached (their prefix was evicted out of
	// order) are reused, not duplicated.
	maxHit := min(nb, (len(s.req.Tokens)-1)/bs)
	if cap(e.scratch) < nb {
		e.scratch = make([]int32, nb)
	}
	existing := e.scratch[:nb]
	hit, contiguous := 0, true
	pinnedFree, need := 0, total-nb
	for i := range nb {
		id, ok := e.pool.lookup(s.digests[i].Key())
		if !ok {
			existing[i] = 0
			need++
			contiguous = false
			continue
		}
		existing[i] = id
		if contiguous && i < maxHit {
			hit++
		}
		if e.pool.blocks[id].refs == 0 {
			pinnedFree++
		}
	}
	if e.pool.free-pinnedFree < need {
		return 0, 0, false
	}
	// The prefix continues past the GPU hit through blocks held in the CPU
	// tier (loaded, then cached on the GPU again) or on the GPU out of order.
	loaded := 0
	for e.offload != nil && hit < maxHit {
		switch {
		case existing[hit] != 0:
		case e.offload.has(s.digests[hit].Key()):
			loaded++
		default:
			maxHit = hit
			continue
		}
		hit++
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
	if deferCache {
		s.fresh = make([]bool, nb)
		for i := range nb {
			s.fresh[i] = existing[i] == 0
		}
		return hit, loaded, true
	}
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
	e.offload.store(&e.pool, s.digests[:nb], bs)
	return hit, loaded, true
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
