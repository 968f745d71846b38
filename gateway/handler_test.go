package gateway

import (
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
)

// panicTransport simulates a bug below the handler.
type panicTransport struct{}

func (panicTransport) RoundTrip(*http.Request) (*http.Response, error) { panic("bug") }

func TestHandler_StripsHopByHopHeadersBothWays(t *testing.T) {
	be := newFakeVLLM(t)
	be.answer = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		h := w.Header()
		h.Set("Connection", "X-Resp-Hop")
		h.Set("X-Resp-Hop", "1")
		h.Set("Keep-Alive", "timeout=5")
		h.Set("Proxy-Authenticate", "Basic")
		h.Set("X-End-To-End", "kept")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	resp, _ := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"p"}`,
		"Connection", "X-Hop, keep-alive", "X-Hop", "1", "Keep-Alive", "timeout=5", "Te", "trailers",
		"Proxy-Authorization", "Basic eA==", "Proxy-Connection", "keep-alive", "X-Forwarded-For", "6.6.6.6",
		"Forwarded", "for=6.6.6.6", "X-Custom", "kept")
	br := be.requests()[0]
	for _, k := range []string{"Connection", "X-Hop", "Keep-Alive", "Te", "Proxy-Authorization", "Proxy-Connection", "Forwarded"} {
		if v := br.Header.Values(k); len(v) != 0 {
			t.Errorf("backend saw hop-by-hop %s: %q", k, v)
		}
	}
	if got := br.Header.Get("X-Forwarded-For"); got != "127.0.0.1" {
		t.Errorf("X-Forwarded-For = %q; want llb's own view 127.0.0.1", got)
	}
	if br.Header.Get("X-Custom") != "kept" {
		t.Error("an end-to-end request header was dropped")
	}
	for _, k := range []string{"X-Resp-Hop", "Keep-Alive", "Proxy-Authenticate"} {
		if v := resp.Header.Values(k); len(v) != 0 {
			t.Errorf("client saw hop-by-hop %s: %q", k, v)
		}
	}
	if resp.Header.Get("X-End-To-End") != "kept" {
		t.Error("an end-to-end response header was dropped")
	}
}

func TestOutboundHeader_TrustedForwardedChainIsExtended(t *testing.T) {
	r, _ := http.NewRequest(http.MethodPost, "http://vip/v1/completions", nil)
	r.RemoteAddr, r.Host = "10.1.1.1:999", "vip:2020"
	r.TLS = &tls.ConnectionState{}
	r.Header.Set("X-Forwarded-For", "1.2.3.4")
	h := outboundHeader(r, true)
	if got := h.Get("X-Forwarded-For"); got != "1.2.3.4, 10.1.1.1" {
		t.Errorf("X-Forwarded-For = %q", got)
	}
	if h.Get("X-Forwarded-Proto") != "https" || h.Get("X-Forwarded-Host") != "vip:2020" {
		t.Errorf("X-Forwarded-Proto/Host = %q/%q", h.Get("X-Forwarded-Proto"), h.Get("X-Forwarded-Host"))
	}
	if r.Header.Get("X-Forwarded-For") != "1.2.3.4" {
		t.Error("the inbound request's header was mutated")
	}
}

func TestHandler_RejectsBadRequestsWithOpenAIErrors(t *testing.T) {
	be := newFakeVLLM(t)
	cfg := singlePool(be.addr())
	cfg.BodyLimit = 64
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, cfg, Deps{Router: fr})
	c := testClient(t)
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		wantStatus int
		wantCode   string
	}{
		{"malformed JSON", "POST", PathCompletions, `{"prompt":`, 400, CodeInvalidJSON},
		{"bad field", "POST", PathChatCompletions, `{"messages":"x"}`, 400, CodeInvalidField},
		{"body too large", "POST", PathCompletions, `{"prompt":"` + strings.Repeat("x", 100) + `"}`, 413, CodeBodyTooLarge},
		{"unknown path", "POST", "/v1/embeddings", `{}`, 404, CodeUnknownURL},
		{"wrong method", "GET", PathCompletions, ``, 405, CodeMethodNotAllowed},
		{"wrong method on passthrough", "POST", PathHealth, `{}`, 405, CodeMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req, _ := http.NewRequest(tt.method, url+tt.path, strings.NewReader(tt.body))
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			e := decodeError(t, b)
			if resp.StatusCode != tt.wantStatus || e.Error.Code != tt.wantCode {
				t.Errorf("got %d %s; want %d %s", resp.StatusCode, e.Error.Code, tt.wantStatus, tt.wantCode)
			}
			if r := resp.Header.Get(HeaderRoute); r != "tier=none error="+tt.wantCode {
				t.Errorf("%s = %q", HeaderRoute, r)
			}
		})
	}
	if n := len(be.requests()); n != 0 {
		t.Errorf("backend got %d requests; want none", n)
	}
}

func TestPassthrough_ForwardsHealthAndModels(t *testing.T) {
	be := newFakeVLLM(t)
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	c := testClient(t)
	for _, tt := range []struct{ path, want string }{{PathHealth, ""}, {PathModels, `"id":"m1"`}} {
		resp, err := c.Get(url + tt.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), tt.want) {
			t.Errorf("GET %s = %d %q", tt.path, resp.StatusCode, b)
		}
		if resp.Header.Get(HeaderRoute) == "" {
			t.Errorf("GET %s has no %s", tt.path, HeaderRoute)
		}
	}
	fr.checkTicketsClosed(t, 2)
	if paths := be.requests(); paths[0].Path != PathHealth || paths[1].Path != PathModels {
		t.Errorf("backend paths = %v", paths)
	}
}

func TestListener_ServesCleartextHTTP2(t *testing.T) {
	be := newFakeVLLM(t)
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protos}
	t.Cleanup(tr.CloseIdleConnections)
	resp, err := (&http.Client{Transport: tr}).Post(url+PathCompletions, "application/json", strings.NewReader(`{"model":"m","prompt":"p","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events, err := sseEvents(t, resp.Body)
	if resp.ProtoMajor != 2 || err != nil || len(events) != 4 || events[3] != "[DONE]" {
		t.Errorf("proto %d events %q err %v; want HTTP/2 and 3 events + [DONE]", resp.ProtoMajor, events, err)
	}
}

func TestHandler_ReleasesTheTicketOnBadDecisionsAndPanics(t *testing.T) {
	tests := []struct {
		name string
		d    ladder.Decision
		rt   http.RoundTripper
		want int // HTTP status; 0 = connection dropped
	}{
		{"decision names a missing endpoint", decision(ladder.TierSelector, 7, -1), nil, 503},
		{"panic below the handler", decision(ladder.TierSelector, 0, -1), panicTransport{}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newFakeVLLM(t)
			fr := newFakeRouter(fixedRoute(tt.d))
			cfg := singlePool(be.addr())
			l, err := NewListener(cfg, Deps{Router: fr, Transport: tt.rt})
			if err != nil {
				t.Fatal(err)
			}
			l.srv.ErrorLog = log.New(io.Discard, "", 0) // the recovered panic is expected
			if err := l.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = l.Close() })
			req, _ := http.NewRequest(http.MethodPost, "http://"+l.Addr().String()+PathCompletions, strings.NewReader(`{"model":"m","prompt":"p"}`))
			resp, err := testClient(t).Do(req)
			switch {
			case tt.want == 0 && err == nil:
				resp.Body.Close()
				t.Errorf("got %d; want the connection dropped", resp.StatusCode)
			case tt.want != 0 && (err != nil || resp.StatusCode != tt.want):
				t.Errorf("got %v, %v; want %d", resp, err, tt.want)
			}
			if err == nil {
				resp.Body.Close()
			}
			fr.checkTicketsClosed(t, 1)
		})
	}
}

