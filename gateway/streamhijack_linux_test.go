//go:build linux

package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
)

func TestAppendChunk_FramesOneChunk(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a", "1\r\na\r\n"},
		{"data: x\n\n", "9\r\ndata: x\n\n\r\n"},
		{strings.Repeat("z", 255), "ff\r\n" + strings.Repeat("z", 255) + "\r\n"},
		{strings.Repeat("z", 4096), "1000\r\n" + strings.Repeat("z", 4096) + "\r\n"},
	} {
		if got := string(appendChunk(nil, []byte(tc.in))); got != tc.want {
			t.Errorf("appendChunk(%d bytes) = %q…, want %q…", len(tc.in), got[:min(len(got), 12)], tc.want[:min(len(tc.want), 12)])
		}
	}
}

// shortConn takes at most n bytes of a write, then fails.
type shortConn struct {
	net.Conn
	n   int
	got bytes.Buffer
}

func (c *shortConn) Write(p []byte) (int, error) {
	k := min(len(p), c.n)
	c.got.Write(p[:k])
	if k < len(p) {
		return k, errors.New("broken pipe")
	}
	return k, nil
}

// A chunk the client took only part of is an error, whatever the
// connection said: the body cannot go on after half a chunk.
func TestChunkWriter_APartialChunkIsAnError(t *testing.T) {
	for _, n := range []int{0, 1, 3, 7} {
		c := &shortConn{n: n}
		w := chunkWriter{&clientConn{Conn: c}}
		k, err := w.Write([]byte("hello"))
		if err == nil || k != 0 {
			t.Errorf("client taking %d bytes of a 10-byte chunk: Write = %d, %v; want 0 and an error", n, k, err)
		}
	}
	c := &shortConn{n: 100}
	w := chunkWriter{&clientConn{Conn: c}}
	if k, err := w.Write([]byte("hello")); k != 5 || err != nil || c.got.String() != "5\r\nhello\r\n" {
		t.Errorf("whole write: %d, %v, %q", k, err, c.got.String())
	}
}

// With the stream poller on, a connection whose stream was written past
// the server goes back to it: a request pipelined behind the stream's (in
// the same packet, so the server had it buffered when the stream took the
// connection) and one sent after the stream ended are both answered, in
// order, and every stream parked between its events.
func TestStreamPoller_TheConnectionServesTheRequestsAfterItsStream(t *testing.T) {
	defer SetStreamPoller(streamPollerOn.Load())
	SetStreamPoller(true)
	const events = 5
	backend := serveTCP(t, func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
			for i := range events {
				time.Sleep(20 * time.Millisecond) // the stream parks between events
				_, _ = io.WriteString(c, chunk(fmt.Sprintf(`data: {"choices":[{"index":0,"text":"e%d"}]}`+"\n\n", i)))
			}
			_, _ = io.WriteString(c, chunk("data: [DONE]\n\n")+"0\r\n\r\n")
		}
	})
	base, _ := startGateway(t, singlePool(backend), Deps{Router: newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))})
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	body := `{"model":"m","prompt":"hello","stream":true}`
	req := fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: llb\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	_ = c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, req+req); err != nil { // the second pipelined
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	readStream := func(i int) {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || len(resp.TransferEncoding) == 0 {
			t.Fatalf("answer %d: %d %v, %v", i, resp.StatusCode, resp.TransferEncoding, err)
		}
		for e := range events {
			if !bytes.Contains(b, fmt.Appendf(nil, `"e%d"`, e)) {
				t.Fatalf("answer %d lacks event %d: %q", i, e, b)
			}
		}
		if !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
			t.Fatalf("answer %d does not end with [DONE]: %q", i, b)
		}
	}
	parks := streamPoll.parks.Load()
	readStream(0)
	readStream(1)
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	readStream(2)
	// The first event is read before the head goes out; each stream
	// waits for the other events (the end follows the last at once).
	if n := streamPoll.parks.Load() - parks; n < 3*(events-1) {
		t.Errorf("%d parks for 3 streams of %d events apart; want at least %d", n, events, 3*(events-1))
	}
}

// A stream registers its upstream socket with the poller once: where the
// poller's own read drained the socket, the next park costs no epoll_ctl
// (the registration is edge-triggered for the stream's life), so a stream
// of events one read apart re-arms far fewer times than it parks (the
// one-shot registration before re-armed at every park).
func TestStreamPoller_AStreamRegistersItsSocketOnce(t *testing.T) {
	defer SetStreamPoller(streamPollerOn.Load())
	SetStreamPoller(true)
	const events = 20
	backend := serveTCP(t, func(c net.Conn) {
		if !readRequest(c) {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for i := range events {
			time.Sleep(10 * time.Millisecond) // one event a read: the stream parks between them
			_, _ = io.WriteString(c, chunk(fmt.Sprintf(`data: {"choices":[{"index":0,"text":"e%d"}]}`+"\n\n", i)))
		}
		_, _ = io.WriteString(c, chunk("data: [DONE]\n\n")+"0\r\n\r\n")
	})
	base, _ := startGateway(t, singlePool(backend), Deps{Router: newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))})
	parks, arms := streamPoll.parks.Load(), streamPoll.arms.Load()
	resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hello","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
		t.Fatalf("stream: %d, %v, %q", resp.StatusCode, err, b)
	}
	for i := range events {
		if !bytes.Contains(b, fmt.Appendf(nil, `"e%d"`, i)) {
			t.Fatalf("the stream lacks event %d: %q", i, b)
		}
	}
	p, a := streamPoll.parks.Load()-parks, streamPoll.arms.Load()-arms
	if p < events/2 || a > p/4 {
		t.Errorf("%d parks, %d of them calling epoll_ctl, for a stream of %d events apart; want at least %d parks and at most a quarter re-arming", p, a, events, events/2)
	}
	t.Logf("%d parks, %d epoll_ctl", p, a)
}

