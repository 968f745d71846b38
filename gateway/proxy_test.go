package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/rule/ruletest"
)

func TestSinglePool_ProxiesNonStreamingRequest(t *testing.T) {
	be := newFakeVLLM(t)
	d := decision(ladder.TierSelector, 0, -1)
	d.Selector = ladder.SelCHWBL
	fr := newFakeRouter(fixedRoute(d))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	body := `{"model":"m", "prompt":"hi","max_tokens":1e1,"user_id":"u"}`
	resp, got := post(t, testClient(t), url+PathCompletions, body, "Authorization", "Bearer k", "X-Request-Id", "client-id")

	if resp.StatusCode != 200 || !strings.Contains(string(got), `"text":"hello"`) {
		t.Fatalf("got %d %s", resp.StatusCode, got)
	}
	wantRoute := "tier=sel sel=chwbl prefill=0 decode=-1 prefill_addr=" + be.addr().String() + " retries=0"
	if r := resp.Header.Get(HeaderRoute); r != wantRoute {
		t.Errorf("%s = %q; want %q", HeaderRoute, r, wantRoute)
	}
	reqs := be.requests()
	if len(reqs) != 1 {
		t.Fatalf("backend got %d requests; want 1", len(reqs))
	}
	br := reqs[0]
	if string(br.Body) != body {
		t.Errorf("backend body = %s; want the client's bytes %s", br.Body, body)
	}
	for k, want := range map[string]string{"Authorization": "Bearer k", "X-Request-Id": "client-id", "X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "http"} {
		if got := br.Header.Get(k); got != want {
			t.Errorf("backend %s = %q; want %q", k, got, want)
		}
	}
	fr.checkTicketsClosed(t, 1)
	routes, outcomes, fin := fr.snapshot()
	if routes[0].Req.SessionKey != "u" || !routes[0].Req.HasPrefixHash || string(routes[0].Req.Prompt) != "hi" {
		t.Errorf("route request = %+v", routes[0].Req)
	}
	if len(outcomes) != 1 || outcomes[0].Leg != actors.LegSingle || outcomes[0].Status != 200 || outcomes[0].Failure != actors.FailNone || outcomes[0].TTFB <= 0 {
		t.Errorf("outcomes = %+v; want one single-leg 200 with a TTFB", outcomes)
	}
	if !fin[1].OK {
		t.Errorf("ticket finished with %+v; want OK", fin[1])
	}
}

func TestSinglePool_FlushesEachSSEEventAsItArrives(t *testing.T) {
	be := newFakeVLLM(t)
	release := make(chan struct{})
	stalled := make(chan bool, 1)
	be.answer = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
			stalled <- false
		case <-time.After(5 * time.Second):
			stalled <- true // the client never saw the first event
		}
		_, _ = io.WriteString(w, "data: second\n\ndata: [DONE]\n\n")
	}
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	req, _ := http.NewRequest(http.MethodPost, url+PathCompletions, strings.NewReader(`{"model":"m","prompt":"p","stream":true}`))
	resp, err := testClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != "data: first\n" {
		t.Fatalf("first line = %q, %v", line, err)
	}
	close(release)
	rest, err := io.ReadAll(br)
	if err != nil {
		t.Fatalf("reading the rest: %v", err)
	}
	if string(rest) != "\ndata: second\n\ndata: [DONE]\n\n" {
		t.Errorf("rest = %q; want the stream through [DONE] as-is", rest)
	}
	if <-stalled {
		t.Error("the first event only reached the client after the backend sent more: not flushed per event")
	}
	fr.checkTicketsClosed(t, 1)
}

