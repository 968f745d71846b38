package gateway

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// clientConn is one accepted client connection, as the HTTP/1.1 server
// (fasthttp) sees it. It carries what is per connection rather than per
// request: the client's address strings, a context that ends when the
// client leaves or the listener cuts, the exchange in progress (so a cut
// or a departure can abort its upstream legs) and the departure watch.
//
// Concurrency: Read/Write belong to the serving goroutine; mu guards x and
// the watch state, which the watch callback and Listener cuts also touch.
type clientConn struct {
	net.Conn
	// prefix holds the bytes the protocol sniff read; Read returns them
	// first.
	prefix []byte
	raw    syscall.RawConn // nil when the departure watch is unsupported
	remote string          // ip:port
	ip     string
	ctx    context.Context
	cancel context.CancelCauseFunc
	idle   atomic.Bool // between requests (fasthttp's StateIdle)

	mu        sync.Mutex
	x         *exchange // the exchange in progress, nil between requests
	watching  bool      // the watch callback is blocked in waitPeerGone
	watchOff  bool      // the exchange ended: the callback must not watch
	watchDone chan struct{}
	timer     *time.Timer // starts the watch clientWatchDelay into an exchange
}

// clientWatchDelay is how long an exchange runs before its client
// connection is watched for a departure. A watch is a goroutine blocked
// on the socket (net/http keeps one per connection at all times); starting
// it only for exchanges that outlive this delay keeps short requests free
// of it, and an inference request that runs longer is cancelled within
// microseconds of its client leaving.
const clientWatchDelay = 200 * time.Millisecond

// h2Preface is the start of the HTTP/2 connection preface (RFC 9113 §3.4):
// a connection that opens with it speaks h2c with prior knowledge.
const h2Preface = "PRI * HTTP/2.0"

func newClientConn(c net.Conn, base context.Context) *clientConn {
	cc := &clientConn{Conn: c, remote: c.RemoteAddr().String(), watchDone: make(chan struct{}, 1)}
	cc.ip = cc.remote
	if host, _, err := net.SplitHostPort(cc.remote); err == nil {
		cc.ip = host
	}
	if peerWatchSupported {
		if sc, ok := c.(syscall.Conn); ok {
			cc.raw, _ = sc.SyscallConn()
		}
	}
	cc.ctx, cc.cancel = context.WithCancelCause(base)
	return cc
}

// Read implements net.Conn, returning the sniffed bytes first.
func (cc *clientConn) Read(p []byte) (int, error) {
	if len(cc.prefix) > 0 {
		n := copy(p, cc.prefix)
		cc.prefix = cc.prefix[n:]
		return n, nil
	}
	return cc.Conn.Read(p)
}

// sniffH2 reads the first bytes of the connection and reports whether they
// are the HTTP/2 preface. It reads no further than it must to tell, and
// keeps what it read for the server that takes the connection.
func (cc *clientConn) sniffH2(timeout time.Duration) (bool, error) {
	buf := make([]byte, len(h2Preface))
	_ = cc.Conn.SetReadDeadline(time.Now().Add(timeout))
	n := 0
	for n < len(buf) {
		m, err := cc.Conn.Read(buf[n:])
		n += m
		cc.prefix = buf[:n]
		if !bytes.HasPrefix([]byte(h2Preface), buf[:n]) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	return true, nil
}

// begin makes x the connection's exchange and arms the departure watch.
func (cc *clientConn) begin(x *exchange) {
	cc.mu.Lock()
	cc.x, cc.watchOff = x, false
	cc.mu.Unlock()
	if cc.raw == nil {
		return
	}
	if cc.timer == nil {
		cc.timer = time.AfterFunc(clientWatchDelay, cc.watch)
	} else {
		cc.timer.Reset(clientWatchDelay)
	}
}

// end detaches the exchange and stops the watch, waiting for a running
// watch callback to return, so the server can read the next request.
func (cc *clientConn) end() {
	if cc.raw == nil || cc.timer.Stop() {
		cc.mu.Lock()
		cc.x = nil
		cc.mu.Unlock()
		return
	}
	// The callback started (or ran): stop it and wait for it.
	cc.mu.Lock()
	cc.watchOff, cc.x = true, nil
	if cc.watching {
		_ = cc.Conn.SetReadDeadline(aLongTimeAgo) // wakes waitPeerGone
	}
	cc.mu.Unlock()
	<-cc.watchDone
}

// watch is the timer callback: it blocks until the client leaves (then
// aborts the exchange) or the exchange ends.
func (cc *clientConn) watch() {
	defer func() { cc.watchDone <- struct{}{} }()
	cc.mu.Lock()
	if cc.watchOff || cc.x == nil {
		cc.mu.Unlock()
		return
	}
	cc.watching = true
	_ = cc.Conn.SetReadDeadline(time.Time{}) // the request-read bound no longer applies
	cc.mu.Unlock()
	gone := waitPeerGone(cc.raw)
	cc.mu.Lock()
	cc.watching = false
	if gone && !cc.watchOff && cc.x != nil { // under mu: the exchange cannot end meanwhile
		cc.x.abort(causeClient, errClientGone)
	}
	cc.mu.Unlock()
}

// cut aborts the exchange in progress (cause errCut) and closes the
// connection: the listener is stopping and will not wait any longer.
func (cc *clientConn) cut() {
	cc.mu.Lock()
	if cc.x != nil { // held under mu: the exchange cannot end meanwhile
		cc.x.abort(causeCut, errCut)
	}
	cc.mu.Unlock()
	cc.cancel(errCut)
	_ = cc.Conn.Close()
}

// aLongTimeAgo is a deadline in the past: setting it wakes a blocked read
// or write at once.
var aLongTimeAgo = time.Unix(1, 0)
