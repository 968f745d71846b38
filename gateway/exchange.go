package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/ladder"
)

// exchange is one client request from its first byte in the handler to the
// end of its response: the inbound request, the client response being
// built, the cancellation state its legs watch, the relay of a streamed
// body, and the bookkeeping the access log and metrics read. Exchanges are
// pooled per Handler; every field is reset by reset.
//
// Concurrency: one goroutine at a time runs the exchange (the connection's
// serving goroutine; for a streamed body the same goroutine inside the
// server's body writer). abort may be called from any goroutine (the
// departure watch, a listener cut, a context); mu guards up and cause.
type exchange struct {
	h   *Handler
	in  *fasthttp.Request  // the client's request; valid until done
	out *fasthttp.Response // the client's response being built
	cc  *clientConn        // nil when served by the net/http front end
	// ctx ends when the client leaves or the listener cuts (and at the
	// request's deadline when max_stream_duration is short): Route, the
	// tokenizer and dials wait under it.
	ctx       context.Context
	cancelCtx context.CancelFunc // releases a per-request ctx; nil if none
	remote    string             // client ip:port
	ip        string             // client ip
	tls       bool
	start     time.Time
	deadline  time.Time // start + max stream duration

	mu    sync.Mutex
	up    *upConn   // the upstream connection a leg is using
	cause failCause // causeClient or causeCut once aborted; causeNone otherwise
	// legCause is why the current leg alone was cut (causeDown: its
	// endpoint was taken out before it answered); cleared between legs.
	legCause failCause

	// watched is the exchange's entry in the endpoint watch.
	watched watchedLeg

	// stream is the relay of a body streamed to the client, handed to the
	// server as the response body stream (nil while the response is
	// buffered).
	stream *relayStream

	accessRecord

	// The attempt loop's state (attempt.go): the current attempt's routing
	// input and its ticket (admitted and not yet finished; the zero Ticket
	// when none), the re-routes left after an answering leg whose endpoint
	// never answered and after a dead P/D prefill, and the answer when no
	// retry can be made.
	rr *actors.RouteRequest
	// spareRR is a routing input the router answered, kept across requests
	// so that the next one reuses it rather than allocate: one allocation
	// per request fewer. The router keeps no pointer to it once it
	// answered, but may keep slices it held (a ticket's block chain, for
	// cache truth): routeRequest zeroes the struct, dropping them, and
	// never reuses their storage. One whose Route ended in an error is
	// never kept: a router that was still deciding may hold it.
	spareRR        *actors.RouteRequest
	ticket         actors.Ticket
	retriesLeft    int
	prefillRetries int
	lastErr        *ClientError
	// following is set while a migrated stream's next leg is routed and
	// started (migrate.go): nothing may touch the client's response, whose
	// head and first events went out.
	following bool
	// mig is the request's migration state.
	mig migration
	// pair is the P/D prefill leg running beside the answering leg
	// (SGLang's dual dispatch, pd_sglang.go; nil otherwise); set and
	// cleared under mu, its storage side's.
	pair *pairLeg
	// side is what only a P/D request or a migrated stream's next leg
	// uses (sides); nil until one does.
	side *exchangeSide

	// Kept across requests (buffers).
	req     Request     // the parsed request (parse resets it)
	relay   relayStream // stream's storage
	scratch []byte      // request heads
	iov     net.Buffers // head and body of an upstream request
	iovArr  [2][]byte   // iov's storage
	ids     idScan      // a stored response's id (respstore.go)
}

// exchangeSide is an exchange's storage for the legs beside the one that
// answers: a P/D prefill's head and body, a pair's leg, the head of a leg
// continuing a migrated stream. Most requests use none of it, and every
// stream holds its exchange for its whole life: kept inline it made the
// exchange 4 KiB, out of line 3 KiB. Allocated the first time a request
// needs it and kept with the pooled exchange.
type exchangeSide struct {
	pair    pairLeg
	preHead fasthttp.ResponseHeader // the P/D prefill leg's response head
	legHead fasthttp.ResponseHeader // the head of a leg continuing a migrated stream
	preBody []byte                  // the P/D prefill leg's response body
}

// sides returns x's side storage, allocating it on first use. A pair's
// goroutine uses it after startPair allocated it, so only the exchange's
// own goroutine ever allocates.
func (x *exchange) sides() *exchangeSide {
	if x.side == nil {
		x.side = new(exchangeSide)
	}
	return x.side
}

