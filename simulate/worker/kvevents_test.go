package worker

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/tokenizer"
)

// llbView is what llb's inventory makes of a worker's KV events: a real
// inventory.Feed (ZMQ SUB) applying to a real inventory.Mirror.
type llbView struct {
	mu     sync.Mutex
	mirror *inventory.Mirror
	feed   *inventory.Feed
}

// watch subscribes llb's inventory to w's events with the given keys.
func watch(t *testing.T, w *Worker, keys inventory.ChainHasher) *llbView {
	t.Helper()
	m, err := inventory.NewMirror(inventory.MirrorConfig{Keys: keys, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	v := &llbView{mirror: m}
	v.feed, err = inventory.NewFeed(inventory.FeedConfig{
		Endpoint:       w.KVEndpoint(),
		ReplayEndpoint: w.ReplayEndpoint(),
		Sink: func(u inventory.Update) {
			v.mu.Lock()
			defer v.mu.Unlock()
			v.mirror.ApplyUpdate(u)
		},
		Logger: zerolog.Nop(),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.feed.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("feed: %v", err)
		}
		m.Close()
	})
	return v
}

// score is the mirror's leading-block match for chain.
func (v *llbView) score(chain []uint64) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.mirror.Score(chain)
}

func (v *llbView) stats() inventory.MirrorStats {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.mirror.Stats()
}

// joinFeed beats the ZMQ slow-joiner: it sends throwaway requests until the
// feed has received a batch, so every later event reaches the mirror, then
// resets the prefix cache so worker and mirror start equal (warm-up batches
// sent before the subscription was live are lost, as in production).
func joinFeed(t *testing.T, c *http.Client, w *Worker, v *llbView) {
	t.Helper()
	i := 0
	eventually(t, "the feed to receive a batch", func() bool {
		i++
		post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": words(fmt.Sprintf("warm up %d", i), 20), "max_tokens": 1}, nil)
		return v.feed.Stats().Batches > 0
	})
	clears := v.stats().Clears
	if st, _, raw := post(t, c, w.URL()+"/reset_prefix_cache", "", nil); st != http.StatusOK {
		t.Fatalf("reset: %d %s", st, raw)
	}
	eventually(t, "the reset to reach the mirror", func() bool { return v.stats().Clears > clears && v.stats().Blocks == 0 })
}

