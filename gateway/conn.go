package gateway

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
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
	// prefix holds the bytes the protocol sniff or readFirst read; Read
	// returns them first. early is readFirst's pooled buffer under prefix,
	// given back once prefix is read.
	prefix []byte
	early  *[]byte
	raw    syscall.RawConn // nil when the departure watch is unsupported
	// first is readFirst's read callback and fbp, fn, ferr its results,
	// made once per connection: a closure per request would be four
	// allocations per request.
	first  func(fd uintptr) bool
	fbp    *[]byte
	fn     int
	ferr   error
	remote string // ip:port
	ip     string
	ctx    context.Context
	cancel context.CancelCauseFunc
	idle   atomic.Bool // between requests (fasthttp's StateIdle)

	// The read deadline, armed only when a read is to wait (armRead): the
	// HTTP/1.1 server sets one up to three times a request (the idle
	// bound, the head's, the body's), and a request that arrived whole in
	// one read waits under none of them. rd is the deadline asked for last,
	// rdArmed the socket's, rdSlack how much later than asked it may fire.
	// lazyRead is set once the HTTP/1.1 server has the connection; the h2c
	// server, which may move a deadline from another goroutine, and the
	// gateway's own code (the sniff, a hijacked stream) set theirs at once
	// (setReadDeadline, SetDeadline). The reading goroutine only.
	rd, rdArmed time.Time
	rdSlack     time.Duration
	lazyRead    bool

	// Body budget and connection limit (serving goroutine only, but for
	// closed and the limit's slot, released once by Close).
	//
	// budget and reserved are the body bytes the request being read or
	// served holds (released when the connection goes idle or closes);
	// refused marks a request the budget refused at its head; linger makes
	// Close wait for the client's unread input (an answer sent before the
	// body was read).
	budget   *BodyBudget
	reserved int64
	refused  bool
	linger   bool
	limit    *ConnLimit // nil: no connection limit
	closed   atomic.Bool

	// send is the send bound on the connection's writes (sendbound.go;
	// the writing goroutine only).
	send sendClock
	// hijacked is closed when an HTTP/1.0 stream written past the server
	// is over (stream.go, writeUntilClose); nil when none was.
	hijacked chan struct{}
	// handoff is set by a request whose stream is written past the server
	// (relayHijacked): the listener closes it once the server's goroutine
	// let go of the connection, and the stream then hands the connection
	// back with rejoin (the server again, or the listener's end of it).
	handoff chan struct{}
	rejoin  func(cc *clientConn, keep bool)
	// handing is the exchange whose stream a hijack handler is to write
	// (relayUntilClose, relayHijacked), until the server hands the
	// connection over; serverHijacked tells that it did (connState). The
	// server's goroutine only.
	handing        *exchange
	serverHijacked bool

	mu       sync.Mutex
	x        *exchange // the exchange in progress, nil between requests
	watchID  uint64    // the departure watch's registration (departures), 0: none
	watchOff bool      // the exchange ended: the callback must not watch
	// timer starts the watch clientWatchDelay into an exchange; timerSet
	// tells that it is pending. An exchange that ends leaves it pending
	// and the next one reuses it (watch re-arms it for that exchange's own
	// delay): a keep-alive connection's short requests cost no timer
	// update each (two, Reset and Stop, cost 0.2–2 µs a request here),
	// the timer fires once per clientWatchDelay at most.
	timer    *time.Timer
	timerSet bool
}

// clientWatchDelay is how long an exchange runs before its client
// connection is watched for a departure. A watch is a registration with the
// process's departure watcher (departures_linux.go: two system calls, no
// goroutine); starting it only for exchanges that outlive this delay keeps
// short requests free of it, and an inference request that runs longer is
// cancelled within microseconds of its client leaving.
const clientWatchDelay = 200 * time.Millisecond

// h2Preface is the start of the HTTP/2 connection preface (RFC 9113 §3.4):
// a connection that opens with it speaks h2c with prior knowledge.
const h2Preface = "PRI * HTTP/2.0"

