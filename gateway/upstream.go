package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"
)

// llb's HTTP/1.1 client to a rule's endpoints: one pool of keep-alive
// connections per endpoint, no goroutine per connection or per request.
//
// net/http's Transport runs two goroutines per connection and allocates
// ~40 objects per round trip; fasthttp's HostClient has neither cost but
// cannot be cancelled mid-request (no context), which the data plane needs
// when a client leaves or a listener is cut. So llb keeps its own pool and
// uses fasthttp only for the wire format: the request head is written by
// headers.go in one writev with the body, the response head is parsed by
// fasthttp.ResponseHeader, and bodies are framed by bodyReader. A request
// in flight is cancelled by setting a deadline in the past on its
// connection (exchange.abort), which wakes the blocked read at once; the
// connection is then closed, so the backend sees the client go.

// Upstream pool defaults.
const (
	// DefaultMaxIdleConnsPerHost keeps enough warm connections per endpoint
	// for a busy worker.
	DefaultMaxIdleConnsPerHost = 256
	// DefaultIdleConnTimeout closes upstream connections idle this long.
	DefaultIdleConnTimeout = 90 * time.Second
	// staleCheckAfter: a connection idle longer than this is checked for a
	// close by the backend (one non-blocking peek) before it is reused;
	// uvicorn, which serves vLLM, closes idle keep-alive connections after
	// 5 s.
	staleCheckAfter = time.Second
	// upReadBufSize is the read buffer of an upstream connection; it bounds
	// the response head (ErrSmallBuffer beyond it).
	upReadBufSize = 16 << 10
)

// upReaders pools the upstream read buffers. A connection holds one only
// while response bytes wait in it or a read is under way: not while it
// idles in its pool, waits for a response head, or waits for a stream's
// next event (waitReadable). Thousands of streams at a few dozen events a
// second then share a few buffers instead of holding 16 KiB each.
var upReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, upReadBufSize) }}

// dialError marks a failure to connect: the request never reached the
// backend, so it may be retried elsewhere (FailConnect).
type dialError struct{ err error }

func (e *dialError) Error() string { return "dial: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// upstreamPool holds the idle keep-alive connections to one endpoint.
// Safe for concurrent use.
type upstreamPool struct {
	addr           string
	dialer         net.Dialer // bounded by connectTimeout
	busyDialer     net.Dialer // bounded by dialBusy (liveness.go)
	connectTimeout time.Duration
	maxIdle        int
	idleTTL        time.Duration
	// life is the endpoint's signs of life: legs note the response bytes
	// they read, a dial past its timeout waits on while the endpoint
	// answered within quiet (nil: the connect timeout bounds every dial).
	life  *lifeSigns
	quiet time.Duration

	mu     sync.Mutex // guards idle, closed, sweeping
	idle   []*upConn  // LIFO: the most recently used last
	closed bool
	sweep  *time.Timer // closes expired idle connections; nil until needed
	armed  bool
}

func newUpstreamPool(addr string, connectTimeout time.Duration, life *lifeSigns, quiet time.Duration) *upstreamPool {
	return &upstreamPool{
		addr:           addr,
		dialer:         net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second},
		busyDialer:     net.Dialer{Timeout: max(busyConnectMax, connectTimeout), KeepAlive: 30 * time.Second},
		connectTimeout: connectTimeout,
		maxIdle:        DefaultMaxIdleConnsPerHost,
		idleTTL:        DefaultIdleConnTimeout,
		life:           life,
		quiet:          quiet,
	}
}

