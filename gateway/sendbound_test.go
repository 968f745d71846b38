package gateway

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/internal/testwait"
	"github.com/llbproject/llb/ladder"
)

func TestSendClock_ArmsTheNearerBoundAndSkipsFreshDeadlines(t *testing.T) {
	now := time.Unix(1000, 0)
	c := sendClock{timeout: 64 * time.Second}
	d, set, ok := c.next(now, c.timeout)
	if !ok || !set || !d.Equal(now.Add(64*time.Second)) || !c.bounded {
		t.Fatalf("first write: deadline %v set %v ok %v bounded %v; want now+64s, set, by the send bound", d, set, ok, c.bounded)
	}
	c.armed = d
	if _, set, _ := c.next(now.Add(500*time.Millisecond), c.timeout); set {
		t.Error("re-armed within 1/64 of the bound; want the armed deadline kept")
	}
	if _, set, _ := c.next(now.Add(2*time.Second), c.timeout); !set {
		t.Error("kept a deadline more than 1/64 of the bound stale; want it re-armed")
	}
	c.limit = now.Add(10 * time.Second)
	if d, set, _ := c.next(now.Add(time.Second), c.timeout); !set || !d.Equal(c.limit) || c.bounded {
		t.Errorf("deadline %v set %v bounded %v; want the nearer stream limit", d, set, c.bounded)
	}
	c = sendClock{armed: now}
	if _, set, ok := c.next(now, c.timeout); ok || !set {
		t.Errorf("no bound: set %v ok %v; want the old deadline cleared", set, ok)
	}
}

// endlessStream is a backend answer that streams 64 KiB SSE events until
// its client (llb) goes; gone is closed then.
func endlessStream(gone chan<- struct{}) func(w http.ResponseWriter, r *http.Request, body []byte) {
	event := []byte("data: " + strings.Repeat("x", 64<<10) + "\n\n")
	return func(w http.ResponseWriter, r *http.Request, body []byte) {
		defer close(gone)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for {
			if _, err := w.Write(event); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
	}
}

// A client that stops reading a stream is cut at the send bound: its
// connection reset, the upstream leg ended (reported client-gone), the
// cut counted. Before the bound, only the max stream duration (a day)
// ended such a stream. The cut is a reset, not a close: a graceful close
// left the unsent answer in an orphaned socket that the kernel drops
// silently after its zero-window probes, so a client reading later got
// neither an end nor an error (and an HTTP/1.0 stream, delimited by the
// close, would have read as complete).
func TestSendBound_AClientThatStopsReadingIsCutAtTheBound(t *testing.T) {
	for _, proto := range []string{"HTTP/1.1", "HTTP/1.0"} {
		t.Run(proto, func(t *testing.T) {
			be := newFakeVLLM(t)
			gone := make(chan struct{})
			be.answer = endlessStream(gone)
			fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
			url, l := startGatewayWith(t, singlePool(be.addr()), Options{ClientSendTimeout: 300 * time.Millisecond}, Deps{Router: fr})
			c := rawConn(t, url)
			body := `{"model":"m","prompt":"p","stream":true}`
			if _, err := io.WriteString(c, "POST /v1/completions "+proto+"\r\nHost: x\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			select {
			case <-gone:
			case <-time.After(5 * time.Second):
				t.Fatal("the upstream stream still runs 5 s after its client stopped reading (send bound 300 ms)")
			}
			t.Logf("upstream ended %v after the request", time.Since(start).Round(time.Millisecond))
			fr.waitFinished(t, 1)
			if _, outcomes, _ := fr.snapshot(); len(outcomes) != 1 || outcomes[0].Failure != actors.FailClientGone {
				t.Errorf("outcomes %+v; want the leg reported client-gone", outcomes)
			}
			if n := l.Handler().met.sendTimeouts.Get(); n != 1 {
				t.Errorf("llb_client_send_timeouts_total %d; want 1", n)
			}
			// The client connection is reset: what its own buffer held, then
			// ECONNRESET — not the rest of the answer and a clean end.
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			n, err := io.Copy(io.Discard, c)
			if !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("reading the rest: %d bytes, then %v; want the connection reset by llb", n, err)
			}
		})
	}
}