func newClientConn(c net.Conn, base context.Context) *clientConn {
	cc := &clientConn{Conn: c, remote: c.RemoteAddr().String()}
	cc.ip = cc.remote
	if host, _, err := net.SplitHostPort(cc.remote); err == nil {
		cc.ip = host
	}
	if peerWatchSupported {
		if sc, ok := c.(syscall.Conn); ok {
			cc.raw, _ = sc.SyscallConn()
			cc.first = cc.firstStep
		}
	}
	cc.ctx, cc.cancel = context.WithCancelCause(base)
	return cc
}

// Close implements net.Conn: it closes the connection once (lingering
// first when an answer went out before the request was read whole) and
// gives back the connection's slot in the connection limit. Both servers
// close the connections they serve through it; cuts close cc.Conn directly
// and leave the slot to this.
func (cc *clientConn) Close() error {
	if !cc.closed.CompareAndSwap(false, true) {
		return nil
	}
	defer waves.closed()
	defer cc.limit.release()
	cc.mu.Lock()
	departures.remove(cc) // before the descriptor can be another's
	if cc.timerSet {
		cc.timer.Stop()
		cc.timerSet = false
	}
	cc.mu.Unlock()
	if cc.linger {
		lingerClose(cc.Conn, lingerTimeout, lingerMaxBytes)
		return nil
	}
	return cc.Conn.Close()
}

// reserve takes n bytes of the body budget b for the request whose head
// just arrived, and reports whether they fit. A refused request is marked
// (refused) for the error handler and the handler, which answer it 503.
func (cc *clientConn) reserve(b *BodyBudget, n int64) bool {
	cc.endRequest() // a previous request's reservation, should one be left
	if !b.Reserve(n) {
		cc.refused = true
		return false
	}
	cc.budget, cc.reserved = b, n
	return true
}

// trimReservation shrinks the request's reservation to the body actually
// read (a chunked body reserved the rule's whole limit).
func (cc *clientConn) trimReservation(n int64) {
	if n < cc.reserved {
		cc.budget.Release(cc.reserved - n)
		cc.reserved = n
	}
}

// endRequest releases the request's body reservation: its answer is
// written (the connection went idle) or the connection is closing.
func (cc *clientConn) endRequest() {
	if cc.reserved > 0 {
		cc.budget.Release(cc.reserved)
	}
	cc.budget, cc.reserved, cc.refused = nil, 0, false
}

// Read implements net.Conn, returning the sniffed or early-read bytes
// first.
func (cc *clientConn) Read(p []byte) (int, error) {
	if len(cc.prefix) > 0 {
		n := copy(p, cc.prefix)
		cc.prefix = cc.prefix[n:]
		if len(cc.prefix) == 0 && cc.early != nil {
			earlyReads.Put(cc.early)
			cc.early = nil
		}
		return n, nil
	}
	if len(p) == 1 && cc.raw != nil {
		return cc.readFirst(p)
	}
	cc.armRead()
	return cc.Conn.Read(p)
}

// SetReadDeadline implements net.Conn. While the HTTP/1.1 server reads the
// connection the deadline is armed only when a read is to wait (armRead);
// otherwise at once.
func (cc *clientConn) SetReadDeadline(t time.Time) error {
	if cc.lazyRead {
		cc.rd = t
		return nil
	}
	return cc.setReadDeadline(t)
}

// setReadDeadline arms t on the socket at once.
func (cc *clientConn) setReadDeadline(t time.Time) error {
	cc.rd, cc.rdArmed, cc.rdSlack = t, t, 0
	return cc.Conn.SetReadDeadline(t)
}

