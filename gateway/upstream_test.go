package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
)

// readResponse parses raw as a response to a request (head: a HEAD
// request) and reads its body with bodyReader, one Read at a time.
func readResponse(t *testing.T, raw string, head bool) (reads []string, err error, reusable bool) {
	t.Helper()
	br := bufio.NewReader(strings.NewReader(raw))
	var h fasthttp.ResponseHeader
	if err := h.Read(br); err != nil {
		t.Fatalf("head of %q: %v", raw, err)
	}
	var r bodyReader
	r.reset(&upConn{br: br}, &h, head)
	buf := make([]byte, 64)
	for range 100 {
		n, err := r.Read(buf)
		if n > 0 {
			reads = append(reads, string(buf[:n]))
		}
		if err != nil {
			if err == io.EOF {
				err = nil
			}
			return reads, err, r.reusable()
		}
	}
	t.Fatal("no end after 100 reads")
	return nil, nil, false
}

func TestBodyReader_Framing(t *testing.T) {
	tests := []struct {
		name         string
		give         string
		head         bool
		want         []string
		wantErr      bool
		wantReusable bool
	}{
		{"content length", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false, []string{"hello"}, false, true},
		{"empty", "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, nil, false, true},
		{"head request", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true, nil, false, true},
		{"no content", "HTTP/1.1 204 No Content\r\n\r\n", false, nil, false, true},
		{"chunked, one read per chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
			false, []string{"abc", "de"}, false, true},
		{"chunk extensions and trailers", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
			false, []string{"abc"}, false, true},
		{"until close", "HTTP/1.1 200 OK\r\n\r\nall of it", false, []string{"all of it"}, false, false},
		{"truncated length", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhell", false, []string{"hell"}, true, false},
		{"truncated chunk", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nabc", false, []string{"abc"}, true, false},
		{"bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n", false, nil, true, false},
		{"chunk longer than its size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n", false, []string{"ab"}, true, false},
		{"huge chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n", false, nil, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err, reusable := readResponse(t, tt.give, tt.head)
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("reads %q; want %q", got, tt.want)
			}
			if (err != nil) != tt.wantErr {
				t.Errorf("err %v; want error %v", err, tt.wantErr)
			}
			if reusable != tt.wantReusable {
				t.Errorf("reusable %v; want %v", reusable, tt.wantReusable)
			}
		})
	}
}

// oneShot answers one request with a keep-alive response and then closes
// the connection without saying so: the next request on a pooled
// connection meets a backend that is gone, as after uvicorn's keep-alive
// timeout.
func oneShot(c net.Conn) {
	req, err := http.ReadRequest(bufio.NewReader(c))
	if err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, req.Body)
	_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
}

func TestUpstream_AKeepAliveConnectionTheBackendClosedIsRetriedOnANewOne(t *testing.T) {
	cfg := singlePool(serveTCP(t, oneShot))
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, cfg, Deps{Router: fr})
	c := testClient(t)
	for i := range 3 {
		resp, body := post(t, c, url+PathCompletions, `{"model":"m","prompt":"p"}`)
		if resp.StatusCode != 200 || string(body) != `{"ok":true}` {
			t.Fatalf("request %d: %d %s; want 200 (a stale pooled connection is retried, not a 502)", i, resp.StatusCode, body)
		}
	}
	fr.checkTicketsClosed(t, 3)
	_, outcomes, _ := fr.snapshot()
	for _, o := range outcomes {
		if o.Failure != actors.FailNone {
			t.Errorf("outcome %+v; want no failure", o)
		}
	}
}

func TestListener_UnreadableRequestsGetJSONErrorsAndTheConnectionCloses(t *testing.T) {
	be := newFakeVLLM(t)
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	tests := []struct {
		name       string
		raw        string
		wantStatus int
		wantCode   string
	}{
		{"head over the read buffer", "GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", readBufferSize) + "\r\n\r\n",
			http.StatusRequestHeaderFieldsTooLarge, CodeHeadersTooLarge},
		{"malformed request line", "GET\r\n\r\n", http.StatusBadRequest, CodeBadRequest},
		{"body over the limit", "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + strconv.Itoa(DefaultBodyLimit+1) + "\r\n\r\n{",
			http.StatusRequestEntityTooLarge, CodeBodyTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := rawConn(t, url)
			if _, err := io.WriteString(c, tt.raw); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if e := decodeError(t, body); resp.StatusCode != tt.wantStatus || e.Error.Code != tt.wantCode {
				t.Errorf("got %d %s; want %d %s", resp.StatusCode, e.Error.Code, tt.wantStatus, tt.wantCode)
			}
			if !resp.Close {
				t.Error("the connection stays open after a request that could not be read")
			}
		})
	}
	if n := len(be.requests()); n != 0 {
		t.Errorf("backend saw %d requests; want 0", n)
	}
}