// upConn is one connection to an endpoint, owned by one leg at a time.
type upConn struct {
	nc net.Conn
	// raw waits for readability without a buffer (nil where the platform
	// cannot peek: reads then wait with their buffer).
	raw syscall.RawConn
	// br is the read buffer, from upReaders; nil while none is held
	// (reader attaches one, shed gives it back).
	br     *bufio.Reader
	pool   *upstreamPool
	idleAt time.Time
	// reused is true when the connection served an earlier request: a
	// failure before the first response byte may then be the backend's
	// keep-alive close racing our write, and is retried once on a new
	// connection.
	reused bool
	// deadline is the read and write deadline armed on nc (see arm).
	deadline time.Time
	// killed is set (under the exchange's mu) when an abort put nc's
	// deadline in the past: the connection is closed, never pooled. Atomic:
	// arm, on the leg's goroutine, reads it without that lock.
	killed atomic.Bool
	// woke and step are waitReadable's state and callback, made once per
	// connection: a closure per wait would be an allocation per event.
	woke bool
	step func(fd uintptr) bool
	// headStep is readEarly's callback (made once per connection, as
	// step); pre holds the bytes it read, in the pooled buffer early,
	// served by Read before the socket's; preErr is the error it read.
	headStep func(fd uintptr) bool
	pre      []byte
	early    *[]byte
	preErr   error
	// sendStep is sendEarly's callback (made once per connection); out is
	// what it has still to write, outErr the write's failure.
	sendStep func(fd uintptr) bool
	out      []byte
	outErr   error
	// polled: the stream poller has the socket registered, with its
	// shard-th epoll instance; parkedOn is the stream parked on it, woken
	// by an abort (exchange.killUp).
	polled   bool
	shard    int
	parkedOn atomic.Pointer[parkedStream]
}

// arm bounds the connection's reads and writes by d, firing at most slack
// after it: a deadline already armed in [d, d+slack] is kept, otherwise
// d+slack is armed. Re-arming costs two runtime timer updates, and the
// requests of a busy connection come well within the slack of each other.
func (c *upConn) arm(d time.Time, slack time.Duration) {
	if !c.deadline.Before(d) && c.deadline.Sub(d) <= slack {
		return
	}
	c.deadline = d.Add(slack)
	_ = c.nc.SetDeadline(c.deadline)
	// An abort between the leg's last read and this re-arm put a past
	// deadline that the line above just replaced: put it back, or the
	// next read would wait for the backend or the new bound. (An abort
	// after this load sets its own deadline last.)
	if c.killed.Load() {
		_ = c.nc.SetDeadline(aLongTimeAgo)
	}
}

// get returns an idle connection (checking one that idled long for a close
// by the backend) or dials a new one under ctx; patient: the dial waits
// past the connect timeout as for an endpoint that answers (a request sent
// in panic to an endpoint down by timeouts alone). A dial failure wraps
// *dialError.
func (p *upstreamPool) get(ctx context.Context, now time.Time, patient bool) (*upConn, error) {
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		c := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		idle := now.Sub(c.idleAt)
		if idle >= p.idleTTL || (idle >= staleCheckAfter && !connAlive(c.nc)) {
			_ = c.nc.Close()
			continue
		}
		c.reused = true
		return c, nil
	}
	return p.dial(ctx, patient)
}

func (p *upstreamPool) dial(ctx context.Context, patient bool) (*upConn, error) {
	var nc net.Conn
	var err error
	if p.life != nil && p.connectTimeout > 0 {
		nc, err = p.dialBusy(ctx, patient)
	} else {
		nc, err = p.dialer.DialContext(ctx, "tcp", p.addr)
	}
	if err != nil {
		return nil, &dialError{err: err}
	}
	c := &upConn{nc: nc, pool: p}
	if sc, ok := nc.(syscall.Conn); ok && peerWatchSupported {
		c.raw, _ = sc.SyscallConn()
		c.step = c.waitStep
		c.headStep = c.readEarlyStep
		c.sendStep = c.sendEarlyStep
	}
	return c, nil
}

// reader returns the connection's read buffer, taking one from the pool
// when none is held.
func (c *upConn) reader() *bufio.Reader {
	if c.br == nil {
		c.br = upReaders.Get().(*bufio.Reader)
		c.br.Reset(c)
	}
	return c.br
}

// Read implements io.Reader for the read buffer: the bytes readEarly took
// first, then the socket's.
func (c *upConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		if len(c.pre) == 0 {
			c.dropEarly()
		}
		return n, nil
	}
	if err := c.preErr; err != nil {
		c.preErr = nil
		return 0, err
	}
	return c.nc.Read(p)
}

