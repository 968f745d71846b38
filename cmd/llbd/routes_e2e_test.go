package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/fleet"
)

// End-to-end tests of every route vLLM serves, through the real llbd in
// front of simulated vLLM workers (issue 26).

// startRouteFleet starts n publishing single-pool workers on baseIP and a
// kvExactMode-3 rule on vip:port over them.
func startRouteFleet(t *testing.T, n int, baseIP, vip string, port int) (*fleet.Fleet, *daemon) {
	t.Helper()
	tmpl := workerCfg("", 0, engine.KVNone, 0, 0.02)
	tmpl.KVEvents = true
	f, err := fleet.Start(fleet.Config{Single: n, BaseIP: baseIP, Template: &tmpl})
	if err != nil {
		t.Fatalf("fleet: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.Stop(ctx)
	})
	d := startDataPlane(t, "LOXILB_KV_COLDSTART_SEED_N=0")
	d.post(ruleJSON(t, f, vip, port, map[string]any{"kvExactMode": 3, "kvWarmupSec": 1}))
	d.waitActive(port)
	time.Sleep(1100 * time.Millisecond) // kvWarmupSec: 1
	return f, d
}

// sseNames returns the event names (and "data" for unnamed events) of an
// SSE body.
func sseNames(body string) []string {
	var out []string
	named := false
	for _, line := range strings.Split(body, "\n") {
		switch {
		case strings.HasPrefix(line, "event: "):
			out, named = append(out, strings.TrimPrefix(line, "event: ")), true
		case strings.HasPrefix(line, "data: ") && !named:
			out = append(out, "data")
		case line == "":
			named = false
		}
	}
	return out
}

func TestE2E_EveryRouteVLLMServesThroughLLBD(t *testing.T) {
	_, d := startRouteFleet(t, 2, "127.0.26.2", "127.0.26.1", 2026)
	_ = d
	const vip = "http://127.0.26.1:2026"
	tests := []struct {
		name, path, body string
		wantCT, want     string
	}{
		{"completion", "/v1/completions", `{"model":"sim-model","prompt":"hi","max_tokens":2}`, "application/json", `"text_completion"`},
		{"completion stream", "/v1/completions", `{"model":"sim-model","prompt":"hi","max_tokens":2,"stream":true}`, "text/event-stream", "data: [DONE]"},
		{"chat", "/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":2}`, "application/json", `"chat.completion"`},
		{"chat stream", "/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_tokens":2,"stream":true}`, "text/event-stream", "data: [DONE]"},
		{"responses", "/v1/responses", `{"model":"sim-model","input":"hi","max_output_tokens":2}`, "application/json", `"object":"response"`},
		{"responses stream", "/v1/responses", `{"model":"sim-model","input":"hi","max_output_tokens":2,"stream":true}`, "text/event-stream", "event: response.completed"},
		{"messages", "/v1/messages", `{"model":"sim-model","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, "application/json", `"type":"message"`},
		{"messages stream", "/v1/messages", `{"model":"sim-model","max_tokens":2,"stream":true,"messages":[{"role":"user","content":"hi"}]}`, "text/event-stream", "event: message_stop"},
		{"count tokens", "/v1/messages/count_tokens", `{"model":"sim-model","messages":[{"role":"user","content":"hi"}]}`, "application/json", `"input_tokens"`},
		{"embeddings", "/v1/embeddings", `{"model":"sim-model","input":["a","b"]}`, "application/json", `"object":"embedding"`},
		{"pooling", "/pooling", `{"model":"sim-model","input":"a"}`, "application/json", `"object":"pooling"`},
		{"classify", "/classify", `{"model":"sim-model","input":"a"}`, "application/json", `"probs"`},
		{"score", "/score", `{"model":"sim-model","text_1":"q","text_2":["a","b"]}`, "application/json", `"object":"score"`},
		{"score v1", "/v1/score", `{"model":"sim-model","text_1":"q","text_2":"a"}`, "application/json", `"object":"score"`},
		{"rerank", "/rerank", `{"model":"sim-model","query":"q","documents":["a","b"]}`, "application/json", `"relevance_score"`},
		{"rerank v1", "/v1/rerank", `{"model":"sim-model","query":"q","documents":["a"]}`, "application/json", `"results"`},
		{"rerank v2", "/v2/rerank", `{"model":"sim-model","query":"q","documents":["a"]}`, "application/json", `"results"`},
		{"tokenize", "/tokenize", `{"model":"sim-model","prompt":"hello world"}`, "application/json", `"tokens"`},
		{"detokenize", "/detokenize", `{"model":"sim-model","tokens":[151644]}`, "application/json", `"prompt"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, b := post(t, vip+tt.path, tt.body)
			if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), tt.wantCT) || !strings.Contains(b, tt.want) {
				t.Fatalf("POST %s: %d %s %s; want %s with %s", tt.path, res.StatusCode, res.Header.Get("Content-Type"), b, tt.wantCT, tt.want)
			}
			if res.Header.Get("X-Llb-Route") == "" {
				t.Errorf("no X-Llb-Route")
			}
		})
	}
	for _, path := range []string{"/v1/audio/transcriptions", "/v1/audio/translations"} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s stream=%v", path, stream), func(t *testing.T) {
				var buf bytes.Buffer
				mw := multipart.NewWriter(&buf)
				fw, _ := mw.CreateFormFile("file", "a.wav")
				_, _ = fw.Write(bytes.Repeat([]byte("RIFF"), 2000))
				_ = mw.WriteField("model", "sim-model")
				_ = mw.WriteField("stream", fmt.Sprint(stream))
				_ = mw.Close()
				res, err := http.Post(vip+path, mw.FormDataContentType(), &buf)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				want := `"text":`
				if stream {
					want = ".chunk"
				}
				if res.StatusCode != 200 || !strings.Contains(string(b), want) {
					t.Fatalf("%d %s", res.StatusCode, b)
				}
			})
		}
	}
	for _, path := range []string{"/v1/models", "/health", "/ping", "/version"} {
		res, err := http.Get(vip + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if path != "/version" && res.StatusCode != 200 {
			t.Errorf("GET %s: %d %s", path, res.StatusCode, b)
		}
	}
}

