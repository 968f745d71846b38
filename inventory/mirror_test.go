package inventory

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
)

// seqTokens returns n tokens start, start+1, ...
func seqTokens(start, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(start + i)
	}
	return out
}

// fataler is the part of testing.TB (and *rapid.T) test helpers need.
type fataler interface {
	Helper()
	Fatal(args ...any)
}

// engine simulates what vLLM publishes for a request, with a given hasher.
type engine struct {
	h *Hasher
}

// store returns the BlockStored event vLLM would publish for caching the
// full blocks of tokens[from*bs:] after blocks [0, from) are cached.
func (e engine) store(t fataler, tokens []uint32, from int, ek ExtraKeys) Event {
	t.Helper()
	bs := e.h.BlockSize()
	all, err := e.h.AppendDigests(nil, Digest{}, 0, tokens, ek)
	if err != nil {
		t.Fatal(err)
	}
	ev := Event{Kind: EventBlockStored, BlockSize: bs, Medium: MediumGPU, HasMedium: true,
		HasGroupIdx: true, SpecKind: SpecFullAttention, HasSpecKind: true, HasExtraKeys: true}
	if from > 0 {
		ev.HasParent, ev.Parent = true, all[from-1].Key()
	}
	for i := from; i < len(all); i++ {
		ev.BlockHashes = append(ev.BlockHashes, all[i].Key())
		var tup any
		if t := ek.BlockTuple(i, bs); t != nil {
			tup = t
		}
		ev.ExtraKeys = append(ev.ExtraKeys, tup)
	}
	ev.TokenIDs = tokens[from*bs : len(all)*bs]
	return ev
}

func removed(keys ...uint64) Event {
	return Event{Kind: EventBlockRemoved, BlockHashes: keys, Medium: MediumGPU, HasMedium: true, HasGroupIdx: true}
}

func batchOf(evs ...Event) *Batch { return &Batch{Events: evs} }

