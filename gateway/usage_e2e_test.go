package gateway

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/ladder"
)

// Cache truth through the data plane: the answering leg's usage reaches
// the router with the outcome, X-Llb-Route carries the predicted and (when
// known before the headers) the actual cached tokens, and the client gets
// exactly the bytes the engine sent.

const usageJSON = `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"say \"cached_tokens\": 1","finish_reason":"length"}],` +
	`"usage":{"prompt_tokens":70,"total_tokens":71,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":48}}}`

// predicted routes every request with a prediction of 64 cached tokens.
func predicted(d ladder.Decision) func(*actors.RouteRequest, int) (actors.Route, error) {
	return func(*actors.RouteRequest, int) (actors.Route, error) {
		return actors.Route{Decision: d, Prediction: actors.Prediction{OK: true, CachedTokens: 64}}, nil
	}
}

func TestCacheTruth_NonStreamAnswerReportsUsageAndHeaderCarriesBoth(t *testing.T) {
	be := newFakeVLLM(t)
	be.answer = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(usageJSON)))
		// Two writes with a flush between: the gateway reads the whole
		// (short) answer before its headers go out.
		_, _ = io.WriteString(w, usageJSON[:40])
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, usageJSON[40:])
	}
	fr := newFakeRouter(predicted(decision(ladder.Tier15, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	resp, got := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"hi"}`)
	if resp.StatusCode != 200 || string(got) != usageJSON {
		t.Fatalf("got %d %q; want the engine's bytes unchanged", resp.StatusCode, got)
	}
	if r := resp.Header.Get(HeaderRoute); !strings.HasSuffix(r, "retries=0 kv_predicted=64 kv_cached=48") {
		t.Errorf("%s = %q; want predicted and actual cached tokens", HeaderRoute, r)
	}
	fr.checkTicketsClosed(t, 1)
	_, outcomes, _ := fr.snapshot()
	if len(outcomes) != 1 || outcomes[0].Usage != (actors.Usage{Reported: true, CachedTokens: 48, PromptTokens: 70, CompletionTokens: 1}) {
		t.Fatalf("outcomes %+v; want the engine's usage", outcomes)
	}
}

func TestCacheTruth_StreamWithIncludeUsageReportsTheFinalChunk(t *testing.T) {
	be := newFakeVLLM(t)
	var sent strings.Builder
	be.answer = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			ev := fmt.Sprintf("data: {\"choices\":[{\"index\":0,\"text\":\"t%d\"}],\"usage\":null}\n\n", i)
			sent.WriteString(ev)
			_, _ = io.WriteString(w, ev)
			w.(http.Flusher).Flush()
		}
		tail := "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":70,\"completion_tokens\":3,\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\ndata: [DONE]\n\n"
		sent.WriteString(tail)
		_, _ = io.WriteString(w, tail)
	}
	d := decision(ladder.Tier15, 0, -1)
	d.TTFT = ladder.TTFTPrediction{OK: true, Input: ladder.TTFTInput{Uncached: 1, Queued: 24, Running: 3, Waiting: 2, KVUsed: 990, KVCapacity: 985}, Predicted: 42 * time.Millisecond}
	fr := newFakeRouter(predicted(d))
	var buf safeBuffer
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr, Log: zerolog.New(&buf)})
	resp, got := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"hi","stream":true,"stream_options":{"include_usage":true}}`)
	if string(got) != sent.String() {
		t.Fatalf("client got %q; want the engine's stream unchanged %q", got, sent.String())
	}
	// The headers leave with the first bytes: they carry the prediction,
	// and the engine's figure only if the whole stream had arrived by then.
	if r := resp.Header.Get(HeaderRoute); !strings.HasSuffix(r, "kv_predicted=64") && !strings.HasSuffix(r, "kv_predicted=64 kv_cached=64") {
		t.Errorf("%s = %q; want the prediction", HeaderRoute, r)
	}
	fr.checkTicketsClosed(t, 1)
	_, outcomes, _ := fr.snapshot()
	if len(outcomes) != 1 || outcomes[0].Usage != (actors.Usage{Reported: true, CachedTokens: 64, PromptTokens: 70, CompletionTokens: 3}) {
		t.Fatalf("outcomes %+v; want the final chunk's usage", outcomes)
	}
	// The access log explains the request end to end, the stream included.
	var access map[string]any
	for _, l := range buf.lines(t, 2) {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["message"] == "request" {
			access = m
		}
	}
	if access[logfield.KVPredicted] != float64(64) || access[logfield.KVCached] != float64(64) ||
		!strings.HasSuffix(access[logfield.LLBRoute].(string), "kv_predicted=64 kv_cached=64") {
		t.Fatalf("access line %v; want kv_predicted and kv_cached", access)
	}
	// And the TTFT prediction with what it was made from.
	if access[logfield.TTFTPredicted] != float64(42) || access[logfield.TTFTInput] != "1/24/3/2/6" {
		t.Fatalf("access line %v; want ttft_predicted 42 and ttft_input 1/24/3/2/6", access)
	}
}

