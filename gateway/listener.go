package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"
)

// Listener serving: one listener per externalIP:port of mode:4 rules (the
// rules sharing it in a RuleTable).
//
// Each accepted connection is sniffed for the HTTP/2 preface: h2c with
// prior knowledge goes to a net/http server (fasthttp has no HTTP/2), every
// other connection to a fasthttp server, which serves HTTP/1.1 with
// keep-alive at several times net/http's rate (docs/performance.md). Both
// run the same Handler.

// Server timeouts. None of them bounds a response: long SSE streams are
// bounded per request (the rule's rule.Timeouts: MaxStream, Data).
const (
	// DefaultReadHeaderTimeout bounds reading a request's headers (from its
	// first byte); the rule's body read timeout then bounds the body.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultIdleTimeout closes keep-alive client connections idle this long.
	DefaultIdleTimeout = 120 * time.Second
	// readBufferSize is the per-connection request read buffer; it bounds
	// a request's head (431 beyond it), like HAProxy's 16 KiB tune.bufsize.
	readBufferSize = 16 << 10
	// maxKeptBodyBuffer is the largest request body buffer a connection
	// keeps for its next request; a larger one is left to the garbage
	// collector once its request is done, so a burst of large bodies does
	// not stay in the server's pools.
	maxKeptBodyBuffer = 64 << 10
)

// ErrBind classifies a listener that could not bind its address; the
// runtime reports it in the rule's REST status (other rules keep running).
var ErrBind = errors.New("gateway: cannot listen")

// Listener is the listener of the rules on one VIP:port: HTTP/1.1 and cleartext HTTP/2 with
// prior knowledge (h2c), serving the rule's Handler.
//
// Lifecycle: NewListener → Start (once) → Shutdown or Close (once; later
// calls return the first result). Safe for concurrent use.
type Listener struct {
	h      atomic.Pointer[Handler]   // the default handler (connection bounds, errors)
	table  atomic.Pointer[RuleTable] // the rules on the address; new requests pick theirs
	limit  *ConnLimit                // the process's connection limit (nil: none)
	addr   netip.AddrPort
	fast   *fasthttp.Server
	h2     *http.Server
	h2ln   *chanListener
	base   context.Context
	cancel context.CancelCauseFunc // cuts every request with errCut
	log    zerolog.Logger
	// acceptLog rate-limits the accept loop's errors (out of file
	// descriptors, it retries every few milliseconds to a second).
	acceptLog *serverErrorLog

	stopping atomic.Bool
	connWG   sync.WaitGroup // goroutines serving HTTP/1.1 connections

	mu      sync.Mutex // guards ln, conns, retired, started, served
	ln      net.Listener
	conns   map[*clientConn]struct{}
	retired []*Handler // replaced handlers that may still be serving
	started bool
	done    chan struct{} // closed when the accept loop returned
	served  error

	stopOnce sync.Once
	stopErr  error
}

// NewListener builds an unbound listener serving h on its rule's VIP:port.
func NewListener(h *Handler) *Listener {
	base, cancel := context.WithCancelCause(context.Background())
	l := &Listener{addr: netip.AddrPortFrom(h.rule.VIP, h.rule.Port), limit: h.conns, base: base, cancel: cancel, log: h.log,
		done: make(chan struct{}), conns: map[*clientConn]struct{}{}}
	l.h.Store(h)
	l.table.Store(NewRuleTable([]*Handler{h}))
	l.acceptLog = &serverErrorLog{log: l.log}
	l.fast = &fasthttp.Server{
		Handler: func(rc *fasthttp.RequestCtx) {
			h, pre := l.pick(&rc.Request)
			h.serveFast(rc, rc.Conn().(*clientConn), l.stopping.Load(), pre)
		},
		ErrorHandler:                 l.requestError,
		HeaderReceived:               l.headerReceived,
		ConnState:                    l.connState,
		ReadTimeout:                  DefaultReadHeaderTimeout,
		IdleTimeout:                  DefaultIdleTimeout,
		ReadBufferSize:               readBufferSize,
		NoDefaultServerHeader:        true,
		NoDefaultContentType:         true,
		DisablePreParseMultipartForm: true,
		LazyRequestTime:              true, // the handler keeps its own clock
		SecureErrorLogMessage:        true, // parse errors do not echo the request's bytes
		Logger:                       fastLogger{l.log},
		// A connection holds its read buffer only while a request is read,
		// its write buffer only while an answer is written, its request
		// context only while a request is served: a keep-alive connection
		// waiting holds none of them (clientConn.readFirst reads the next
		// request's first byte without a buffer of its own), a stream
		// relayed for minutes only the 4 KiB write buffer.
		ReduceMemoryUsage: true,
		// A stream written past the server (relayHijacked) gives its
		// connection back to the server when it ends.
		KeepHijackedConns: true,
	}
	var protos http.Protocols
	protos.SetHTTP1(true)
	protos.SetUnencryptedHTTP2(true)
	l.h2 = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			h, pre := l.pickNet(r)
			h.serveHTTP(w, r, pre)
		}),
		Protocols: &protos,
		// Each stream may hold an upstream connection: bound them per
		// connection. A stream the client takes no byte of is reset at the
		// send bound (writeNetHTTP, counted); a connection that can take
		// no byte at all is closed a quarter of the bound later, after its
		// streams.
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: maxH2Streams, WriteByteTimeout: h.sendTimeout + h.sendTimeout/4},
		ReadHeaderTimeout: DefaultReadHeaderTimeout,
		IdleTimeout:       DefaultIdleTimeout,
		BaseContext:       func(net.Listener) context.Context { return base },
		ErrorLog:          log.New(&serverErrorLog{log: l.log}, "", 0),
	}
	return l
}

