package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/attack"
)

// Large streams through the real llbd, and clients that do not read them
// (issue 23), in front of a worker that streams as much as it is asked.

// streamWorker is a simulated worker whose completions are SSE streams of
// size bytes (endless when size is 0, until its client goes), with the
// streams and connections it has open.
type streamWorker struct {
	addr    string
	size    int
	streams atomic.Int64 // answers being written
	conns   atomic.Int64 // connections open
}

// startStreamWorker serves on ip:8000 until the test ends.
func startStreamWorker(t *testing.T, ip string, size int) *streamWorker {
	t.Helper()
	w := &streamWorker{addr: ip + ":8000", size: size}
	event := []byte("data: {\"choices\":[{\"text\":\"" + strings.Repeat("x", 16<<10) + "\"}]}\n\n")
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(http.ResponseWriter, *http.Request) {})
	mux.HandleFunc("/v1/completions", func(rw http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.streams.Add(1)
		defer w.streams.Add(-1)
		rw.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(rw)
		for sent := 0; w.size == 0 || sent < w.size; sent += len(event) {
			if _, err := rw.Write(event); err != nil || rc.Flush() != nil {
				return
			}
		}
		_, _ = io.WriteString(rw, "data: [DONE]\n\n")
	})
	srv := &http.Server{Handler: mux, ConnState: func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			w.conns.Add(1)
		case http.StateClosed, http.StateHijacked:
			w.conns.Add(-1)
		}
	}}
	ln, err := net.Listen("tcp", w.addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return w
}

// streamRule posts a single-pool rule on vip:2020 over w and waits for it.
// Its connect bound is 5 s, not 500 ms: a hundred dials at once on a busy
// test machine must not fail the test.
func streamRule(t *testing.T, d *daemon, vip string, w *streamWorker) string {
	t.Helper()
	ip, _, _ := net.SplitHostPort(w.addr)
	d.post(fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":2020,"protocol":"tcp","sel":0,"mode":4,"timeoutMemberConnect":5000},`+
		`"endpoints":[{"endpointIP":%q,"targetPort":8000,"weight":1}]}`, vip, ip))
	d.waitActive(2020)
	return vip + ":2020"
}

// completionRequest is a streamed completion request in HTTP/1.x proto.
func completionRequest(proto string) string {
	body := `{"model":"m","prompt":"p","max_tokens":100000,"stream":true}`
	return fmt.Sprintf("POST /v1/completions %s\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", proto, len(body), body)
}

// sockCount is how many sockets pid has open. Sockets, not every
// descriptor: the process's epoll instances (the departure watch, the
// stream poller) are made on first use and kept for its life, so a count of
// every descriptor would move by them whenever the first stream comes after
// the baseline.
func sockCount(t *testing.T, pid int) int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		// A descriptor closed since ReadDir has no link: not a socket.
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// 100 HTTP/1.0 clients streaming at once cost llbd their relay buffers,
// not their answers: each stream is written as it comes, without a length,
// ended by the close. llbd used to read each whole first (up to 64 MiB):
// 100 streams of 7.2 MB took it from 55 to 713 MB RSS.
func TestE2E_HTTP10StreamsAreRelayedNotHeld(t *testing.T) {
	const clients, size = 100, 4 << 20
	n := newChaosNet()
	w := startStreamWorker(t, n.ip(10), size)
	d := startDataPlane(t)
	vip := streamRule(t, d, n.ip(1), w)
	pid := d.cmd.Process.Pid
	before := rssKB(t, pid)
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if r := rssKB(t, pid); r > peak.Load() {
				peak.Store(r)
			}
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- http10Stream(vip, size)
		}()
	}
	wg.Wait()
	close(stop)
	<-sampled
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("%v\nllbd log:\n%s", err, grepLines(d.log.text(), `"status":5`))
		}
	}
	grew := (peak.Load() - before) >> 10
	t.Logf("%d HTTP/1.0 streams of %d MiB in %v: llbd RSS %d MiB before, peak %d MiB (+%d MiB)",
		clients, size>>20, time.Since(start).Round(time.Millisecond), before>>10, peak.Load()>>10, grew)
	// Held whole, the answers alone are 400 MiB; relayed, each stream holds
	// a 32 KiB buffer.
	if grew > 96 {
		t.Errorf("llbd's RSS grew by %d MiB for %d streams of %d MiB; want under 96 MiB (streams relayed, not held)", grew, clients, size>>20)
	}
}

