package engine

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/llbproject/llb/inventory"
)

var t0 = time.Unix(1_700_000_000, 0)

// testConfig is a small engine with round latencies: prefill 10ms +
// 1ms/token, ITL 5ms, no load factor, time scale 1.
func testConfig() Config {
	c := DefaultConfig()
	c.BlockSize = 4
	c.NumBlocks = 16
	c.MaxNumSeqs = 4
	c.MaxModelLen = 1024
	c.Latency = Latency{
		PrefillOverhead:     10 * time.Millisecond,
		PrefillPerToken:     time.Millisecond,
		InterTokenLatency:   5 * time.Millisecond,
		TimeFactorUnderLoad: 1,
		KVTransferOverhead:  2 * time.Millisecond,
		KVTransferPerBlock:  time.Millisecond,
		TimeScale:           1,
	}
	return c
}

func newEngine(t *testing.T, c Config) *Engine {
	t.Helper()
	e, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func submit(t *testing.T, e *Engine, at time.Time, req Request) Ticket {
	t.Helper()
	tk, err := e.Submit(at, req)
	if err != nil {
		t.Fatalf("submit %q: %v", req.ID, err)
	}
	return tk
}

// runToEnd advances through every scheduled event and returns the final
// Progress of each request by ticket.
func runToEnd(t *testing.T, e *Engine) map[Ticket]Progress {
	t.Helper()
	out := map[Ticket]Progress{}
	for _, p := range e.Advance(t0, nil) {
		out[p.Ticket] = p
	}
	for i := 0; i < 100000; i++ {
		at, ok := e.NextEventTime()
		if !ok {
			return out
		}
		for _, p := range e.Advance(at, nil) {
			out[p.Ticket] = p
		}
	}
	t.Fatal("engine did not go idle")
	return nil
}

// runUntilDone advances event by event until tk is done.
func runUntilDone(t *testing.T, e *Engine, tk Ticket) Progress {
	t.Helper()
	for i := 0; i < 100000; i++ {
		at, ok := e.NextEventTime()
		if !ok {
			at = t0
		}
		for _, p := range e.Advance(at, nil) {
			if p.Ticket == tk && p.Done {
				return p
			}
		}
		if !ok {
			t.Fatalf("ticket %d never finished", tk)
		}
	}
	t.Fatalf("ticket %d never finished", tk)
	return Progress{}
}

func storedKeys(evs []inventory.Event) []uint64 {
	var out []uint64
	for _, ev := range evs {
		if ev.Kind == inventory.EventBlockStored {
			out = append(out, ev.BlockHashes...)
		}
	}
	return out
}

func TestEngine_StoresNewFullBlocksInPrefixOrderWithParent(t *testing.T) {
	e := newEngine(t, testConfig())
	h := e.Hasher()
	a := seq(1, 10) // 2 full blocks + 2 tokens
	submit(t, e, t0, Request{ID: "a", Tokens: a, MaxTokens: 1})
	evs := e.TakeEvents(nil)
	if len(evs) != 1 {
		t.Fatalf("%d events; want 1 BlockStored", len(evs))
	}
	ev := evs[0]
	want, _ := h.AppendDigests(nil, a, inventory.ExtraKeys{})
	if !slices.Equal(ev.BlockHashes, keysOf(want)) || ev.HasParent {
		t.Fatalf("stored %v parent %v; want %v and no parent", ev.BlockHashes, ev.HasParent, keysOf(want))
	}
	if !slices.Equal(ev.TokenIDs, a[:8]) || ev.BlockSize != 4 || ev.Medium != "GPU" || !ev.HasGroupIdx ||
		ev.GroupIdx != 0 || ev.SpecKind != "full_attention" || len(ev.ExtraKeys) != 2 || ev.HasLoRAName {
		t.Fatalf("event fields %+v", ev)
	}

	// b shares block 0 only: one hit block, and block 1' stored with parent = block 0.
	b := append(seq(1, 4), seq(50, 6)...)
	tk := submit(t, e, t0, Request{ID: "b", Tokens: b, MaxTokens: 1})
	evs = e.TakeEvents(nil)
	bw, _ := h.AppendDigests(nil, b, inventory.ExtraKeys{})
	if len(evs) != 1 || !slices.Equal(evs[0].BlockHashes, keysOf(bw[1:])) || !evs[0].HasParent || evs[0].Parent != want[0].Key() {
		t.Fatalf("events %+v; want one BlockStored of block 1 with parent %d", evs, want[0].Key())
	}
	got := runToEnd(t, e)[tk]
	if got.CachedTokens != 4 {
		t.Fatalf("cached tokens %d; want 4", got.CachedTokens)
	}
	st := e.Stats()
	if st.PrefixQueries != 20 || st.PrefixHits != 4 {
		t.Fatalf("queries/hits %d/%d; want 20/4", st.PrefixQueries, st.PrefixHits)
	}
}

func TestEngine_RecomputesTheLastPromptToken(t *testing.T) {
	tests := []struct {
		name       string
		giveTokens int
		wantCached int
	}{
		{"block aligned prompt keeps its last block uncached", 8, 4},
		{"prompt with a partial block hits every full block", 9, 8},
		{"prompt shorter than a block hits nothing", 3, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, testConfig())
			submit(t, e, t0, Request{ID: "warm", Tokens: seq(1, tt.giveTokens), MaxTokens: 1})
			runToEnd(t, e)
			tk := submit(t, e, t0.Add(time.Second), Request{ID: "again", Tokens: seq(1, tt.giveTokens), MaxTokens: 1})
			if got := runToEnd(t, e)[tk].CachedTokens; got != tt.wantCached {
				t.Fatalf("cached %d; want %d", got, tt.wantCached)
			}
		})
	}
}