func TestHandler_KeepAliveConnectionOutlivesAStreamDeadline(t *testing.T) {
	be := newFakeVLLM(t)
	cfg := singlePool(be.addr())
	cfg.MaxStreamDuration = 100 * time.Millisecond
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, cfg, Deps{Router: fr})
	c := testClient(t)
	c.Transport.(*http.Transport).MaxConnsPerHost = 1 // one keep-alive connection
	if resp, _ := post(t, c, url+PathCompletions, `{"model":"m","prompt":"p"}`); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	// Let the first request's stream deadline pass (elapsed time is what is
	// tested), then use the same connection again.
	<-time.After(3 * cfg.MaxStreamDuration)
	resp, body := post(t, c, url+PathCompletions, `{"prompt":`)
	if resp.StatusCode != 400 || decodeError(t, body).Error.Code != CodeInvalidJSON {
		t.Errorf("second request on the kept-alive connection: %d %s; want 400 %s", resp.StatusCode, body, CodeInvalidJSON)
	}
}

func TestHandler_PausedRuleAnswers503WithoutRouting(t *testing.T) {
	be := newFakeVLLM(t)
	cfg := singlePool(be.addr())
	cfg.Paused = true
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, cfg, Deps{Router: fr})
	c := testClient(t)
	for _, path := range []string{PathCompletions, PathHealth} {
		method := "POST"
		if path == PathHealth {
			method = "GET"
		}
		req, _ := http.NewRequest(method, url+path, strings.NewReader(`{"prompt":"hi"}`))
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if e := decodeError(t, b); resp.StatusCode != 503 || e.Error.Code != CodeServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%s %s: %d %s (Retry-After %q); want 503 service_unavailable with Retry-After", method, path, resp.StatusCode, e.Error.Code, resp.Header.Get("Retry-After"))
		}
	}
	if routes, _, _ := fr.snapshot(); len(routes) != 0 || len(be.requests()) != 0 {
		t.Fatalf("a paused rule routed %d requests and proxied %d", len(routes), len(be.requests()))
	}
}

// A router that counts queued prefill work (actors.FirstByter) hears of a
// single-pool leg's first body byte, once, before the ticket finishes.
func TestHandler_TellsTheRouterOfTheFirstByte(t *testing.T) {
	be := newFakeVLLM(t)
	be.answer = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		for range 3 {
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"text\":\"x\"}]}\n\n")
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	resp, _ := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"p","stream":true}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	fr.waitFinished(t, 1)
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if len(fr.firsts) != 1 || fr.firsts[0] != 1 {
		t.Fatalf("FirstByte calls %v; want [1]", fr.firsts)
	}
}
