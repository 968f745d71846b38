package inventory

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// sglangVectorsFile holds SGLang page-hash vectors computed with SGLang's own
// get_hash_str / hash_str_to_int64 (testdata/vectors/sglang_vectors.py says
// how) and one KV-event batch as SGLang's msgspec encoder writes it.
const sglangVectorsFile = "testdata/vectors/sglang-page-hash-vectors.json"

type sglangVectors struct {
	Contract string `json:"contract"`
	Cases    []struct {
		Name     string   `json:"name"`
		PageSize int      `json:"page_size"`
		Tokens   []uint32 `json:"tokens"`
		Pages    []struct {
			Digest string `json:"digest"`
			Int64  int64  `json:"int64"`
		} `json:"pages"`
	} `json:"cases"`
	Batch struct {
		TS     float64 `json:"ts"`
		DPRank int64   `json:"dp_rank"`
		Hex    string  `json:"hex"`
	} `json:"batch"`
	UpstreamChecked bool `json:"upstream_checked"`
}

func loadSGLangVectors(t *testing.T) sglangVectors {
	t.Helper()
	raw, err := os.ReadFile(sglangVectorsFile)
	if err != nil {
		t.Fatalf("read vectors: %v", err)
	}
	var v sglangVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("parse vectors: %v", err)
	}
	if v.Contract != "sha256_sglang" || len(v.Cases) == 0 || !v.UpstreamChecked {
		t.Fatalf("vectors file: contract %q, %d cases, upstream checked %v", v.Contract, len(v.Cases), v.UpstreamChecked)
	}
	return v
}