func TestEngine_EvictsLeastRecentlyFreedFirstOneEventPerBlock(t *testing.T) {
	c := testConfig()
	c.NumBlocks = 4
	e := newEngine(t, c)
	h := e.Hasher()
	// a: 3 full blocks (+1 output token => 4 blocks total with the partial).
	a := seq(1, 12)
	submit(t, e, t0, Request{ID: "a", Tokens: a, MaxTokens: 1})
	runToEnd(t, e)
	e.TakeEvents(nil)
	// b needs 2 full blocks + 1 private: 3 blocks, evicting a's blocks from
	// the queue head: vLLM frees in reverse, so a's LAST blocks go first.
	b := seq(100, 8)
	submit(t, e, t0.Add(time.Second), Request{ID: "b", Tokens: b, MaxTokens: 1})
	evs := e.TakeEvents(nil)
	aw, _ := h.AppendDigests(nil, a, inventory.ExtraKeys{})
	var removed []uint64
	for _, ev := range evs {
		if ev.Kind == inventory.EventBlockRemoved {
			if len(ev.BlockHashes) != 1 || ev.Medium != "GPU" || !ev.HasGroupIdx {
				t.Fatalf("removed event %+v; want one hash, GPU, group 0", ev)
			}
			removed = append(removed, ev.BlockHashes[0])
		}
	}
	// Free queue after a: [private-of-a? no: a had 3 full + 1 private] ->
	// reversed free: private, a2, a1, a0. b takes 3: private (uncached), a2, a1.
	want := []uint64{aw[2].Key(), aw[1].Key()}
	if !slices.Equal(removed, want) {
		t.Fatalf("removed %v; want %v (a's tail first)", removed, want)
	}
	if evs[len(evs)-1].Kind != inventory.EventBlockStored {
		t.Fatalf("last event %v; want BlockStored after the removals", evs[len(evs)-1].Kind)
	}
	// a's block 0 survived.
	tk := submit(t, e, t0.Add(2*time.Second), Request{ID: "a0", Tokens: seq(1, 5), MaxTokens: 1})
	if got := runToEnd(t, e)[tk].CachedTokens; got != 4 {
		t.Fatalf("a's first block cached %d tokens; want 4", got)
	}
}

