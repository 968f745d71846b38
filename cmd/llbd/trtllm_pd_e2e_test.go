package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/worker"
)

// TensorRT-LLM P/D through the real llbd: simulated trtllm-serve workers
// (context_only then generation_only with disaggregated_params, events in
// a ring drained over HTTP, any undeclared request field refused with 400)
// behind a P/D rule and a single-pool rule on one daemon.

// strictRefusals sums the requests the fleets' strict request models
// refused (an undeclared field, stream_options without stream).
func strictRefusals(fleets ...*fleet.Fleet) uint64 {
	var n uint64
	for _, f := range fleets {
		for _, w := range f.Workers() {
			n += w.Debug().Counters["strict_refused"]
		}
	}
	return n
}

// sseData returns the data payloads of an SSE body.
func sseData(body string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if s, ok := strings.CutPrefix(l, "data: "); ok {
			out = append(out, s)
		}
	}
	return out
}

// streamedTokens counts the content events of a completion or chat stream
// and reports whether it ended with [DONE].
func streamedTokens(t *testing.T, body string) (int, bool) {
	t.Helper()
	n, done := 0, false
	for _, d := range sseData(body) {
		if d == "[DONE]" {
			done = true
			continue
		}
		var ev struct {
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(d), &ev); err != nil {
			t.Fatalf("event %q: %v", d, err)
		}
		for _, c := range ev.Choices {
			if c.Text != "" || c.Delta.Content != "" {
				n++
			}
		}
	}
	return n, done
}

// legs reports the fleet's context legs (prefills that handed their KV
// on) and generation legs (decodes served from pulled KV).
func legs(f *fleet.Fleet) (ctx, gen uint64) {
	for _, w := range f.Workers() {
		s := w.Stats()
		ctx += s.RemoteDecodeLegs
		gen += s.RemotePrefillLegs
	}
	return ctx, gen
}