func mustSGLangHasher(t testing.TB, pageSize int) *SGLangHasher {
	t.Helper()
	h, err := NewSGLangHasher(pageSize)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestSGLangHasher_MatchesSGLangVectors checks keys and digests against the
// vectors SGLang's own code produced, including the engines spec's check
// values, negative int64 keys and a partial trailing page (no key).
func TestSGLangHasher_MatchesSGLangVectors(t *testing.T) {
	v := loadSGLangVectors(t)
	sawNegative := false
	for _, c := range v.Cases {
		t.Run(c.Name, func(t *testing.T) {
			h := mustSGLangHasher(t, c.PageSize)
			keys := h.AppendBlockKeys(nil, c.Tokens, ExtraKeys{})
			if len(keys) != len(c.Pages) {
				t.Fatalf("got %d keys; want %d", len(keys), len(c.Pages))
			}
			digs, err := h.AppendRunDigests(nil, Digest{}, c.Tokens[:len(c.Pages)*c.PageSize], nil)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range c.Pages {
				if got := int64(keys[i]); got != p.Int64 {
					t.Errorf("page %d: key %d; want %d", i, got, p.Int64)
				}
				if got := digs[i].String(); got != p.Digest {
					t.Errorf("page %d: digest %s; want %s", i, got, p.Digest)
				}
				sawNegative = sawNegative || p.Int64 < 0
			}
			// Chaining from a page's digest continues the same chain.
			if len(c.Pages) >= 2 {
				parent, _ := ParseDigestHex(c.Pages[0].Digest)
				rest, err := h.AppendRunDigests(nil, parent, c.Tokens[c.PageSize:len(c.Pages)*c.PageSize], nil)
				if err != nil {
					t.Fatal(err)
				}
				if rest[0].String() != c.Pages[1].Digest {
					t.Errorf("chained page 1: %s; want %s", rest[0], c.Pages[1].Digest)
				}
			}
		})
	}
	if !sawNegative {
		t.Error("vectors hold no negative int64 key (the signed wrap is untested)")
	}
}

// TestSGLangHasher_ExtraKeysStartAnotherChain: a salted or LoRA prompt never
// matches the unsalted pages SGLang published (its radix tree keeps them
// apart although the page keys are equal).
func TestSGLangHasher_ExtraKeysStartAnotherChain(t *testing.T) {
	h := mustSGLangHasher(t, 4)
	toks := seqTokens(1, 12)
	plain := h.AppendBlockKeys(nil, toks, ExtraKeys{})
	for _, ek := range []ExtraKeys{{CacheSalt: "s"}, {LoRAName: "a"}, {CacheSalt: "t"}} {
		got := h.AppendBlockKeys(nil, toks, ek)
		if len(got) != len(plain) {
			t.Fatalf("%+v: %d keys; want %d", ek, len(got), len(plain))
		}
		for i := range got {
			if got[i] == plain[i] {
				t.Errorf("%+v: page %d key equals the unsalted page's", ek, i)
			}
		}
	}
	if a, b := h.AppendBlockKeys(nil, toks, ExtraKeys{CacheSalt: "s"}), h.AppendBlockKeys(nil, toks, ExtraKeys{CacheSalt: "t"}); a[0] == b[0] {
		t.Error("two salts give the same chain")
	}
}

// TestNewChainHasher_PicksEngineContract: the rule's kvHashAlgo picks the
// chain, TensorRT-LLM's being llb's own token keys.
func TestNewChainHasher_PicksEngineContract(t *testing.T) {
	tests := []struct {
		give     string
		tokenKey bool
		want     string
	}{
		{"sha256_cbor", false, "*inventory.Hasher"},
		{"sha256_sglang", false, "*inventory.SGLangHasher"},
		{"blockhash_trtllm", false, "*inventory.TokenHasher"},
		{"sha256_cbor", true, "*inventory.TokenHasher"},
	}
	for _, tt := range tests {
		ch, err := NewChainHasher(tt.give, 16, "0", tt.tokenKey)
		if err != nil {
			t.Fatalf("%s: %v", tt.give, err)
		}
		if got := typeName(ch); got != tt.want {
			t.Errorf("%s (token keyed %v): got %s; want %s", tt.give, tt.tokenKey, got, tt.want)
		}
	}
	if got := HashAlgoName(mustSGLangHasher(t, 16)); got != "sha256_sglang" {
		t.Errorf("HashAlgoName: got %q; want sha256_sglang", got)
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *Hasher:
		return "*inventory.Hasher"
	case *SGLangHasher:
		return "*inventory.SGLangHasher"
	case *TokenHasher:
		return "*inventory.TokenHasher"
	}
	return "?"
}

// TestDecode_SGLangBatch decodes the batch SGLang's encoder writes: tagged
// arrays of 7 and 3 elements, signed int64 hashes, attn_dp_rank; and the
// SGLang layout of AppendBatch writes the same bytes.
func TestDecode_SGLangBatch(t *testing.T) {
	v := loadSGLangVectors(t)
	raw, err := hex.DecodeString(v.Batch.Hex)
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	if err := b.Decode(raw); err != nil {
		t.Fatal(err)
	}
	if b.Invalid != 0 || b.Unknown != 0 || len(b.Events) != 5 {
		t.Fatalf("decoded %d events, %d invalid (%v), %d unknown; want 5 valid", len(b.Events), b.Invalid, b.InvalidErr, b.Unknown)
	}
	if !b.HasDPRank || b.DPRank != v.Batch.DPRank || b.TS != v.Batch.TS {
		t.Errorf("envelope: ts %v rank %d (%v); want %v rank %d", b.TS, b.DPRank, b.HasDPRank, v.Batch.TS, v.Batch.DPRank)
	}
	pages := v.Cases[0].Pages
	for i := 0; i < 3; i++ {
		ev := b.Events[i]
		if ev.Kind != EventBlockStored || len(ev.BlockHashes) != 1 || int64(ev.BlockHashes[0]) != pages[i].Int64 ||
			ev.BlockSize != 16 || len(ev.TokenIDs) != 16 || ev.Medium != MediumGPU || ev.HasLoRAID {
			t.Errorf("event %d: %+v", i, ev)
		}
		if wantParent := i > 0; ev.HasParent != wantParent || (wantParent && int64(ev.Parent) != pages[i-1].Int64) {
			t.Errorf("event %d: parent %d (%v)", i, int64(ev.Parent), ev.HasParent)
		}
	}
	if ev := b.Events[3]; ev.Kind != EventBlockRemoved || int64(ev.BlockHashes[0]) != pages[2].Int64 || ev.Medium != MediumGPU {
		t.Errorf("event 3: %+v", ev)
	}
	if b.Events[4].Kind != EventAllBlocksCleared {
		t.Errorf("event 4: %v", b.Events[4].Kind)
	}
	out, err := AppendBatch(nil, &b, EncodeOptions{Layout: LayoutSGLang})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, raw) {
		t.Errorf("SGLang layout re-encodes to\n%x\nwant\n%x", out, raw)
	}
}