func TestEngine_NeverEvictsBlocksInUse(t *testing.T) {
	c := testConfig()
	c.NumBlocks = 4
	e := newEngine(t, c)
	long := submit(t, e, t0, Request{ID: "long", Tokens: seq(1, 8), MaxTokens: 5}) // 13 tokens: 4 blocks
	blocked := submit(t, e, t0, Request{ID: "next", Tokens: seq(100, 4), MaxTokens: 1})
	ps := e.Advance(t0, nil)
	for _, p := range ps {
		if p.Ticket == blocked && p.Admitted {
			t.Fatalf("request admitted while every block is held")
		}
	}
	for _, ev := range e.TakeEvents(nil) {
		if ev.Kind == inventory.EventBlockRemoved {
			t.Fatalf("evicted a block in use: %+v", ev)
		}
	}
	if st := e.Stats(); st.Waiting != 1 || st.BlocksInUse != 4 {
		t.Fatalf("waiting %d in use %d; want 1 and 4", st.Waiting, st.BlocksInUse)
	}
	got := runToEnd(t, e)
	if !got[long].Done || !got[blocked].Done || got[blocked].AdmittedAt.Before(got[long].DoneAt) {
		t.Fatalf("next admitted at %v before long finished at %v", got[blocked].AdmittedAt, got[long].DoneAt)
	}
}

func TestEngine_BatchLimitAdmitsInFIFOOrder(t *testing.T) {
	c := testConfig()
	c.MaxNumSeqs = 1
	e := newEngine(t, c)
	var tks []Ticket
	for i := range 3 {
		tks = append(tks, submit(t, e, t0, Request{ID: "r", Tokens: seq(10*i+1, 2), MaxTokens: 2}))
	}
	if st := e.Stats(); st.Running != 1 || st.Waiting != 2 {
		t.Fatalf("running %d waiting %d; want 1 and 2", st.Running, st.Waiting)
	}
	got := runToEnd(t, e)
	for i := 1; i < len(tks); i++ {
		prev, cur := got[tks[i-1]], got[tks[i]]
		if !cur.AdmittedAt.Equal(prev.DoneAt) {
			t.Fatalf("request %d admitted at %v; want at %v when %d finished", i, cur.AdmittedAt, prev.DoneAt, i-1)
		}
	}
}

func TestEngine_RejectsWhatItCannotServe(t *testing.T) {
	c := testConfig()
	c.MaxModelLen = 40
	c.NumBlocks = 8
	tests := []struct {
		name string
		give Request
		want error
	}{
		{"empty prompt", Request{ID: "x", MaxTokens: 1}, ErrInvalidRequest},
		{"no output", Request{ID: "x", Tokens: seq(1, 3)}, ErrInvalidRequest},
		{"longer than max model len", Request{ID: "x", Tokens: seq(1, 39), MaxTokens: 2}, ErrInvalidRequest},
		{"bigger than the cache", Request{ID: "x", Tokens: seq(1, 33), MaxTokens: 1}, ErrInvalidRequest},
		{"wrong digest count", Request{ID: "x", Tokens: seq(1, 8), MaxTokens: 1, Digests: []inventory.Digest{{}}}, ErrInvalidRequest},
		{"bad mm item", Request{ID: "x", Tokens: seq(1, 8), MaxTokens: 1,
			Extra: inventory.ExtraKeys{MM: []inventory.MMItem{{Identifier: "i", Offset: 1, Length: 0}}}}, ErrInvalidRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, c)
			if _, err := e.Submit(t0, tt.give); !errors.Is(err, tt.want) {
				t.Fatalf("error %v; want %v", err, tt.want)
			}
			if st := e.Stats(); st.Rejected != 1 || st.Submitted != 0 || len(e.TakeEvents(nil)) != 0 {
				t.Fatalf("stats %+v after a rejection", st)
			}
		})
	}
}

func TestEngine_FullWaitingQueueRejects(t *testing.T) {
	c := testConfig()
	c.MaxNumSeqs = 1
	c.MaxWaiting = 1
	e := newEngine(t, c)
	submit(t, e, t0, Request{ID: "run", Tokens: seq(1, 2), MaxTokens: 3})
	submit(t, e, t0, Request{ID: "wait", Tokens: seq(5, 2), MaxTokens: 3})
	if _, err := e.Submit(t0, Request{ID: "over", Tokens: seq(9, 2), MaxTokens: 3}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("error %v; want ErrQueueFull", err)
	}
}

