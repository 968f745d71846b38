package engine

import (
	"testing"

	"github.com/llbproject/llb/inventory"
)

// tokensFrom returns n tokens start, start+1, ...
func tokensFrom(start, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(start + i)
	}
	return out
}

func TestOffload_EvictedGPUBlocksAreLoadedFromCPUAndPublishedPerTier(t *testing.T) {
	c := testConfig() // 16 GPU blocks of 4 tokens
	c.OffloadBlocks = 64
	e := newEngine(t, c)
	a := tokensFrom(1, 4*4+1) // 4 full blocks
	tk := submit(t, e, t0, Request{ID: "a", Tokens: a, MaxTokens: 1})
	runUntilDone(t, e, tk)
	var stored [2]int // GPU, CPU blocks stored
	count := func() {
		for _, ev := range e.TakeEvents(nil) {
			tier, _ := inventory.TierOf(&ev)
			if ev.Kind == inventory.EventBlockStored {
				stored[tier] += len(ev.BlockHashes)
				if tier == inventory.TierCPU && (len(ev.TokenIDs) != 0 || ev.HasParent || ev.BlockSize != 4) {
					t.Fatalf("CPU BlockStored %+v; want tokenless, parentless, block_size 4", ev)
				}
			}
		}
	}
	count()
	if stored != [2]int{4, 4} {
		t.Fatalf("stored %v; want 4 GPU and 4 CPU blocks", stored)
	}
	// Fill the GPU with other prompts so a's blocks are evicted there.
	for i := 0; i < 4; i++ {
		tk := submit(t, e, t0, Request{ID: "f", Tokens: tokensFrom(1000*(i+1), 15), MaxTokens: 1})
		runUntilDone(t, e, tk)
	}
	count()
	if st := e.Stats(); st.OffloadedBlocks != 4+4*3 {
		t.Fatalf("offloaded %d; want 16", st.OffloadedBlocks)
	}
	tk = submit(t, e, t0, Request{ID: "a2", Tokens: a, MaxTokens: 1})
	p := runUntilDone(t, e, tk)
	if p.CachedTokens != 16 {
		t.Fatalf("cached tokens %d; want 16 (4 blocks loaded from CPU memory)", p.CachedTokens)
	}
	if st := e.Stats(); st.LoadedBlocks == 0 {
		t.Fatalf("stats %+v; want loaded blocks counted", st)
	}
}
