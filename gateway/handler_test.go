package gateway

import (
	"bufio"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
)

// panicReport simulates a bug below the handler: the ticket's ledger
// panics when the leg is reported.
type panicReport struct{ *fakeRouter }

func (panicReport) Report(actors.Outcome)                  { panic("bug") }
func (panicReport) Conclude(actors.Outcome, actors.Result) { panic("bug") }

// The decorator must still satisfy the ledger contract.
var _ actors.Ledger = panicReport{}

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

// outbound renders the upstream request head llb builds for the raw client
// request (from 10.1.1.1:999 over TLS), and parses it back.
func outbound(t *testing.T, raw string, trust bool, hopID string) (*http.Request, *fasthttp.Request) {
	t.Helper()
	cfg := singlePool(netip.MustParseAddrPort("127.0.0.1:8000"))
	h, err := NewHandler(cfg, Options{TrustForwardedHeaders: trust, HopID: hopID}, Deps{Router: newFakeRouter(fixedRoute(decision(ladder.Tier2, 0, -1)))})
	if err != nil {
		t.Fatal(err)
	}
	in := new(fasthttp.Request)
	if err := in.Read(bufio.NewReader(strings.NewReader(raw))); err != nil {
		t.Fatal(err)
	}
	x := &exchange{h: h, in: in, ip: "10.1.1.1", remote: "10.1.1.1:999", tls: true}
	head := x.appendRequestHead(nil, &leg{ep: 0}, len(in.Body()))
	r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(string(head) + string(in.Body()))))
	if err != nil {
		t.Fatalf("the head %q does not parse: %v", head, err)
	}
	return r, in
}

func TestRequestHead_TrustedForwardedChainIsExtended(t *testing.T) {
	raw := "POST /v1/completions?x=1 HTTP/1.1\r\nHost: vip:2020\r\nX-Forwarded-For: 1.2.3.4\r\nForwarded: for=1.2.3.4\r\n" +
		"Connection: X-Hop\r\nX-Hop: 1\r\nContent-Length: 2\r\n\r\n{}"
	r, in := outbound(t, raw, true, "me")
	if got := r.Header.Get("X-Forwarded-For"); got != "1.2.3.4, 10.1.1.1" {
		t.Errorf("X-Forwarded-For = %q", got)
	}
	if r.Header.Get("X-Forwarded-Proto") != "https" || r.Header.Get("X-Forwarded-Host") != "vip:2020" || r.Header.Get("Forwarded") != "for=1.2.3.4" {
		t.Errorf("X-Forwarded-Proto/Host, Forwarded = %q/%q, %q", r.Header.Get("X-Forwarded-Proto"), r.Header.Get("X-Forwarded-Host"), r.Header.Get("Forwarded"))
	}
	if r.Host != "127.0.0.1:8000" || r.RequestURI != "/v1/completions?x=1" || r.ContentLength != 2 || r.Header.Get("X-Hop") != "" {
		t.Errorf("host %q uri %q length %d X-Hop %q", r.Host, r.RequestURI, r.ContentLength, r.Header.Get("X-Hop"))
	}
	if string(in.Header.Peek("X-Forwarded-For")) != "1.2.3.4" {
		t.Error("the inbound request's header was mutated")
	}
}

func TestHandler_RejectsBadRequestsWithOpenAIErrors(t *testing.T) {
	be := newFakeVLLM(t)
	cfg := singlePool(be.addr())
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGatewayWith(t, cfg, Options{BodyLimit: 64}, Deps{Router: fr})
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
		{"unknown path", "POST", "/v1/assistants", `{}`, 404, CodeUnknownURL},
		{"an admin route of one engine", "POST", "/v1/load_lora_adapter", `{}`, 404, CodeUnknownURL},
		{"responses sub-path", "DELETE", "/v1/responses/resp_1", ``, 405, CodeMethodNotAllowed},
		{"responses unknown op", "POST", "/v1/responses/resp_1/delete", `{}`, 404, CodeUnknownURL},
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
		name  string
		d     ladder.Decision
		panic bool
		want  int // HTTP status; 0 = connection dropped
	}{
		{"decision names a missing endpoint", decision(ladder.TierSelector, 7, -1), false, 503},
		{"panic below the handler", decision(ladder.TierSelector, 0, -1), true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newFakeVLLM(t)
			fr := newFakeRouter(fixedRoute(tt.d))
			if tt.panic {
				fr.ledger = panicReport{fr}
			}
			cfg := singlePool(be.addr())
			h, err := NewHandler(cfg, Options{}, Deps{Router: fr})
			if err != nil {
				t.Fatal(err)
			}
			l := NewListener(h)
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
	cfg.Timeouts.MaxStream = 100 * time.Millisecond
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, cfg, Deps{Router: fr})
	c := testClient(t)
	c.Transport.(*http.Transport).MaxConnsPerHost = 1 // one keep-alive connection
	if resp, _ := post(t, c, url+PathCompletions, `{"model":"m","prompt":"p"}`); resp.StatusCode != 200 {
		t.Fatalf("first request: %d", resp.StatusCode)
	}
	// Let the first request's stream deadline pass (elapsed time is what is
	// tested), then use the same connection again.
	<-time.After(3 * cfg.Timeouts.MaxStream)
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

func TestRequestHead_AppendsThisInstanceToTheHopList(t *testing.T) {
	r, _ := outbound(t, "GET /health HTTP/1.1\r\nHost: vip\r\n\r\n", false, "me")
	if got := r.Header.Values(HeaderHop); len(got) != 1 || got[0] != "me" {
		t.Errorf("first hop: %q; want [me]", got)
	}
	r, _ = outbound(t, "GET /health HTTP/1.1\r\nHost: vip\r\nX-Llb-Hop: a\r\nX-Llb-Hop: b, c\r\n\r\n", false, "me")
	if got := r.Header.Values(HeaderHop); len(got) != 1 || got[0] != "a, b, c, me" {
		t.Errorf("later hop: %q; want [a, b, c, me]", got)
	}
}

func TestLooped_OwnIDOrTooManyHops(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want bool
	}{
		{"no header", nil, false},
		{"other instances", []string{"a, b"}, false},
		{"own id", []string{"a, me , b"}, true},
		{"own id in a second line", []string{"a", "me"}, true},
		{"max hops", []string{strings.Repeat("x, ", MaxHops-1) + "x"}, false},
		{"beyond max hops", []string{strings.Repeat("x, ", MaxHops) + "x"}, true},
	}
	for _, tt := range tests {
		var h fasthttp.RequestHeader
		for _, v := range tt.give {
			h.Add(HeaderHop, v)
		}
		if got := looped(&h, "me"); got != tt.want {
			t.Errorf("%s: got %v; want %v", tt.name, got, tt.want)
		}
	}
}

