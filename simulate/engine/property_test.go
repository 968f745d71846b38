package engine

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/llbproject/llb/inventory"
)

// checkPool asserts the pool's invariants.
func checkPool(t *rapid.T, e *Engine) {
	p := &e.pool
	n := len(p.blocks) - 1
	if p.free+p.inUse != n {
		t.Fatalf("free %d + in use %d != %d blocks", p.free, p.inUse, n)
	}
	queued := 0
	for id, steps := p.blocks[0].next, 0; id != 0; id, steps = p.blocks[id].next, steps+1 {
		if steps > n {
			t.Fatalf("free queue has a cycle")
		}
		if p.blocks[id].refs != 0 {
			t.Fatalf("block %d in the free queue with %d refs", id, p.blocks[id].refs)
		}
		queued++
	}
	if queued != p.free {
		t.Fatalf("free queue holds %d blocks; free says %d", queued, p.free)
	}
	cached := 0
	for id := 1; id <= n; id++ {
		b := p.blocks[id]
		if b.refs < 0 {
			t.Fatalf("block %d has %d refs", id, b.refs)
		}
		if b.cached {
			cached++
			if got, ok := p.byKey[b.digest.Key()]; !ok || got != int32(id) {
				t.Fatalf("cached block %d not findable by its key", id)
			}
		}
	}
	if cached != len(p.byKey) {
		t.Fatalf("%d cached blocks; index holds %d", cached, len(p.byKey))
	}
}

// TestEngine_EventsMirrorTheCache drives random traffic through either
// engine model and checks, after every operation, that a consumer applying the KV events (as llb's
// inventory does, with reference counts) holds exactly the engine's cached
// keys, and that the pool invariants hold.
func TestEngine_EventsMirrorTheCache(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		c := testConfig()
		c.NumBlocks = rapid.IntRange(4, 24).Draw(t, "blocks")
		c.MaxNumSeqs = rapid.IntRange(1, 4).Draw(t, "seqs")
		c.KVRole = KVBoth
		c.EngineID = "e"
		c.KVLease = 50 * time.Millisecond
		if rapid.Bool().Draw(t, "stepModel") {
			c.Scheduler = SchedStep
			c.MaxNumBatchedTokens = rapid.IntRange(1, 32).Draw(t, "budget")
			c.Step = StepLatency{FixedUs: 5000, PrefillTokenUs: 1000, DecodeTokenUs: 100}
		}
		e, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		mirror := map[uint64]int{}
		apply := func() {
			for _, ev := range e.TakeEvents(nil) {
				switch ev.Kind {
				case inventory.EventBlockStored:
					for _, k := range ev.BlockHashes {
						mirror[k]++
					}
				case inventory.EventBlockRemoved:
					for _, k := range ev.BlockHashes {
						if mirror[k] == 0 {
							t.Fatalf("BlockRemoved of %d never stored", k)
						}
						if mirror[k]--; mirror[k] == 0 {
							delete(mirror, k)
						}
					}
				case inventory.EventAllBlocksCleared:
					clear(mirror)
				}
			}
			if len(mirror) != len(e.pool.byKey) {
				t.Fatalf("mirror holds %d keys; cache %d", len(mirror), len(e.pool.byKey))
			}
			for k, n := range mirror {
				if _, ok := e.pool.byKey[k]; !ok || n != 1 {
					t.Fatalf("mirror key %d (count %d) not cached once", k, n)
				}
			}
		}
		now := t0
		var tickets []Ticket
		var leased []RemoteParams
		prefixes := [][]uint32{seq(1, 12), seq(500, 12), seq(900, 4)}
		steps := rapid.IntRange(1, 60).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1: // submit prefix + suffix
				pre := prefixes[rapid.IntRange(0, len(prefixes)-1).Draw(t, "prefix")]
				suffix := seq(rapid.IntRange(2000, 2100).Draw(t, "suffix"), rapid.IntRange(0, 9).Draw(t, "suffixLen"))
				tokens := append(append([]uint32{}, pre...), suffix...)
				req := Request{ID: "r", Tokens: tokens, MaxTokens: rapid.IntRange(1, 6).Draw(t, "out"),
					RemoteDecode: rapid.Bool().Draw(t, "remote")}
				if tk, err := e.Submit(now, req); err == nil {
					tickets = append(tickets, tk)
				}
			case 2: // time passes
				now = now.Add(time.Duration(rapid.IntRange(0, 80).Draw(t, "ms")) * time.Millisecond)
			case 3: // abort something
				if len(tickets) > 0 {
					_ = e.Abort(now, tickets[rapid.IntRange(0, len(tickets)-1).Draw(t, "victim")])
				}
			case 4: // a decode side pulls a lease
				if len(leased) > 0 {
					i := rapid.IntRange(0, len(leased)-1).Draw(t, "lease")
					_, _ = e.ReleaseLease(now, leased[i].RequestID, leased[i].BlockIDs)
				}
			case 5:
				_ = e.Reset(now)
			}
			for _, p := range e.Advance(now, nil) {
				if p.Remote != nil {
					leased = append(leased, *p.Remote)
				}
			}
			checkPool(t, e)
			apply()
			if st := e.Stats(); st.PrefixHits > st.PrefixQueries {
				t.Fatalf("hits %d > queries %d", st.PrefixHits, st.PrefixQueries)
			}
		}
		// Drain: everything finishes, leases expire, nothing stays held.
		for i := 0; ; i++ {
			at, ok := e.NextEventTime()
			if !ok {
				break
			}
			if i > 100000 {
				t.Fatalf("engine never idles")
			}
			e.Advance(at, nil)
		}
		checkPool(t, e)
		apply()
		if st := e.Stats(); st.BlocksInUse != 0 || st.Running != 0 || st.Waiting != 0 {
			t.Fatalf("idle engine still holds: %+v", st)
		}
	})
}