// armRead arms the read deadline asked for last before a read that may
// wait, with a slack of a 64th of the time left (at most a second): the
// deadline armed is kept when it falls within the slack after the one
// asked for, so a busy keep-alive connection, whose idle bound moves with
// every request, re-arms it about once a second rather than per request.
func (cc *clientConn) armRead() {
	t := cc.rd
	switch {
	case t.IsZero():
		if cc.rdArmed.IsZero() {
			return
		}
		cc.rdSlack = 0
	case !cc.rdArmed.IsZero() && !cc.rdArmed.Before(t) && cc.rdArmed.Sub(t) <= cc.rdSlack:
		return
	default:
		cc.rdSlack = min(max(time.Until(t)/64, 0), time.Second)
		t = t.Add(cc.rdSlack)
	}
	cc.rdArmed = t
	_ = cc.Conn.SetReadDeadline(t)
}

// earlyReads pools the buffers of readFirst, the size of the server's
// request read buffer.
var earlyReads = sync.Pool{New: func() any { b := make([]byte, readBufferSize); return &b }}

// readFirst reads a request's first byte. The HTTP/1.1 server holds no
// buffer for a connection between requests (ReduceMemoryUsage): it reads
// the first byte alone, then takes its read buffer for the rest, which
// would cost a second system call per request. readFirst waits holding no
// buffer too, then reads whatever arrived in one system call into a pooled
// buffer, returns its first byte and keeps the rest for the server's next
// Read (which gives the buffer back).
func (cc *clientConn) readFirst(p []byte) (int, error) {
	cc.armRead()
	err := cc.raw.Read(cc.first)
	bp, n, rerr := cc.fbp, cc.fn, cc.ferr
	cc.fbp, cc.ferr = nil, nil
	switch {
	case err != nil:
		if bp != nil {
			earlyReads.Put(bp)
		}
		return 0, err // the deadline, or a closed connection
	case rerr != nil:
		earlyReads.Put(bp)
		return 0, os.NewSyscallError("read", rerr)
	case n <= 0:
		earlyReads.Put(bp)
		return 0, io.EOF
	}
	p[0] = (*bp)[0]
	if n == 1 {
		earlyReads.Put(bp)
		return 1, nil
	}
	cc.early, cc.prefix = bp, (*bp)[1:n]
	return 1, nil
}

// firstStep is readFirst's callback (readPooled).
func (cc *clientConn) firstStep(fd uintptr) bool {
	bp, n, ok, err := readPooled(fd)
	if ok {
		cc.fbp, cc.fn, cc.ferr = bp, n, err
	}
	return ok
}

// readPooled is a raw connection's read callback that waits holding no
// buffer: one read (retried on EINTR) into a buffer from earlyReads, which
// goes back to the pool when nothing was there (ok false: wait for
// readability) and is the caller's otherwise, whatever the read returned.
func readPooled(fd uintptr) (bp *[]byte, n int, ok bool, err error) {
	bp = earlyReads.Get().(*[]byte)
	for {
		n, err = syscall.Read(int(fd), *bp)
		if err != syscall.EINTR {
			break
		}
	}
	if err == syscall.EAGAIN {
		earlyReads.Put(bp)
		return nil, 0, false, nil
	}
	return bp, n, true, err
}

// writeRaw makes one write of b to the non-blocking socket fd (retried
// when interrupted) and returns how much it took: less than b and EAGAIN
// when its send buffer is full.
func writeRaw(fd uintptr, b []byte) (int, error) {
	for {
		n, err := syscall.Write(int(fd), b)
		if err == syscall.EINTR {
			continue
		}
		return max(n, 0), err
	}
}