// The send bound counts from the last byte the client accepted: a write
// that the client takes slowly, in parts, goes on; one it takes nothing of
// fails at the bound, marked stalled and counted. The reader means to pause
// 100 ms between reads against a 300 ms bound; a run in which the machine
// held it for 3/4 of the bound or more is not such a reader, and is run
// again.
func TestSendBound_AWriteGoesOnWhileTheClientTakesBytes(t *testing.T) {
	const bound = 300 * time.Millisecond
	for try := 1; ; try++ {
		server, client := net.Pipe()
		stalls := metrics.NewSet().NewCounter("stalls")
		cc := &clientConn{Conn: server, send: sendClock{timeout: bound, stalls: stalls}}
		longest := make(chan time.Duration, 1)
		go func() {
			var most time.Duration
			defer func() { longest <- most }()
			buf := make([]byte, 1<<10)
			last := time.Now()
			for range 8 {
				time.Sleep(100 * time.Millisecond)
				_, err := io.ReadFull(client, buf)
				most = max(most, time.Since(last))
				last = time.Now()
				if err != nil {
					return
				}
			}
		}()
		start := time.Now()
		n, err := cc.Write(make([]byte, 8<<10))
		took := time.Since(start)
		if err != nil || n != 8<<10 {
			client.Close()
			held := <-longest
			if held < bound*3/4 {
				t.Fatalf("write of 8 KiB taken 1 KiB per 100 ms: %d bytes, %v after %v (the reader's longest pause %v); want it whole (bound %v)", n, err, took, held, bound)
			}
			if try == 5 {
				t.Fatalf("the reader paused %v of a %v bound in each of %d runs; the machine is too loaded for a reader that keeps reading", held, bound, try)
			}
			t.Logf("run %d: the reader was held %v; again", try, held)
			continue
		}
		<-longest
		start = time.Now()
		n, err = cc.Write(make([]byte, 1<<10))
		if took := time.Since(start); !isTimeout(err) || n != 0 || took < bound*5/6 || took > 2*time.Second {
			t.Fatalf("write nobody reads: %d bytes, %v after %v; want a timeout at the %v bound", n, err, took, bound)
		}
		if !cc.send.stalled || stalls.Get() != 1 {
			t.Errorf("stalled %v, counted %d; want the stall marked and counted once", cc.send.stalled, stalls.Get())
		}
		client.Close()
		return
	}
}

// The bound counts from the last byte the client took, not from the start
// of a write that took some: a write whose first bytes went and that then
// stalls fails one bound after the stall (it failed after two).
func TestSendBound_AStallIsCutOneBoundAfterTheLastByteTaken(t *testing.T) {
	server, client := net.Pipe()
	defer client.Close()
	cc := &clientConn{Conn: server, send: sendClock{timeout: time.Second}}
	go func() {
		buf := make([]byte, 512)
		time.Sleep(50 * time.Millisecond)
		_, _ = io.ReadFull(client, buf) // then never again
	}()
	start := time.Now()
	n, err := cc.Write(make([]byte, 8<<10))
	if took := time.Since(start); !isTimeout(err) || n != 512 || took < 900*time.Millisecond || took > 1600*time.Millisecond {
		t.Fatalf("write stalled after 512 bytes at 50 ms: %d bytes, %v after %v; want a timeout about 1 s after the stall (bound 1 s)", n, err, took)
	}
}

