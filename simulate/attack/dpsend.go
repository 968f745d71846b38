package attack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// The send bound under attack. llbd runs the family with
// --client-send-timeout dpSendTimeout (dpLLBDEnv). One case, alone, after
// the other bound cases:
//
//   - non_reader: dpSilentH11 HTTP/1.1 and dpSilentH10 HTTP/1.0 clients
//     with a 16 KiB receive buffer, and one h2c connection with dpSilentH2
//     streams whose flow-control windows it never opens (it reads the
//     connection, so it stays alive), each asking for a long stream and
//     never reading it. Each must be cut — the HTTP/1 connections closed
//     by llbd, the h2c streams reset — within dpSilentWithin (the bound,
//     and the time the sockets take to fill first);
//     llb_client_send_timeouts_total grows by one per stream;
//     loxilb_ai_active_streams goes back to its level before the case (the
//     upstream legs ended); once the h2c client is gone, llbd's file
//     descriptors and goroutines are back near their level before it.
//     Before the bound, such clients held their connections and upstream
//     legs until max_stream_duration (a day).

const (
	// dpSendTimeout is the family's --client-send-timeout.
	dpSendTimeout = 3 * time.Second
	// dpSilentH11, dpSilentH10 and dpSilentH2 are the clients of
	// non_reader: HTTP/1.1 connections, HTTP/1.0 connections, and the
	// streams of one h2c connection.
	dpSilentH11, dpSilentH10, dpSilentH2 = 12, 4, 8
	// dpSilentTokens is each stream's length: about 6.7 MB of events
	// (224 bytes a token), more than the sockets between llbd and a client
	// buffer (llbd's send buffer grows to 4 MiB, tcp_wmem's default
	// maximum). A stream they can hold whole is not a stall: it ends,
	// its upstream leg with it, and the connection idles.
	dpSilentTokens = 30000
	// dpSilentWithin bounds how long after the requests every stream must
	// be cut.
	dpSilentWithin = dpSendTimeout + 30*time.Second
)

// silentBody is a long streamed completion.
func silentBody(i int) []byte {
	return fmt.Appendf(nil, `{"model":"sim-model","prompt":"non-reader %d: tell me everything","max_tokens":%d,"stream":true}`, i, dpSilentTokens)
}