// Handler returns the handler new requests get.
func (l *Listener) Handler() *Handler { return l.h.Load() }

// Swap makes h serve every request accepted from now on (a rule replace
// with a new configuration, on the same VIP:port) and returns the handler
// it replaces. Requests already inside the old handler finish there; wait
// for them with old.Drain before releasing what the old handler uses.
func (l *Listener) Swap(h *Handler) (old *Handler) {
	old = l.h.Swap(h)
	l.table.Store(NewRuleTable([]*Handler{h}))
	l.mu.Lock()
	l.retired = append(l.retired, old)
	l.mu.Unlock()
	return old
}

// SetTable makes the rules of t share the listener: every request accepted
// from now on goes to the handler its host, path and model select
// (RuleTable). The first handler of t becomes the default. Handlers that
// leave the table are retired: requests inside them finish there.
func (l *Listener) SetTable(t *RuleTable) {
	old := l.table.Swap(t)
	l.h.Store(t.rules[0].h)
	keep := map[*Handler]bool{}
	for _, h := range t.Handlers() {
		keep[h] = true
	}
	l.mu.Lock()
	for _, h := range old.Handlers() {
		if !keep[h] {
			l.retired = append(l.retired, h)
		}
	}
	l.mu.Unlock()
}

// Table returns the rules on the listener.
func (l *Listener) Table() *RuleTable { return l.table.Load() }

// errNoRule is the answer when no rule on the address takes a request.
func errNoRule(model string) *ClientError {
	msg := "no rule on this address takes the request's host, path and model"
	if model != "" {
		msg = "no rule on this address serves model " + strconv.Quote(model) + " (X-Model, else the body's model) for this host and path, and no wildcard rule does"
	}
	return planeError(http.StatusServiceUnavailable, CodeModelUnavailable, msg)
}

// pick returns the handler of the rule that takes in, or the default
// handler and the error to answer when none does.
func (l *Listener) pick(in *fasthttp.Request) (*Handler, *ClientError) {
	t := l.table.Load()
	if t.open {
		return t.rules[0].h, nil
	}
	model := ""
	if t.needsModel {
		model = requestModel(in)
	}
	if h := t.Pick(requestHost(in), string(in.URI().PathOriginal()), model); h != nil {
		return h, nil
	}
	return l.h.Load(), errNoRule(model)
}

// pickNet is pick for an h2c request. When the rules differ by model and
// the request has no X-Model, its body is read first (bounded by the
// default handler's body limit) and put back for the handler to read.
func (l *Listener) pickNet(r *http.Request) (*Handler, *ClientError) {
	t := l.table.Load()
	if t.open {
		return t.rules[0].h, nil
	}
	var in fasthttp.Request
	in.Header.SetHost(r.Host)
	in.Header.SetRequestURI(r.RequestURI)
	in.Header.Set(HeaderModel, r.Header.Get(HeaderModel))
	in.Header.SetContentType(r.Header.Get("Content-Type"))
	if t.needsModel && strings.TrimSpace(r.Header.Get(HeaderModel)) == "" && r.Body != nil && r.Body != http.NoBody {
		body, err := io.ReadAll(io.LimitReader(r.Body, l.h.Load().bodyLimit+1))
		if err == nil {
			in.SetBodyRaw(body)
		}
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
	}
	return l.pick(&in)
}