// TestKVEvents_LLBRecomputesThePublishedKeys is the product's core
// contract: the keys llb computes for a prompt (its /tokenize tokens through
// inventory.Hasher) are exactly the keys the worker publishes, so llb's
// mirror scores a cached prompt at every block — for both API forms, both
// event layouts, int and digest hashes, and both CBOR algorithms.
func TestKVEvents_LLBRecomputesThePublishedKeys(t *testing.T) {
	tests := []struct {
		name   string
		algo   engine.HashAlgo
		seed   string
		layout inventory.Layout
		digest bool
		replay bool
	}{
		{"sha256_cbor map layout int hashes", engine.HashSHA256CBOR, "0", inventory.LayoutMap, false, false},
		{"sha256_cbor legacy array layout", engine.HashSHA256CBOR, "0", inventory.LayoutArray, false, true},
		{"sha256_cbor raw digests", engine.HashSHA256CBOR, "12345", inventory.LayoutMap, true, false},
		{"xxhash_cbor empty seed", engine.HashXXHashCBOR, "", inventory.LayoutMap, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := startWorker(t, func(c *Config) {
				c.Engine.Hash = engine.HashConfig{Algo: tt.algo, Seed: tt.seed}
				c.Layout, c.DigestHashes, c.Replay = tt.layout, tt.digest, tt.replay
				c.LoRAs = []string{"sql-lora"}
			})
			hasher, err := inventory.NewHasher(inventory.Algo(tt.algo), 16, tt.seed)
			if err != nil {
				t.Fatal(err)
			}
			c := client(t)
			v := watch(t, w, hasher)
			joinFeed(t, c, w, v)

			prompt := words("Shared system preamble for every tenant.", 150)
			tok := tokenize(t, c, w, map[string]any{"prompt": prompt})
			chain := hasher.AppendBlockKeys(nil, tok.Tokens, inventory.ExtraKeys{})
			if len(chain) < 8 || v.score(chain) != 0 {
				t.Fatalf("chain of %d blocks, score %d before the request", len(chain), v.score(chain))
			}
			post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 2}, nil)
			eventually(t, "llb's mirror to hold the completion prompt", func() bool { return v.score(chain) == len(chain) })

			msgs := []map[string]any{{"role": "system", "content": "Be terse."}, {"role": "user", "content": words("Question:", 90)}}
			ctok := tokenize(t, c, w, map[string]any{"messages": msgs})
			cchain := hasher.AppendBlockKeys(nil, ctok.Tokens, inventory.ExtraKeys{})
			post(t, c, w.URL()+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 2}, nil)
			eventually(t, "llb's mirror to hold the chat prompt", func() bool { return v.score(cchain) == len(cchain) })

			// A cache_salt changes every key through block 0; llb does the same.
			post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1, "cache_salt": "tenant-7"}, nil)
			schain := hasher.AppendBlockKeys(nil, tok.Tokens, inventory.ExtraKeys{CacheSalt: "tenant-7"})
			eventually(t, "llb's mirror to hold the salted prompt", func() bool { return v.score(schain) == len(schain) })

			// A LoRA request hashes the adapter name into every block.
			post(t, c, w.URL()+"/v1/completions", map[string]any{"model": "sql-lora", "prompt": prompt, "max_tokens": 1}, nil)
			lchain := hasher.AppendBlockKeys(nil, tok.Tokens, inventory.ExtraKeys{LoRAName: "sql-lora"})
			eventually(t, "llb's mirror to hold the LoRA prompt", func() bool { return v.score(lchain) == len(lchain) })

			// An image part adds an extra key from its block on: llb, which
			// has no mm hash, matches exactly the blocks before the image.
			img := []map[string]any{{"role": "user", "content": []map[string]any{
				{"type": "text", "text": words("Look closely.", 60)},
				{"type": "image_url", "image_url": map[string]any{"url": "http://example/cat.png"}},
				{"type": "text", "text": words("What is it?", 60)},
			}}}
			itok := tokenize(t, c, w, map[string]any{"messages": img})
			ichain := hasher.AppendBlockKeys(nil, itok.Tokens, inventory.ExtraKeys{})
			pad := -1
			for i, id := range itok.Tokens {
				if id == tokenizer.ImagePad {
					pad = i
				}
			}
			post(t, c, w.URL()+"/v1/chat/completions", map[string]any{"messages": img, "max_tokens": 1}, nil)
			eventually(t, "the image prompt's blocks before the image", func() bool { return v.score(ichain) == pad/16 })

			st := v.stats()
			if st.Contract.Tripped || st.Contract.Verified == 0 || st.Contract.Mismatched != 0 {
				t.Fatalf("contract %+v; want verified and never mismatched", st.Contract)
			}
			if got, want := st.Blocks, w.Stats().CachedBlocks; got != want {
				t.Fatalf("mirror holds %d blocks; worker caches %d", got, want)
			}
		})
	}
}

func TestKVEvents_EvictionsAndResetReachTheMirror(t *testing.T) {
	w := startWorker(t, func(c *Config) { c.Engine.NumBlocks = 24 })
	hasher, _ := inventory.NewHasher(inventory.AlgoSHA256CBOR, 16, "0")
	c := client(t)
	v := watch(t, w, hasher)
	joinFeed(t, c, w, v)

	a := words("tenant A", 150) // ~10 blocks
	atok := tokenize(t, c, w, map[string]any{"prompt": a}).Tokens
	achain := hasher.AppendBlockKeys(nil, atok, inventory.ExtraKeys{})
	post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": a, "max_tokens": 1}, nil)
	eventually(t, "A cached", func() bool { return v.score(achain) == len(achain) })
	for _, p := range []string{words("tenant B", 150), words("tenant C", 150)} {
		post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": p, "max_tokens": 1}, nil)
	}
	eventually(t, "the mirror to follow the evictions", func() bool {
		return v.score(achain) < len(achain) && v.stats().Blocks == w.Stats().CachedBlocks
	})
	if v.stats().RemovedBlocks == 0 {
		t.Fatal("no BlockRemoved reached the mirror")
	}
	if st, _, raw := post(t, c, w.URL()+"/reset_prefix_cache", "", nil); st != 200 {
		t.Fatalf("reset %d %s", st, raw)
	}
	eventually(t, "AllBlocksCleared to empty the mirror", func() bool { return v.stats().Blocks == 0 && v.stats().Clears == 2 })
}