// sglangPages returns the per-page BlockStored events SGLang publishes for a
// node of tokens under parent (0, false: under the root).
func sglangPages(h *SGLangHasher, tokens []uint32, parentDig Digest) []Event {
	digs, _ := h.AppendRunDigests(nil, parentDig, tokens, nil)
	ps := h.BlockSize()
	out := make([]Event, 0, len(digs))
	for i, d := range digs {
		ev := Event{Kind: EventBlockStored, BlockHashes: []uint64{SGLangKey(d)}, TokenIDs: tokens[i*ps : (i+1)*ps],
			BlockSize: ps, Medium: MediumGPU, HasMedium: true}
		switch {
		case i > 0:
			ev.Parent, ev.HasParent = SGLangKey(digs[i-1]), true
		case !parentDig.IsZero():
			ev.Parent, ev.HasParent = SGLangKey(parentDig), true
		}
		out = append(out, ev)
	}
	return out
}

// TestMirror_SGLangExactMode mirrors SGLang's per-page events: the prompt's
// chain scores them, the contract check re-hashes them without extra_keys,
// evictions and salted runs behave.
func TestMirror_SGLangExactMode(t *testing.T) {
	h := mustSGLangHasher(t, 4)
	m := newTestMirror(t, h, 0)
	prompt := seqTokens(1, 16)
	m.Apply(batchOf(sglangPages(h, prompt[:12], Digest{})...))
	chain := h.AppendBlockKeys(nil, prompt, ExtraKeys{})
	if got := m.Score(chain); got != 3 {
		t.Fatalf("score %d; want 3", got)
	}
	digs, _ := h.AppendRunDigests(nil, Digest{}, prompt[:12], nil)
	m.Apply(batchOf(sglangPages(h, prompt[12:], digs[2])...)) // a child node
	if got := m.Score(chain); got != 4 {
		t.Fatalf("score after child %d; want 4", got)
	}
	c := m.Contract()
	if c.Tripped || c.Verified != 4 || c.Mismatched != 0 {
		t.Fatalf("contract %+v; want 4 verified", c)
	}
	m.Apply(batchOf(Event{Kind: EventBlockRemoved, BlockHashes: []uint64{chain[1]}, Medium: MediumGPU, HasMedium: true}))
	if got := m.Score(chain); got != 1 {
		t.Fatalf("score after evicting page 1: %d; want 1", got)
	}
	salted := sglangPages(h, seqTokens(50, 4), Digest{})
	salted[0].CacheSalt, salted[0].HasCacheSalt = "s", true
	m.Apply(batchOf(salted...))
	if got := m.Score(h.AppendBlockKeys(nil, seqTokens(50, 4), ExtraKeys{})); got != 0 {
		t.Errorf("a salted run scored %d for an unsalted prompt; want 0", got)
	}
	if st := m.Stats(); st.Ignored[IgnoreCacheSalt].Events != 1 {
		t.Errorf("cache_salt ignored %+v; want 1 event", st.Ignored[IgnoreCacheSalt])
	}
}

// TestMirror_SGLangContractTrips: a wrong page size trips the guard at
// once; keys of another hash trip it after consecutive mismatches, with an
// SGLang-specific fix.
func TestMirror_SGLangContractTrips(t *testing.T) {
	h := mustSGLangHasher(t, 4)
	t.Run("page size", func(t *testing.T) {
		m := newTestMirror(t, mustSGLangHasher(t, 8), 0)
		m.Apply(batchOf(sglangPages(h, seqTokens(1, 8), Digest{})...))
		if c := m.Contract(); !c.Tripped || c.Reason != ContractBlockSize {
			t.Fatalf("contract %+v; want tripped block_size", c)
		}
	})
	t.Run("keys", func(t *testing.T) {
		m := newTestMirror(t, h, 0)
		for i := 0; i < contractTripAfter; i++ {
			evs := sglangPages(h, seqTokens(100*i+1, 4), Digest{})
			evs[0].BlockHashes = []uint64{evs[0].BlockHashes[0] ^ 1}
			m.Apply(batchOf(evs...))
		}
		c := m.Contract()
		if !c.Tripped || c.Reason != ContractHashMismatch || !strings.Contains(c.Detail, "--page-size") {
			t.Fatalf("contract %+v; want tripped hash_mismatch naming --page-size", c)
		}
	})
}