func TestSinglePool_RetriesAnotherEndpointAfterConnectFailure(t *testing.T) {
	be := newFakeVLLM(t)
	cfg := singlePool(closedAddr(t), be.addr())
	fr := newFakeRouter(firstAllowed(cfg))
	url, _ := startGateway(t, cfg, Deps{Router: fr})
	resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"p"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("got %d %s; want 200 from the second endpoint", resp.StatusCode, body)
	}
	if r := resp.Header.Get(HeaderRoute); !strings.Contains(r, "prefill=1") || !strings.HasSuffix(r, "retries=1") {
		t.Errorf("%s = %q; want prefill=1 … retries=1", HeaderRoute, r)
	}
	fr.checkTicketsClosed(t, 2)
	routes, outcomes, fin := fr.snapshot()
	if len(routes) != 2 || routes[0].Avoid != 0 || routes[1].Avoid != 1 {
		t.Errorf("Avoid masks = %v; want [0 1]", avoidMasks(routes))
	}
	if len(outcomes) != 2 || outcomes[0].Failure != actors.FailConnect || outcomes[1].Status != 200 {
		t.Errorf("outcomes = %+v; want connect failure then 200", outcomes)
	}
	if fin[1].OK || !fin[2].OK {
		t.Errorf("finishes = %+v; want the failed ticket not OK and the retry OK", fin)
	}
}

func avoidMasks(rs []actors.RouteRequest) []uint32 {
	var out []uint32
	for _, r := range rs {
		out = append(out, r.Avoid)
	}
	return out
}

func TestSinglePool_ConnectFailuresExhaust(t *testing.T) {
	tests := []struct {
		name        string
		endpoints   int
		retries     int
		wantTickets int
	}{
		{"retry budget runs out", 4, 0, 3},        // 1 try + 2 retries
		{"router runs out of endpoints", 2, 0, 2}, // third Route is unavailable
		{"retries disabled", 3, -1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var addrs []netip.AddrPort
			for range tt.endpoints {
				addrs = append(addrs, closedAddr(t))
			}
			cfg := singlePool(addrs...)
			fr := newFakeRouter(firstAllowed(cfg))
			url, _ := startGatewayWith(t, cfg, Options{MaxConnectRetries: tt.retries}, Deps{Router: fr})
			resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"p"}`)
			if e := decodeError(t, body); resp.StatusCode != 502 || e.Error.Code != CodeBackendUnreachable {
				t.Errorf("got %d %s; want 502 %s", resp.StatusCode, e.Error.Code, CodeBackendUnreachable)
			}
			fr.checkTicketsClosed(t, tt.wantTickets)
			_, outcomes, _ := fr.snapshot()
			for _, o := range outcomes {
				if o.Failure != actors.FailConnect {
					t.Errorf("outcome %+v; want FailConnect", o)
				}
			}
		})
	}
}

// abortAfter makes a backend answer that sends head (nothing when empty) and
// then kills the connection.
func abortAfter(head string, headers bool) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, r *http.Request, _ []byte) {
		if headers {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
		}
		if head != "" {
			_, _ = io.WriteString(w, head)
		}
		if headers || head != "" {
			w.(http.Flusher).Flush()
		}
		panic(http.ErrAbortHandler)
	}
}

func TestSinglePool_BackendDeathBeforeFirstByteIs502(t *testing.T) {
	tests := []struct {
		name    string
		headers bool
	}{
		{"before headers", false},
		{"after headers", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newFakeVLLM(t)
			be.answer = abortAfter("", tt.headers)
			fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
			cfg := singlePool(be.addr())
			cfg.MigrationLimit = 0 // otherwise the request is resent (migrate_test.go)
			url, _ := startGateway(t, cfg, Deps{Router: fr})
			resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"p","stream":true}`)
			if e := decodeError(t, body); resp.StatusCode != 502 || e.Error.Code != CodeBackendUnreachable {
				t.Errorf("got %d %s; want 502 %s", resp.StatusCode, e.Error.Code, CodeBackendUnreachable)
			}
			fr.checkTicketsClosed(t, 1)
			_, outcomes, _ := fr.snapshot()
			if len(outcomes) != 1 || outcomes[0].Failure != actors.FailReset {
				t.Errorf("outcomes = %+v; want one FailReset", outcomes)
			}
		})
	}
}