// Start binds VIP:port and serves in the background. A bind failure is
// returned (wrapping ErrBind and the OS error) and leaves nothing running.
func (l *Listener) Start() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.started {
		return fmt.Errorf("gateway: listener %s already started", l.addr)
	}
	ln, err := net.Listen("tcp", l.addr.String())
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrBind, l.addr, err)
	}
	l.ln, l.started = ln, true
	l.h2ln = newChanListener(ln.Addr())
	go func() { _ = l.h2.Serve(l.h2ln) }()
	go l.accept(ln)
	return nil
}

// accept runs the accept loop until the listener closes.
func (l *Listener) accept(ln net.Listener) {
	defer close(l.done)
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if l.stopping.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporaryAccept(err) {
				// Out of file descriptors or a transient kernel error: wait
				// and retry, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				_, _ = fmt.Fprintf(l.acceptLog, "accept error: %v; retrying in %v", err, backoff)
				time.Sleep(backoff)
				continue
			}
			l.mu.Lock()
			l.served = err
			l.mu.Unlock()
			return
		}
		backoff = 0
		if !l.limit.acquire() {
			l.limit.refuse(c)
			continue
		}
		cc := newClientConn(c, l.base)
		waves.opened() // closed by cc.Close
		cc.limit = l.limit
		cc.rejoin = l.rejoin
		h := l.h.Load()
		cc.send = sendClock{timeout: h.sendTimeout, stalls: h.met.sendTimeouts}
		l.mu.Lock()
		if l.stopping.Load() {
			l.mu.Unlock()
			_ = cc.Close()
			continue
		}
		l.conns[cc] = struct{}{}
		l.connWG.Add(1)
		l.mu.Unlock()
		go l.serveConn(cc)
	}
}

// isTemporaryAccept reports accept errors worth retrying (EMFILE, ENFILE,
// ECONNABORTED and the like).
func isTemporaryAccept(err error) bool {
	s := err.Error()
	return strings.Contains(s, "too many open files") || strings.Contains(s, "connection aborted") ||
		strings.Contains(s, "file table overflow") || strings.Contains(s, "no buffer space")
}

// serveConn serves one accepted connection: h2c to the net/http server,
// anything else to fasthttp.
func (l *Listener) serveConn(cc *clientConn) {
	h2, err := cc.sniffH2(DefaultReadHeaderTimeout)
	if err != nil && len(cc.prefix) == 0 {
		_ = cc.Close()
		l.endConn(cc)
		return
	}
	if h2 {
		if !l.h2ln.deliver(cc) {
			_ = cc.Close()
		}
		l.endConn(cc)
		return
	}
	l.serveHTTP1(cc)
}

// serveHTTP1 serves cc with the HTTP/1.1 server until it closes the
// connection, or a stream written past it (relayHijacked) takes it over:
// that stream gives it back (rejoin) when it ends.
func (l *Listener) serveHTTP1(cc *clientConn) {
	cc.serverHijacked = false
	cc.lazyRead = true // for good: a hijacked stream sets its deadlines at once
	_ = l.fast.ServeConn(cc)
	if x := cc.handing; x != nil {
		cc.handing = nil
		if !cc.serverHijacked {
			l.abandonHandoff(cc, x)
			return
		}
	}
	if cc.hijacked != nil {
		<-cc.hijacked // an HTTP/1.0 stream, written until its close
	}
	if hand := cc.handoff; hand != nil {
		cc.handoff = nil
		close(hand)
		return
	}
	l.endConn(cc)
}

// abandonHandoff ends x, whose stream was to be written past the server,
// when the server gave the connection up before it ran the hijack handler
// (the connection failed as it was handed over: fasthttp then neither runs
// the handler nor releases the request context, and the stream would hold
// its upstream leg, its ticket and the listener's count of the connection
// for ever). The stream ends as a client that left; the server closed the
// connection.
func (l *Listener) abandonHandoff(cc *clientConn, x *exchange) {
	cc.hijacked, cc.handoff = nil, nil
	x.stream.writeErr = true
	_ = x.out.CloseBodyStream() // the stream's CloseWithError: the leg and the exchange end
	l.endConn(cc)
}

// rejoin takes back a connection whose stream was written past the server:
// the server serves its next request (keep), or the connection is done.
func (l *Listener) rejoin(cc *clientConn, keep bool) {
	if keep && !l.stopping.Load() {
		l.serveHTTP1(cc)
		return
	}
	_ = cc.Close()
	l.endConn(cc)
}