// A slow reader whose answer waits on it again and again, each time for
// less than the bound, is never cut by the send bound. The reader means to
// pause 50 ms between reads against a 1 s bound; a run in which the
// machine held it for 3/4 of the bound or more (llb looks for progress
// every eighth of it) is not such a reader, and is run again.
func TestSendBound_ASlowReaderThatKeepsReadingIsNotCut(t *testing.T) {
	be := newFakeVLLM(t)
	const events = 256 // 16 MiB, more than the sockets buffer
	be.answer = func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for i := range events {
			_, _ = w.Write([]byte("data: " + strconv.Itoa(i) + strings.Repeat("x", 64<<10) + "\n\n"))
			_ = rc.Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
	const bound = time.Second
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, l := startGatewayWith(t, singlePool(be.addr()), Options{ClientSendTimeout: bound}, Deps{Router: fr})
	for try := 1; ; try++ {
		cut0 := l.Handler().met.sendTimeouts.Get()
		got, took, longest := readSlowly(t, url)
		cut := l.Handler().met.sendTimeouts.Get() - cut0
		whole := bytes.Contains(got, []byte("data: [DONE]"))
		t.Logf("run %d: read %d bytes in %v, longest pause %v, send timeouts %d", try, len(got), took.Round(time.Millisecond), longest.Round(time.Millisecond), cut)
		switch {
		case whole && cut == 0:
			return
		case longest < bound*3/4:
			t.Fatalf("read %d bytes (the stream's end: %v), llb_client_send_timeouts_total +%d; want the whole stream and no timeout for a reader that never paused %v",
				len(got), whole, cut, longest)
		case try == 5:
			t.Fatalf("the reader paused %v of a %v bound in each of %d runs; the machine is too loaded for a reader that keeps reading", longest, bound, try)
		}
	}
}

// readSlowly streams a completion from url on a raw HTTP/1.1 connection,
// reading 256 KiB every 50 ms (about 3.2 s for 16 MiB), and returns what it
// read, how long it took and the longest time between two reads' ends.
func readSlowly(t *testing.T, url string) (got []byte, took, longest time.Duration) {
	t.Helper()
	c := rawConn(t, url)
	defer c.Close()
	body := `{"model":"m","prompt":"p","stream":true}`
	if _, err := io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var out bytes.Buffer
	buf := make([]byte, 256<<10)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for last := start; ; {
		n, err := io.ReadFull(c, buf)
		longest = max(longest, time.Since(last))
		last = time.Now()
		out.Write(buf[:n])
		if err != nil {
			return out.Bytes(), time.Since(start), longest
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// h2c: every stream of a connection whose window stays shut is reset at
// the send bound and its upstream leg ends; a connection takes at most
// maxH2Streams streams at once (it took 250, each holding an upstream
// connection; issue 23).
func TestSendBound_UnreadH2CStreamsAreResetAtTheBound(t *testing.T) {
	be := newFakeVLLM(t)
	var running atomic.Int64
	ended := make(chan struct{}, 16)
	event := []byte("data: " + strings.Repeat("x", 64<<10) + "\n\n")
	be.answer = func(w http.ResponseWriter, r *http.Request, body []byte) {
		running.Add(1)
		defer func() { running.Add(-1); ended <- struct{}{} }()
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for {
			if _, err := w.Write(event); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, l := startGatewayWith(t, singlePool(be.addr()), Options{ClientSendTimeout: 300 * time.Millisecond}, Deps{Router: fr})
	c := rawConn(t, url)
	// The preface and an empty SETTINGS: the client's windows stay at
	// 65 535 bytes and are never opened further.
	hdrs := h2RequestHeaders("/v1/completions", strings.TrimPrefix(url, "http://"))
	req := append([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), h2TestFrame(0x4, 0, 0, nil)...)
	const streams = 5
	body := []byte(`{"model":"m","prompt":"p","stream":true}`)
	for i := range streams {
		id := uint32(2*i + 1)
		req = append(req, h2TestFrame(0x1, 0x4, id, hdrs)...) // HEADERS, END_HEADERS
		req = append(req, h2TestFrame(0x0, 0x1, id, body)...) // DATA, END_STREAM
	}
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	// Read the frames (the socket stays drained; only the windows are
	// shut): the server's SETTINGS, then the answers and resets.
	frames := make(chan h2TestFrameHead, 1024)
	go func() {
		defer close(frames)
		br := bufio.NewReader(c)
		for {
			var h [9]byte
			if _, err := io.ReadFull(br, h[:]); err != nil {
				return
			}
			n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
			p := make([]byte, n)
			if _, err := io.ReadFull(br, p); err != nil {
				return
			}
			if h[3] == 0x4 && h[4]&0x1 == 0 {
				_, _ = c.Write(h2TestFrame(0x4, 0x1, 0, nil)) // SETTINGS ACK
			}
			frames <- h2TestFrameHead{typ: h[3], flags: h[4], stream: binary.BigEndian.Uint32(h[5:]) & 0x7fffffff, payload: p}
		}
	}()
	maxStreams := -1
	resets := map[uint32]bool{}
	deadline := time.After(5 * time.Second)
	for len(resets) < streams {
		select {
		case f, ok := <-frames:
			if !ok {
				t.Fatalf("connection closed after %d of %d resets; want the streams reset, the connection kept", len(resets), streams)
			}
			switch {
			case f.typ == 0x4 && f.flags&0x1 == 0: // SETTINGS
				for p := f.payload; len(p) >= 6; p = p[6:] {
					if binary.BigEndian.Uint16(p) == 0x3 {
						maxStreams = int(binary.BigEndian.Uint32(p[2:]))
					}
				}
			case f.typ == 0x3: // RST_STREAM
				resets[f.stream] = true
			}
		case <-deadline:
			t.Fatalf("%d of %d streams reset 5 s after the requests (send bound 300 ms); want every one", len(resets), streams)
		}
	}
	if maxStreams != maxH2Streams {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS %d; want %d", maxStreams, maxH2Streams)
	}
	for range streams {
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d upstream streams still running after the resets; want none", running.Load())
		}
	}
	fr.waitFinished(t, streams)
	testwait.Eventually(t, "every reset counted", func() bool { return l.Handler().met.sendTimeouts.Get() == streams })
}

// h2TestFrameHead is one frame read back.
type h2TestFrameHead struct {
	typ, flags byte
	stream     uint32
	payload    []byte
}

// h2TestFrame is one HTTP/2 frame.
func h2TestFrame(typ, flags byte, stream uint32, payload []byte) []byte {
	b := []byte{byte(len(payload) >> 16), byte(len(payload) >> 8), byte(len(payload)), typ, flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[5:], stream)
	return append(b, payload...)
}

// h2RequestHeaders is an HPACK block (literals without indexing) for a
// POST of JSON to path.
func h2RequestHeaders(path, host string) []byte {
	var b []byte
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path}, {":authority", host}, {"content-type", "application/json"}} {
		b = append(b, 0x00, byte(len(kv[0])))
		b = append(b, kv[0]...)
		b = append(b, byte(len(kv[1])))
		b = append(b, kv[1]...)
	}
	return b
}