func newTestMirror(t testing.TB, keys ChainHasher, maxBlocks int) *Mirror {
	t.Helper()
	m, err := NewMirror(MirrorConfig{ID: EndpointID{Service: "svc", EpIdx: 1}, Keys: keys, MaxBlocks: maxBlocks, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func mustTokenHasher(t testing.TB, bs int) *TokenHasher {
	t.Helper()
	th, err := NewTokenHasher(bs)
	if err != nil {
		t.Fatal(err)
	}
	return th
}

func mustExactHasher(t testing.TB, seed string) *Hasher {
	t.Helper()
	h, err := NewHasher(AlgoSHA256CBOR, 4, seed)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestMirror_AppliesEventsInBothModes runs the same event scripts against
// an exact-mode and a token-keyed mirror: the prompt's chain must score the
// same in both.
func TestMirror_AppliesEventsInBothModes(t *testing.T) {
	h := mustExactHasher(t, "0")
	eng := engine{h: h}
	prompt := seqTokens(1, 16) // 4 blocks of 4
	other := seqTokens(100, 8)
	tests := []struct {
		name      string
		give      func(t *testing.T) []Event
		wantScore int
		wantLen   int
	}{
		{"stored run scores its blocks", func(t *testing.T) []Event {
			return []Event{eng.store(t, prompt[:12], 0, ExtraKeys{})}
		}, 3, 3},
		{"a continuation chains from its parent", func(t *testing.T) []Event {
			return []Event{eng.store(t, prompt[:8], 0, ExtraKeys{}), eng.store(t, prompt, 2, ExtraKeys{})}
		}, 4, 4},
		{"stored twice survives one removal", func(t *testing.T) []Event {
			s := eng.store(t, prompt[:8], 0, ExtraKeys{})
			return []Event{s, s, removed(s.BlockHashes...)}
		}, 2, 2},
		{"stored twice is gone after two removals", func(t *testing.T) []Event {
			s := eng.store(t, prompt[:8], 0, ExtraKeys{})
			return []Event{s, s, removed(s.BlockHashes...), removed(s.BlockHashes...)}
		}, 0, 0},
		{"score stops at the first missing block", func(t *testing.T) []Event {
			s := eng.store(t, prompt, 0, ExtraKeys{})
			return []Event{s, removed(s.BlockHashes[1])}
		}, 1, 3},
		{"all blocks cleared empties the mirror", func(t *testing.T) []Event {
			return []Event{eng.store(t, prompt, 0, ExtraKeys{}), eng.store(t, other, 0, ExtraKeys{}), {Kind: EventAllBlocksCleared}}
		}, 0, 0},
		{"CPU medium scores as the offload tier, not GPU", func(t *testing.T) []Event {
			s := eng.store(t, prompt, 0, ExtraKeys{})
			s.Medium = "CPU"
			return []Event{s}
		}, 4, 0},
		{"lowercase gpu is the GPU tier (LoxiLB's CI publisher)", func(t *testing.T) []Event {
			s := eng.store(t, prompt, 0, ExtraKeys{})
			s.Medium = "gpu"
			return []Event{s}
		}, 4, 4},
		{"STORAGE medium is ignored", func(t *testing.T) []Event {
			s := eng.store(t, prompt, 0, ExtraKeys{})
			s.Medium = "STORAGE"
			return []Event{s}
		}, 0, 0},
		{"another KV group is ignored", func(t *testing.T) []Event {
			s := eng.store(t, prompt, 0, ExtraKeys{})
			s.GroupIdx = 1
			return []Event{s}
		}, 0, 0},
		{"a sliding-window spec is ignored", func(t *testing.T) []Event {
			s := eng.store(t, prompt, 0, ExtraKeys{})
			s.SpecKind = "sliding_window"
			return []Event{s}
		}, 0, 0},
		{"absent medium, group and kind count", func(t *testing.T) []Event {
			s := eng.store(t, prompt, 0, ExtraKeys{})
			s.HasMedium, s.HasGroupIdx, s.HasSpecKind = false, false, false
			return []Event{s}
		}, 4, 4},
		{"a CPU removal does not remove the GPU block", func(t *testing.T) []Event {
			s := eng.store(t, prompt, 0, ExtraKeys{})
			r := removed(s.BlockHashes...)
			r.Medium = "CPU"
			return []Event{s, r}
		}, 4, 4},
		{"removing unknown keys is harmless", func(t *testing.T) []Event {
			return []Event{removed(1, 2, 3), eng.store(t, prompt[:4], 0, ExtraKeys{})}
		}, 1, 1},
	}
	for _, tt := range tests {
		for _, mode := range []struct {
			name string
			keys ChainHasher
		}{{"exact", h}, {"token", mustTokenHasher(t, 4)}} {
			t.Run(tt.name+"/"+mode.name, func(t *testing.T) {
				m := newTestMirror(t, mode.keys, 0)
				m.Apply(batchOf(tt.give(t)...))
				chain := mode.keys.AppendBlockKeys(nil, prompt, ExtraKeys{})
				if got := m.Score(chain); got != tt.wantScore {
					t.Errorf("Score = %d; want %d", got, tt.wantScore)
				}
				if got := m.Len(); got != tt.wantLen {
					t.Errorf("Len = %d; want %d", got, tt.wantLen)
				}
				if c := m.Contract(); c.Tripped {
					t.Errorf("contract tripped: %+v", c)
				}
			})
		}
	}
}

func TestMirror_CountsWhatItIgnores(t *testing.T) {
	h := mustExactHasher(t, "0")
	eng := engine{h: h}
	m := newTestMirror(t, h, 0)
	s := eng.store(t, seqTokens(1, 8), 0, ExtraKeys{})
	disk := s
	disk.Medium = "STORAGE"
	group := s
	group.GroupIdx = 1
	swa := s
	swa.SpecKind = "sliding_window"
	m.Apply(batchOf(s, disk, group, swa, removed(99), Event{Kind: EventAllBlocksCleared}))
	m.Reset()
	st := m.Stats()
	if st.IgnoredEvents != 3 || st.UnknownRemovals != 1 || st.Clears != 1 || st.Resyncs != 1 || st.StoredBlocks != 2 || st.RemovedBlocks != 1 {
		t.Fatalf("stats %+v", st)
	}
	want := map[IgnoreReason]IgnoreCount{
		IgnoreMedium:       {Events: 1, Blocks: 2},
		IgnoreGroup:        {Events: 1, Blocks: 2},
		IgnoreSpecKind:     {Events: 1, Blocks: 2},
		IgnoreUnknownBlock: {Blocks: 1},
	}
	for r := IgnoreReason(0); r < NumIgnoreReasons; r++ {
		got := st.Ignored[r]
		if got.Events != want[r].Events || got.Blocks != want[r].Blocks {
			t.Errorf("%s: %d events %d blocks; want %d, %d", r, got.Events, got.Blocks, want[r].Events, want[r].Blocks)
		}
		if (got.Events+got.Blocks > 0) != (got.Cause != "") {
			t.Errorf("%s: cause %q with %d events %d blocks", r, got.Cause, got.Events, got.Blocks)
		}
	}
	if c := st.Ignored[IgnoreMedium].Cause; !strings.Contains(c, `"STORAGE"`) {
		t.Errorf("medium cause %q; want it to name the medium", c)
	}
	var reasons []string
	for _, v := range IgnoredViews(st.Ignored) {
		reasons = append(reasons, fmt.Sprintf("%s=%d/%d", v.Reason, v.Events, v.Blocks))
	}
	if got := strings.Join(reasons, " "); got != "medium=1/2 group=1/2 spec_kind=1/2 unknown_block=0/1" {
		t.Errorf("IgnoredViews = %q", got)
	}
}

func TestMirror_EvictsAtTheCapAndCountsIt(t *testing.T) {
	set := metrics.NewSet()
	for _, mode := range []string{"exact", "token"} {
		t.Run(mode, func(t *testing.T) {
			h := mustExactHasher(t, "0")
			var keys ChainHasher = h
			if mode == "token" {
				keys = mustTokenHasher(t, 4)
			}
			m, err := NewMirror(MirrorConfig{ID: EndpointID{Service: mode}, Keys: keys, MaxBlocks: 10, Metrics: set})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			eng := engine{h: h}
			for r := 0; r < 5; r++ {
				m.Apply(batchOf(eng.store(t, seqTokens(1000*r, 16), 0, ExtraKeys{}))) // 4 blocks each
			}
			st := m.Stats()
			if st.EngineBlocks != 10 || st.Evictions != 10 {
				t.Fatalf("engine blocks %d evictions %d; want 10, 10", st.EngineBlocks, st.Evictions)
			}
			if st.Blocks != 10 {
				t.Fatalf("scorable blocks %d; want 10", st.Blocks)
			}
			var buf bytes.Buffer
			set.WritePrometheus(&buf)
			want := `loxilb_kv_inv_cap_evictions_total{service="` + mode + `",ep_idx="0",rank="0"} 10`
			if !strings.Contains(buf.String(), want) {
				t.Fatalf("metrics lack %q:\n%s", want, buf.String())
			}
			// The most recent run survives: it was stored last.
			chain := keys.AppendBlockKeys(nil, seqTokens(4000, 16), ExtraKeys{})
			if got := m.Score(chain); got != 4 {
				t.Fatalf("latest run scores %d; want 4", got)
			}
		})
	}
}

func TestMirror_ExactModeVerifiesTheContract(t *testing.T) {
	good := mustExactHasher(t, "0")
	wrongSeed := mustExactHasher(t, "1")
	ek := ExtraKeys{LoRAName: "l", CacheSalt: "s"}
	tests := []struct {
		name       string
		engine     *Hasher
		mutate     func(*Event)
		runs       int
		wantTrip   bool
		wantReason string
	}{
		{"matching engine verifies", good, nil, 10, false, ""},
		{"a wrong seed trips after three runs", wrongSeed, nil, 3, true, ContractHashMismatch},
		{"two mismatching runs do not trip yet", wrongSeed, nil, 2, false, ""},
		{"a block-size difference trips at once", good, func(e *Event) { e.BlockSize = 16 }, 1, true, ContractBlockSize},
		{"runs without extra_keys are unverifiable, not failures", wrongSeed, func(e *Event) { e.HasExtraKeys, e.ExtraKeys = false, nil }, 5, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newTestMirror(t, good, 0)
			eng := engine{h: tt.engine}
			for r := 0; r < tt.runs; r++ {
				toks := seqTokens(100*r, 12)
				ev1 := eng.store(t, toks[:8], 0, ek)
				ev2 := eng.store(t, toks, 2, ek) // continuation: verified via the digest cache
				if tt.mutate != nil {
					tt.mutate(&ev1)
				}
				m.Apply(batchOf(ev1, ev2))
			}
			c := m.Contract()
			if c.Tripped != tt.wantTrip || c.Reason != tt.wantReason {
				t.Fatalf("contract %+v; want tripped=%v reason=%q", c, tt.wantTrip, tt.wantReason)
			}
			if !tt.wantTrip && tt.engine == good && c.Verified != uint64(2*tt.runs) {
				t.Fatalf("verified %d runs; want %d (parents and continuations)", c.Verified, 2*tt.runs)
			}
		})
	}
}

func TestMirror_ContractRecoversAfterConsecutiveGoodRuns(t *testing.T) {
	good := mustExactHasher(t, "0")
	m := newTestMirror(t, good, 0)
	bad := engine{h: mustExactHasher(t, "1")}
	for r := 0; r < 3; r++ {
		m.Apply(batchOf(bad.store(t, seqTokens(r*50, 8), 0, ExtraKeys{})))
	}
	if !m.Contract().Tripped {
		t.Fatal("contract not tripped after three mismatches")
	}
	for r := 0; r < contractRecoverAfter; r++ {
		m.Apply(batchOf(engine{h: good}.store(t, seqTokens(1000+r*50, 8), 0, ExtraKeys{})))
	}
	if c := m.Contract(); c.Tripped {
		t.Fatalf("contract still tripped after %d good runs: %+v", contractRecoverAfter, c)
	}
}

func TestMirror_TokenModeResolvesParentsRemovalsAndOrphans(t *testing.T) {
	th := mustTokenHasher(t, 4)
	// The engine's hashes are opaque here: token-keyed mode must not care.
	eng := engine{h: mustExactHasher(t, "random-unknown-seed")}
	toks := seqTokens(7, 16)
	m := newTestMirror(t, th, 0)
	first := eng.store(t, toks[:8], 0, ExtraKeys{LoRAName: "l"})
	second := eng.store(t, toks, 2, ExtraKeys{LoRAName: "l"})
	m.Apply(batchOf(first, second))
	chain := th.AppendBlockKeys(nil, toks, ExtraKeys{LoRAName: "l"})
	if got := m.Score(chain); got != 4 {
		t.Fatalf("Score = %d; want 4", got)
	}
	if got := m.Score(th.AppendBlockKeys(nil, toks, ExtraKeys{})); got != 0 {
		t.Fatalf("Score without the LoRA = %d; want 0", got)
	}
	m.Apply(batchOf(removed(second.BlockHashes[0])))
	if got := m.Score(chain); got != 2 {
		t.Fatalf("Score after removing block 2 = %d; want 2", got)
	}
	orphan := eng.store(t, seqTokens(500, 12), 1, ExtraKeys{})
	m.Apply(batchOf(orphan))
	if st := m.Stats(); st.OrphanRuns != 1 {
		t.Fatalf("orphan runs %d; want 1", st.OrphanRuns)
	}
	simStyle := eng.store(t, seqTokens(900, 4), 0, ExtraKeys{})
	simStyle.HasParent, simStyle.Parent = true, 0 // llm-d-inference-sim's "no parent"
	m.Apply(batchOf(simStyle))
	if got := m.Score(th.AppendBlockKeys(nil, seqTokens(900, 4), ExtraKeys{})); got != 1 {
		t.Fatalf("sim-style root run scores %d; want 1", got)
	}
}

func TestMirror_TokenModeGuardsRunsWithoutTokens(t *testing.T) {
	th := mustTokenHasher(t, 4)
	m := newTestMirror(t, th, 0)
	for r := 0; r < 3; r++ {
		ev := engine{h: mustExactHasher(t, "0")}.store(t, seqTokens(r*10, 8), 0, ExtraKeys{})
		ev.TokenIDs = ev.TokenIDs[:5]
		m.Apply(batchOf(ev))
	}
	c := m.Contract()
	if !c.Tripped || c.Reason != ContractTokenCount {
		t.Fatalf("contract %+v; want tripped token_count", c)
	}
	if st := m.Stats(); st.UnindexableRuns != 3 {
		t.Fatalf("unindexable %d; want 3", st.UnindexableRuns)
	}
}

func TestMirror_ExportsBlocksGaugeAndUnregistersOnClose(t *testing.T) {
	set := metrics.NewSet()
	h := mustExactHasher(t, "0")
	m, err := NewMirror(MirrorConfig{ID: EndpointID{Service: `we"ird`, EpIdx: 2, Rank: 1}, Keys: h, Metrics: set})
	if err != nil {
		t.Fatal(err)
	}
	m.Apply(batchOf(engine{h: h}.store(t, seqTokens(1, 12), 0, ExtraKeys{})))
	var buf bytes.Buffer
	set.WritePrometheus(&buf)
	want := `loxilb_pd_kv_blocks{service="we\"ird",ep_idx="2",rank="1"} 3`
	if !strings.Contains(buf.String(), want) {
		t.Fatalf("metrics lack %q:\n%s", want, buf.String())
	}
	m.Close()
	if names := set.ListMetricNames(); len(names) != 0 {
		t.Fatalf("after Close the set still holds %v", names)
	}
}

func TestMirrorConfig_ReportsAllProblems(t *testing.T) {
	err := MirrorConfig{MaxBlocks: -1}.Validate()
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "Keys") || !strings.Contains(err.Error(), "MaxBlocks") {
		t.Fatalf("got %v; want both problems", err)
	}
}

func TestMirror_PagesEngineKeys(t *testing.T) {
	h := mustExactHasher(t, "0")
	m := newTestMirror(t, h, 0)
	ev := engine{h: h}.store(t, seqTokens(1, 40), 0, ExtraKeys{})
	m.Apply(batchOf(ev))
	var all []uint64
	for off := 0; ; off += 3 {
		page := m.AppendKeys(nil, off, 3)
		if len(page) == 0 {
			break
		}
		all = append(all, page...)
	}
	if len(all) != 10 {
		t.Fatalf("paged %d keys; want 10", len(all))
	}
	seen := map[uint64]bool{}
	for _, k := range all {
		seen[k] = true
	}
	for _, k := range ev.BlockHashes {
		if !seen[k] {
			t.Fatalf("key %d missing from pages", k)
		}
	}
}

// TestMirror_OffloadTier covers the CPU tier: offloaded blocks extend the
// GPU prefix, count separately, and leave with their own removals.
func TestMirror_OffloadTier(t *testing.T) {
	h := mustExactHasher(t, "0")
	eng := engine{h: h}
	prompt := seqTokens(1, 24) // 6 blocks of 4
	for _, mode := range []struct {
		name string
		keys ChainHasher
	}{{"exact", h}, {"token", mustTokenHasher(t, 4)}} {
		t.Run(mode.name, func(t *testing.T) {
			m := newTestMirror(t, mode.keys, 0)
			chain := mode.keys.AppendBlockKeys(nil, prompt, ExtraKeys{})
			all := eng.store(t, prompt, 0, ExtraKeys{})
			// The engine caches 6 blocks on the GPU; vLLM's offloading
			// connector copies them to CPU memory, tokenless and parentless.
			off := Event{Kind: EventBlockStored, BlockHashes: all.BlockHashes, BlockSize: 4, Medium: "cpu", HasMedium: true}
			m.Apply(batchOf(all, off))
			if b, o := m.ScoreTiers(chain); b != 6 || o != 0 || m.Len() != 6 || m.OffloadLen() != 6 {
				t.Fatalf("after store: score %d/%d, len %d/%d; want 6/0, 6/6", b, o, m.Len(), m.OffloadLen())
			}
			// The GPU evicts the last 4 blocks: they are still in CPU memory.
			m.Apply(batchOf(removed(all.BlockHashes[2:]...)))
			if b, o := m.ScoreTiers(chain); b != 6 || o != 4 {
				t.Fatalf("after GPU eviction: score %d/%d; want 6/4", b, o)
			}
			// The CPU tier drops block 3: the prefix ends there.
			cpuRem := removed(all.BlockHashes[3])
			cpuRem.Medium = "CPU"
			m.Apply(batchOf(cpuRem))
			if b, o := m.ScoreTiers(chain); b != 3 || o != 1 {
				t.Fatalf("after CPU removal: score %d/%d; want 3/1", b, o)
			}
			if st := m.Stats(); st.OffloadBlocks != 5 || st.EngineBlocks != 2 || st.IgnoredEvents != 0 {
				t.Fatalf("stats %+v", st)
			}
			// AllBlocksCleared empties every tier.
			m.Apply(batchOf(Event{Kind: EventAllBlocksCleared}))
			if m.Len() != 0 || m.OffloadLen() != 0 {
				t.Fatalf("len %d/%d after clear; want 0/0", m.Len(), m.OffloadLen())
			}
		})
	}
}

func TestMirror_OffloadBlocksOfAnotherSizeAreCountedNotMirrored(t *testing.T) {
	h := mustExactHasher(t, "0")
	m := newTestMirror(t, h, 0)
	m.Apply(batchOf(Event{Kind: EventBlockStored, BlockHashes: []uint64{1, 2}, BlockSize: 16, Medium: "CPU", HasMedium: true}))
	st := m.Stats()
	if st.OffloadBlocks != 0 || st.Ignored[IgnoreBlockSize].Events != 1 || st.Contract.Tripped {
		t.Fatalf("stats %+v; want the run ignored for block_size, the contract untouched", st)
	}
}

func TestMirror_TokenModeCannotKeyUnknownTokenlessOffloads(t *testing.T) {
	m := newTestMirror(t, mustTokenHasher(t, 4), 0)
	m.Apply(batchOf(Event{Kind: EventBlockStored, BlockHashes: []uint64{1, 2, 3}, BlockSize: 4, Medium: "CPU", HasMedium: true}))
	st := m.Stats()
	if st.OffloadBlocks != 0 || st.Ignored[IgnoreTokenCount].Blocks != 3 {
		t.Fatalf("stats %+v; want 3 blocks ignored for token_count", st)
	}
}

// TestMirror_LogsEachReasonOnceThenRateLimited checks the operator sees the
// cause at once, then at most one line per interval with the count held
// back.
func TestMirror_LogsEachReasonOnceThenRateLimited(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	h := mustExactHasher(t, "0")
	m, err := NewMirror(MirrorConfig{ID: EndpointID{Service: "svc"}, Keys: h, Logger: zerolog.New(&buf),
		IgnoreLogEvery: time.Minute, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ev := engine{h: h}.store(t, seqTokens(1, 8), 0, ExtraKeys{})
	ev.Medium = "STORAGE"
	for i := 0; i < 100; i++ {
		m.Apply(batchOf(ev))
		now = now.Add(time.Second)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d log lines; want 2 (the first, then one a minute later):\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[0], `"reason":"medium"`) || !strings.Contains(lines[0], `\"STORAGE\"`) || !strings.Contains(lines[0], `"level":"warn"`) {
		t.Errorf("first line %s; want a warning naming the reason and the medium", lines[0])
	}
	if !strings.Contains(lines[1], `"count":59`) || !strings.Contains(lines[1], `"ignored_events":61`) {
		t.Errorf("second line %s; want 59 held back, 61 in total", lines[1])
	}
	if got := m.Stats().Ignored[IgnoreMedium].Events; got != 100 {
		t.Errorf("counted %d; want 100", got)
	}
}

func TestMirror_ExportsIgnoredByReason(t *testing.T) {
	set := metrics.NewSet()
	h := mustExactHasher(t, "0")
	m, err := NewMirror(MirrorConfig{ID: EndpointID{Service: "svc", EpIdx: 2}, Keys: h, Metrics: set})
	if err != nil {
		t.Fatal(err)
	}
	ev := engine{h: h}.store(t, seqTokens(1, 8), 0, ExtraKeys{})
	ev.Medium = "disk"
	m.Apply(batchOf(ev, ev))
	var out bytes.Buffer
	set.WritePrometheus(&out)
	for _, want := range []string{
		`llb_kv_events_ignored_total{service="svc",ep_idx="2",rank="0",reason="medium"} 2`,
		`llb_kv_blocks_ignored_total{service="svc",ep_idx="2",rank="0",reason="medium"} 4`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("metrics lack %s:\n%s", want, out.String())
		}
	}
	m.Close()
	out.Reset()
	set.WritePrometheus(&out)
	if strings.Contains(out.String(), "ignored") {
		t.Errorf("series left after Close:\n%s", out.String())
	}
}