// However the backend's writes cut the body — an event across chunks, a
// chunk's size line, data or CRLF across reads — the client gets the
// stream byte for byte, with the poller on or off and migration following
// the stream or not: the poller's step takes whole chunks and whole events
// only and leaves the rest to the relay.
func TestStreamPoller_CutsAcrossReadsKeepTheStreamWhole(t *testing.T) {
	ev := []string{sseEvent(0), sseEvent(1), sseEvent(2), sseEvent(3), "data: [DONE]\n\n"}
	var want strings.Builder
	for _, e := range ev {
		want.WriteString(e)
	}
	frame := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }
	half := len(ev[1]) / 2
	// A backlog: more chunks in one write than a read takes, so a read
	// fills the buffer and cuts a chunk off.
	var backlog, backlogBody strings.Builder
	for i := 0; backlog.Len() < 3*readBufferSize; i++ {
		e := sseEvent(i)
		backlog.WriteString(frame(e))
		backlogBody.WriteString(e)
	}
	for _, tc := range []struct {
		name   string
		writes []string // each written alone, apart
		want   string   // the body when not the events of ev
	}{
		{"an event a chunk", []string{frame(ev[0]), frame(ev[1]), frame(ev[2]), frame(ev[3]), frame(ev[4]) + "0\r\n\r\n"}, ""},
		{"an event across two chunks", []string{frame(ev[0]), frame(ev[1][:half]), frame(ev[1][half:]), frame(ev[2] + ev[3]), frame(ev[4]) + "0\r\n\r\n"}, ""},
		{"a size line across reads", []string{frame(ev[0]), frame(ev[1])[:1], frame(ev[1])[1:], frame(ev[2]), frame(ev[3]) + frame(ev[4]), "0\r\n\r\n"}, ""},
		{"data across reads", []string{frame(ev[0]), frame(ev[1])[:20], frame(ev[1])[20:], frame(ev[2]) + frame(ev[3]), frame(ev[4]) + "0\r\n\r\n"}, ""},
		{"a CRLF across reads", []string{frame(ev[0]), frame(ev[1])[:len(frame(ev[1]))-1], "\n" + frame(ev[2]), frame(ev[3]), frame(ev[4]), "0\r\n", "\r\n"}, ""},
		{"two events and half a chunk", []string{frame(ev[0]), frame(ev[1]) + frame(ev[2])[:30], frame(ev[2])[30:], frame(ev[3]), frame(ev[4]) + "0\r\n\r\n"}, ""},
		{"a backlog over the read buffer", []string{frame(ev[0]), backlog.String(), backlog.String()[:100], backlog.String()[100:], frame(ev[4]) + "0\r\n\r\n"},
			ev[0] + backlogBody.String() + backlogBody.String() + ev[4]},
	} {
		want := want.String()
		if tc.want != "" {
			want = tc.want
		}
		// poller: off, on, or on with every registration that fires
		// relayed in a goroutine of its own (a saturated shard's batch).
		for _, poller := range []string{"on", "apart", "off"} {
			for _, migration := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/poller=%v/migration=%v", tc.name, poller, migration), func(t *testing.T) {
					defer SetStreamPoller(streamPollerOn.Load())
					SetStreamPoller(poller != "off")
					if poller == "apart" {
						defer inlineBatch.Store(inlineBatch.Load())
						inlineBatch.Store(0)
					}
					backend := serveTCP(t, func(c net.Conn) {
						if !readRequest(c) {
							return
						}
						_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
						for _, w := range tc.writes {
							_, _ = io.WriteString(c, w)
							time.Sleep(15 * time.Millisecond)
						}
					})
					cfg := singlePool(backend)
					if !migration {
						cfg.MigrationLimit = 0
					}
					fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
					url, _ := startGateway(t, cfg, Deps{Router: fr})
					c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
					if err != nil {
						t.Fatal(err)
					}
					defer c.Close()
					_ = c.SetDeadline(time.Now().Add(10 * time.Second))
					req := `{"model":"m","prompt":"p","max_tokens":100,"stream":true}`
					_, _ = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", PathCompletions, len(req), req)
					body, _ := readChunks(t, bufio.NewReader(c))
					if body != want {
						t.Fatalf("body %q;\nwant %q", body, want)
					}
					fr.checkTicketsClosed(t, 1)
				})
			}
		}
	}
}