// An HTTP/1.0 client cannot read chunks: a streamed answer reaches it as
// it comes, without a length, and ends with the connection (as from vLLM).
// It used to be read whole first, up to 64 MiB per answer (issue 23).
func TestSinglePool_AnHTTP10ClientGetsAStreamAsItComesUntilTheClose(t *testing.T) {
	be := newFakeVLLM(t)
	release := make(chan struct{})
	be.answer = func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		_, _ = io.WriteString(w, "data: first\n\n")
		_ = rc.Flush()
		<-release
		_, _ = io.WriteString(w, "data: second\n\ndata: [DONE]\n\n")
	}
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	c := rawConn(t, url)
	body := `{"model":"m","prompt":"p","stream":true}`
	if _, err := io.WriteString(c, "POST /v1/completions HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodPost})
	if err != nil {
		close(release)
		t.Fatalf("no head while the backend holds the rest of the stream: %v", err)
	}
	first, err := br.ReadString('\n')
	close(release)
	if err != nil || first != "data: first\n" {
		t.Fatalf("first line %q (%v); want the first event before the stream ended", first, err)
	}
	if resp.StatusCode != 200 || resp.ContentLength != -1 || len(resp.TransferEncoding) != 0 || !resp.Close {
		t.Errorf("status %d, length %d, transfer encoding %v, close %v; want 200 without a length or chunks, ended by the close",
			resp.StatusCode, resp.ContentLength, resp.TransferEncoding, resp.Close)
	}
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading to the close: %v", err)
	}
	if events, _ := sseEvents(t, strings.NewReader(first+string(rest))); len(events) != 3 || events[2] != "[DONE]" {
		t.Errorf("events %q; want first, second, [DONE]", events)
	}
	fr.checkTicketsClosed(t, 1)
	if _, outcomes, _ := fr.snapshot(); len(outcomes) != 1 || outcomes[0].Failure != actors.FailNone {
		t.Errorf("outcomes %+v; want one clean leg", outcomes)
	}
}

// An HTTP/1.0 stream the upstream breaks ends with a reset, never with the
// close that ends a complete one.
func TestSinglePool_AnHTTP10StreamTheUpstreamBreaksEndsWithAReset(t *testing.T) {
	up := serveTCP(t, func(c net.Conn) {
		_, _ = bufio.NewReader(c).ReadString('}')
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n10\r\ndata: partial\n\n\r\n")
		time.Sleep(50 * time.Millisecond)
		_ = c.(*net.TCPConn).SetLinger(0) // the worker dies: a reset mid-stream
	})
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, singlePool(up), Deps{Router: fr})
	c := rawConn(t, url)
	body := `{"model":"m","prompt":"p","stream":true}`
	if _, err := io.WriteString(c, "POST /v1/completions HTTP/1.0\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read %q, then %v; want the partial stream and a reset", got, err)
	}
	if !bytes.Contains(got, []byte("data: partial")) {
		t.Errorf("read %q; want the event that came before the break", got)
	}
}

// Requests fasthttp would serve but net/http refuses, refused the same way:
// a request line naming another HTTP version (505, closed), and paths the
// API does not have in their raw form (fasthttp's Path() cleans "//" and
// "..", and the backend would get the raw one).
func TestListener_RefusesOtherVersionsAndUncleanPaths(t *testing.T) {
	be := newFakeVLLM(t)
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	tests := []struct {
		name       string
		raw        string
		wantStatus int
		wantCode   string
	}{
		{"HTTP/2.0 request line", "GET /v1/models HTTP/2.0\r\nHost: x\r\n\r\n", http.StatusHTTPVersionNotSupported, CodeBadRequest},
		{"HTTP/9.9 request line", "GET /v1/models HTTP/9.9\r\nHost: x\r\n\r\n", http.StatusHTTPVersionNotSupported, CodeBadRequest},
		{"doubled slash", "GET //v1/models HTTP/1.1\r\nHost: x\r\n\r\n", http.StatusNotFound, CodeUnknownURL},
		{"dot segments", "POST /v1/../v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}", http.StatusNotFound, CodeUnknownURL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := rawConn(t, url)
			if _, err := io.WriteString(c, tt.raw); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if e := decodeError(t, body); resp.StatusCode != tt.wantStatus || e.Error.Code != tt.wantCode {
				t.Errorf("got %d %s; want %d %s", resp.StatusCode, e.Error.Code, tt.wantStatus, tt.wantCode)
			}
		})
	}
	if n := len(be.requests()); n != 0 {
		t.Errorf("backend saw %d requests; want 0", n)
	}
}

// An abort that lands between a leg's read and its re-arm of the idle
// bound must still wake the next read at once: the re-arm may not
// replace the abort's past deadline with a future one.
func TestUpConn_ReArmAfterAnAbortKeepsTheConnectionWoken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c // a silent backend: it never writes
		}
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	defer func() { (<-accepted).Close() }()

	c := &upConn{nc: nc}
	now := time.Now()
	c.arm(now.Add(time.Minute), 0) // the leg's bound, as armed before its read
	// killUp, as the exchange's abort makes it from another goroutine.
	c.killed.Store(true)
	_ = nc.SetDeadline(aLongTimeAgo)
	// The leg's goroutine re-arms its idle bound before the next read.
	c.arm(now.Add(20*time.Second), time.Second)

	start := time.Now()
	_, err = nc.Read(make([]byte, 1))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read after the abort and a re-arm: %v; want the deadline exceeded at once", err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("the read waited %v", waited)
	}
}