func TestEngine_LatencyModel(t *testing.T) {
	tests := []struct {
		name      string
		give      func(c *Config)
		warm      bool // run the same prompt first, so 8 of 10 tokens hit
		wantTTFT  time.Duration
		wantTotal time.Duration // admission to done, 3 output tokens
	}{
		{"cold prefill is overhead plus every token", nil, false, 20 * time.Millisecond, 30 * time.Millisecond},
		{"cached tokens are not prefilled", nil, true, 12 * time.Millisecond, 22 * time.Millisecond},
		{"time scale shrinks everything", func(c *Config) { c.Latency.TimeScale = 0.5 }, false, 10 * time.Millisecond, 15 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig()
			if tt.give != nil {
				tt.give(&c)
			}
			e := newEngine(t, c)
			start := t0
			if tt.warm {
				submit(t, e, t0, Request{ID: "warm", Tokens: seq(1, 10), MaxTokens: 1})
				runToEnd(t, e)
				start = t0.Add(time.Second)
			}
			tk := submit(t, e, start, Request{ID: "r", Tokens: seq(1, 10), MaxTokens: 3})
			p := runToEnd(t, e)[tk]
			if got := p.FirstTokenAt.Sub(p.AdmittedAt); got != tt.wantTTFT {
				t.Fatalf("ttft %v; want %v", got, tt.wantTTFT)
			}
			if got := p.DoneAt.Sub(p.AdmittedAt); got != tt.wantTotal {
				t.Fatalf("total %v; want %v", got, tt.wantTotal)
			}
		})
	}
}

func TestEngine_SlowsDownUnderConcurrency(t *testing.T) {
	c := testConfig()
	c.MaxNumSeqs = 3
	c.Latency.TimeFactorUnderLoad = 3 // LF(1)=1, LF(2)=2, LF(3)=3
	e := newEngine(t, c)
	a := submit(t, e, t0, Request{ID: "a", Tokens: seq(1, 10), MaxTokens: 1})
	b := submit(t, e, t0, Request{ID: "b", Tokens: seq(100, 10), MaxTokens: 1})
	cc := submit(t, e, t0, Request{ID: "c", Tokens: seq(200, 10), MaxTokens: 1})
	got := runToEnd(t, e)
	for i, tc := range []struct {
		tk   Ticket
		want time.Duration
	}{{a, 20 * time.Millisecond}, {b, 40 * time.Millisecond}, {cc, 60 * time.Millisecond}} {
		if ttft := got[tc.tk].FirstTokenAt.Sub(t0); ttft != tc.want {
			t.Fatalf("request %d ttft %v; want %v", i, ttft, tc.want)
		}
	}
}

func TestEngine_AdvanceInOneJumpEqualsSmallSteps(t *testing.T) {
	run := func(step time.Duration) map[Ticket]Progress {
		c := testConfig()
		c.MaxNumSeqs = 2
		c.Latency.TimeFactorUnderLoad = 2
		e := newEngine(t, c)
		out := map[Ticket]Progress{}
		for i := range 6 {
			submit(t, e, t0, Request{ID: "r", Tokens: seq(1+i%2*50, 9), MaxTokens: 4})
		}
		end := t0.Add(2 * time.Second)
		for now := t0; !now.After(end); now = now.Add(step) {
			for _, p := range e.Advance(now, nil) {
				out[p.Ticket] = p
			}
		}
		return out
	}
	jump, fine := run(2*time.Second), run(time.Millisecond)
	if len(jump) != 6 || len(fine) != 6 {
		t.Fatalf("%d and %d results; want 6", len(jump), len(fine))
	}
	for tk, p := range jump {
		q := fine[tk]
		if !p.Done || !p.FirstTokenAt.Equal(q.FirstTokenAt) || !p.DoneAt.Equal(q.DoneAt) || p.CachedTokens != q.CachedTokens {
			t.Fatalf("ticket %d: jump %+v; fine steps %+v", tk, p, q)
		}
	}
}