// TestKVEvents_MismatchedHashModes checks the modes that exist to exercise
// llb's token-keyed mode and hash-contract guard: llm-d's FNV keys and an
// unset PYTHONHASHSEED. Exact keys never match (and the contract trips);
// token-keyed mode still scores every block.
func TestKVEvents_MismatchedHashModes(t *testing.T) {
	tests := []struct {
		name string
		give func(*Config)
	}{
		{"llm-d fnv keys", func(c *Config) { c.Engine.Hash = engine.HashConfig{Algo: engine.HashFNV, Seed: "0"} }},
		{"PYTHONHASHSEED unset", func(c *Config) { c.SeedUnset = true }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := startWorker(t, tt.give)
			exact, _ := inventory.NewHasher(inventory.AlgoSHA256CBOR, 16, "0")
			own, _ := inventory.NewTokenHasher(16)
			c := client(t)
			ve := watch(t, w, exact)
			vt := watch(t, w, own)
			joinFeed(t, c, w, ve)
			joinFeed(t, c, w, vt)
			eventually(t, "the second reset to reach the exact mirror", func() bool { return ve.stats().Blocks == 0 })
			var last []uint32
			for i := range 4 {
				p := words(fmt.Sprintf("prompt %d", i), 100)
				last = tokenize(t, c, w, map[string]any{"prompt": p}).Tokens
				post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": p, "max_tokens": 1}, nil)
			}
			tchain := own.AppendBlockKeys(nil, last, inventory.ExtraKeys{})
			eventually(t, "the token-keyed mirror to hold the prompt", func() bool { return vt.score(tchain) == len(tchain) })
			echain := exact.AppendBlockKeys(nil, last, inventory.ExtraKeys{})
			// Both feeds share the worker's stream; wait until the exact one has
			// applied the last batch the token-keyed one has (counting stored
			// blocks would not do: a feed may miss the stream's first batch to
			// ZMQ's slow joiner, and the first batch is accepted as is).
			eventually(t, "the exact mirror to see the stores", func() bool {
				e, k := ve.feed.Stats(), vt.feed.Stats()
				return e.HaveSeq && k.HaveSeq && e.LastSeq >= k.LastSeq
			})
			if got := ve.score(echain); got != 0 {
				t.Fatalf("exact score %d; want 0 under a mismatched hash", got)
			}
			if ct := ve.stats().Contract; !ct.Tripped && ct.Mismatched == 0 {
				t.Fatalf("contract %+v; want the mismatch detected", ct)
			}
		})
	}
}

// TestKVEvents_OffloadTierReachesTheMirrorAndServesCachedTokens: a worker
// with CPU offloading publishes its CPU tier with medium "CPU"; llb's mirror
// keeps scoring a prompt whose GPU blocks were evicted, and the engine
// reports those blocks as cached (loaded from CPU memory).
func TestKVEvents_OffloadTierReachesTheMirrorAndServesCachedTokens(t *testing.T) {
	w := startWorker(t, func(c *Config) { c.Engine.NumBlocks = 24; c.Engine.OffloadBlocks = 200 })
	hasher, _ := inventory.NewHasher(inventory.AlgoSHA256CBOR, 16, "0")
	c := client(t)
	v := watch(t, w, hasher)
	joinFeed(t, c, w, v)

	a := words("tenant A", 150) // ~10 blocks
	atok := tokenize(t, c, w, map[string]any{"prompt": a}).Tokens
	achain := hasher.AppendBlockKeys(nil, atok, inventory.ExtraKeys{})
	post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": a, "max_tokens": 1}, nil)
	for _, p := range []string{words("tenant B", 150), words("tenant C", 150)} {
		post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": p, "max_tokens": 1}, nil)
	}
	mirror := func() (int, int) {
		v.mu.Lock()
		defer v.mu.Unlock()
		return v.mirror.ScoreTiers(achain)
	}
	eventually(t, "A's evicted GPU blocks to score from the CPU tier", func() bool {
		n, off := mirror()
		return n == len(achain) && off > 0 && v.stats().OffloadBlocks == w.Stats().OffloadedBlocks
	})
	_, _, raw := post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": a, "max_tokens": 1}, nil)
	r := decode[response](t, raw)
	if want := (len(atok) - 1) / 16 * 16; r.Usage.PromptTokensDetails.CachedTokens != want {
		t.Fatalf("cached %d; want %d (every block, some loaded from CPU memory)", r.Usage.PromptTokensDetails.CachedTokens, want)
	}
	if st := v.stats(); st.IgnoredEvents != 0 {
		t.Fatalf("mirror ignored events: %+v", st.Ignored)
	}
}

func TestUsage_PromptTokensDetailsCanBeOff(t *testing.T) {
	w := startWorker(t, func(c *Config) { c.NoPromptTokensDetails = true })
	_, _, raw := post(t, client(t), w.URL()+"/v1/completions", map[string]any{"prompt": words("x", 40), "max_tokens": 1}, nil)
	if !strings.Contains(string(raw), `"prompt_tokens_details":null`) {
		t.Fatalf("body %s; want prompt_tokens_details null (vLLM without --enable-prompt-tokens-details)", raw)
	}
}