// dropEarly gives readEarly's buffer back, with whatever it still holds.
func (c *upConn) dropEarly() {
	if c.early != nil {
		earlyReads.Put(c.early)
		c.early, c.pre = nil, nil
	}
}

// buffered returns how many response bytes were read and not yet consumed.
func (c *upConn) buffered() int {
	n := len(c.pre)
	if c.br != nil {
		n += c.br.Buffered()
	}
	return n
}

// shed gives the read buffer back to the pool, unless bytes wait in it.
func (c *upConn) shed() {
	if c.br != nil && c.br.Buffered() == 0 {
		c.br.Reset(nil)
		upReaders.Put(c.br)
		c.br = nil
	}
}

// waitReadable waits, holding no read buffer, until the connection has
// something to read: bytes, an end, an error, or the armed deadline (which
// the read that follows then reports). It costs no system call over a
// blocking read: the check replaces the read that would have found
// nothing, and the wake-up is trusted (a spurious one only makes the next
// read wait with its buffer). The check cannot be skipped after a read
// shorter than its buffer, although whatever data comes later raises an
// edge: the backend's end (a FIN, a reset) that came with the data shared
// its edge, the read returned the data alone, and Go's netpoller, which
// forgets readiness when a wait begins, does not report EPOLLRDHUP — the
// wait would sleep until the idle bound (a dying engine's stream, whose
// migration then waits).
func (c *upConn) waitReadable() {
	if c.buffered() > 0 {
		return
	}
	c.shed()
	if c.raw == nil {
		return
	}
	c.woke = false
	_ = c.raw.Read(c.step)
}

// readEarly waits for the response head holding no read buffer, like
// waitReadable, but reads what arrived in the same system call that finds
// it (into a pooled buffer, which Read hands on): a head already waiting
// costs one read instead of a peek and a read. Errors are left to the read
// that follows (a deadline, a closed connection) or handed to it (preErr).
func (c *upConn) readEarly() {
	if c.buffered() > 0 || c.preErr != nil {
		return
	}
	c.shed()
	if c.raw == nil {
		return
	}
	_ = c.raw.Read(c.headStep)
}

// sendEarly writes the request buf and waits for the response head as
// readEarly does, the write made in the wait's first callback: the wait
// resets the socket's readiness before that callback, so an answer, which
// can only come after the request, wakes it, and the read that would find
// nothing between the write and the answer is not made — one system call
// fewer per request. What the socket does not take at once (a full send
// buffer) goes through the connection's write, under its deadline; the
// response head is then waited for by readHead. A write's failure is
// returned as the connection's write would return it.
func (c *upConn) sendEarly(buf []byte) error {
	if c.raw == nil || c.buffered() > 0 || c.preErr != nil {
		_, err := c.nc.Write(buf)
		return err
	}
	c.shed()
	c.out = buf
	_ = c.raw.Read(c.sendStep) // a wait's error is the next read's
	rest, err := c.out, c.outErr
	c.out, c.outErr = nil, nil
	if err != nil {
		return &net.OpError{Op: "write", Net: "tcp", Source: c.nc.LocalAddr(), Addr: c.nc.RemoteAddr(), Err: err}
	}
	if len(rest) > 0 { // not called (a deadline, a close) or not all taken
		_, err = c.nc.Write(rest)
	}
	return err
}

// sendEarlyStep is sendEarly's callback: the first call writes, the next
// (after the poller's wake-up) read as readEarlyStep does.
func (c *upConn) sendEarlyStep(fd uintptr) bool {
	if len(c.out) == 0 {
		return c.readEarlyStep(fd)
	}
	n, err := writeRaw(fd, c.out)
	c.out = c.out[n:]
	switch {
	case err != nil && err != syscall.EAGAIN:
		c.outErr = os.NewSyscallError("write", err)
		return true
	case len(c.out) > 0:
		return true // the rest through the connection's write
	}
	return false // sent: wait for the answer
}

