package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/rule"
)

// trtCtxParams is what the fake context worker answers as
// choices[0].disaggregated_params (a space inside a value on purpose: the
// generation leg must get every member byte for byte).
const trtCtxParams = `{"request_type":"context_only","first_gen_tokens":[42, 43],"ctx_request_id":7,"encoded_opaque_state":"b3BhcXVl","draft_tokens":null}`

// trtAnswer makes f answer as trtllm-serve does: a context_only request
// with a whole answer carrying disaggregated_params and finish_reason
// finish; a generation_only one (or a plain one) like the fake vLLM's
// decode. Fields outside disaggregated_params' members are not checked
// here (the simulated worker refuses unknown fields in the e2e tests).
func trtAnswer(f *fakeVLLM, finish, params string) {
	f.answer = func(w http.ResponseWriter, r *http.Request, body []byte) {
		var req struct {
			Stream *bool `json:"stream"`
			DP     *struct {
				RequestType string `json:"request_type"`
			} `json:"disaggregated_params"`
		}
		_ = json.Unmarshal(body, &req)
		if req.DP != nil && req.DP.RequestType == "context_only" {
			w.Header().Set("Content-Type", "application/json")
			dp := ""
			if params != "" {
				dp = `,"disaggregated_params":` + params
			}
			fmt.Fprintf(w, `{"id":"cmpl-ctx","object":"text_completion","created":5,"model":"m","choices":[{"index":0,"text":"Hi","token_ids":null,"logprobs":null,"finish_reason":%q,"stop_reason":null%s,"avg_decoded_tokens_per_iter":null}],"usage":{"prompt_tokens":4,"total_tokens":5,"completion_tokens":1},"prompt_token_ids":[1,2,3,4]}`, finish, dp)
			return
		}
		if req.Stream == nil || !*req.Stream {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"cmpl-gen","object":"text_completion","choices":[{"index":0,"text":"Hi there","finish_reason":"length"}],"usage":{"prompt_tokens":4,"completion_tokens":2}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"t%d\"}]}\n\n", i)
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
}

// newTRTFleet is a trtllm P/D rule over one context and one generation
// fake.
func newTRTFleet(t *testing.T, finish, params string) *pdFleet {
	t.Helper()
	f := newPDFleet(t, []bool{false}, func(c *rule.Compiled) { c.Engine = rule.EngineTRTLLM })
	trtAnswer(f.prefill[0], finish, params)
	trtAnswer(f.decode, finish, params)
	return f
}

func TestTRTLLMPD_ContextThenGeneration(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			f := newTRTFleet(t, "length", trtCtxParams)
			body := `{"model":"m","prompt":"hello","max_tokens":20,"temperature":0.50,"disaggregated_params":{"request_type":"context_and_generation"}}`
			if stream {
				body = `{"model":"m","prompt":"hello","max_tokens":20,"stream":true,"stream_options":{"include_usage":true}}`
			}
			resp, got := post(t, testClient(t), f.url+PathCompletions, body)
			p, d := f.prefill[0].requests(), f.decode.requests()
			if resp.StatusCode != 200 || len(p) != 1 || len(d) != 1 {
				t.Fatalf("got %d %s; context %d, generation %d requests; want 200 and one leg each", resp.StatusCode, got, len(p), len(d))
			}
			if stream != strings.Contains(string(got), "data: [DONE]") {
				t.Fatalf("client got %s; want the generation leg's answer (stream %v)", got, stream)
			}
			// Context leg: the client's members but stream and
			// stream_options, disaggregated_params context_only, stream false.
			want := members(t, body)
			delete(want, "stream_options")
			want["stream"], want["disaggregated_params"] = "false", trtContextParams
			if pm := members(t, string(p[0].Body)); !mapsEqual(pm, want) {
				t.Errorf("context body members = %v; want %v", pm, want)
			}
			// Generation leg: the client's body, with the context's params
			// byte for byte but request_type.
			dm := members(t, string(d[0].Body))
			wantDP := strings.Replace(trtCtxParams, `"context_only"`, `"generation_only"`, 1)
			if dm["disaggregated_params"] != wantDP {
				t.Errorf("generation disaggregated_params = %s; want %s", dm["disaggregated_params"], wantDP)
			}
			want = members(t, body)
			want["disaggregated_params"] = wantDP
			if stream {
				// A stream migration follows asks for usage in every chunk.
				want["stream_options"] = usageOptions
			}
			if !mapsEqual(dm, want) {
				t.Errorf("generation body members = %v; want %v", dm, want)
			}
			if id := p[0].Header.Get(HeaderRequestID); id == "" || d[0].Header.Get(HeaderRequestID) != id {
				t.Errorf("request ids %q, %q; want one on both legs", id, d[0].Header.Get(HeaderRequestID))
			}
			f.router.checkTicketsClosed(t, 1)
			if got := f.metric(t, "loxilb_ai_pd_kv_params_found_total"); got != "1" {
				t.Errorf("kv_params_found = %s; want 1", got)
			}
		})
	}
}