func TestEngine_PrefillLegLeasesBlocksUntilPulled(t *testing.T) {
	c := testConfig()
	c.KVRole = KVProducer
	c.EngineID = "engine-p"
	e := newEngine(t, c)
	tk := submit(t, e, t0, Request{ID: "cmpl-x-0", Tokens: seq(1, 10), MaxTokens: 1, RemoteDecode: true})
	p := runUntilDone(t, e, tk)
	if p.Remote == nil {
		t.Fatalf("no kv_transfer_params on a prefill leg: %+v", p)
	}
	if p.Remote.EngineID != "engine-p" || p.Remote.RequestID != "cmpl-x-0" || len(p.Remote.BlockIDs) != 2 || p.Remote.NumTokens != 10 {
		t.Fatalf("remote params %+v", p.Remote)
	}
	if st := e.Stats(); st.BlocksInUse != 2 || st.Leases != 1 {
		t.Fatalf("in use %d leases %d; want the 2 full blocks leased", st.BlocksInUse, st.Leases)
	}
	if _, err := e.ReleaseLease(t0.Add(time.Second), "cmpl-x-0", []int{99, 98}); !errors.Is(err, ErrInvalidRequest) {
		t.Fatalf("release with wrong ids: %v; want ErrInvalidRequest", err)
	}
	if _, err := e.ReleaseLease(t0.Add(time.Second), "nobody", nil); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("release unknown: %v; want ErrUnknownRequest", err)
	}
	n, err := e.ReleaseLease(t0.Add(time.Second), "cmpl-x-0", p.Remote.BlockIDs)
	if err != nil || n != 2 {
		t.Fatalf("release: %d, %v; want 2 blocks", n, err)
	}
	if st := e.Stats(); st.BlocksInUse != 0 || st.Leases != 0 || st.LeasesReleased != 1 || st.RemoteDecodeLegs != 1 {
		t.Fatalf("stats after release %+v", st)
	}
}

func TestEngine_LeaseExpiresAfterKVLease(t *testing.T) {
	c := testConfig()
	c.KVRole = KVBoth
	c.EngineID = "e"
	c.KVLease = time.Second
	e := newEngine(t, c)
	submit(t, e, t0, Request{ID: "p", Tokens: seq(1, 8), MaxTokens: 1, RemoteDecode: true})
	runToEnd(t, e) // runs through the expiry too
	if st := e.Stats(); st.Leases != 0 || st.LeasesExpired != 1 || st.BlocksInUse != 0 {
		t.Fatalf("stats %+v; want the lease expired", st)
	}
	if _, err := e.ReleaseLease(t0.Add(2*time.Second), "p", nil); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("late release: %v; want ErrUnknownRequest", err)
	}
}

func TestEngine_DecodeLegSkipsPrefillAndCache(t *testing.T) {
	c := testConfig()
	c.KVRole = KVConsumer
	e := newEngine(t, c)
	tk := submit(t, e, t0, Request{ID: "d", Tokens: seq(1, 10), MaxTokens: 2, RemotePrefill: &RemotePrefill{Blocks: 2}})
	p := runToEnd(t, e)[tk]
	if got := p.FirstTokenAt.Sub(p.AdmittedAt); got != 4*time.Millisecond {
		t.Fatalf("decode leg ttft %v; want the 2ms + 2×1ms pull", got)
	}
	if !p.PulledRemote || p.CachedTokens != 0 {
		t.Fatalf("progress %+v; want pulled, nothing cached", p)
	}
	st := e.Stats()
	if len(e.TakeEvents(nil)) != 0 || st.PrefixQueries != 0 || st.RemotePrefillLegs != 1 || st.BlocksInUse != 0 {
		t.Fatalf("stats %+v; want no events, no queries, one remote leg, blocks freed", st)
	}
}

func TestEngine_IgnoresRemoteParamsTheRoleDoesNotServe(t *testing.T) {
	tests := []struct {
		name string
		role KVRole
		give Request
	}{
		{"decode role asked to remote-decode", KVConsumer, Request{ID: "a", Tokens: seq(1, 8), MaxTokens: 1, RemoteDecode: true}},
		{"prefill role given pulled blocks", KVProducer, Request{ID: "b", Tokens: seq(1, 8), MaxTokens: 1, RemotePrefill: &RemotePrefill{Blocks: 2}}},
		{"no role", KVNone, Request{ID: "c", Tokens: seq(1, 8), MaxTokens: 1, RemoteDecode: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig()
			c.KVRole = tt.role
			c.EngineID = "e"
			e := newEngine(t, c)
			tk := submit(t, e, t0, tt.give)
			p := runToEnd(t, e)[tk]
			if p.Remote != nil || p.PulledRemote || e.Stats().RemoteParamsIgnored != 1 {
				t.Fatalf("progress %+v stats %+v; want params ignored and counted", p, e.Stats())
			}
			if len(storedKeys(e.TakeEvents(nil))) != 2 {
				t.Fatalf("an ignored-params request must run as a normal request")
			}
		})
	}
}

