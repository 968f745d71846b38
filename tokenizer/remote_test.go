package tokenizer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// waitTimeout bounds the condition waits of the remote tests.
const waitTimeout = 10 * time.Second

// fakeEngine is a real HTTP server speaking vLLM's /tokenize.
type fakeEngine struct {
	srv      *httptest.Server
	calls    atomic.Int64
	inFlight atomic.Int64
	maxSeen  atomic.Int64
	mu       sync.Mutex
	bodies   []map[string]json.RawMessage
	handle   func(w http.ResponseWriter, r *http.Request, body map[string]json.RawMessage)
}

func newFakeEngine(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, body map[string]json.RawMessage)) *fakeEngine {
	t.Helper()
	e := &fakeEngine{handle: handle}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/tokenize" || r.Method != http.MethodPost {
			http.Error(w, `{"error":{"message":"not found","type":"NotFound","code":404}}`, http.StatusNotFound)
			return
		}
		n := e.inFlight.Add(1)
		defer e.inFlight.Add(-1)
		for {
			m := e.maxSeen.Load()
			if n <= m || e.maxSeen.CompareAndSwap(m, n) {
				break
			}
		}
		e.calls.Add(1)
		raw, _ := io.ReadAll(r.Body)
		var body map[string]json.RawMessage
		if err := json.Unmarshal(raw, &body); err != nil {
			http.Error(w, `{"error":{"message":"bad json","type":"BadRequestError","code":400}}`, 400)
			return
		}
		e.mu.Lock()
		e.bodies = append(e.bodies, body)
		e.mu.Unlock()
		e.handle(w, r, body)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *fakeEngine) lastBody() map[string]json.RawMessage {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.bodies[len(e.bodies)-1]
}

// answerLen answers with one token per byte of the prompt or messages.
func answerLen(w http.ResponseWriter, _ *http.Request, body map[string]json.RawMessage) {
	text := body["prompt"]
	if text == nil {
		text = body["messages"]
	}
	toks := make([]int, len(text))
	for i := range toks {
		toks[i] = int(text[i]) + 1000*i
	}
	json.NewEncoder(w).Encode(map[string]any{"count": len(toks), "max_model_len": 32768, "tokens": toks, "token_strs": nil})
}