// nonReaderCase runs non_reader.
func (f *dpFamily) nonReaderCase(ctx context.Context) {
	before, _ := f.d.usage(ctx)
	cutsBefore := f.counter(ctx, "llb_client_send_timeouts_total")
	streamsBefore := f.counter(ctx, "loxilb_ai_active_streams")
	start := time.Now()
	dialer := net.Dialer{Timeout: 3 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10) })
	}}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	reqs := make([][]byte, dpSilentH11+dpSilentH10)
	for i := range reqs {
		proto := "HTTP/1.1"
		if i >= dpSilentH11 {
			proto = "HTTP/1.0"
		}
		reqs[i] = reqOpts{proto: proto, body: silentBody(i)}.build(f.vip)
		c, err := dialer.DialContext(ctx, "tcp", f.vip)
		if err != nil {
			f.t.add(-3000-i, "non_reader", defect("cannot connect: %v", err), nil)
			continue
		}
		conns = append(conns, c)
		if _, err := c.Write(reqs[i]); err != nil {
			f.t.add(-3000-i, "non_reader", defect("writing the request: %v", err), nil)
		}
	}
	h2c, resets, h2err := f.silentH2(ctx)
	if h2err != nil {
		f.t.add(-3100, "non_reader", defect("h2c: %v", h2err), nil)
	}
	total := float64(dpSilentH11 + dpSilentH10 + dpSilentH2)
	cuts := func() float64 { return f.counter(ctx, "llb_client_send_timeouts_total") - cutsBefore }
	for cuts() < total && time.Since(start) < dpSilentWithin && ctx.Err() == nil {
		time.Sleep(250 * time.Millisecond)
	}
	took := time.Since(start)
	// Each HTTP/1 client: its connection must be closed by now (what llbd
	// had sent is read, then the end).
	for i, c := range conns {
		i, c := i, c
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.Copy(io.Discard, c)
		o := refused()
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			o = defect("still open %v after the request (%d bytes sent): not cut at the %v send bound", time.Since(start).Round(time.Second), n, dpSendTimeout)
		case err != nil && !errors.Is(err, syscall.ECONNRESET):
			o = defect("read error %v", err)
		}
		f.t.add(-3000-i, "non_reader", o, func() string {
			return fmt.Sprintf("one of %d clients (16 KiB receive buffer) that never read:\nwrite %s", len(conns), quote(reqs[i], 300))
		})
	}
	got := resets.Load()
	for s := range dpSilentH2 {
		o := refused()
		if s >= int(got) {
			o = defect("%d of %d h2c streams reset %v after the requests; want every one, at the %v send bound", got, dpSilentH2, took.Round(time.Second), dpSendTimeout)
		}
		f.t.add(-3200-s, "non_reader", o, func() string {
			return fmt.Sprintf("one h2c connection, %d streamed completions of %d tokens, windows never opened (SETTINGS acked, no WINDOW_UPDATE)", dpSilentH2, dpSilentTokens)
		})
	}
	n := cuts()
	f.t.note("non_reader: %d HTTP/1.1, %d HTTP/1.0 and %d h2c streams never read: %v cut at the %v send bound within %v, %d h2c streams reset",
		dpSilentH11, dpSilentH10, dpSilentH2, n, dpSendTimeout, took.Round(100*time.Millisecond), got)
	f.t.check("non_reader_counted", n == total,
		fmt.Sprintf("llb_client_send_timeouts_total grew by %v for %v streams never read", n, total), "")
	if h2c != nil {
		_ = h2c.Close()
	}
	var streams float64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if streams = f.counter(ctx, "loxilb_ai_active_streams"); streams <= streamsBefore {
			break
		}
	}
	f.t.check("non_reader_streams_ended", streams <= streamsBefore,
		fmt.Sprintf("loxilb_ai_active_streams %v after the case, %v before: upstream legs still held", streams, streamsBefore), "")
	for _, c := range conns {
		_ = c.Close()
	}
	conns = nil
	u, ok := f.d.settle(ctx, before, 8, 40, 20*time.Second)
	f.t.note("non_reader: %v after the case (before it: %v)", u, before)
	f.t.check("non_reader_resources_back", ok,
		fmt.Sprintf("20 s after the case: %v; before it %v (slack 8 fds, 40 goroutines)", u, before), "")
}

// silentH2 opens non_reader's h2c connection.
func (f *dpFamily) silentH2(ctx context.Context) (net.Conn, *atomic.Int64, error) {
	bodies := make([][]byte, dpSilentH2)
	for i := range bodies {
		bodies[i] = silentBody(dpSilentH11 + dpSilentH10 + i)
	}
	return SilentH2(ctx, f.vip, bodies)
}

// SilentH2 opens an h2c connection to vip with one POST
// /v1/completions stream per body, and never opens their flow-control
// windows: a client that never reads its streams. It reads the
// connection (acking the server's SETTINGS, so the connection stays
// alive) and counts the streams the server resets. Close the connection
// to end it.
func SilentH2(ctx context.Context, vip string, bodies [][]byte) (net.Conn, *atomic.Int64, error) {
	var resets atomic.Int64
	c, err := (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, "tcp", vip)
	if err != nil {
		return nil, &resets, err
	}
	out := append([]byte(h2Preface), h2Frame(0x4, 0, 0, nil)...)
	for i, body := range bodies {
		id := uint32(2*i + 1)
		out = append(out, h2Frame(0x1, 0x4, id, h2Headers("/v1/completions", vip))...) // HEADERS, END_HEADERS
		out = append(out, h2Frame(0x0, 0x1, id, body)...)                              // DATA, END_STREAM
	}
	if _, err := c.Write(out); err != nil {
		return c, &resets, err
	}
	go func() {
		br := bufio.NewReader(c)
		for {
			var h [9]byte
			if _, err := io.ReadFull(br, h[:]); err != nil {
				return
			}
			if _, err := io.CopyN(io.Discard, br, int64(h[0])<<16|int64(h[1])<<8|int64(h[2])); err != nil {
				return
			}
			switch {
			case h[3] == 0x4 && h[4]&0x1 == 0: // SETTINGS: ack
				_, _ = c.Write(h2Frame(0x4, 0x1, 0, nil))
			case h[3] == 0x3: // RST_STREAM
				resets.Add(1)
			}
		}
	}()
	return c, &resets, nil
}