// readEarlyStep is readEarly's callback: one read into a pooled buffer,
// given back while the connection has nothing to read.
func (c *upConn) readEarlyStep(fd uintptr) bool {
	bp, n, ok, err := readPooled(fd)
	switch {
	case !ok:
		return false // wait for readability
	case err != nil:
		earlyReads.Put(bp)
		c.preErr = os.NewSyscallError("read", err)
	case n == 0:
		earlyReads.Put(bp)
		c.preErr = io.EOF
	default:
		c.early, c.pre = bp, (*bp)[:n]
	}
	return true
}

// waitStep is waitReadable's callback: the first call checks, the next
// (after the poller's wake-up) ends the wait.
func (c *upConn) waitStep(fd uintptr) bool {
	if c.woke {
		return true
	}
	c.woke = true
	return readable(fd)
}

// put returns a connection whose last response was read to its end.
func (p *upstreamPool) put(c *upConn, now time.Time) {
	c.idleAt = now
	p.mu.Lock()
	if p.closed || len(p.idle) >= p.maxIdle {
		p.mu.Unlock()
		_ = c.nc.Close()
		return
	}
	p.idle = append(p.idle, c)
	if !p.armed {
		p.armed = true
		if p.sweep == nil {
			p.sweep = time.AfterFunc(p.idleTTL, p.expire)
		} else {
			p.sweep.Reset(p.idleTTL)
		}
	}
	p.mu.Unlock()
}

// expire closes the connections idle longer than idleTTL and re-arms
// itself while any remain.
func (p *upstreamPool) expire() {
	now := time.Now()
	var old []*upConn
	p.mu.Lock()
	keep := p.idle[:0]
	for _, c := range p.idle {
		if now.Sub(c.idleAt) >= p.idleTTL {
			old = append(old, c)
		} else {
			keep = append(keep, c)
		}
	}
	clear(p.idle[len(keep):])
	p.idle = keep
	p.armed = len(keep) > 0 && !p.closed
	if p.armed {
		p.sweep.Reset(p.idleTTL - now.Sub(keep[0].idleAt))
	}
	p.mu.Unlock()
	for _, c := range old {
		_ = c.nc.Close()
	}
}

// close closes the idle connections; connections in use are closed when
// their leg ends.
func (p *upstreamPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	if p.sweep != nil {
		p.sweep.Stop()
	}
	p.mu.Unlock()
	for _, c := range idle {
		_ = c.nc.Close()
	}
}

// release ends the connection's use by a leg: back to the pool when the
// response was read to its end on a reusable connection, closed otherwise.
// Either way its read buffer goes back to upReaders.
func (c *upConn) release(reusable bool) {
	if reusable && c.buffered() == 0 {
		c.shed()
		c.pool.put(c, time.Now())
		return
	}
	if c.br != nil {
		c.br.Reset(nil)
		upReaders.Put(c.br)
		c.br = nil
	}
	c.dropEarly()
	c.preErr = nil
	_ = c.nc.Close()
}

// readHead reads the response head into h, skipping interim (1xx)
// responses other than 101.
func (c *upConn) readHead(h *fasthttp.ResponseHeader) error {
	c.readEarly() // a long prefill or generation waits without a buffer
	for range 100 {
		if err := h.Read(c.reader()); err != nil {
			return err
		}
		if sc := h.StatusCode(); sc >= 200 || sc == fasthttp.StatusSwitchingProtocols {
			return nil
		}
	}
	return errors.New("gateway: too many interim responses")
}

// Body framing of an upstream response.
const (
	framingLength  = iota // Content-Length bytes
	framingChunked        // Transfer-Encoding: chunked
	framingClose          // until the backend closes (no length, no chunks)
	framingNone           // no body (HEAD, 1xx, 204, 304)
)

// errBadChunk is a malformed chunked body.
var errBadChunk = errors.New("gateway: malformed chunked response body")

// bodyReader reads one upstream response body. A Read returns what one
// read of the connection produced, at most one chunk: an SSE event is
// handed on as soon as it arrives. Chunk extensions and trailer fields are
// read and dropped.
type bodyReader struct {
	c       *upConn
	framing int
	left    int64 // framingLength: bytes left; framingChunked: left in the chunk
	inChunk bool
	eof     bool
}