func newTestTokenizer(t *testing.T, url string, mod func(*RemoteConfig)) *Remote {
	t.Helper()
	cfg := RemoteConfig{BaseURL: url, Timeout: 2 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	tok, err := NewRemote(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tok.client.CloseIdleConnections)
	return tok
}

func TestRemote_SendsBothFormsWithVLLMDefaults(t *testing.T) {
	eng := newFakeEngine(t, answerLen)
	tok := newTestTokenizer(t, eng.srv.URL, nil)
	messages := json.RawMessage(`[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi"}]}]`)
	f := false
	tests := []struct {
		name string
		give Request
		want map[string]string // raw JSON of expected fields; "" = absent
	}{
		{"completion form", Request{Model: "m", Prompt: "hello"},
			map[string]string{"model": `"m"`, "prompt": `"hello"`, "add_special_tokens": "", "messages": "", "add_generation_prompt": ""}},
		{"completion without special tokens", Request{Model: "m", Prompt: "hello", AddSpecialTokens: &f},
			map[string]string{"add_special_tokens": "false"}},
		{"chat form passes messages through byte for byte", Request{Model: "m", Messages: messages},
			map[string]string{"messages": string(messages), "add_generation_prompt": "true", "add_special_tokens": "", "prompt": ""}},
		{"continue final message turns off the generation prompt", Request{Model: "m", Messages: messages, ContinueFinalMessage: true},
			map[string]string{"add_generation_prompt": "false", "continue_final_message": "true"}},
		{"chat options pass through", Request{Messages: messages, Tools: json.RawMessage(`[{"type":"function"}]`), ChatTemplateKwargs: json.RawMessage(`{"enable_thinking":false}`)},
			map[string]string{"tools": `[{"type":"function"}]`, "chat_template_kwargs": `{"enable_thinking":false}`, "model": ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tok.Tokenize(context.Background(), tt.give, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) == 0 {
				t.Fatal("no tokens")
			}
			body := eng.lastBody()
			for k, want := range tt.want {
				if gotRaw := string(body[k]); gotRaw != want {
					t.Errorf("field %s = %s; want %q", k, gotRaw, want)
				}
			}
		})
	}
}

func TestRemote_CachesByModelFormAndText(t *testing.T) {
	eng := newFakeEngine(t, answerLen)
	tok := newTestTokenizer(t, eng.srv.URL, nil)
	ctx := context.Background()
	calls := func() int64 { return eng.calls.Load() }
	first, err := tok.Tokenize(ctx, Request{Model: "m", Prompt: "abc"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first[0] = 99999 // the caller owns what it got; the cache must not change
	steps := []struct {
		name      string
		give      Request
		wantCalls int64
	}{
		{"same request hits", Request{Model: "m", Prompt: "abc"}, 1},
		{"other model misses", Request{Model: "n", Prompt: "abc"}, 2},
		{"chat form with the same text misses", Request{Model: "m", Messages: json.RawMessage(`["abc"]`)}, 3},
		{"other options miss", Request{Model: "m", Prompt: "abc", AddSpecialTokens: new(bool)}, 4},
		{"first again still hits", Request{Model: "m", Prompt: "abc"}, 4},
	}
	for _, s := range steps {
		got, err := tok.Tokenize(ctx, s.give, []uint32{7})
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if calls() != s.wantCalls {
			t.Fatalf("%s: %d engine calls; want %d", s.name, calls(), s.wantCalls)
		}
		if got[0] != 7 {
			t.Fatalf("%s: dst prefix lost", s.name)
		}
		if s.give.Prompt == "abc" && s.give.Model == "m" && s.give.AddSpecialTokens == nil && got[1] == 99999 {
			t.Fatalf("%s: cached tokens alias a caller's slice", s.name)
		}
	}
	if st := tok.Stats(); st.Hits != 2 || st.Misses != 4 || st.CacheEntries != 4 {
		t.Fatalf("stats %+v; want 2 hits, 4 misses, 4 entries", st)
	}
}

func TestRemote_CacheEvictsLeastRecentlyUsedByBytes(t *testing.T) {
	eng := newFakeEngine(t, answerLen)
	// answerLen gives one token per byte of the JSON string, quotes
	// included: 12 tokens, 48 bytes + overhead each; room for two.
	const bound = 2*(48+requestEntryOverhead) + 10
	tok := newTestTokenizer(t, eng.srv.URL, func(c *RemoteConfig) { c.CacheBytes = bound })
	ctx := context.Background()
	for _, p := range []string{"aaaaaaaaaa", "bbbbbbbbbb", "aaaaaaaaaa", "cccccccccc", "aaaaaaaaaa", "bbbbbbbbbb"} {
		if _, err := tok.Tokenize(ctx, Request{Prompt: p}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// a, b (miss, miss), a (hit), c (miss, evicts b), a (hit), b (miss)
	if got := eng.calls.Load(); got != 4 {
		t.Fatalf("%d engine calls; want 4", got)
	}
	if st := tok.Stats(); st.CacheBytes > bound || st.CacheEntries != 2 {
		t.Fatalf("cache holds %d entries, %d bytes; want 2 within %d", st.CacheEntries, st.CacheBytes, bound)
	}
}

func TestRemote_DeadlineMissIsATokenizeGuard(t *testing.T) {
	release := make(chan struct{})
	eng := newFakeEngine(t, func(w http.ResponseWriter, r *http.Request, _ map[string]json.RawMessage) {
		select { // hold the request until the client gives up
		case <-r.Context().Done():
		case <-release:
		}
	})
	defer close(release)
	tok := newTestTokenizer(t, eng.srv.URL, func(c *RemoteConfig) { c.Timeout = 50 * time.Millisecond })
	_, err := tok.Tokenize(context.Background(), Request{Prompt: "x"}, nil)
	var ge *GuardError
	if !errors.As(err, &ge) || ge.Reason != GuardTokenize || !errors.Is(err, ErrTimeout) {
		t.Fatalf("got %v; want a tokenize guard wrapping ErrTimeout", err)
	}
	if st := tok.Stats(); st.Timeouts != 1 || st.Errors != 1 {
		t.Fatalf("stats %+v; want 1 timeout", st)
	}
}

func TestRemote_ReportsBothVLLMErrorShapes(t *testing.T) {
	tests := []struct {
		name       string
		status     int
		body       string
		wantType   string
		wantMsg    string
		wantCode   string
		wantSentin error
	}{
		{"current nested shape", 400, `{"error":{"message":"model x not found","type":"NotFoundError","param":"model","code":404}}`, "NotFoundError", "model x not found", "404", ErrUpstream},
		{"older flat shape", 400, `{"object":"error","message":"too long","type":"BadRequestError","param":null,"code":400}`, "BadRequestError", "too long", "400", ErrUpstream},
		{"non-JSON error", 502, `upstream died`, "", "upstream died", "", ErrUpstream},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eng := newFakeEngine(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]json.RawMessage) {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.body)
			})
			tok := newTestTokenizer(t, eng.srv.URL, nil)
			_, err := tok.Tokenize(context.Background(), Request{Prompt: "x"}, nil)
			var ue *UpstreamError
			var ge *GuardError
			if !errors.As(err, &ge) || ge.Reason != GuardTokenize || !errors.As(err, &ue) || !errors.Is(err, tt.wantSentin) {
				t.Fatalf("got %v; want a tokenize guard wrapping an UpstreamError", err)
			}
			if ue.Status != tt.status || ue.Type != tt.wantType || ue.Message != tt.wantMsg || ue.Code != tt.wantCode {
				t.Fatalf("got %+v; want status %d type %q msg %q code %q", ue, tt.status, tt.wantType, tt.wantMsg, tt.wantCode)
			}
		})
	}
}