func TestE2E_TRTLLMPDThroughTheDaemon(t *testing.T) {
	pd := engineFleet(t, worker.DialectTRTLLM, fleet.Config{Prefill: 2, Decode: 2, BaseIP: "127.0.0.150"}, 32)
	single := engineFleet(t, worker.DialectTRTLLM, fleet.Config{Single: 2, BaseIP: "127.0.0.160"}, 32)
	d := startDataPlane(t, "LOXILB_KV_COLDSTART_SEED_N=0")

	port := freePort(t)
	d.post(ruleJSON(t, pd, "127.0.0.1", port, map[string]any{"name": "trtllm-pd", "kvExactMode": 1, "kvWarmupSec": 1}))
	d.waitActive(port)
	key, vip := fmt.Sprintf("tcp:127.0.0.1:%d", port), fmt.Sprintf("http://127.0.0.1:%d", port)
	d.feedsConnected(key, 2, 1) // the context endpoints (0, 1) are drained
	time.Sleep(1100 * time.Millisecond)
	// The single pool schedules by priority: llb must not send vLLM's
	// priority field to TensorRT-LLM.
	_, svip := d.servePool(single, 1, map[string]any{"name": "trtllm-single", "priority_scheduling": true})

	t.Run("non-streamed", func(t *testing.T) {
		c0, g0 := legs(pd)
		res, body := complete(t, vip, tokenPrompt(100, 70, 0))
		if res.StatusCode != 200 {
			t.Fatalf("%d %s", res.StatusCode, body)
		}
		if _, p, dc := routeOf(t, res.Header); p < 0 || p > 1 || dc < 2 || !strings.Contains(res.Header.Get("X-Llb-Route"), " engine=trtllm ") {
			t.Fatalf("route %q; want a context and a generation endpoint, engine trtllm", res.Header.Get("X-Llb-Route"))
		}
		var out struct {
			Choices []struct {
				Text string `json:"text"`
				DP   any    `json:"disaggregated_params"`
			} `json:"choices"`
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil || len(out.Choices) != 1 || out.Usage.CompletionTokens != 2 || out.Choices[0].DP != nil {
			t.Fatalf("body %s (%v); want the generation leg's answer of 2 tokens", body, err)
		}
		if c, g := legs(pd); c != c0+1 || g != g0+1 {
			t.Fatalf("context legs %d→%d, generation legs from pulled KV %d→%d; want one each", c0, c, g0, g)
		}
	})

	t.Run("streamed completion and chat", func(t *testing.T) {
		c0, g0 := legs(pd)
		res, body := complete(t, vip, `{"model":"sim-model","prompt":[5,6,7,8,9,10],"max_tokens":6,"stream":true}`)
		if n, done := streamedTokens(t, body); res.StatusCode != 200 || n != 6 || !done {
			t.Fatalf("completion stream: %d, %d tokens, done %v: %s", res.StatusCode, n, done, body)
		}
		if strings.Contains(body, `"usage"`) {
			t.Fatalf("the client asked for no usage and got some: %s", body)
		}
		res, body = post(t, vip+"/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"tell me about routers"}],"max_tokens":5,"stream":true,"stream_options":{"include_usage":true}}`)
		if n, done := streamedTokens(t, body); res.StatusCode != 200 || n != 5 || !done || !strings.Contains(body, `"usage"`) {
			t.Fatalf("chat stream: %d, %d tokens, done %v: %s", res.StatusCode, n, done, body)
		}
		res, body = post(t, vip+"/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"and not streamed"}],"max_completion_tokens":3}`)
		if res.StatusCode != 200 || !strings.Contains(body, `"chat.completion"`) {
			t.Fatalf("chat: %d %s", res.StatusCode, body)
		}
		if c, g := legs(pd); c != c0+3 || g != g0+3 {
			t.Fatalf("context legs %d→%d, generation legs %d→%d; want three each", c0, c, g0, g)
		}
	})

	t.Run("tier 1.5 on the context side", func(t *testing.T) {
		owner := tierOneFiveHit(t, d, vip, func(i int) string { return tokenPrompt(7000, 96, i) })
		if owner > 1 {
			t.Fatalf("tier 1.5 chose endpoint %d; want a context endpoint", owner)
		}
		if v := d.inventory(key, owner); v.Total == 0 || v.LLB.Ranks[0].Feed.Gaps != 0 {
			t.Fatalf("context endpoint %d inventory total %d, gaps %d", owner, v.Total, v.LLB.Ranks[0].Feed.Gaps)
		}
	})

	t.Run("a context leg that dies is retried on the other", func(t *testing.T) {
		owner := tierOneFiveHit(t, d, vip, func(i int) string { return tokenPrompt(9000, 96, i) })
		// Two drops: a reused connection that breaks before any answer is
		// sent again on a fresh one to the same endpoint first.
		if err := pd.Workers()[owner].SetFaults(worker.Faults{DropNext: 2}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pd.Workers()[owner].SetFaults(worker.Faults{}) })
		res, body := complete(t, vip, tokenPrompt(9000, 96, 2))
		_, p, _ := routeOf(t, res.Header)
		if res.StatusCode != 200 || p != 1-owner || !strings.Contains(res.Header.Get("X-Llb-Route"), "retries=1") {
			t.Fatalf("%d %s, route %q; want 200 from context endpoint %d after one retry", res.StatusCode, body, res.Header.Get("X-Llb-Route"), 1-owner)
		}
	})

	t.Run("a context 400 is relayed verbatim", func(t *testing.T) {
		_, g0 := legs(pd)
		res, body := complete(t, vip, `{"model":"sim-model","prompt":[1,2,3],"max_tokens":4,"best_of_typo":2}`)
		if res.StatusCode != 400 || !strings.Contains(body, "best_of_typo\\n  Extra inputs are not permitted [type=extra_forbidden]") {
			t.Fatalf("%d %s; want trtllm-serve's 400", res.StatusCode, body)
		}
		if _, g := legs(pd); g != g0 {
			t.Fatalf("a generation leg ran after the context's 400")
		}
	})

	t.Run("a context answer that finished is the answer", func(t *testing.T) {
		c0, g0 := legs(pd)
		res, body := complete(t, vip, `{"model":"sim-model","prompt":[11,12,13,14],"max_tokens":1}`)
		if res.StatusCode != 200 || strings.Contains(body, "disaggregated_params") || !strings.Contains(body, `"finish_reason":"length"`) {
			t.Fatalf("%d %s; want the context's own answer without disaggregated_params", res.StatusCode, body)
		}
		res, body = complete(t, vip, `{"model":"sim-model","prompt":[11,12,13,15],"max_tokens":1,"stream":true,"stream_options":{"include_usage":true}}`)
		if n, done := streamedTokens(t, body); res.StatusCode != 200 || n != 1 || !done || !strings.Contains(body, `"usage"`) ||
			!strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
			t.Fatalf("stream: %d %q, %d tokens, done %v: %s", res.StatusCode, res.Header.Get("Content-Type"), n, done, body)
		}
		if c, g := legs(pd); c != c0+2 || g != g0 {
			t.Fatalf("context legs %d→%d, generation legs %d→%d; want two context legs and no generation leg", c0, c, g0, g)
		}
	})

	t.Run("a stream whose generation worker dies goes on elsewhere", func(t *testing.T) {
		// Generation endpoint 2 drops its next stream after 3 tokens; the
		// streams the router sends to 3 meanwhile are not touched.
		w := pd.Workers()[2]
		if err := w.SetFaults(worker.Faults{DropNext: 1, DropMode: worker.DropMidStream, DropAfterTokens: 3}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.SetFaults(worker.Faults{}) })
		for i := 0; ; i++ {
			res, body := complete(t, vip, fmt.Sprintf(`{"model":"sim-model","prompt":"a story about a load balancer that never drops stream %d","max_tokens":12,"stream":true}`, i))
			if n, done := streamedTokens(t, body); res.StatusCode != 200 || n != 12 || !done {
				t.Fatalf("stream %d (%s): %d, %d tokens, done %v: %s\nlog:\n%s", i, res.Header.Get("X-Llb-Route"), res.StatusCode, n, done, body, d.log.text())
			}
			if _, _, dc := routeOf(t, res.Header); dc == 2 {
				break
			}
			if i == 20 {
				t.Fatal("no stream went to generation endpoint 2")
			}
		}
		if _, inj := w.Debug().Faults.Injected["drop"]; !inj {
			t.Fatal("the drop was not injected")
		}
		eventually(t, "the stream was migrated", func() (bool, string) {
			return strings.Contains(d.log.text(), `"stream migrated"`), ""
		})
	})

	t.Run("single pool", func(t *testing.T) {
		res, body := complete(t, svip, `{"model":"sim-model","prompt":"hello there","max_tokens":4,"stream":true}`)
		if n, done := streamedTokens(t, body); res.StatusCode != 200 || n != 4 || !done {
			t.Fatalf("completion stream: %d, %d tokens: %s", res.StatusCode, n, body)
		}
		res, body = post(t, svip+"/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true}`)
		if n, done := streamedTokens(t, body); res.StatusCode != 200 || n != 3 || !done {
			t.Fatalf("chat stream: %d, %d tokens: %s", res.StatusCode, n, body)
		}
		if res, body := complete(t, svip, `{"model":"sim-model","prompt":"hello","max_tokens":2}`); res.StatusCode != 200 {
			t.Fatalf("completion: %d %s", res.StatusCode, body)
		}
	})

	if _, text := d.do("GET", "/metrics", ""); !strings.Contains(text, `llb_rule_engine{service="`+key+`",engine="trtllm"} 1`) {
		t.Errorf("/metrics does not name the rule's engine")
	}

	// Every path above reached the strict workers with TensorRT-LLM's
	// fields only: the one refusal is the client's own typo.
	if n := strictRefusals(pd, single); n != 1 {
		t.Fatalf("the strict workers refused %d requests; want 1 (the client's best_of_typo)\nlog:\n%s", n, d.log.text())
	}
}
