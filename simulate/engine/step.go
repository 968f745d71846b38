package engine

import (
	"slices"
	"time"
)

// The step model (SchedStep): vLLM V1's scheduler loop, simplified.
//
// A step starts when the engine is idle and work arrives, or when the
// previous step ends. It spends a token budget of MaxNumBatchedTokens:
// first on the running batch in admission order — one token for each
// decoding request, the rest of the prompt (up to the budget left) for a
// request still in prefill — then on waiting requests in FIFO order, each
// admitted while the batch has fewer than MaxNumSeqs requests and its
// blocks fit (the head of the queue blocks it, as in vLLM), with as much of
// its uncached prompt as the budget allows (chunked prefill). A request
// whose prompt completes in a step produces its first token at the step's
// end; a decoding request produces one token per step. The step lasts
// StepLatency's cost of what it computes, so a long prefill in the batch
// stretches every decode in it, and a request joins a busy engine only at
// the next step boundary.
//
// Simplifications, against vLLM: a request's blocks (prompt and max_tokens
// output) are allocated when it is admitted, so nothing is ever preempted;
// a running request later in the batch waits for budget rather than being
// scheduled out of order. Prompt blocks are cached — findable by later
// requests and published as BlockStored — at the end of the step that
// computes them, as vLLM publishes its KV events after each step; two
// requests computing the same block at once keep one cached copy.

// startStep schedules a step at t, or leaves the engine idle when there is
// nothing to run.
func (e *Engine) startStep(t time.Time) {
	budget := e.cfg.MaxNumBatchedTokens
	e.sched = e.sched[:0]
	var cost stepCost
	for _, s := range e.batch {
		if budget == 0 {
			break
		}
		budget = e.plan(s, budget, &cost)
	}
	for i := 0; budget > 0 && len(e.batch) < e.cfg.MaxNumSeqs && i < len(e.waiting); {
		s := e.waiting[i]
		if s.phase != phaseWaiting { // aborted while waiting
			e.removeWaiting(i)
			continue
		}
		if !e.loraFits(s) {
			i++ // skipped: its adapter would be one too many
			continue
		}
		if s == e.blockedHead && e.pool.free == e.blockedFree {
			break
		}
		if !e.admitStep(s, t) {
			e.blockedHead, e.blockedFree = s, e.pool.free
			break
		}
		e.blockedHead = nil
		e.removeWaiting(i)
		e.nWait--
		cost.swap += e.loraJoin(s)
		e.batch = append(e.batch, s)
		budget = e.plan(s, budget, &cost)
	}
	if len(e.sched) == 0 {
		e.stepping = false
		return
	}
	e.stepping, e.stepEnd = true, t.Add(e.stepDuration(cost))
}

// stepCost accumulates a step's composition.
type stepCost struct {
	prefill, decode, context, pairs float64
	swap                            time.Duration // LoRA adapters swapped in
}

// plan gives s its share of the step's budget and returns what is left.
func (e *Engine) plan(s *seqState, budget int, c *stepCost) int {
	if need := len(s.req.Tokens) - s.computed; need > 0 {
		n := min(need, budget)
		s.chunk = n
		c.prefill += float64(n)
		c.pairs += float64(n) * (float64(s.computed) + float64(n)/2)
		budget -= n
	} else {
		s.chunk = 0
		c.decode++
		c.context += float64(len(s.req.Tokens) + s.prog.Generated)
		budget--
	}
	e.sched = append(e.sched, s)
	return budget
}

// stepDuration is StepLatency's cost of c, scaled by TimeScale (at least
// a nanosecond, so time always moves).
func (e *Engine) stepDuration(c stepCost) time.Duration {
	l := e.cfg.Step
	us := l.FixedUs + l.PrefillTokenUs*c.prefill + l.DecodeTokenUs*c.decode + l.ContextTokenUs*c.context + l.AttentionPairUs*c.pairs
	return max(time.Duration((us*1000+float64(c.swap))*e.cfg.Latency.TimeScale), time.Nanosecond)
}

// admitStep allocates s's blocks and enters it into the batch at t; false
// when the cache cannot hold it yet.
func (e *Engine) admitStep(s *seqState, t time.Time) bool {
	bs := e.cfg.BlockSize
	total := ceilDiv(len(s.req.Tokens)+s.req.MaxTokens, bs)
	if s.pulled {
		// A decode leg's prompt KV was pulled: it decodes from its first
		// step. The pull itself (KVTransfer*) is not modelled here.
		blocks, ok := e.pool.allocateN(total)
		if !ok {
			return false
		}
		s.blocks = blocks
		s.computed = len(s.req.Tokens)
		s.prog.PulledRemote = true
		e.st.RemotePrefillLegs++
	} else {
		hit, loaded, ok := e.allocatePrompt(s, total, true)
		if !ok {
			return false
		}
		s.computed, s.registered = hit*bs, hit
		s.prog.CachedTokens = hit * bs
		e.st.PrefixQueries += uint64(len(s.req.Tokens))
		e.st.PrefixHits += uint64(hit * bs)
		e.st.LoadedBlocks += uint64(loaded) // loaded blocks count as cached; the step model does not price the copy
	}
	s.phase = phaseRunning
	s.prog.Admitted, s.prog.AdmittedAt = true, t
	e.markDirty(s)
	return true
}

// finishStep applies the step ending at t: prompt chunks computed (their
// full blocks cached and published), first tokens for completed prompts, a
// token for each decode, completions; then it starts the next step.
func (e *Engine) finishStep(t time.Time) {
	e.stepping = false
	done := false
	for _, s := range e.sched {
		if s.phase != phaseRunning { // aborted during the step
			continue
		}
		if s.chunk > 0 {
			s.computed += s.chunk
			s.chunk = 0
			e.registerComputed(s)
			if s.computed < len(s.req.Tokens) {
				continue // more prompt to compute
			}
		}
		s.prog.Generated++
		if s.prog.Generated == 1 {
			s.prog.FirstTokenAt = t
		}
		e.markDirty(s)
		if s.prog.Generated >= s.req.MaxTokens {
			e.finish(s, t)
			done = true
		}
	}
	clear(e.sched)
	e.sched = e.sched[:0]
	if done {
		e.batch = slices.DeleteFunc(e.batch, func(s *seqState) bool { return s.phase != phaseRunning })
	}
	e.startStep(t)
}

// registerComputed caches and publishes s's fresh prompt blocks that its
// computed tokens now cover, in BlockStored runs. A block whose key
// another request cached meanwhile stays private (one cached copy).
func (e *Engine) registerComputed(s *seqState) {
	full := min(s.computed/e.cfg.BlockSize, s.nFull)
	from := s.registered
	runStart := -1
	for i := s.registered; i < full; i++ {
		_, taken := e.pool.lookup(s.digests[i].Key())
		if s.fresh[i] && !taken {
			e.pool.cache(s.blocks[i], s.digests[i])
			if runStart < 0 {
				runStart = i
			}
			continue
		}
		if runStart >= 0 {
			e.recordStored(s, runStart, i)
			runStart = -1
		}
	}
	if runStart >= 0 {
		e.recordStored(s, runStart, full)
	}
	if full > from {
		e.offload.store(&e.pool, s.digests[from:full], e.cfg.BlockSize)
	}
	s.registered = max(s.registered, full)
}

// dropFromBatch removes an aborted request from the running batch.
func (e *Engine) dropFromBatch(s *seqState) {
	if i := slices.Index(e.batch, s); i >= 0 {
		e.batch = slices.Delete(e.batch, i, i+1)
	}
}