func TestE2E_ResponsesAndMessagesAreRoutedByTierOneFive(t *testing.T) {
	_, d := startRouteFleet(t, 2, "127.0.26.12", "127.0.26.11", 2026)
	const vip = "http://127.0.26.11:2026"
	long := strings.Repeat("you answer questions about the orders table in precise SQL ", 30)
	// The engine renders a Responses request's instructions and input with
	// the chat template; llb renders the same messages and tokenizes them
	// through the engines' /tokenize: the follow-up is a Tier-1.5 hit on the
	// endpoint that holds the blocks.
	routesToOwnerByTierOneFiveAt(t, d, vip, "/v1/responses", func(i int) string {
		b, _ := json.Marshal(map[string]any{"model": "sim-model", "instructions": long, "input": fmt.Sprintf("question %d", i), "max_output_tokens": 2})
		return string(b)
	})
	routesToOwnerByTierOneFiveAt(t, d, vip, "/v1/messages", func(i int) string {
		b, _ := json.Marshal(map[string]any{"model": "sim-model", "system": "anthropic " + long, "max_tokens": 2,
			"messages": []any{map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": fmt.Sprintf("question %d", i)}}}}})
		return string(b)
	})
}

func TestE2E_AResponsesChainStaysOnTheWorkerThatStoresIt(t *testing.T) {
	f, _ := startRouteFleet(t, 3, "127.0.26.22", "127.0.26.21", 2026)
	const vip = "http://127.0.26.21:2026"
	prev, holder := "", -1
	for turn := range 10 {
		body := map[string]any{"model": "sim-model", "input": fmt.Sprintf("turn %d", turn), "max_output_tokens": 2, "stream": turn%2 == 1}
		if prev != "" {
			body["previous_response_id"] = prev
		}
		b, _ := json.Marshal(body)
		res, out := post(t, vip+"/v1/responses", string(b))
		if res.StatusCode != 200 {
			t.Fatalf("turn %d: %d %s", turn, res.StatusCode, out)
		}
		_, ep, _ := routeOf(t, res.Header)
		if holder >= 0 && ep != holder {
			t.Fatalf("turn %d went to endpoint %d; the chain is held by %d", turn, ep, holder)
		}
		holder = ep
		i := strings.Index(out, `"id":"resp_`)
		prev = out[i+6 : i+6+len("resp_")+32]
	}
	for i, w := range f.Workers() {
		n := w.StoredResponses()
		if i == holder && n != 10 || i != holder && n != 0 {
			t.Errorf("worker %d stores %d responses; the holder %d should store all 10", i, n, holder)
		}
	}
	res, err := http.Get(vip + "/v1/responses/" + prev)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if _, ep, _ := routeOf(t, res.Header); res.StatusCode != 200 || ep != holder {
		t.Errorf("GET /v1/responses/{id}: %d on %d; want 200 from the holder %d", res.StatusCode, ep, holder)
	}
}

// kvPredictedRE reads X-Llb-Route's kv_predicted (tokens).
var kvPredictedRE = regexp.MustCompile(`kv_predicted=(\d+)`)

// TestE2E_ToolCallHistoriesArePredictedAsTheEngineRendersThem sends a
// Responses and an Anthropic Messages request whose history holds tool
// calls and their results — the items vLLM converts to assistant tool_calls
// and tool messages before rendering the chat template — twice. The second
// time the engine holds every full block of the prompt it rendered; llb's
// prediction of the cached prefix covers all of them only if llb rendered
// and tokenized the same prompt.
func TestE2E_ToolCallHistoriesArePredictedAsTheEngineRendersThem(t *testing.T) {
	startRouteFleet(t, 2, "127.0.26.52", "127.0.26.51", 2026)
	const vip = "http://127.0.26.51:2026"
	long := strings.Repeat("the orders table holds one row per order with its customer and date ", 12)
	tests := []struct {
		name, path, body string
		input            func(map[string]any) int
	}{
		{"responses", "/v1/responses", mustJSONString(map[string]any{"model": "sim-model", "instructions": long, "max_output_tokens": 2, "store": false,
			"input": []any{
				map[string]any{"role": "user", "content": "How many orders did Ada place?"},
				map[string]any{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "Let me look."}}},
				map[string]any{"type": "function_call", "call_id": "call_1", "name": "sql", "arguments": `{"q":"select count(*) from orders where customer='Ada'"}`},
				map[string]any{"type": "function_call_output", "call_id": "call_1", "output": "42"},
				map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "Ada placed 42 orders."}}},
				map[string]any{"role": "user", "content": []any{map[string]any{"type": "input_text", "text": "And Grace?"}}},
			}}),
			func(v map[string]any) int { return int(v["usage"].(map[string]any)["input_tokens"].(float64)) }},
		{"messages", "/v1/messages", mustJSONString(map[string]any{"model": "sim-model", "system": long, "max_tokens": 2,
			"messages": []any{
				map[string]any{"role": "user", "content": "How many orders did Ada place?"},
				map[string]any{"role": "assistant", "content": []any{
					map[string]any{"type": "text", "text": "Let me look."},
					map[string]any{"type": "tool_use", "id": "toolu_1", "name": "sql", "input": map[string]any{"q": "select count(*) from orders where customer='Ada'"}},
				}},
				map[string]any{"role": "user", "content": []any{
					map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": "42"},
					map[string]any{"type": "text", "text": "And Grace?"},
				}},
			}}),
			func(v map[string]any) int { return int(v["usage"].(map[string]any)["input_tokens"].(float64)) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, b := post(t, vip+tt.path, tt.body)
			if res.StatusCode != 200 {
				t.Fatalf("first: %d %s", res.StatusCode, b)
			}
			var v map[string]any
			if err := json.Unmarshal([]byte(b), &v); err != nil {
				t.Fatal(err)
			}
			prompt := tt.input(v)
			// vLLM never counts a prompt's last token as cached: the full
			// blocks before it are what a repeat can hit.
			want := (prompt - 1) / 16 * 16
			deadline := time.Now().Add(10 * time.Second)
			for {
				res, b := post(t, vip+tt.path, tt.body)
				if res.StatusCode != 200 {
					t.Fatalf("repeat: %d %s", res.StatusCode, b)
				}
				route := res.Header.Get("X-Llb-Route")
				m := kvPredictedRE.FindStringSubmatch(route)
				got := -1
				if m != nil {
					got, _ = strconv.Atoi(m[1])
				}
				if got == want {
					if !strings.HasPrefix(route, "tier=1.5 ") {
						t.Errorf("route %s; want tier 1.5", route)
					}
					break
				}
				if got > want || time.Now().After(deadline) {
					t.Fatalf("%d-token prompt: llb predicted %d cached tokens; the engine holds %d (route %s)", prompt, got, want, route)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

func mustJSONString(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