// accessRecord is what the client saw, for the access log and metrics.
type accessRecord struct {
	tenancy
	// objective is the request's TTFT objective (0: none; objective.go).
	objective  time.Duration
	api        string
	model      string
	wantStream bool
	kvGuard    ladder.Reason
	decided    bool
	decision   ladder.Decision
	parked     time.Duration
	prefillEP  int
	decodeEP   int
	retries    int
	requestID  string
	status     int    // sent to the client (StatusClientGone when it left)
	code       string // llb's error code when llb answered
	bytes      int64  // body bytes written
	ttfb       time.Duration
	ttft       time.Duration
	prefill    time.Duration
	pd         bool
	kvOut      KVParamsOutcome
	failure    actors.Failure
	aborted    bool
	// detail is the upstream error behind a failed leg (for the log; the
	// client sees it only when addresses are not hidden).
	detail string
	// noPool keeps the exchange out of the pool when it ends (the net/http
	// front end, whose context callback may still reach it).
	noPool bool

	// Cache truth: pred is the router's prediction of the cached tokens of
	// the endpoint that answers the prompt; observe asks the answering leg
	// (single, or the P/D prefill) to scan its body for the engine's usage
	// with usage; cached is the usage it found.
	pred    actors.Prediction
	observe bool
	usage   usageScanner
	cached  actors.Usage
	// tokens is the answering leg's usage (prompt and completion tokens,
	// the completion counted from the stream's deltas when the engine
	// sent no usage): what the tenant is charged.
	tokens actors.Usage
}

// begin takes an exchange for a new request.
func (h *Handler) begin() *exchange {
	h.inflight.Add(1)
	h.total.Add(1)
	h.active.Add(1)
	x := h.xpool.get(h)
	x.start = time.Now()
	x.deadline = x.start.Add(h.maxStream)
	return x
}

// done ends an exchange: access log and metrics, then the exchange goes
// back to the pool. Only a bug (a panic) leaves a ticket open here; it is
// released so the endpoint's in-flight count does not leak.
func (h *Handler) done(x *exchange) {
	x.finish(actors.Result{})
	if x.cc != nil {
		x.cc.end()
	}
	if x.abortCause() == causeCut {
		// The listener cut the request (drain deadline, Close), not the
		// client: whatever was or was not written, it is not an answer.
		x.aborted = true
	}
	h.record(x)
	if x.cancelCtx != nil {
		x.cancelCtx()
	}
	h.active.Add(-1)
	h.inflight.Done()
	if !x.noPool {
		h.xpool.put(x)
	}
}

// recoverPanic handles a panic (a bug) inside serve: it is logged with its
// stack, the upstream connection in use is closed and the ticket released.
// The exchange is dropped, not pooled.
func (h *Handler) recoverPanic(x *exchange, p any) {
	buf := make([]byte, 16<<10)
	buf = buf[:runtime.Stack(buf, false)]
	h.log.Error().Str(logfield.Panic, fmt.Sprint(p)).Bytes(logfield.Stack, buf).Msg("panic serving a request; connection dropped")
	x.mu.Lock()
	if x.up != nil {
		_ = x.up.nc.Close()
	}
	x.mu.Unlock()
	x.ticket.Finish(actors.Result{})
	if x.cc != nil {
		x.cc.end()
	}
	if x.cancelCtx != nil {
		x.cancelCtx()
	}
	h.active.Add(-1)
	h.inflight.Done()
}

// fail answers the client with e (nothing was sent yet). While a migrated
// stream is following on, the client's answer is under way: e is only the
// detail.
func (x *exchange) fail(e *ClientError) {
	if x.following {
		x.detail = e.Message
		return
	}
	x.status, x.code = e.Status, e.Code
	x.setRouteHeader(&x.out.Header, x.h.clientAddrs)
	x.bytes += int64(e.write(x.out, x.scratch[:0]))
}

// clearResponse drops what a failed leg left in the client response (an
// upstream head) before an error is written.
func (x *exchange) clearResponse() {
	if x.following {
		return
	}
	x.out.Reset()
	x.out.Header.SetNoDefaultContentType(true)
}

// resetTruth starts an attempt's cache-truth bookkeeping.
func (x *exchange) resetTruth(p actors.Prediction, observe bool) {
	x.pred, x.observe, x.usage, x.cached, x.tokens = p, observe && p.OK, usageScanner{}, actors.Usage{}, actors.Usage{}
}

// routeRequest returns a zeroed routing input for the request's first
// attempt: the spare one when there is one.
func (x *exchange) routeRequest() *actors.RouteRequest {
	rr := x.spareRR
	if rr == nil {
		return &actors.RouteRequest{}
	}
	x.spareRR = nil
	*rr = actors.RouteRequest{}
	return rr
}