// reset prepares r for the body that follows head h on c. head tells
// whether the request was a HEAD request.
func (r *bodyReader) reset(c *upConn, h *fasthttp.ResponseHeader, head bool) {
	*r = bodyReader{c: c}
	sc := h.StatusCode()
	switch cl := h.ContentLength(); {
	case head || sc < 200 || sc == 204 || sc == 304:
		r.framing, r.eof = framingNone, true
	case cl >= 0:
		r.framing, r.left, r.eof = framingLength, int64(cl), cl == 0
	case cl == -1:
		r.framing = framingChunked
	default:
		r.framing = framingClose
	}
}

// reusable reports whether the connection can carry another request once
// the body was read to its end.
func (r *bodyReader) reusable() bool { return r.eof && r.framing != framingClose }

// drained reports whether the next Read would wait on the connection:
// the body goes on and none of it is buffered.
func (r *bodyReader) drained() bool { return !r.eof && r.c.buffered() == 0 }

// wait waits for the body's next bytes holding no read buffer
// (upConn.waitReadable).
func (r *bodyReader) wait() { r.c.waitReadable() }

// Read implements io.Reader.
func (r *bodyReader) Read(p []byte) (int, error) {
	if r.eof {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	switch r.framing {
	case framingLength:
		n, err := r.c.reader().Read(p[:min(int64(len(p)), r.left)])
		r.left -= int64(n)
		if r.left == 0 {
			r.eof = true
			return n, nil
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return n, err
	case framingClose:
		n, err := r.c.reader().Read(p)
		if err == io.EOF {
			r.eof = true
		}
		return n, err
	}
	if !r.inChunk {
		size, err := r.chunkSize()
		if err != nil {
			return 0, err
		}
		if size == 0 {
			if err := r.trailer(); err != nil {
				return 0, err
			}
			r.eof = true
			return 0, io.EOF
		}
		r.left, r.inChunk = size, true
	}
	n, err := r.c.reader().Read(p[:min(int64(len(p)), r.left)])
	r.left -= int64(n)
	if r.left == 0 {
		r.inChunk = false
		if err == nil {
			err = r.crlf()
		}
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// chunkSize reads a chunk-size line: hex digits, optional extensions, CRLF.
func (r *bodyReader) chunkSize() (int64, error) {
	line, err := r.c.reader().ReadSlice('\n')
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return 0, err
	}
	return parseChunkSize(line)
}

// parseChunkSize parses a chunk-size line, its LF included.
func parseChunkSize(line []byte) (int64, error) {
	var size int64
	digits := 0
	for _, b := range line {
		var d byte
		switch {
		case b >= '0' && b <= '9':
			d = b - '0'
		case b >= 'a' && b <= 'f':
			d = b - 'a' + 10
		case b >= 'A' && b <= 'F':
			d = b - 'A' + 10
		default:
			if digits == 0 || (b != ';' && b != '\r' && b != '\n' && b != ' ' && b != '\t') {
				return 0, fmt.Errorf("%w: chunk size line %q", errBadChunk, line)
			}
			return size, nil
		}
		if digits++; digits > 15 {
			return 0, fmt.Errorf("%w: chunk size too large", errBadChunk)
		}
		size = size<<4 | int64(d)
	}
	return 0, fmt.Errorf("%w: chunk size line %q", errBadChunk, line)
}

// crlf reads the CRLF that ends a chunk's data.
func (r *bodyReader) crlf() error {
	line, err := r.c.reader().ReadSlice('\n')
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if len(line) > 2 || (len(line) == 2 && line[0] != '\r') {
		return fmt.Errorf("%w: data longer than its chunk size", errBadChunk)
	}
	return nil
}

// trailer reads (and drops) trailer fields up to the empty line.
func (r *bodyReader) trailer() error {
	for range 100 {
		line, err := r.c.reader().ReadSlice('\n')
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if len(line) <= 2 {
			return nil
		}
	}
	return fmt.Errorf("%w: too many trailer fields", errBadChunk)
}
