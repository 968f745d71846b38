//go:build linux

package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/internal/testwait"
	"github.com/llbproject/llb/ladder"
)

// A stream waiting for its next event holds no buffer: not the server's
// request read buffer, not the upstream connection's read buffer, not the
// relay buffer (issue 31: ~75 KiB a stream for its whole life, against
// HAProxy's 12–27 KiB); and one goroutine, its connection's: the departure
// watch that follows it is a registration with the process's watcher, not
// a goroutine of its own. 200 streams are held open between two events
// through the gateway and the heap and goroutines it keeps for them are
// measured; the streams then end whole.
//
// With the stream poller on, a waiting stream holds no goroutine either:
// its upstream socket is a registration with the poller, and the server's
// write buffer and request context went back with the server's goroutine.
func TestStreams_WaitingStreamsHoldNoBuffers(t *testing.T) {
	if testing.Short() {
		t.Skip("holds 200 streams")
	}
	for _, poller := range []bool{false, true} {
		t.Run(fmt.Sprintf("poller=%v", poller), func(t *testing.T) {
			defer SetStreamPoller(streamPollerOn.Load())
			SetStreamPoller(poller)
			testWaitingStreams(t, poller)
		})
	}
}

func testWaitingStreams(t *testing.T, poller bool) {
	const streams = 200
	release := make(chan struct{})
	backend := serveTCP(t, func(c net.Conn) {
		// The request is read with a buffer that is garbage by the time
		// the heap is measured: the backend's memory is not counted.
		if !readRequest(c) {
			return
		}
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		_, _ = io.WriteString(c, chunk(`data: {"choices":[{"index":0,"text":"first"}]}`+"\n\n"))
		<-release
		_, _ = io.WriteString(c, chunk(`data: {"choices":[{"index":0,"text":"second"}]}`+"\n\n"))
		_, _ = io.WriteString(c, chunk("data: [DONE]\n\n")+"0\r\n\r\n")
	})
	base, _ := startGateway(t, singlePool(backend), Deps{Router: newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))})
	addr := strings.TrimPrefix(base, "http://")

	heap := func() (inuse, stacks uint64) {
		// Two collections: pooled buffers nobody holds are dropped.
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse, m.StackInuse
	}
	before, stacksBefore := heap()
	goroutines := runtime.NumGoroutine()
	watched := departures.count()
	body := `{"model":"m","prompt":"hello","stream":true}`
	req := fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: llb\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	conns := make([]net.Conn, streams)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
	}
	// Every stream has its first event: the gateway relayed it and waits
	// for the next.
	got := make([][]byte, streams)
	var buf [512]byte
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		for !bytes.Contains(got[i], []byte("first")) {
			n, err := c.Read(buf[:])
			if err != nil {
				t.Fatalf("stream %d before its first event: %v (read %q)", i, err, got[i])
			}
			got[i] = append(got[i], buf[:n]...)
		}
	}
	// Every stream is watched for its client's departure (from
	// clientWatchDelay on).
	testwait.Eventually(t, "every stream watched", func() bool { return departures.count()-watched >= streams })
	// The backend's handler is one goroutine a stream; the gateway's
	// connection another. A departure watch of its own would be a third.
	// Parked with the poller, the gateway's goroutine is gone too.
	want := 2.0
	if poller {
		want = 1
		testwait.Eventually(t, "every stream parked", func() bool { return streamPoll.count() >= streams })
	}
	if g := float64(runtime.NumGoroutine()-goroutines) / streams; g > want+0.5 {
		t.Errorf("goroutines per waiting stream: %.2f (the backend's one included); want %v", g, want)
	}
	inuse, stacks := heap()
	perStream := (int64(inuse) - int64(before)) / streams
	// The goroutine stacks are outside the heap: the relay's parked frame
	// and the backend's handler (the test's own, in both modes).
	stackPerStream := (int64(stacks) - int64(stacksBefore)) / streams
	t.Logf("heap per waiting stream: %d bytes (the test's own connections and read-back included); goroutine stacks per waiting stream: %d bytes (the test backend's included)", perStream, stackPerStream)
	if poller && perStream > 16<<10 {
		// Without the server's 4 KiB write buffer and its request context
		// (the exchange's request and response are copied out of it).
		t.Errorf("heap per stream parked between events: %d bytes; want at most 16 KiB", perStream)
	}
	// The server's request read buffer (16 KiB), the upstream read buffer
	// (16 KiB) and the relay buffer (32 KiB) held per stream were 64 KiB
	// of it; what is left is the server's 4 KiB write buffer, the
	// exchange, the request context and the connections.
	if perStream > 32<<10 {
		t.Errorf("heap per stream waiting between events: %d bytes; want at most 32 KiB (no read or relay buffer held)", perStream)
	}

	close(release)
	for i, c := range conns {
		rest, err := io.ReadAll(bufio.NewReader(&deadlineReader{c}))
		got[i] = append(got[i], rest...)
		if err != nil || !bytes.Contains(got[i], []byte("second")) || !bytes.Contains(got[i], []byte("[DONE]")) || !bytes.HasSuffix(got[i], []byte("0\r\n\r\n")) {
			t.Fatalf("stream %d did not end whole: %v, %q", i, err, got[i])
		}
	}
}

// deadlineReader reads a connection until its last chunk, within its
// read deadline.
type deadlineReader struct{ c net.Conn }

func (r *deadlineReader) Read(p []byte) (int, error) {
	n, err := r.c.Read(p)
	if n > 0 && bytes.HasSuffix(p[:n], []byte("0\r\n\r\n")) {
		return n, io.EOF
	}
	return n, err
}

// readRequest reads one request head and its Content-Length body.
func readRequest(c net.Conn) bool {
	br := bufio.NewReaderSize(c, 1024)
	n := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return false
		}
		if v, ok := strings.CutPrefix(strings.ToLower(line), "content-length:"); ok {
			_, _ = fmt.Sscan(strings.TrimSpace(v), &n)
		}
		if line == "\r\n" {
			break
		}
	}
	_, err := br.Discard(n)
	return err == nil
}

// chunk frames s as one HTTP/1.1 chunk.
func chunk(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }
