package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/llbproject/llb/inventory"
)

// BenchmarkEngine_RequestLifecycle drives whole requests through the engine
// in virtual time (Submit, then Advance event by event until done), as a
// discrete-event simulator would: the cost of simulating one request.
// Prompts share a prefix of half their blocks, so the cache both hits and
// evicts.
func BenchmarkEngine_RequestLifecycle(b *testing.B) {
	for _, blocks := range []int{8, 128, 512} {
		for _, out := range []int{1, 64} {
			b.Run(fmt.Sprintf("prompt_blocks=%d/output=%d", blocks, out), func(b *testing.B) {
				c := DefaultConfig()
				c.NumBlocks = 16 * blocks
				c.MaxModelLen = blocks*16 + 1024
				e, err := New(c)
				if err != nil {
					b.Fatal(err)
				}
				shared := seq(1, blocks*8)
				prompts := make([][]uint32, 64)
				digests := make([][]inventory.Digest, len(prompts))
				for i := range prompts {
					prompts[i] = append(append([]uint32{}, shared...), seq(100000+i*blocks*8, blocks*8)...)
					digests[i], _ = e.Hasher().AppendDigests(nil, prompts[i], inventory.ExtraKeys{})
				}
				now := t0
				var prog []Progress
				var evs []inventory.Event
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if _, err := e.Submit(now, Request{ID: "r", Tokens: prompts[i%len(prompts)], Digests: digests[i%len(prompts)], MaxTokens: out}); err != nil {
						b.Fatal(err)
					}
					for {
						at, ok := e.NextEventTime()
						if !ok {
							break
						}
						now = at
						prog = e.Advance(now, prog[:0])
					}
					evs = e.TakeEvents(evs[:0])
					now = now.Add(time.Millisecond)
					i++
				}
			})
		}
	}
}

// BenchmarkHasher_FNV measures the llm-d key chain (the vLLM algorithms are
// inventory.Hasher's, benchmarked there).
func BenchmarkHasher_FNV(b *testing.B) {
	h, err := NewHasher(HashConfig{Algo: HashFNV, Seed: "0", Model: "m"}, 16)
	if err != nil {
		b.Fatal(err)
	}
	for _, blocks := range []int{8, 128} {
		toks := seq(1, 16*blocks)
		b.Run(fmt.Sprintf("blocks=%d", blocks), func(b *testing.B) {
			dst := make([]inventory.Digest, 0, blocks)
			b.ReportAllocs()
			for b.Loop() {
				dst, _ = h.AppendDigests(dst[:0], toks, inventory.ExtraKeys{})
			}
		})
	}
}