// TestDecode_SGLangMetadata reads BlockStoredWithMetadata's trailing
// {"cache_salt": ...} where vLLM's lora_name would be.
func TestDecode_SGLangMetadata(t *testing.T) {
	ev := Event{Kind: EventBlockStored, BlockHashes: []uint64{1 << 63}, TokenIDs: seqTokens(1, 4), BlockSize: 4,
		Medium: MediumGPU, HasMedium: true, CacheSalt: "tenant-a", HasCacheSalt: true}
	raw, err := AppendBatch(nil, &Batch{TS: 1, Events: []Event{ev}, HasDPRank: true}, EncodeOptions{Layout: LayoutSGLang})
	if err != nil {
		t.Fatal(err)
	}
	var b Batch
	if err := b.Decode(raw); err != nil {
		t.Fatal(err)
	}
	if len(b.Events) != 1 || b.Invalid != 0 {
		t.Fatalf("%d events, %d invalid (%v)", len(b.Events), b.Invalid, b.InvalidErr)
	}
	got := b.Events[0]
	if !got.HasCacheSalt || got.CacheSalt != "tenant-a" || got.HasLoRAName || got.BlockHashes[0] != 1<<63 {
		t.Errorf("decoded %+v", got)
	}
}

// TestTierOf_SGLangHostTier: HiCache's CPU_PINNED blocks are the CPU tier.
func TestTierOf_SGLangHostTier(t *testing.T) {
	for _, m := range []string{"CPU_PINNED", "cpu_pinned"} {
		if tier, ok := TierOf(&Event{Medium: m, HasMedium: true}); !ok || tier != TierCPU {
			t.Errorf("%s: tier %v ok %v; want CPU", m, tier, ok)
		}
	}
	if _, ok := TierOf(&Event{Medium: "DISK", HasMedium: true}); ok {
		t.Error("DISK is mirrored; want ignored")
	}
}

// TestScoreUnion_CountsLeadingBlocksAnyRankHolds: the union of DP ranks
// scores a prefix whose pages are spread over ranks, GPU before CPU.
func TestScoreUnion_CountsLeadingBlocksAnyRankHolds(t *testing.T) {
	h := mustSGLangHasher(t, 4)
	toks := seqTokens(1, 20)
	chain := h.AppendBlockKeys(nil, toks, ExtraKeys{})
	pages := sglangPages(h, toks, Digest{})
	r0, r1, r2 := newTestMirror(t, h, 0), newTestMirror(t, h, 0), newTestMirror(t, h, 0)
	r0.Apply(batchOf(pages[0], pages[1]))
	r1.Apply(batchOf(pages[2]))
	cpu := pages[3]
	cpu.Medium = MediumCPUPinned
	r2.Apply(batchOf(cpu))
	tests := []struct {
		name          string
		give          []*Mirror
		want, wantOff int
	}{
		{"none", nil, 0, 0},
		{"one rank is ScoreTiers", []*Mirror{r0}, 2, 0},
		{"two ranks chain", []*Mirror{r0, r1}, 3, 0},
		{"offloaded page extends it", []*Mirror{r2, r1, r0}, 4, 1},
		{"a gap stops it", []*Mirror{r0, r2}, 2, 0},
	}
	for _, tt := range tests {
		got, off := ScoreUnion(tt.give, chain)
		if got != tt.want || off != tt.wantOff {
			t.Errorf("%s: got %d (%d offloaded); want %d (%d)", tt.name, got, off, tt.want, tt.wantOff)
		}
	}
}