func TestHandler_ALoopedRequestIs508AndNeverForwarded(t *testing.T) {
	be := newFakeVLLM(t)
	cfg := singlePool(be.addr())
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGatewayWith(t, cfg, Options{HopID: "me"}, Deps{Router: fr})
	req, _ := http.NewRequest(http.MethodPost, url+PathCompletions, strings.NewReader(`{"model":"m","prompt":"p"}`))
	req.Header.Set(HeaderHop, "other, me")
	resp, err := testClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusLoopDetected || !strings.Contains(string(body), `"code":"loop_detected"`) {
		t.Fatalf("looped request: %d %s; want 508 loop_detected", resp.StatusCode, body)
	}
	if n := len(be.requests()); n != 0 {
		t.Fatalf("backend saw %d requests; want 0", n)
	}
}

func TestRequestHead_XRealIPIsLLBsViewUnlessTrusted(t *testing.T) {
	with := "GET /health HTTP/1.1\r\nHost: vip\r\nX-Real-IP: 6.6.6.6\r\n\r\n"
	if r, _ := outbound(t, with, false, "me"); len(r.Header.Values("X-Real-Ip")) != 1 || r.Header.Get("X-Real-Ip") != "10.1.1.1" {
		t.Errorf("untrusted X-Real-IP %q; want [10.1.1.1]", r.Header.Values("X-Real-Ip"))
	}
	if r, _ := outbound(t, with, true, "me"); len(r.Header.Values("X-Real-Ip")) != 1 || r.Header.Get("X-Real-Ip") != "6.6.6.6" {
		t.Errorf("trusted X-Real-IP %q; want the client's 6.6.6.6", r.Header.Values("X-Real-Ip"))
	}
	if r, _ := outbound(t, "GET /health HTTP/1.1\r\nHost: vip\r\n\r\n", true, "me"); r.Header.Get("X-Real-Ip") != "10.1.1.1" {
		t.Errorf("trusted without one: %q; want 10.1.1.1", r.Header.Get("X-Real-Ip"))
	}
}

func TestHandler_HiddenBackendAddressesStayOutOfClientAnswers(t *testing.T) {
	closed := closedAddr(t)
	cfg := singlePool(closed)
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGatewayWith(t, cfg, Options{HideBackendAddrs: true, MaxConnectRetries: -1}, Deps{Router: fr})
	resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"p"}`)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("got %d %s; want 502", resp.StatusCode, body)
	}
	addr := closed.String()
	if strings.Contains(string(body), addr) || strings.Contains(resp.Header.Get(HeaderRoute), addr) {
		t.Fatalf("the backend address %s reached the client: %s / %s", addr, resp.Header.Get(HeaderRoute), body)
	}
	if !strings.Contains(resp.Header.Get(HeaderRoute), "prefill=0") {
		t.Errorf("X-Llb-Route %q lost the decision itself", resp.Header.Get(HeaderRoute))
	}
}

// The ticket's ledger hears of a single-pool leg's first body byte, once,
// before the ticket finishes.
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
	firsts := append([]uint64(nil), fr.firsts...)
	fr.mu.Unlock()
	if len(firsts) != 1 || firsts[0] != 1 {
		t.Fatalf("FirstByte calls %v; want [1]", firsts)
	}
	// The router learns whether the client streams (a request that does
	// not has no first byte before its whole answer).
	resp, _ = post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"p"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	fr.waitFinished(t, 2)
	fr.mu.Lock()
	defer fr.mu.Unlock()
	if len(fr.routes) != 2 || !fr.routes[0].Streamed || fr.routes[1].Streamed {
		t.Fatalf("%d routes, Streamed %v; want 2: true, false", len(fr.routes), []bool{fr.routes[0].Streamed, len(fr.routes) > 1 && fr.routes[1].Streamed})
	}
}