func TestSinglePool_MidStreamDeathAbortsTheClientConnection(t *testing.T) {
	be := newFakeVLLM(t)
	be.answer = abortAfter("data: partial\n\n", true)
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	req, _ := http.NewRequest(http.MethodPost, url+PathCompletions, strings.NewReader(`{"model":"m","prompt":"p","stream":true}`))
	resp, err := testClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Errorf("read %q to a clean end; want the connection aborted", got)
	}
	if !strings.HasPrefix(string(got), "data: partial") {
		t.Errorf("client got %q before the abort; want the partial event", got)
	}
	fr.checkTicketsClosed(t, 1)
	_, outcomes, fin := fr.snapshot()
	if len(outcomes) != 1 || outcomes[0].Failure != actors.FailReset || outcomes[0].Status != 200 {
		t.Errorf("outcomes = %+v; want status 200 with FailReset", outcomes)
	}
	if fin[1].OK {
		t.Error("an aborted stream finished OK")
	}
}

func TestSinglePool_ClientDisconnectCancelsUpstream(t *testing.T) {
	be := newFakeVLLM(t)
	upstreamGone := make(chan struct{})
	be.answer = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the gateway must cancel us
		close(upstreamGone)
	}
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+PathCompletions, strings.NewReader(`{"model":"m","prompt":"p","stream":true}`))
	resp, err := testClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if line != "data: one\n" {
		t.Fatalf("first line %q", line)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-upstreamGone:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not cancelled after the client left")
	}
	fr.checkTicketsClosed(t, 1)
	_, outcomes, _ := fr.snapshot()
	if len(outcomes) != 1 || outcomes[0].Failure != actors.FailClientGone {
		t.Errorf("outcomes = %+v; want FailClientGone", outcomes)
	}
}

func TestSinglePool_OriginErrorsAreRelayed(t *testing.T) {
	be := newFakeVLLM(t)
	be.answer = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"message":"max_tokens too large","type":"BadRequestError","param":null,"code":400}}`)
	}
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"p"}`)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "max_tokens too large") {
		t.Errorf("got %d %s; want the origin's 400", resp.StatusCode, body)
	}
	fr.checkTicketsClosed(t, 1)
	_, outcomes, fin := fr.snapshot()
	if outcomes[0].Status != 400 || outcomes[0].Failure != actors.FailNone || fin[1].OK {
		t.Errorf("outcome %+v finish %+v; want status 400, no failure, not OK", outcomes[0], fin[1])
	}
}