func TestRemote_RejectsMalformedAnswersAndRequests(t *testing.T) {
	answers := []struct {
		name string
		body string
	}{
		{"not json", `{"tokens":[1,2`},
		{"no tokens", `{"count":0}`},
		{"negative token", `{"count":1,"tokens":[-1]}`},
		{"token over uint32", `{"count":1,"tokens":[4294967296]}`},
		{"count disagrees", `{"count":3,"tokens":[1]}`},
	}
	for _, a := range answers {
		t.Run(a.name, func(t *testing.T) {
			eng := newFakeEngine(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]json.RawMessage) { io.WriteString(w, a.body) })
			tok := newTestTokenizer(t, eng.srv.URL, nil)
			if _, err := tok.Tokenize(context.Background(), Request{Prompt: "x"}, nil); !errors.Is(err, ErrMalformed) {
				t.Fatalf("got %v; want ErrMalformed", err)
			}
		})
	}
	tok := newTestTokenizer(t, "http://127.0.0.1:1", nil)
	for _, req := range []Request{
		{},
		{Prompt: "x", Messages: json.RawMessage(`[]`)},
		{Messages: json.RawMessage(`{"role":"user"}`)},
		{Prompt: "x", Tools: json.RawMessage(`[]`)},
	} {
		_, err := tok.Tokenize(context.Background(), req, nil)
		var ge *GuardError
		if !errors.As(err, &ge) || !errors.Is(err, ErrMalformed) {
			t.Errorf("request %+v: got %v; want a guard wrapping ErrMalformed", req, err)
		}
	}
}

func TestRemote_BoundsConcurrency(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 6)
	eng := newFakeEngine(t, func(w http.ResponseWriter, r *http.Request, b map[string]json.RawMessage) {
		arrived <- struct{}{}
		<-release
		answerLen(w, r, b)
	})
	tok := newTestTokenizer(t, eng.srv.URL, func(c *RemoteConfig) { c.MaxConcurrent = 2; c.Timeout = 10 * time.Second })
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := tok.Tokenize(context.Background(), Request{Prompt: fmt.Sprint("p", i)}, nil)
			errs <- err
		}()
	}
	deadline := time.After(waitTimeout)
	for i := 0; i < 2; i++ {
		select {
		case <-arrived:
		case <-deadline:
			t.Fatal("requests never reached the engine")
		}
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if m := eng.maxSeen.Load(); m != 2 {
		t.Fatalf("engine saw %d concurrent calls; want at most (and here exactly) 2", m)
	}
}

func TestRemoteConfig_ReportsAllProblems(t *testing.T) {
	err := RemoteConfig{BaseURL: "10.0.0.1:8000", Timeout: -1}.Validate()
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "BaseURL") || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("got %v", err)
	}
}
