package worker

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/simulate/engine"
)

// subscribe runs an inventory feed (ZMQ or drain) against a worker and
// applies what it delivers to a mirror keyed by keys.
type mirrorRig struct {
	mu     sync.Mutex
	mirror *inventory.Mirror
	batch  []*inventory.Batch
}

func (m *mirrorRig) sink(u inventory.Update) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u.Kind == inventory.UpdateBatch {
		m.batch = append(m.batch, u.Batch)
		m.mirror.ApplyUpdate(u)
	}
}

func (m *mirrorRig) score(chain []uint64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mirror.Score(chain)
}

func newMirrorRig(t *testing.T, keys inventory.ChainHasher) *mirrorRig {
	t.Helper()
	mir, err := inventory.NewMirror(inventory.MirrorConfig{Keys: keys, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mir.Close)
	return &mirrorRig{mirror: mir}
}

func runFeed(t *testing.T, run func(context.Context) error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := run(ctx); err != nil {
			t.Errorf("feed: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func tokenPrompt(n, base int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = base + i
	}
	return out
}

func u32(ids []int) []uint32 {
	out := make([]uint32, len(ids))
	for i, v := range ids {
		out[i] = uint32(v)
	}
	return out
}

// TestSGLang_PublishesPagesWithSGLangHashes: an SGLang worker publishes
// one BlockStored per page, SGLang's page keys (signed on the wire), its
// DP rank in every batch; llb's SGLang mirror scores the prompt.
func TestSGLang_PublishesPagesWithSGLangHashes(t *testing.T) {
	w := startWorker(t, func(c *Config) { c.Dialect = DialectSGLang; c.DPRank = 2 })
	h, _ := inventory.NewSGLangHasher(16)
	rig := newMirrorRig(t, h)
	f, err := inventory.NewFeed(inventory.FeedConfig{Endpoint: w.KVEndpoint(), Sink: rig.sink, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	runFeed(t, f.Run)
	c := client(t)
	base := 300
	eventually(t, "a prompt's three pages mirrored", func() bool {
		// A fresh prompt each time: a cached one publishes nothing again,
		// and the first ones may go out before the subscription reached
		// the publisher.
		base += 100
		prompt := tokenPrompt(50, base)
		if st, _, raw := post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 2}, nil); st != http.StatusOK {
			t.Fatalf("completion %d %s", st, raw)
		}
		chain := h.AppendBlockKeys(nil, u32(prompt), inventory.ExtraKeys{})
		deadline := time.Now().Add(200 * time.Millisecond)
		for time.Now().Before(deadline) && rig.score(chain) != 3 {
			time.Sleep(5 * time.Millisecond)
		}
		return rig.score(chain) == 3
	})
	rig.mu.Lock()
	defer rig.mu.Unlock()
	for _, b := range rig.batch {
		if !b.HasDPRank || b.DPRank != 2 {
			t.Fatalf("batch dp rank %d (%v); want 2", b.DPRank, b.HasDPRank)
		}
		for _, ev := range b.Events {
			if ev.Kind == inventory.EventBlockStored && (len(ev.BlockHashes) != 1 || len(ev.TokenIDs) != 16 || ev.HasGroupIdx || ev.HasExtraKeys) {
				t.Fatalf("SGLang BlockStored %+v; want one page, no vLLM fields", ev)
			}
		}
	}
	if st := rig.mirror.Contract(); st.Tripped || st.Verified == 0 {
		t.Fatalf("contract %+v; want verified pages", st)
	}
}

// TestTRTLLM_DrainsEventsDestructively: trtllm-serve's events wait in the
// ring until POST /kv_cache_events takes them; a second drain gets nothing;
// llb's drain feed keys them by tokens.
func TestTRTLLM_DrainsEventsDestructively(t *testing.T) {
	w := startWorker(t, func(c *Config) { c.Dialect = DialectTRTLLM; c.Engine.BlockSize = 32 })
	c := client(t)
	prompt := tokenPrompt(70, 500)
	if st, _, raw := post(t, c, w.URL()+"/v1/completions", map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": 2}, nil); st != http.StatusOK {
		t.Fatalf("completion %d %s", st, raw)
	}
	var evs []struct {
		EventID uint64 `json:"event_id"`
		Data    struct {
			Type   string `json:"type"`
			Blocks []struct {
				Tokens []struct {
					TokenID int `json:"token_id"`
				} `json:"tokens"`
			} `json:"blocks"`
		} `json:"data"`
		WindowSize int `json:"window_size"`
	}
	eventually(t, "events in the ring", func() bool {
		st, _, raw := post(t, c, w.URL()+"/kv_cache_events", "", nil)
		if st != http.StatusOK {
			t.Fatalf("drain %d %s", st, raw)
		}
		var got []json.RawMessage
		_ = json.Unmarshal(raw, &got)
		if len(got) == 0 {
			return false
		}
		evs = decode[[]struct {
			EventID uint64 `json:"event_id"`
			Data    struct {
				Type   string `json:"type"`
				Blocks []struct {
					Tokens []struct {
						TokenID int `json:"token_id"`
					} `json:"tokens"`
				} `json:"blocks"`
			} `json:"data"`
			WindowSize int `json:"window_size"`
		}](t, raw)
		return true
	})
	if len(evs) < 2 || evs[0].Data.Type != "created" || evs[0].EventID != 0 || evs[1].Data.Type != "stored" || evs[1].EventID != 1 ||
		len(evs[1].Data.Blocks) != 2 || len(evs[1].Data.Blocks[0].Tokens) != 32 || evs[1].Data.Blocks[0].Tokens[0].TokenID != 500 {
		t.Fatalf("drained %+v; want created then the stored prompt (2 blocks of 32)", evs)
	}
	if st, _, raw := post(t, c, w.URL()+"/kv_cache_events", "", nil); st != http.StatusOK || string(raw) != "[]" {
		t.Fatalf("second drain %d %s; want []", st, raw)
	}
	if st, _ := get(t, c, w.URL()+"/tokenize"); st != http.StatusNotFound {
		t.Fatalf("GET /tokenize %d; trtllm-serve has none", st)
	}

	th, _ := inventory.NewTokenHasher(32)
	rig := newMirrorRig(t, th)
	f, err := inventory.NewDrainFeed(inventory.DrainConfig{URL: w.URL() + "/kv_cache_events", BlockSize: 32, Sink: rig.sink, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	runFeed(t, f.Run)
	other := tokenPrompt(64, 9000)
	chain := th.AppendBlockKeys(nil, u32(other), inventory.ExtraKeys{})
	if st, _, raw := post(t, c, w.URL()+"/v1/completions", map[string]any{"model": "sim-model", "prompt": other, "max_tokens": 2}, nil); st != http.StatusOK {
		t.Fatalf("completion %d %s", st, raw)
	}
	eventually(t, "the drain feed mirrors the prompt", func() bool { return rig.score(chain) == 2 })
}

// TestTRTLLM_RefusesOtherDialectsFields: trtllm-serve forbids unknown
// fields (400 {"error": ...}); vLLM and SGLang workers ignore them.
func TestTRTLLM_RefusesOtherDialectsFields(t *testing.T) {
	trt := startWorker(t, func(c *Config) { c.Dialect = DialectTRTLLM })
	vl := startWorker(t, nil)
	c := client(t)
	for _, extra := range []map[string]any{
		{"kv_transfer_params": map[string]any{"do_remote_decode": true}},
		{"bootstrap_host": "127.0.0.1", "bootstrap_port": 8998, "bootstrap_room": 7},
		{"disaggregated_params": map[string]any{"request_type": "context_only", "kv_transfer_params": 1}},
		{"stream": true, "stream_options": map[string]any{"include_usage": true, "bogus": 1}},
		{"priority": -1},
		{"continue_final_message": true},
	} {
		body := map[string]any{"model": "sim-model", "prompt": "hello there", "max_tokens": 1}
		for k, v := range extra {
			body[k] = v
		}
		st, _, raw := post(t, c, trt.URL()+"/v1/completions", body, nil)
		var e map[string]any
		_ = json.Unmarshal(raw, &e)
		msg, _ := e["error"].(string)
		if st != http.StatusBadRequest || !strings.Contains(msg, "Extra inputs are not permitted") {
			t.Errorf("trtllm with %v: %d %s; want 400 extra_forbidden", extra, st, raw)
		}
		if _, ok := extra["disaggregated_params"]; !ok && extra["stream"] == nil {
			if st, _, raw := post(t, c, vl.URL()+"/v1/completions", body, nil); st != http.StatusOK {
				t.Errorf("vllm with %v: %d %s; want 200", extra, st, raw)
			}
		}
	}
}

// TestTRTLLM_StreamOptionsOnlyWithStream: trtllm-serve's validator
// refuses stream_options unless stream is true; every refusal is counted.
func TestTRTLLM_StreamOptionsOnlyWithStream(t *testing.T) {
	trt := startWorker(t, func(c *Config) { c.Dialect = DialectTRTLLM })
	c := client(t)
	for _, stream := range []any{nil, false} {
		body := map[string]any{"model": "sim-model", "prompt": "hello there", "max_tokens": 1, "stream_options": map[string]any{"include_usage": true}}
		if stream != nil {
			body["stream"] = stream
		}
		st, _, raw := post(t, c, trt.URL()+"/v1/completions", body, nil)
		if st != http.StatusBadRequest || !strings.Contains(string(raw), "Stream options can only be defined when stream is true") {
			t.Errorf("stream %v with stream_options: %d %s; want 400", stream, st, raw)
		}
	}
	body := map[string]any{"model": "sim-model", "prompt": "hello there", "max_tokens": 1, "stream": true,
		"stream_options": map[string]any{"include_usage": true, "continuous_usage_stats": true}}
	if st, _, raw := post(t, c, trt.URL()+"/v1/completions", body, nil); st != http.StatusOK {
		t.Errorf("a stream with both stream options: %d %s; want 200", st, raw)
	}
	if n := trt.Debug().Counters["strict_refused"]; n != 2 {
		t.Errorf("strict_refused = %d; want 2", n)
	}
}

// TestSGLang_PrefillWaitsForItsDecode: the pair gets the same body at once;
// the prefill answers only after the decode joined the room, the decode
// reads the prefill's KV. A prefill alone waits until the bootstrap timeout.
func TestSGLang_PrefillWaitsForItsDecode(t *testing.T) {
	p := startWorker(t, func(c *Config) {
		c.Name, c.Dialect, c.Engine.KVRole, c.BootstrapTimeout = "prefill", DialectSGLang, engine.KVProducer, 400*time.Millisecond
	})
	d := startWorker(t, func(c *Config) {
		c.Name, c.Dialect, c.Engine.KVRole, c.KVEvents, c.BootstrapTimeout = "decode", DialectSGLang, engine.KVConsumer, false, 400*time.Millisecond
	})
	host, port, _ := net.SplitHostPort(p.BootstrapAddr())
	bport, _ := strconv.Atoi(port)
	c := client(t)
	body := func(room int, stream bool) map[string]any {
		return map[string]any{"model": "sim-model", "prompt": tokenPrompt(80, 40), "max_tokens": 5, "stream": stream,
			"bootstrap_host": host, "bootstrap_port": bport, "bootstrap_room": room}
	}
	for _, stream := range []bool{false, true} {
		var wg sync.WaitGroup
		var pst, dst int
		var praw, draw []byte
		wg.Add(2)
		go func() { defer wg.Done(); pst, _, praw = post(t, c, p.URL()+"/v1/completions", body(11, stream), nil) }()
		go func() { defer wg.Done(); dst, _, draw = post(t, c, d.URL()+"/v1/completions", body(11, stream), nil) }()
		wg.Wait()
		if pst != http.StatusOK || dst != http.StatusOK {
			t.Fatalf("stream %v: prefill %d %s, decode %d %s", stream, pst, praw, dst, draw)
		}
		recs := d.Debug().KVParamsReceived
		if r := recs[len(recs)-1]; !r.Pulled || r.PulledBlocks != 5 {
			t.Fatalf("decode receipt %+v; want 5 pulled pages", r)
		}
	}
	if s := d.Stats(); s.RemotePrefillLegs != 2 || s.PrefixQueries != 0 {
		t.Fatalf("decode stats %+v; want two remote legs and no local prefill", s)
	}
	start := time.Now()
	st, _, raw := post(t, c, p.URL()+"/v1/completions", body(12, false), nil)
	if st != http.StatusServiceUnavailable || time.Since(start) < 400*time.Millisecond {
		t.Fatalf("a prefill without its decode: %d %s after %v; want 503 after the bootstrap timeout", st, raw, time.Since(start))
	}
	var e flatError
	if err := json.Unmarshal(raw, &e); err != nil || e.Object != "error" {
		t.Fatalf("SGLang error shape %s", raw)
	}
}

// TestTRTLLM_ContextThenGeneration: the context leg answers with
// disaggregated_params; the generation leg reads them and pulls the KV.
func TestTRTLLM_ContextThenGeneration(t *testing.T) {
	ctxW := startWorker(t, func(c *Config) { c.Name, c.Dialect, c.Engine.KVRole = "context", DialectTRTLLM, engine.KVProducer })
	gen := startWorker(t, func(c *Config) {
		c.Name, c.Dialect, c.Engine.KVRole, c.KVEvents = "generation", DialectTRTLLM, engine.KVConsumer, false
	})
	c := client(t)
	prompt := tokenPrompt(64, 700)
	st, _, raw := post(t, c, ctxW.URL()+"/v1/completions", map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": 8,
		"disaggregated_params": map[string]any{"request_type": "context_only"}}, nil)
	if st != http.StatusOK {
		t.Fatalf("context leg %d %s", st, raw)
	}
	var cr struct {
		Choices []struct {
			FinishReason        string          `json:"finish_reason"`
			DisaggregatedParams json.RawMessage `json:"disaggregated_params"`
		} `json:"choices"`
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(raw, &cr); err != nil || len(cr.Choices) != 1 || cr.KV != nil {
		t.Fatalf("context answer %s", raw)
	}
	var dp map[string]any
	_ = json.Unmarshal(cr.Choices[0].DisaggregatedParams, &dp)
	if dp["request_type"] != "context_only" || dp["encoded_opaque_state"] == "" {
		t.Fatalf("disaggregated_params %s", cr.Choices[0].DisaggregatedParams)
	}
	dp["request_type"] = "generation_only"
	st, _, raw = post(t, c, gen.URL()+"/v1/completions", map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": 8,
		"disaggregated_params": dp}, nil)
	if st != http.StatusOK {
		t.Fatalf("generation leg %d %s", st, raw)
	}
	if u := decode[response](t, raw).Usage; u.CompletionTokens != 8 {
		t.Fatalf("generation usage %+v", u)
	}
	if r := gen.Debug().KVParamsReceived; len(r) != 1 || !r[0].Pulled || r[0].PulledBlocks != 4 {
		t.Fatalf("generation receipts %+v; want 4 pulled blocks", r)
	}
	if st, _, raw := post(t, c, ctxW.URL()+"/v1/completions", map[string]any{"model": "sim-model", "prompt": prompt, "stream": true,
		"disaggregated_params": map[string]any{"request_type": "context_only"}}, nil); st != http.StatusBadRequest {
		t.Fatalf("streamed context_only %d %s; want 400", st, raw)
	}
}