func TestTRTLLMPD_AFinishedContextAnswerIsTheClientsAnswer(t *testing.T) {
	tests := []struct {
		name, finish, body string
		wantEvents         []string // nil: a JSON answer
	}{
		{name: "stop", finish: "stop", body: `{"model":"m","prompt":"hello","max_tokens":20}`},
		{name: "length at max_tokens 1", finish: "length", body: `{"model":"m","prompt":"hello","max_tokens":1}`},
		{name: "stop streamed", finish: "stop", body: `{"model":"m","prompt":"hello","stream":true}`,
			wantEvents: []string{`{"choices":[{"finish_reason":"stop","index":0,"logprobs":null,"stop_reason":null,"text":"Hi"}],"created":5,"id":"cmpl-ctx","model":"m","object":"text_completion"}`, "[DONE]"}},
		{name: "streamed with usage", finish: "stop", body: `{"model":"m","prompt":"hello","stream":true,"stream_options":{"include_usage":true}}`,
			wantEvents: []string{
				`{"choices":[{"finish_reason":"stop","index":0,"logprobs":null,"stop_reason":null,"text":"Hi"}],"created":5,"id":"cmpl-ctx","model":"m","object":"text_completion"}`,
				`{"choices":[],"created":5,"id":"cmpl-ctx","model":"m","object":"text_completion","usage":{"prompt_tokens":4,"total_tokens":5,"completion_tokens":1}}`,
				"[DONE]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTRTFleet(t, tt.finish, trtCtxParams)
			resp, got := post(t, testClient(t), f.url+PathCompletions, tt.body)
			if resp.StatusCode != 200 || len(f.decode.requests()) != 0 {
				t.Fatalf("got %d %s, %d generation legs; want 200 and none", resp.StatusCode, got, len(f.decode.requests()))
			}
			if tt.wantEvents == nil {
				want := `{"id":"cmpl-ctx","object":"text_completion","created":5,"model":"m","choices":[{"index":0,"text":"Hi","token_ids":null,"logprobs":null,"finish_reason":"` + tt.finish + `","stop_reason":null,"avg_decoded_tokens_per_iter":null}],"usage":{"prompt_tokens":4,"total_tokens":5,"completion_tokens":1},"prompt_token_ids":[1,2,3,4]}`
				if string(got) != want || resp.Header.Get("Content-Type") != "application/json" {
					t.Fatalf("client got %q (%s)\nwant %s", got, resp.Header.Get("Content-Type"), want)
				}
			} else {
				var events []string
				for _, l := range strings.Split(string(got), "\n") {
					if s, ok := strings.CutPrefix(l, "data: "); ok {
						events = append(events, s)
					}
				}
				// avg_decoded_tokens_per_iter is null and not in the want:
				// compare decoded.
				if len(events) != len(tt.wantEvents) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
					t.Fatalf("events %q (%s); want %d", events, resp.Header.Get("Content-Type"), len(tt.wantEvents))
				}
				for i, e := range events {
					if !jsonSubset(t, tt.wantEvents[i], e) {
						t.Errorf("event %d = %s; want %s", i, e, tt.wantEvents[i])
					}
				}
			}
			f.router.checkTicketsClosed(t, 1)
			_, outcomes, fin := f.router.snapshot()
			if len(outcomes) != 1 || outcomes[0].Leg != actors.LegPrefill || !fin[1].OK {
				t.Errorf("outcomes %+v, finished %+v; want the context leg only, finished OK", outcomes, fin)
			}
		})
	}
}

// jsonSubset reports whether got (JSON) holds every member of want, with
// equal values, ignoring members of got whose value is null and want lacks;
// "[DONE]" compares as text.
func jsonSubset(t *testing.T, want, got string) bool {
	t.Helper()
	if want == "[DONE]" || got == "[DONE]" {
		return want == got
	}
	var w, g any
	if json.Unmarshal([]byte(want), &w) != nil || json.Unmarshal([]byte(got), &g) != nil {
		return false
	}
	return subset(w, g)
}

func subset(w, g any) bool {
	switch wv := w.(type) {
	case map[string]any:
		gv, ok := g.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range gv {
			if _, in := wv[k]; !in && v != nil {
				return false
			}
		}
		for k, v := range wv {
			if !subset(v, gv[k]) {
				return false
			}
		}
		return true
	case []any:
		gv, ok := g.([]any)
		if !ok || len(gv) != len(wv) {
			return false
		}
		for i := range wv {
			if !subset(wv[i], gv[i]) {
				return false
			}
		}
		return true
	}
	return fmt.Sprint(w) == fmt.Sprint(g)
}