func TestSinglePool_Timeouts(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(*rule.Compiled)
		wantCode string
	}{
		{"idle data timeout", func(c *rule.Compiled) { c.Timeouts.Data = 50 * time.Millisecond }, CodeIdleTimeout},
		{"max stream duration", func(c *rule.Compiled) { c.Timeouts.MaxStream = 50 * time.Millisecond }, CodeStreamDuration},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newFakeVLLM(t)
			be.answer = func(w http.ResponseWriter, r *http.Request, _ []byte) { <-r.Context().Done() }
			cfg := singlePool(be.addr())
			tt.setup(cfg)
			fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
			url, _ := startGateway(t, cfg, Deps{Router: fr})
			resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"p"}`)
			if e := decodeError(t, body); resp.StatusCode != 504 || e.Error.Code != tt.wantCode {
				t.Errorf("got %d %s; want 504 %s", resp.StatusCode, e.Error.Code, tt.wantCode)
			}
			fr.checkTicketsClosed(t, 1)
			_, outcomes, _ := fr.snapshot()
			if outcomes[0].Failure != actors.FailTimeout {
				t.Errorf("outcome %+v; want FailTimeout", outcomes[0])
			}
		})
	}
}

func TestSinglePool_IdleTimeoutIsOffInSSEMode(t *testing.T) {
	be := newFakeVLLM(t)
	release := make(chan struct{})
	be.answer = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: a\n\n")
		w.(http.Flusher).Flush()
		<-release
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
	// sse_mode suppresses timeoutMemberData (rule.Compile leaves no data
	// bound).
	cfg := ruletest.Rule(ruletest.Options{Extra: `"sse_mode":true,"timeoutMemberData":20`}, ruletest.Endpoint{Addr: be.addr()})
	cfg.Port = 0
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, cfg, Deps{Router: fr})
	req, _ := http.NewRequest(http.MethodPost, url+PathCompletions, strings.NewReader(`{"model":"m","prompt":"p","stream":true}`))
	resp, err := testClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); line != "data: a\n" {
		t.Fatalf("first line %q", line)
	}
	// Keep the stream idle for ten DataTimeouts (elapsed time is the thing
	// under test here, not a synchronisation): in SSE mode the idle
	// watchdog must not cut it.
	<-time.After(10 * cfg.Timeouts.Data)
	close(release)
	rest, err := io.ReadAll(br)
	if err != nil || !strings.Contains(string(rest), "[DONE]") {
		t.Errorf("rest = %q, %v; want the stream to survive idling in SSE mode", rest, err)
	}
}

func TestClassifyUpstream(t *testing.T) {
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	readErr := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	tests := []struct {
		name string
		err  error
		want actors.Failure
	}{
		{"dial", dialErr, actors.FailConnect},
		{"our dial", &dialError{err: errors.New("i/o timeout")}, actors.FailConnect},
		{"dns", &net.DNSError{Err: "no such host"}, actors.FailConnect},
		{"read reset", readErr, actors.FailReset},
		{"eof", io.ErrUnexpectedEOF, actors.FailReset},
		{"deadline", os.ErrDeadlineExceeded, actors.FailTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := classifyUpstream(tt.err); got != tt.want {
				t.Errorf("got %v; want %v", got, tt.want)
			}
		})
	}
}

func TestSinglePool_ClientThatStopsReadingIsCutAtMaxStreamDuration(t *testing.T) {
	be := newFakeVLLM(t)
	chunk := strings.Repeat("data: "+strings.Repeat("x", 1000)+"\n\n", 64)
	be.answer = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		for r.Context().Err() == nil {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
	}
	cfg := singlePool(be.addr())
	cfg.Timeouts.MaxStream = 300 * time.Millisecond
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	_, l := startGateway(t, cfg, Deps{Router: fr})
	conn, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body := `{"model":"m","prompt":"p","stream":true}`
	if _, err := io.WriteString(conn, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	// Never read: the gateway's writes block once the socket buffers fill.
	fr.checkTicketsClosed(t, 1)
	_, outcomes, _ := fr.snapshot()
	if len(outcomes) != 1 || outcomes[0].Failure == actors.FailNone {
		t.Errorf("outcomes = %+v; want the stuck stream reported as failed", outcomes)
	}
}

// The departure watch's timer outlives a short exchange and serves the
// next one on the connection: a request that follows a short one within
// clientWatchDelay, and waits on its engine with nothing to write, is
// still cancelled when its client leaves.
func TestSinglePool_ClientLeavingAfterAShortRequestOnItsConnectionCancelsUpstream(t *testing.T) {
	be := newFakeVLLM(t)
	var calls atomic.Int32
	upstreamGone := make(chan struct{})
	be.answer = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		if calls.Add(1) == 1 {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"choices":[{"text":"short"}]}`)
			return
		}
		<-r.Context().Done() // the gateway must cancel us
		close(upstreamGone)
	}
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"model":"m","prompt":"p"}`
	req := "POST " + PathCompletions + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("first request: status %d", resp.StatusCode)
	}
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	for calls.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	c.Close()
	select {
	case <-upstreamGone:
	case <-time.After(10 * time.Second):
		t.Fatal("the upstream request was not cancelled after the client left")
	}
	fr.checkTicketsClosed(t, 2)
	_, outcomes, _ := fr.snapshot()
	if len(outcomes) != 2 || outcomes[1].Failure != actors.FailClientGone {
		t.Errorf("outcomes = %+v; want the second FailClientGone", outcomes)
	}
}
