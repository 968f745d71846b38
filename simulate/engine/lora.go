package engine

import (
	"slices"
	"strings"
	"time"
)

// LoRA adapters, as vLLM V1's scheduler batches them: at most MaxLoRAs
// distinct adapters run at once. A waiting request whose adapter would be
// one too many is skipped — the scheduler moves on to the next waiting
// request, so the queue head does not block it — until a running adapter's
// last request ends. The GPU holds MaxLoRAs adapters (least recently used
// evicted when no running request uses it); a request whose adapter is not
// there pays LoRASwapIn before its prefill, as vLLM loads it from its CPU
// cache into a slot. Requests without an adapter (LoRAID 0) are free of
// all of this. The running and waiting adapters are what vLLM's
// vllm:lora_requests_info gauge shows (Stats.RunningLoRAs, WaitingLoRAs).

// loraState is the engine's adapter bookkeeping.
type loraState struct {
	running map[int]int    // adapter → running requests
	names   map[int]string // adapter → its name (for the gauge)
	slots   []int          // GPU-resident adapters, most recent last
	swaps   uint64
}

// loraFits reports whether s may join the running batch without going past
// MaxLoRAs adapters.
func (e *Engine) loraFits(s *seqState) bool {
	id := s.req.LoRAID
	if id == 0 || e.cfg.MaxLoRAs <= 0 {
		return true
	}
	if e.lora.running[id] > 0 {
		return true
	}
	return len(e.lora.running) < e.cfg.MaxLoRAs
}

// loraJoin counts s into the running batch and returns the swap-in time
// its adapter costs (0 when resident).
func (e *Engine) loraJoin(s *seqState) time.Duration {
	id := s.req.LoRAID
	if id == 0 {
		return 0
	}
	l := &e.lora
	if l.running == nil {
		l.running, l.names = map[int]int{}, map[int]string{}
	}
	l.running[id]++
	l.names[id] = s.req.Extra.LoRAName
	if i := slices.Index(l.slots, id); i >= 0 {
		l.slots = append(slices.Delete(l.slots, i, i+1), id)
		return 0
	}
	if max := e.cfg.MaxLoRAs; max > 0 && len(l.slots) >= max {
		for i, old := range l.slots {
			if l.running[old] == 0 {
				l.slots = slices.Delete(l.slots, i, i+1)
				break
			}
		}
	}
	l.slots = append(l.slots, id)
	l.swaps++
	return e.cfg.LoRASwapIn
}

// loraLeave counts s out of the running batch.
func (e *Engine) loraLeave(s *seqState) {
	id := s.req.LoRAID
	if id == 0 || e.lora.running == nil {
		return
	}
	if e.lora.running[id]--; e.lora.running[id] <= 0 {
		delete(e.lora.running, id)
	}
}

// loraLabels returns the running and waiting adapters, comma-joined in
// name order, as the gauge's labels.
func (e *Engine) loraLabels() (running, waiting string) {
	if e.lora.names == nil {
		return "", ""
	}
	var r, w []string
	for id := range e.lora.running {
		r = append(r, e.lora.names[id])
	}
	seen := map[int]bool{}
	for _, s := range e.waiting {
		if id := s.req.LoRAID; id != 0 && s.phase == phaseWaiting && !seen[id] {
			seen[id] = true
			w = append(w, s.req.Extra.LoRAName)
		}
	}
	slices.Sort(r)
	slices.Sort(w)
	return strings.Join(r, ","), strings.Join(w, ",")
}