// endConn forgets a connection the servers are done with. The HTTP/1.1
// server closed it (or it went to the h2c server, which reserves its bodies
// itself): what the last request reserved is free.
func (l *Listener) endConn(cc *clientConn) {
	cc.endRequest()
	l.mu.Lock()
	delete(l.conns, cc)
	l.mu.Unlock()
	cc.cancel(nil)
	l.connWG.Done()
}

// connState tracks which connections are idle, and closes those that go
// idle while the listener is stopping.
func (l *Listener) connState(c net.Conn, st fasthttp.ConnState) {
	cc, ok := c.(*clientConn)
	if !ok {
		return
	}
	switch st {
	case fasthttp.StateIdle:
		// The answer is written: the request's body reservation ends.
		cc.endRequest()
		cc.idle.Store(true)
		if l.stopping.Load() {
			_ = cc.Conn.Close()
		}
	case fasthttp.StateActive:
		cc.idle.Store(false)
	case fasthttp.StateHijacked:
		cc.serverHijacked = true
	}
}

// headerReceived is the HTTP/1.1 server's hook between a request's head
// and its body: it sets the rule's body limit and read bound, and reserves
// the body in the process's body budget. A body that does not fit is not
// read: the refused request's head is made to declare no body (and no
// Expect: 100-continue, which would invite the client to send it), so the
// server hands it straight to serveFast, which answers 503
// body_buffer_full and closes the connection.
func (l *Listener) headerReceived(hdr *fasthttp.RequestHeader) fasthttp.RequestConfig {
	h := l.h.Load()
	conf := fasthttp.RequestConfig{ReadTimeout: h.bodyReadTimeout, MaxRequestBodySize: int(min(h.bodyLimit, 1<<40))}
	n := bodyReservation(int64(hdr.ContentLength()), h.bodyLimit)
	if h.budget == nil || n == 0 {
		return conf
	}
	cc, ok := ctxOfHeader(hdr).Conn().(*clientConn)
	if !ok || cc.reserve(h.budget, n) {
		return conf
	}
	hdr.Del(fasthttp.HeaderExpect)
	hdr.SetContentLength(0)
	return conf
}

// requestError answers a request the server could not read: a body the
// body budget refused (503), too large a body (413), too slow a client
// (408), too large a head (431), or a malformed one (400). The server
// closes the connection after it; after a 503 or 413, whose body was left
// unread, the close lingers until the client stopped sending.
func (l *Listener) requestError(rc *fasthttp.RequestCtx, err error) {
	h := l.h.Load()
	x := h.begin()
	x.in, x.out = &rc.Request, &rc.Response
	cc, _ := rc.Conn().(*clientConn)
	if cc != nil {
		x.remote, x.ip = cc.remote, cc.ip
	}
	// A body read in part is dropped with the request, not kept in the
	// connection's pooled one, and its reservation ends now (not after the
	// lingering close).
	defer rc.Request.ReleaseBody(maxKeptBodyBuffer)
	if cc != nil {
		defer cc.endRequest()
	}
	x.out.Header.SetNoDefaultContentType(true)
	var small *fasthttp.ErrSmallBuffer
	x.api = apiOfPath(x.in.URI().PathOriginal())
	switch {
	case cc != nil && cc.refused:
		cc.linger = true
		x.fail(errBodyBufferFull())
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		if cc != nil {
			cc.linger = true
		}
		x.fail(bodyTooLarge(h.bodyLimit))
	case isTimeout(err):
		x.fail(requestError(http.StatusRequestTimeout, CodeBodyTimeout, "",
			"the request was not received within "+h.bodyReadTimeout.String()+" (headers within "+DefaultReadHeaderTimeout.String()+")"))
	case errors.As(err, &small):
		x.fail(requestError(http.StatusRequestHeaderFieldsTooLarge, CodeHeadersTooLarge, "",
			fmt.Sprintf("the request head exceeds %d bytes", readBufferSize)))
	default:
		x.fail(requestError(http.StatusBadRequest, CodeBadRequest, "", "the request could not be parsed: "+err.Error()))
	}
	h.done(x)
}

// Addr returns the bound address (useful with port 0), or nil before Start.
func (l *Listener) Addr() net.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ln == nil {
		return nil
	}
	return l.ln.Addr()
}

// Done is closed when the listener stopped accepting (after Shutdown/Close,
// or when accepting failed); Err then tells why.
func (l *Listener) Done() <-chan struct{} { return l.done }

// Err returns the error that stopped serving, nil after a requested stop.
func (l *Listener) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.served
}