func TestCacheTruth_PDPrefillLegReportsUsageBeforeTheDecodeHeaders(t *testing.T) {
	pre, dec := newFakeVLLM(t), newFakeVLLM(t)
	pre.answer = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"cmpl-p","choices":[{"index":0,"text":"x","finish_reason":"length"}],`+
			`"usage":{"prompt_tokens":70,"prompt_tokens_details":{"cached_tokens":32}},"kv_transfer_params":{"remote_engine_id":"e"}}`)
	}
	fr := newFakeRouter(predicted(decision(ladder.Tier15, 0, 1)))
	url, _ := startGateway(t, pdPool(pre.addrs(), dec.addrs()), Deps{Router: fr})
	resp, got := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"hi"}`)
	if resp.StatusCode != 200 || !strings.Contains(string(got), `"text":"hello"`) {
		t.Fatalf("got %d %s", resp.StatusCode, got)
	}
	if r := resp.Header.Get(HeaderRoute); !strings.HasSuffix(r, "kv_predicted=64 kv_cached=32") {
		t.Errorf("%s = %q; want the prefill leg's cached tokens", HeaderRoute, r)
	}
	fr.checkTicketsClosed(t, 1)
	_, outcomes, _ := fr.snapshot()
	if len(outcomes) != 2 || outcomes[0].Leg != actors.LegPrefill || outcomes[0].Usage != (actors.Usage{Reported: true, CachedTokens: 32, PromptTokens: 70, CompletionTokens: 1}) ||
		outcomes[1].Leg != actors.LegDecode || outcomes[1].Usage.Reported {
		t.Fatalf("outcomes %+v; want the prefill leg's usage, none on the decode leg", outcomes)
	}
}

func TestCacheTruth_NothingObservedWithoutAPredictionOrForSeveralPrompts(t *testing.T) {
	for _, tt := range []struct {
		name, body string
		pred       bool
	}{
		{"no prediction", `{"model":"m","prompt":"hi"}`, false},
		{"several prompts", `{"model":"m","prompt":["a","b"]}`, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			be := newFakeVLLM(t)
			be.answer = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, usageJSON)
			}
			decide := fixedRoute(decision(ladder.Tier2, 0, -1))
			if tt.pred {
				decide = predicted(decision(ladder.Tier2, 0, -1))
			}
			fr := newFakeRouter(decide)
			url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
			resp, got := post(t, testClient(t), url+PathCompletions, tt.body)
			if string(got) != usageJSON || strings.Contains(resp.Header.Get(HeaderRoute), "kv_cached") {
				t.Fatalf("body %q route %q", got, resp.Header.Get(HeaderRoute))
			}
			fr.checkTicketsClosed(t, 1)
			if _, outcomes, _ := fr.snapshot(); outcomes[0].Usage.Reported {
				t.Fatalf("outcome %+v; want no usage compared", outcomes[0])
			}
		})
	}
}

// addrs is the backend's address as a one-element list.
func (f *fakeVLLM) addrs() []netip.AddrPort { return []netip.AddrPort{f.addr()} }