func TestTRTLLMPD_ContextAnswerWithoutParamsGoesOnWithoutThem(t *testing.T) {
	f := newTRTFleet(t, "length", "")
	body := `{"model":"m","prompt":"hello","max_tokens":5}`
	if resp, got := post(t, testClient(t), f.url+PathCompletions, body); resp.StatusCode != 200 {
		t.Fatalf("got %d %s", resp.StatusCode, got)
	}
	if d := f.decode.requests(); len(d) != 1 || string(d[0].Body) != body {
		t.Fatalf("generation legs %v; want the client's body unchanged", d)
	}
	if got := f.metric(t, "loxilb_ai_pd_kv_params_missing_total"); got != "1" {
		t.Errorf("kv_params_missing = %s; want 1", got)
	}
}

func TestTRTLLMPD_AContextErrorIsRelayedVerbatim(t *testing.T) {
	f := newTRTFleet(t, "length", trtCtxParams)
	const refusal = `{"error":"1 validation error for CompletionRequest\nbest_of_x\n  Extra inputs are not permitted [type=extra_forbidden]"}`
	f.prefill[0].answer = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, refusal)
	}
	resp, got := post(t, testClient(t), f.url+PathCompletions, `{"model":"m","prompt":"hello","best_of_x":2}`)
	if resp.StatusCode != 400 || string(got) != refusal || len(f.decode.requests()) != 0 {
		t.Fatalf("got %d %s (%d generation legs); want the context's 400 verbatim and no generation leg", resp.StatusCode, got, len(f.decode.requests()))
	}
	f.router.checkTicketsClosed(t, 1)
}

func TestTRTLLMPD_ADeadContextIsRetriedOnAnother(t *testing.T) {
	f := newPDFleet(t, []bool{true, false}, func(c *rule.Compiled) { c.Engine = rule.EngineTRTLLM })
	trtAnswer(f.prefill[1], "length", trtCtxParams)
	trtAnswer(f.decode, "length", trtCtxParams)
	resp, got := post(t, testClient(t), f.url+PathCompletions, `{"model":"m","prompt":"hello","max_tokens":5}`)
	if resp.StatusCode != 200 || len(f.prefill[1].requests()) != 1 || len(f.decode.requests()) != 1 {
		t.Fatalf("got %d %s; want the second context endpoint and the generation leg to answer", resp.StatusCode, got)
	}
	if r := resp.Header.Get(HeaderRoute); !strings.Contains(r, "prefill=1") || !strings.Contains(r, "retries=1") || !strings.Contains(r, " engine=trtllm ") {
		t.Errorf("%s = %q; want prefill 1 after one retry, engine trtllm", HeaderRoute, r)
	}
	var m strings.Builder
	f.set.WritePrometheus(&m)
	if !strings.Contains(m.String(), `llb_rule_engine{service="pd",engine="trtllm"} 1`) {
		t.Errorf("metrics lack llb_rule_engine for trtllm:\n%s", m.String())
	}
	f.router.checkTicketsClosed(t, 2)
}

func TestGenerationParams_KeepsEveryOtherByte(t *testing.T) {
	tests := []struct{ give, want string }{
		{trtCtxParams, strings.Replace(trtCtxParams, `"context_only"`, `"generation_only"`, 1)},
		{`{"first_gen_tokens":[1], "request_type" : "context_only"}`, `{"first_gen_tokens":[1],"request_type":"generation_only"}`},
		{`{"ctx_request_id":3}`, `{"ctx_request_id":3,"request_type":"generation_only"}`},
		{`{}`, `{"request_type":"generation_only"}`},
	}
	for _, tt := range tests {
		got, err := GenerationParams([]byte(tt.give))
		if err != nil || string(got) != tt.want || !json.Valid(got) {
			t.Errorf("GenerationParams(%s) = %s, %v; want %s", tt.give, got, err, tt.want)
		}
	}
}

func TestContextOnlyBody_SendsNoStreamAndNoOtherDialect(t *testing.T) {
	got, err := ContextOnlyBody([]byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true},"prompt":[1,2],"disaggregated_params":{"request_type":"generation_only"},"max_tokens":9}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"m","prompt":[1,2],"max_tokens":9,"disaggregated_params":{"request_type":"context_only"},"stream":false}`
	if string(got) != want {
		t.Errorf("ContextOnlyBody = %s; want %s", got, want)
	}
}