func TestEngine_ResetRefusedWhileBlocksInUse(t *testing.T) {
	e := newEngine(t, testConfig())
	submit(t, e, t0, Request{ID: "a", Tokens: seq(1, 8), MaxTokens: 3})
	if err := e.Reset(t0); !errors.Is(err, ErrBlocksInUse) {
		t.Fatalf("reset while running: %v; want ErrBlocksInUse", err)
	}
	runToEnd(t, e)
	e.TakeEvents(nil)
	if err := e.Reset(t0.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	evs := e.TakeEvents(nil)
	if len(evs) != 1 || evs[0].Kind != inventory.EventAllBlocksCleared || e.Stats().CachedBlocks != 0 {
		t.Fatalf("events %+v cached %d; want AllBlocksCleared and an empty cache", evs, e.Stats().CachedBlocks)
	}
	tk := submit(t, e, t0.Add(2*time.Second), Request{ID: "b", Tokens: seq(1, 8), MaxTokens: 1})
	if got := runToEnd(t, e)[tk].CachedTokens; got != 0 {
		t.Fatalf("cached %d after reset; want 0", got)
	}
}

func TestEngine_AbortFreesBlocksAndAdmitsTheNext(t *testing.T) {
	c := testConfig()
	c.MaxNumSeqs = 1
	e := newEngine(t, c)
	a := submit(t, e, t0, Request{ID: "a", Tokens: seq(1, 8), MaxTokens: 20})
	w := submit(t, e, t0, Request{ID: "w", Tokens: seq(50, 8), MaxTokens: 1})
	b := submit(t, e, t0, Request{ID: "b", Tokens: seq(90, 8), MaxTokens: 1})
	if err := e.Abort(t0.Add(time.Millisecond), w); err != nil {
		t.Fatal(err)
	}
	if err := e.Abort(t0.Add(2*time.Millisecond), a); err != nil {
		t.Fatal(err)
	}
	got := runToEnd(t, e)
	if got[a].Finish != FinishAbort || got[w].Finish != FinishAbort || got[w].Admitted {
		t.Fatalf("aborted progress a=%+v w=%+v", got[a], got[w])
	}
	if !got[b].AdmittedAt.Equal(t0.Add(2 * time.Millisecond)) {
		t.Fatalf("b admitted at %v; want when a was aborted", got[b].AdmittedAt)
	}
	if err := e.Abort(t0.Add(time.Second), a); !errors.Is(err, ErrUnknownRequest) {
		t.Fatalf("second abort: %v; want ErrUnknownRequest", err)
	}
	if st := e.Stats(); st.BlocksInUse != 0 || st.Running != 0 || st.Waiting != 0 {
		t.Fatalf("stats %+v; want idle", st)
	}
}

func TestEngine_PublishesExtraKeysAndLoRA(t *testing.T) {
	e := newEngine(t, testConfig())
	extra := inventory.ExtraKeys{LoRAName: "sql", CacheSalt: "salt"}
	submit(t, e, t0, Request{ID: "l", Tokens: seq(1, 8), MaxTokens: 1, Extra: extra, LoRAID: 3})
	evs := e.TakeEvents(nil)
	ev := evs[0]
	if !ev.HasLoRAName || ev.LoRAName != "sql" || !ev.HasLoRAID || ev.LoRAID != 3 {
		t.Fatalf("lora fields %+v", ev)
	}
	want0 := []any{"sql", "salt"}
	if got, ok := ev.ExtraKeys[0].([]any); !ok || !slices.Equal(got, want0) {
		t.Fatalf("extra_keys[0] %v; want %v", ev.ExtraKeys[0], want0)
	}
	ref, _ := inventory.NewHasher(inventory.AlgoSHA256CBOR, 4, "0")
	if want := ref.AppendBlockKeys(nil, seq(1, 8), extra); !slices.Equal(ev.BlockHashes, want) {
		t.Fatalf("keys %v; want %v", ev.BlockHashes, want)
	}
}
