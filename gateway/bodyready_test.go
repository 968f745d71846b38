package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
)

// errWouldWait is what the connection under a ready test answers a read
// that would have waited for more bytes.
var errWouldWait = errors.New("read would wait")

// onceReader returns its bytes in one read, then errWouldWait.
type onceReader struct {
	b    []byte
	done bool
}

func (r *onceReader) Read(p []byte) (int, error) {
	if r.done {
		return 0, errWouldWait
	}
	r.done = true
	return copy(p, r.b), nil
}

func TestBodyReader_ReadyNeverPromisesAReadThatWaits(t *testing.T) {
	tests := []struct {
		name    string
		framing int
		give    string // the buffered bytes after the head
		room    int
		want    string // what one Read and then the ready ones take
	}{
		{"whole chunks", framingChunked, "3\r\nabc\r\n2\r\nde\r\n", 64, "abcde"},
		{"a chunk without its CRLF", framingChunked, "3\r\nabc\r\n2\r\nde", 64, "abc"},
		{"a chunk cut", framingChunked, "3\r\nabc\r\n4\r\nde", 64, "abcde"},
		{"a size line cut", framingChunked, "3\r\nabc\r\n2", 64, "abc"},
		{"a size line alone", framingChunked, "3\r\nabc\r\n2\r\n", 64, "abc"},
		{"the last chunk", framingChunked, "3\r\nabc\r\n0\r\n\r\n", 64, "abc"},
		{"no room", framingChunked, "3\r\nabc\r\n2\r\nde\r\n", 3, "abc"},
		{"room for part of a chunk", framingChunked, "3\r\nabc\r\n4\r\ndefg\r\n", 5, "abcde"},
		{"a bad size line", framingChunked, "3\r\nabc\r\nzz\r\n", 64, "abc"},
		{"a length", framingLength, "abcdef", 64, "abcdef"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bodyReader{c: &upConn{br: bufio.NewReaderSize(&onceReader{b: []byte(tt.give)}, 64)}, framing: tt.framing, left: int64(len(tt.give))}
			buf := make([]byte, tt.room)
			n, err := r.Read(buf)
			if err != nil {
				t.Fatalf("first read: %v", err)
			}
			for err == nil && r.ready(len(buf)-n) {
				var k int
				k, err = r.Read(buf[n:])
				n += k
			}
			if errors.Is(err, errWouldWait) {
				t.Fatalf("ready promised a read that waited (read %q)", buf[:n])
			}
			if got := string(buf[:n]); got != tt.want {
				t.Errorf("read %q; want %q", got, tt.want)
			}
		})
	}
}

// sseEvent is one completion chunk of a stream.
func sseEvent(i int) string {
	return `data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"t` +
		strconv.Itoa(i) + `","logprobs":null,"finish_reason":null}]}` + "\n\n"
}

// backlogBackend answers each stream as a backend whose relay fell behind:
// one event, then, once the client has read it, many events at once, each
// its own chunk. It serves requests on a connection until it closes.
func backlogBackend(first chan<- struct{}, more <-chan struct{}, events int) func(net.Conn) {
	return func(c net.Conn) {
		br := bufio.NewReader(c)
		for {
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, req.Body)
			chunk := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+chunk(sseEvent(0)))
			first <- struct{}{}
			<-more
			var b strings.Builder
			for i := 1; i < events; i++ {
				b.WriteString(chunk(sseEvent(i)))
			}
			b.WriteString(chunk("data: [DONE]\n\n") + "0\r\n\r\n")
			_, _ = io.WriteString(c, b.String())
		}
	}
}

// readChunks reads a chunked response from br: its body and its chunks.
func readChunks(t *testing.T, br *bufio.Reader) (body string, chunks int) {
	t.Helper()
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the head: %v", err)
		}
		if line == "\r\n" {
			break
		}
	}
	var b strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading a chunk size: %v (body so far %q)", err, b.String())
		}
		size, err := strconv.ParseInt(strings.TrimSpace(line), 16, 64)
		if err != nil {
			t.Fatalf("chunk size line %q", line)
		}
		data := make([]byte, size+2)
		if _, err := io.ReadFull(br, data); err != nil {
			t.Fatalf("reading a chunk: %v", err)
		}
		if size == 0 {
			return b.String(), chunks
		}
		b.Write(data[:size])
		chunks++
	}
}

func TestStream_EventsBufferedTogetherGoOutInOneChunk(t *testing.T) {
	const events = 40
	var want strings.Builder
	for i := range events {
		want.WriteString(sseEvent(i))
	}
	want.WriteString("data: [DONE]\n\n")
	req := `{"model":"m","prompt":"p","max_tokens":100,"stream":true}`
	for _, migration := range []bool{true, false} {
		t.Run(fmt.Sprintf("migration %v", migration), func(t *testing.T) {
			first, more := make(chan struct{}, 2), make(chan struct{})
			cfg := singlePool(serveTCP(t, backlogBackend(first, more, events)))
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
			br := bufio.NewReader(c)
			// Twice on one connection: the stream's end leaves it ready
			// for the next request.
			for n := range 2 {
				_, _ = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", PathCompletions, len(req), req)
				<-first
				if n == 0 {
					close(more)
				}
				body, chunks := readChunks(t, br)
				if body != want.String() {
					t.Fatalf("request %d: body %q;\nwant %q", n, body, want.String())
				}
				// The first event, then the backlog: one chunk, or two
				// should a read end inside it. One chunk per event was the
				// relay before.
				if chunks > 3 {
					t.Errorf("request %d: %d chunks for %d events; want the backlog in one or two", n, chunks, events+1)
				}
			}
			fr.checkTicketsClosed(t, 2)
		})
	}
	t.Run("HTTP/1.0", func(t *testing.T) {
		first, more := make(chan struct{}, 1), make(chan struct{})
		close(more)
		fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
		url, _ := startGateway(t, singlePool(serveTCP(t, backlogBackend(first, more, events))), Deps{Router: fr})
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		_, _ = fmt.Fprintf(c, "POST %s HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", PathCompletions, len(req), req)
		raw, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("reading until the close: %v", err)
		}
		_, body, ok := strings.Cut(string(raw), "\r\n\r\n")
		if !ok || body != want.String() {
			t.Fatalf("answer %q; want the head, then the stream unframed until the close", raw)
		}
		fr.checkTicketsClosed(t, 1)
	})
}