// sniffH2 reads the first bytes of the connection and reports whether they
// are the HTTP/2 preface. It reads no further than it must to tell, and
// keeps what it read for the server that takes the connection.
func (cc *clientConn) sniffH2(timeout time.Duration) (bool, error) {
	buf := make([]byte, len(h2Preface))
	_ = cc.setReadDeadline(time.Now().Add(timeout))
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

// serveFast serves one request of the HTTP/1.1 front end (fasthttp) on
// client connection cc. The response is sent by the server after it
// returns; a streamed body ends the exchange when the server has written it.
func (h *Handler) serveFast(rc *fasthttp.RequestCtx, cc *clientConn, stopping bool, pre *ClientError) {
	x := h.begin()
	x.in, x.out, x.ctx = &rc.Request, &rc.Response, cc.ctx
	x.remote, x.ip = cc.remote, cc.ip
	// A large body goes with the exchange, not back to the connection's
	// pooled request (which would keep its buffer for good).
	defer rc.Request.ReleaseBody(maxKeptBodyBuffer)
	if cc.refused {
		// The body budget refused the request at its head (headerReceived):
		// its body is unread, the connection closes after the answer.
		x.api = apiOfPath(x.in.URI().PathOriginal())
		cc.linger = true
		rc.SetConnectionClose()
		x.fail(errBodyBufferFull())
		h.done(x)
		return
	}
	if cc.reserved > 0 {
		cc.trimReservation(int64(len(rc.Request.Body())))
	}
	if pre != nil {
		// No rule on the listener takes the request (ruletable.go).
		x.api = apiOfPath(x.in.URI().PathOriginal())
		x.fail(pre)
		h.done(x)
		return
	}
	x.cc = cc
	cc.begin(x)
	defer func() {
		if p := recover(); p != nil {
			h.recoverPanic(x, p)
			_ = cc.Conn.Close() // no answer: the client sees the connection drop
		}
	}()
	h.serve(x)
	if stopping {
		rc.SetConnectionClose()
	}
	if x.stream != nil {
		// The stream's writes are bounded by the send bound and by the
		// request's deadline: a client that stops reading, or reads too
		// slowly, cannot pin the connection and the upstream leg.
		cc.limitWrites(x.deadline)
		switch {
		case untilClose(rc):
			h.relayUntilClose(rc, cc, x)
		case hijackable(rc, cc, x):
			h.relayHijacked(rc, cc, x)
		default:
			return
		}
		cc.handing = x
		if f := handingHook.Load(); f != nil {
			(*f)(cc)
		}
		return
	}
	// No answer for a cut request, nor for a client taken for gone (it may
	// only have shut its write side): close the connection rather than let
	// the server send its default, an empty 200, for a request nobody
	// served.
	drop := x.aborted || x.status == StatusClientGone
	h.done(x)
	if drop {
		_ = cc.Conn.Close()
	}
}

// begin makes x the connection's exchange and arms the departure watch
// unless its timer is pending already.
func (cc *clientConn) begin(x *exchange) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.x, cc.watchOff = x, false
	if cc.raw == nil || cc.timerSet {
		return
	}
	cc.timerSet = true
	if cc.timer == nil {
		cc.timer = time.AfterFunc(clientWatchDelay, cc.watch)
	} else {
		cc.timer.Reset(clientWatchDelay)
	}
}

// end detaches the exchange and ends the watch, so the server can read the
// next request. The timer stays pending; the callback finds watchOff (or
// the next exchange) and does not watch this one.
func (cc *clientConn) end() {
	cc.limitWrites(time.Time{})
	cc.mu.Lock()
	cc.watchOff, cc.x = true, nil
	departures.remove(cc)
	cc.mu.Unlock()
}

// watch is the timer callback: it registers the connection with the
// departure watcher, which aborts the exchange when the client leaves,
// once the exchange in progress has run clientWatchDelay. An exchange
// younger than that (a later one than the timer was armed for) gets the
// timer re-armed for the rest of its own delay.
func (cc *clientConn) watch() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.watchOff || cc.x == nil || cc.closed.Load() {
		cc.timerSet = false
		return
	}
	if left := clientWatchDelay - time.Since(cc.x.start); left > 0 {
		cc.timer.Reset(left)
		return
	}
	cc.timerSet = false
	if cc.watchID != 0 {
		return
	}
	departures.add(cc)
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

// handingHook, set by tests, runs when a stream's connection is to be
// handed to a hijack handler, before the server hands it over.
var handingHook atomic.Pointer[func(*clientConn)]