// Shutdown stops accepting, lets in-flight requests and streams finish
// until ctx ends, then cuts what remains (their upstream legs are
// cancelled and reported as client-gone). When it returns, every handler
// has returned (up to CutGrace after the cut), so no Report or Finish
// follows. It returns ctx.Err() when it had to cut streams, nil when
// everything drained.
func (l *Listener) Shutdown(ctx context.Context) error {
	l.stopOnce.Do(func() {
		l.stopAccepting()
		h2err := make(chan error, 1)
		go func() { h2err <- l.h2.Shutdown(ctx) }()
		drained := make(chan struct{})
		go func() { l.connWG.Wait(); close(drained) }()
		var err error
		select {
		case <-drained:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if e := <-h2err; e != nil && err == nil {
			err = e
		}
		if err != nil {
			l.cut()
		}
		l.cancel(errCut)
		l.stopErr = err
		l.waitServe()
		l.waitHandlers()
	})
	return l.stopErr
}

// stopAccepting closes the listening socket and the idle connections; busy
// connections close once their response is out (Connection: close).
func (l *Listener) stopAccepting() {
	l.stopping.Store(true)
	l.mu.Lock()
	if l.ln != nil {
		_ = l.ln.Close()
	}
	for cc := range l.conns {
		if cc.idle.Load() {
			_ = cc.Conn.Close()
		}
	}
	l.mu.Unlock()
	if l.h2ln != nil {
		_ = l.h2ln.Close()
	}
}

// cut aborts every request in flight and closes every connection.
func (l *Listener) cut() {
	l.cancel(errCut) // cancels routing waits and the h2c requests
	l.mu.Lock()
	conns := make([]*clientConn, 0, len(l.conns))
	for cc := range l.conns {
		conns = append(conns, cc)
	}
	l.mu.Unlock()
	for _, cc := range conns {
		cc.cut()
	}
	_ = l.h2.Close()
}

// errCut is the cause of the request contexts a listener cancels when it
// cuts what is still in flight (a drain deadline, Close). A handler whose
// request was cut aborts the client connection: the client is still there
// and must not take the cut for a complete answer (an empty 200, or a
// stream ended cleanly without its [DONE]).
var errCut = errors.New("gateway: listener stopped; in-flight request cut")

// CutGrace bounds how long Shutdown and Close wait for cut handlers to
// return (they report their legs and finish their tickets on the way out).
const CutGrace = 5 * time.Second

// waitHandlers waits up to CutGrace for every handler to return, so no
// Report or Finish reaches the router after Shutdown/Close returned.
func (l *Listener) waitHandlers() {
	l.mu.Lock()
	hs := append([]*Handler{l.h.Load()}, l.retired...)
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), CutGrace)
	defer cancel()
	for _, h := range hs {
		if err := h.Drain(ctx); err != nil {
			h.log.Warn().Dur("grace", CutGrace).Msg("handlers still running after shutdown")
		}
		h.closeIdle()
	}
}

// Drain waits until no request is inside h (or ctx ends, returning its
// error). New requests may still enter h unless it was swapped out.
func (h *Handler) Drain(ctx context.Context) error {
	done := make(chan struct{})
	go func() { h.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops the listener immediately, cutting in-flight requests, and
// waits (up to CutGrace) for their handlers to return.
func (l *Listener) Close() error {
	l.stopOnce.Do(func() {
		l.stopAccepting()
		l.cut()
		l.waitServe()
		l.waitHandlers()
	})
	return l.stopErr
}

func (l *Listener) waitServe() {
	l.mu.Lock()
	started := l.started
	l.mu.Unlock()
	if started {
		<-l.done
	}
}

// chanListener hands the h2c connections the sniff found to net/http.
type chanListener struct {
	addr net.Addr
	ch   chan net.Conn
	once sync.Once
	done chan struct{}
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

// deliver passes c to the server; false when the listener is closed.
func (c *chanListener) deliver(conn net.Conn) bool {
	select {
	case c.ch <- conn:
		return true
	case <-c.done:
		return false
	}
}

// Accept implements net.Listener.
func (c *chanListener) Accept() (net.Conn, error) {
	select {
	case conn := <-c.ch:
		return conn, nil
	case <-c.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (c *chanListener) Close() error {
	c.once.Do(func() { close(c.done) })
	return nil
}

// Addr implements net.Listener.
func (c *chanListener) Addr() net.Addr { return c.addr }

// fastLogger logs fasthttp's connection errors (mostly clients that broke
// off) at debug level.
type fastLogger struct{ l zerolog.Logger }

func (f fastLogger) Printf(format string, args ...any) { f.l.Debug().Msgf(format, args...) }