// http10Stream asks vip for a stream over HTTP/1.0 and reads it to the
// close: no length, no chunks, the whole stream.
func http10Stream(vip string, size int) error {
	c, err := net.Dial("tcp", vip)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.WriteString(c, completionRequest("HTTP/1.0")); err != nil {
		return err
	}
	br := bufio.NewReaderSize(c, 64<<10)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodPost})
	if err != nil {
		return err
	}
	if resp.StatusCode != 200 || resp.ContentLength != -1 || len(resp.TransferEncoding) != 0 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
		return fmt.Errorf("status %d, length %d, transfer encoding %v (%s); want 200 ended by the close", resp.StatusCode, resp.ContentLength, resp.TransferEncoding, b)
	}
	var tail []byte
	got := 0
	buf := make([]byte, 64<<10)
	for {
		k, err := resp.Body.Read(buf)
		got += k
		if tail = append(tail, buf[:k]...); len(tail) > 64 {
			tail = append(tail[:0], tail[len(tail)-64:]...)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("after %d bytes: %w", got, err)
		}
	}
	if got < size || !bytes.HasSuffix(tail, []byte("data: [DONE]\n\n")) {
		return fmt.Errorf("%d bytes ending %q; want at least %d ending with [DONE]", got, tail, size)
	}
	return nil
}

// Clients that stop reading are cut at --client-send-timeout: HTTP/1.1 and
// HTTP/1.0 connections reset (not closed: the unsent answer is dropped at
// once, not left to an orphaned socket), h2c streams reset, every upstream stream
// ended, each counted; llbd's connections back to what they were. Before,
// 50 such clients held 50 + 50 connections until max_stream_duration (a
// day), and one h2c connection with 100 unread streams held 100 upstream
// connections.
func TestE2E_ClientsThatStopReadingAreCutAtTheSendBound(t *testing.T) {
	const h11, h10, h2 = 30, 10, 20
	const bound = 2 * time.Second
	n := newChaosNet()
	w := startStreamWorker(t, n.ip(10), 0)
	d := startDataPlane(t, "LLB_CLIENT_SEND_TIMEOUT="+bound.String())
	vip := streamRule(t, d, n.ip(1), w)
	pid := d.cmd.Process.Pid
	gauge := func() float64 {
		_, text := d.do(http.MethodGet, "/metrics", "")
		return parseProm(text).sum("llb_client_connections")
	}
	cuts := func() float64 {
		_, text := d.do(http.MethodGet, "/metrics", "")
		return parseProm(text).sum("llb_client_send_timeouts_total")
	}
	time.Sleep(200 * time.Millisecond) // the probe's connection settles
	baseSocks, baseConns, baseUp := sockCount(t, pid), gauge(), w.conns.Load()

	// Clients with a small receive buffer that read nothing.
	dialer := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10) })
	}}
	var silent []net.Conn
	t.Cleanup(func() {
		for _, c := range silent {
			c.Close()
		}
	})
	for i := range h11 + h10 {
		c, err := dialer.Dial("tcp", vip)
		if err != nil {
			t.Fatal(err)
		}
		silent = append(silent, c)
		proto := "HTTP/1.1"
		if i >= h11 {
			proto = "HTTP/1.0"
		}
		if _, err := io.WriteString(c, completionRequest(proto)); err != nil {
			t.Fatal(err)
		}
	}
	// One h2c connection, its windows never opened, read (it stays alive).
	bodies := make([][]byte, h2)
	for i := range bodies {
		bodies[i] = []byte(`{"model":"m","prompt":"p","max_tokens":100000,"stream":true}`)
	}
	h2c, resets, err := attack.SilentH2(context.Background(), vip, bodies)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h2c.Close() })

	waitUntil(t, "every request streaming", 20*time.Second, func() bool { return w.streams.Load() == h11+h10+h2 })
	held := time.Now()
	t.Logf("%d streams held: llbd %d sockets (baseline %d), %v client connections (baseline %v), worker %d connections (baseline %d)",
		w.streams.Load(), sockCount(t, pid), baseSocks, gauge(), baseConns, w.conns.Load(), baseUp)
	waitUntil(t, "every upstream stream ended", 20*time.Second, func() bool { return w.streams.Load() == 0 })
	t.Logf("all cut %v after every stream was held (bound %v)", time.Since(held).Round(time.Millisecond), bound)
	waitUntil(t, "every h2c stream reset", 10*time.Second, func() bool { return resets.Load() == h2 })
	waitUntil(t, "every cut counted", 10*time.Second, func() bool { return cuts() == h11+h10+h2 })
	// Back to the baseline: the h2c connection is still open (its client
	// reads it), every other connection is closed on both sides.
	waitUntil(t, "the worker's connections back to the baseline", 10*time.Second, func() bool { return w.conns.Load() <= baseUp })
	waitUntil(t, "llbd's client connections back to the baseline", 10*time.Second, func() bool { return gauge() == baseConns+1 })
	waitUntil(t, "llbd's sockets back to the baseline", 10*time.Second, func() bool { return sockCount(t, pid) <= baseSocks+1 })
	for i, c := range silent {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := io.Copy(io.Discard, c); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("client %d: %d bytes, then %v; want its connection reset by llbd", i, n, err)
		}
	}
}

// grepLines is text's lines that contain sub.
func grepLines(text, sub string) string {
	var b strings.Builder
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
