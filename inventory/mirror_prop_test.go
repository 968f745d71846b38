package inventory

import (
	"testing"

	"pgregory.net/rapid"
)

// TestMirror_MatchesMultisetModel applies random store/remove/clear
// sequences from a few overlapping prompts and checks Score and Len against
// a plain multiset of engine keys, in both modes.
func TestMirror_MatchesMultisetModel(t *testing.T) {
	h := mustExactHasher(t, "0")
	th := mustTokenHasher(t, 4)
	eng := engine{h: h}
	rapid.Check(t, func(t *rapid.T) {
		tokenMode := rapid.Bool().Draw(t, "token_mode")
		var keys ChainHasher = h
		if tokenMode {
			keys = th
		}
		m, err := NewMirror(MirrorConfig{Keys: keys})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		// Prompts share prefixes: prompt p's block b has tokens depending on
		// (p/2, b) for b < 2 and on p afterwards.
		prompts := make([][]uint32, 6)
		for p := range prompts {
			for b := 0; b < 5; b++ {
				base := 1000*(p/2) + 10*b
				if b >= 2 {
					base = 100000*p + 10*b
				}
				prompts[p] = append(prompts[p], seqTokens(base, 4)...)
			}
		}
		model := map[uint64]int{} // engine key -> refs
		ops := rapid.IntRange(1, 60).Draw(t, "ops")
		for op := 0; op < ops; op++ {
			p := rapid.IntRange(0, len(prompts)-1).Draw(t, "prompt")
			switch rapid.IntRange(0, 6).Draw(t, "op") {
			case 0, 1, 2: // store blocks [from, to) of prompt p, as the engine would
				to := rapid.IntRange(1, 5).Draw(t, "to")
				from := rapid.IntRange(0, to-1).Draw(t, "from")
				ev := eng.store(t, prompts[p][:4*to], from, ExtraKeys{})
				if tokenMode && from > 0 && model[ev.Parent] == 0 {
					// an orphan in token mode is not indexed
					m.Apply(batchOf(ev))
					continue
				}
				m.Apply(batchOf(ev))
				for _, k := range ev.BlockHashes {
					model[k]++
				}
			case 3, 4, 5: // remove one block of prompt p
				b := rapid.IntRange(0, 4).Draw(t, "block")
				k := h.AppendBlockKeys(nil, prompts[p][:4*(b+1)], ExtraKeys{})[b]
				m.Apply(batchOf(removed(k)))
				if model[k] > 0 {
					model[k]--
					if model[k] == 0 {
						delete(model, k)
					}
				}
			case 6:
				if rapid.IntRange(0, 9).Draw(t, "clear?") == 0 {
					m.Apply(batchOf(Event{Kind: EventAllBlocksCleared}))
					clear(model)
				}
			}
		}
		if m.Stats().EngineBlocks != len(model) {
			t.Fatalf("mirror holds %d engine keys; model %d", m.Stats().EngineBlocks, len(model))
		}
		for p, toks := range prompts {
			engineChain := h.AppendBlockKeys(nil, toks, ExtraKeys{})
			want := 0
			for want < len(engineChain) && model[engineChain[want]] > 0 {
				want++
			}
			if got := m.Score(keys.AppendBlockKeys(nil, toks, ExtraKeys{})); got != want {
				t.Fatalf("prompt %d scores %d; model %d", p, got, want)
			}
		}
	})
}
