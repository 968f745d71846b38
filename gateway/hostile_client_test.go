package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
)

// Raw-protocol clients against a real listener: what a slow or hostile
// client does to the data plane (issue 13).

// rawConn dials the gateway at url ("http://host:port").
func rawConn(t *testing.T, url string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawExchange writes raw to c and reads one answer within 5 s, its body
// whole; the reader keeps whatever the connection sends after it.
func rawExchange(t *testing.T, c net.Conn, raw string) (*http.Response, []byte, *bufio.Reader) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	return resp, body, br
}

// A client that announces a body and trickles it gets 408 at the body-read
// bound, the connection closed — never a 200, never a wait beyond the
// bound (net/http used to drain the rest of the body with no deadline, and
// a body over 256 KiB got an empty 200).
func TestHandler_ASlowBodyGets408AtTheBoundAndTheConnectionCloses(t *testing.T) {
	for _, size := range []int{100_000, 1 << 20} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			be := newFakeVLLM(t)
			cfg := singlePool(be.addr())
			fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
			url, _ := startGatewayWith(t, cfg, Options{BodyReadTimeout: 300 * time.Millisecond, BodyLimit: 4 << 20}, Deps{Router: fr})
			c := rawConn(t, url)
			start := time.Now()
			if _, err := io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+
				strconv.Itoa(size)+"\r\n\r\n{"); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			defer close(stop)
			go func() { // one byte every 100 ms, never finishing in time
				for {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
						if _, err := c.Write([]byte(" ")); err != nil {
							return
						}
					}
				}
			}()
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatalf("no answer: %v (after %s)", err, time.Since(start))
			}
			body, _ := io.ReadAll(resp.Body)
			took := time.Since(start)
			if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"code":"request_timeout"`) {
				t.Fatalf("slow body: %d %s; want 408 request_timeout", resp.StatusCode, body)
			}
			if !resp.Close {
				t.Errorf("the 408 keeps the connection open; want Connection: close")
			}
			if took > 2*time.Second {
				t.Errorf("answered after %s; want at the 300 ms bound", took)
			}
			if n := len(be.requests()); n != 0 {
				t.Errorf("backend saw %d requests; want 0", n)
			}
		})
	}
}

// RFC 9112 §6.1: a request with both Transfer-Encoding and Content-Length
// is answered, then the connection is closed — the pipelined request behind
// it (possibly smuggled) is never served.
func TestHandler_TransferEncodingWithContentLengthClosesAfterTheAnswer(t *testing.T) {
	be := newFakeVLLM(t)
	cfg := singlePool(be.addr())
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, cfg, Deps{Router: fr})
	c := rawConn(t, url)
	body := `{"model":"m","prompt":"p","max_tokens":1}`
	req := "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
		"Content-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" +
		strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n0\r\n\r\n" +
		"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
	resp, _, br := rawExchange(t, c, req)
	if resp.StatusCode != http.StatusOK || !resp.Close {
		t.Fatalf("first answer %d, close %v; want 200 and Connection: close", resp.StatusCode, resp.Close)
	}
	if resp2, err := http.ReadResponse(br, nil); err == nil {
		t.Fatalf("the pipelined request was served (%d) on a connection that sent TE and CL", resp2.StatusCode)
	}
	if n := len(be.requests()); n != 1 {
		t.Fatalf("backend saw %d requests; want 1", n)
	}
}

// A plain Content-Length request keeps its connection (keep-alive).
func TestHandler_APlainRequestKeepsTheConnection(t *testing.T) {
	be := newFakeVLLM(t)
	cfg := singlePool(be.addr())
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, cfg, Deps{Router: fr})
	c := rawConn(t, url)
	body := `{"model":"m","prompt":"p","max_tokens":1}`
	one := "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body
	if _, err := io.WriteString(c, one+one); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	for i := 0; i < 2; i++ {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("answer %d: %d close %v; want 200 keep-alive", i, resp.StatusCode, resp.Close)
		}
	}
}

// readAnswer reads what comes back on c until it closes (or 5 s pass).
func readAnswer(t *testing.T, c net.Conn) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("reading the answer: %v (got %q)", err, b)
	}
	return string(b)
}

// A client that shuts its write side is taken for gone by net/http (its
// request context ends); llb then abandons the request. It must not answer
// "200 OK" with an empty body — neither for a body cut short nor for a
// complete request — but close the connection (make attack: a truncated
// body, a bad chunked body or a GET followed by a half-close got an empty
// 200).
func TestHandler_AClientThatShutsItsWriteSideNeverGetsAnEmpty200(t *testing.T) {
	body := `{"model":"m","prompt":"p","max_tokens":1}`
	tests := []struct {
		name, req string
	}{
		{name: "body cut short", req: "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n" + body[:10]},
		{name: "chunked body without its last chunk", req: "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
			strconv.FormatInt(int64(len(body)), 16) + "\r\n" + body + "\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newFakeVLLM(t)
			fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
			url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
			c := rawConn(t, url)
			if _, err := io.WriteString(c, tt.req); err != nil {
				t.Fatal(err)
			}
			_ = c.(*net.TCPConn).CloseWrite()
			if got := readAnswer(t, c); strings.HasPrefix(got, "HTTP/1.1 200") {
				t.Fatalf("answered %q; want a 4xx or the connection closed, never a 200", got)
			}
		})
	}
}

// RFC 9112 §6.1: an HTTP/1.0 request with Transfer-Encoding has faulty
// framing and the connection is closed after the answer. net/http drops
// the header of an HTTP/1.0 request before llb sees it, so every HTTP/1.0
// answer closes its connection: the chunked body a proxy in front would
// read was otherwise parsed here as the next request (make attack).
func TestHandler_AnHTTP10RequestClosesItsConnection(t *testing.T) {
	be := newFakeVLLM(t)
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	c := rawConn(t, url)
	body := `{"model":"m","prompt":"p","max_tokens":1}`
	req := "POST /v1/completions HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body + "GET /v1/models HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	got := readAnswer(t, c)
	if n := strings.Count(got, "HTTP/1."); n != 1 {
		t.Fatalf("%d answers on one HTTP/1.0 connection with Transfer-Encoding; want 1, then close:\n%s", n, got)
	}
}

// A complete request whose client shuts its write side while llb waits on
// a slow backend: the departure watch takes the client for gone and the
// leg is cancelled; the client may get nothing, but never an empty 200.
func TestHandler_AHalfClosedClientOfASlowRequestNeverGetsAnEmpty200(t *testing.T) {
	be := newFakeVLLM(t)
	be.answer = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
			_, _ = io.WriteString(w, `{"late":true}`)
		}
	}
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	c := rawConn(t, url)
	body := `{"model":"m","prompt":"p","max_tokens":1}`
	if _, err := io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "+
		strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	<-be.got // the request is at the backend before the client half-closes
	_ = c.(*net.TCPConn).CloseWrite()
	if got := readAnswer(t, c); strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Fatalf("answered %q; want the connection closed, never a 200", got)
	}
	fr.checkTicketsClosed(t, 1)
	if _, outcomes, _ := fr.snapshot(); len(outcomes) != 1 || outcomes[0].Failure != actors.FailClientGone {
		t.Errorf("outcomes %+v; want the leg reported client-gone", outcomes)
	}
}

// An h2c stream that trickles its body gets 408 at the body-read bound,
// from readBody's own timer (net/http's per-stream read deadline is not
// used: armed after a reset, it would hold the stream for the bound).
func TestHandler_ASlowH2CBodyGets408AtTheBound(t *testing.T) {
	be := newFakeVLLM(t)
	cfg := singlePool(be.addr())
	url, _ := startGatewayWith(t, cfg, Options{BodyReadTimeout: 300 * time.Millisecond}, Deps{Router: newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))})
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protos}
	t.Cleanup(tr.CloseIdleConnections)
	pr, pw := io.Pipe()
	defer pw.Close()
	req, err := http.NewRequest(http.MethodPost, url+PathCompletions, pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 1000
	go func() { _, _ = pw.Write([]byte("{")) }()
	start := time.Now()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if took := time.Since(start); resp.ProtoMajor != 2 || resp.StatusCode != http.StatusRequestTimeout || took > 3*time.Second {
		t.Fatalf("proto %d, %d %s after %v; want HTTP/2 408 at the 300 ms bound", resp.ProtoMajor, resp.StatusCode, body, took)
	}
	if e := decodeError(t, body); e.Error.Code != CodeBodyTimeout {
		t.Errorf("code %s; want %s", e.Error.Code, CodeBodyTimeout)
	}
}