// reset clears x for a new request, keeping its buffers.
func (x *exchange) reset() {
	x.in, x.out, x.cc = nil, nil, nil
	x.ctx, x.cancelCtx = nil, nil
	x.remote, x.ip, x.tls = "", "", false
	x.start, x.deadline = time.Time{}, time.Time{}
	x.up, x.cause, x.legCause = nil, causeNone, causeNone
	x.stream = nil
	x.accessRecord = accessRecord{prefillEP: -1, decodeEP: -1}
	x.rr, x.ticket, x.lastErr = nil, actors.Ticket{}, nil
	x.following = false
	x.mig.reset()
	x.pair = nil
	if sd := x.side; sd != nil {
		sd.pair = pairLeg{head: sd.pair.head[:0]}
		if cap(sd.pair.head) > maxKeptBodyBuffer {
			sd.pair.head = nil
		}
		sd.legHead.Reset()
		sd.preHead.Reset()
		if cap(sd.preBody) > maxKeptBodyBuffer {
			sd.preBody = nil
		}
	}
	x.scratch = x.scratch[:0]
	x.iov, x.iovArr = x.iov[:0], [2][]byte{}
	x.relay.reset()
	// A pooled exchange keeps small buffers only, and nothing of its last
	// request's body or prompts.
	x.req.forget()
	if cap(x.scratch) > maxKeptBodyBuffer {
		x.scratch = nil
	}
	x.ids = idScan{buf: x.ids.buf[:0]}
	if cap(x.ids.buf) > maxIDScan*2 {
		x.ids.buf = nil
	}
}

// Errors that cancel an exchange's context.
var (
	errClientGone = errors.New("gateway: client left")
	errDeadline   = errors.New("gateway: max stream duration passed")
)

// abort cuts the exchange from outside its goroutine: the client left
// (causeClient) or the listener is cutting (causeCut). The upstream leg in
// progress wakes at once with a timeout error; later legs see the cause and
// do not start.
func (x *exchange) abort(c failCause, err error) {
	x.mu.Lock()
	if x.cause == causeNone {
		x.cause = c
	}
	x.killUp()
	if x.pair != nil {
		x.pair.kill(c)
	}
	cancel, cc := x.cancelCtx, x.cc
	x.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if cc != nil {
		cc.cancel(err)
	}
}

// setDeadlineCtx gives the exchange a context of its own ending at its
// deadline (under mu: abort reads cancelCtx).
func (x *exchange) setDeadlineCtx() {
	ctx, cancel := context.WithDeadline(x.ctx, x.deadline)
	x.mu.Lock()
	x.ctx, x.cancelCtx = ctx, cancel
	x.mu.Unlock()
}

// abortLeg cuts the current leg only (the endpoint watch): its connection
// wakes at once, and the exchange may go on with another leg.
func (x *exchange) abortLeg(c failCause) {
	x.mu.Lock()
	if x.legCause == causeNone {
		x.legCause = c
	}
	x.killUp()
	x.mu.Unlock()
}

// killUp wakes the upstream connection in use at once (a deadline in the
// past) and marks it never to be pooled. Called with mu held.
func (x *exchange) killUp() {
	if x.up != nil {
		x.up.killed.Store(true)
		_ = x.up.nc.SetDeadline(aLongTimeAgo)
		if p := x.up.parkedOn.Load(); p != nil {
			p.kick()
		}
	}
}

// attach registers c as the connection a leg is using, so abort reaches
// it. It reports false (and the cause) when the exchange or the leg was
// already aborted.
func (x *exchange) attach(c *upConn) (failCause, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	switch {
	case x.cause != causeNone:
		return x.cause, false
	case x.legCause != causeNone:
		return x.legCause, false
	}
	x.up = c
	return causeNone, true
}

// legAbortCause returns why the current leg alone was cut, and clears it
// when clear is set (the leg is over).
func (x *exchange) legAbortCause(clear bool) failCause {
	x.mu.Lock()
	defer x.mu.Unlock()
	c := x.legCause
	if clear {
		x.legCause = causeNone
	}
	return c
}

// detach ends the registration made by attach. It reports whether an
// abort reached the connection meanwhile (it must then be closed).
func (x *exchange) detach() (killed bool) {
	x.mu.Lock()
	if x.up != nil {
		killed = x.up.killed.Load()
	}
	x.up = nil
	x.mu.Unlock()
	return killed
}

// abortCause returns why the exchange was aborted (causeNone: it was not).
func (x *exchange) abortCause() failCause {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.cause
}

// conclude reports o, the ticket's last leg, and finishes the ticket
// (a pair's prefill leg reported first).
func (x *exchange) conclude(o actors.Outcome, res actors.Result) {
	x.settlePair(res.OK)
	x.ticket.Conclude(o, res)
	x.ticket = actors.Ticket{}
}

// finish ends the ticket (its legs reported, or never run).
func (x *exchange) finish(res actors.Result) {
	x.settlePair(res.OK)
	x.ticket.Finish(res)
	x.ticket = actors.Ticket{}
}

// clientGone records that the client left before an answer.
func (x *exchange) clientGone() {
	if x.following {
		return
	}
	x.status = StatusClientGone
	x.failure = actors.FailClientGone
}

// exchangePool recycles exchanges (with their buffers) across requests.
type exchangePool struct{ p sync.Pool }

func (p *exchangePool) get(h *Handler) *exchange {
	if x, ok := p.p.Get().(*exchange); ok {
		return x
	}
	x := &exchange{h: h}
	x.reset()
	return x
}

func (p *exchangePool) put(x *exchange) {
	x.reset()
	p.p.Put(x)
}
