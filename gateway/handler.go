package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

// ErrNoRouter is returned by NewHandler when Deps.Router is nil.
var ErrNoRouter = errors.New("gateway: no router")

// Deps are the runtime services a rule's data plane uses.
type Deps struct {
	// Router is the service's router (a *actors.Service); required.
	Router actors.Router
	// Hasher computes Tier-1.5 block keys. nil builds one from the rule's
	// KV contract when kvExactMode is on; pass the rule's own to share it
	// with the inventory mirror.
	Hasher inventory.ChainHasher
	// Tokenizer is the engine /tokenize client for Tier 1.5 (an
	// *inventory.RemoteTokenizer for one of the rule's endpoints); nil
	// makes every text prompt a tokenize guard (token-id prompts still
	// hash).
	Tokenizer inventory.Tokenizer
	// Metrics receives the rule's metrics; nil keeps them in a private set.
	Metrics *Metrics
	// Log receives the access log (one line per request: Info with
	// Options.AccessLog, else Debug) and decision traces (Debug). The
	// zero Logger discards.
	Log zerolog.Logger
	// Watch cancels legs to an endpoint the router takes out of service;
	// the runtime wires it to the service's OnEndpointDown. nil builds an
	// unconnected one.
	Watch *EndpointWatch
	// LoRAOf returns the LoRA adapter name a request's model names, or ""
	// for a base model; nil means no LoRA adapters. The name is folded into
	// the Tier-1.5 extra keys and the prefix hash.
	LoRAOf func(model string) string
	// Budget is the process-wide request-body budget every listener
	// shares; nil bounds bodies per request only.
	Budget *BodyBudget
	// Conns is the process-wide client connection limit every listener
	// shares; nil sets none.
	Conns *ConnLimit
}

// Handler is one rule's data plane: parsing, routing input, single-pool
// and P/D proxying, client errors, access log and metrics. Both front ends
// (the HTTP/1.1 server and the h2c one, see Listener) run its serve on an
// exchange. It is safe for concurrent use; each request runs entirely in
// its connection's goroutine, with no goroutine per request or token.
type Handler struct {
	rule  *rule.Compiled // read-only
	opts  Options        // defaults applied
	addrs []string       // endpoint ip:port, by index
	// clientAddrs is addrs, or nil when Options.HideBackendAddrs keeps
	// them out of what clients see (X-Llb-Route).
	clientAddrs []string
	pools       []*upstreamPool // keep-alive connections, by endpoint index
	router      actors.Router
	input       *routeInput
	met         *Metrics
	log         zerolog.Logger
	hopID       string // this instance in X-Llb-Hop
	watch       *EndpointWatch

	// The rule's bounds and the options, copied for the request path.
	maxStream       time.Duration
	prefillTimeout  time.Duration
	dataTimeout     time.Duration // 0: not set (decodeFirstByte and streamIdle apply)
	decodeFirstByte time.Duration // 0: no bound
	streamIdle      time.Duration // 0: no bound
	bodyLimit       int64
	bodyReadTimeout time.Duration
	maxRetries      int
	sendTimeout     time.Duration // the send bound (0: off)

	// Process-wide bounds (shared by every handler; nil: none).
	budget *BodyBudget
	conns  *ConnLimit

	bufs  sync.Pool // *[]byte, copyBufSize
	xpool exchangePool

	// inflight counts exchanges in progress, streams included
	// (Listener.Shutdown waits for them so no Report/Finish follows a stop).
	inflight sync.WaitGroup
	// counters feed Stats (the REST …/stats view).
	total, active     atomic.Int64
	bytesIn, bytesOut atomic.Int64
}

// HandlerStats are a handler's request counters since it was built.
type HandlerStats struct {
	// Total counts requests received; Active those in progress.
	Total, Active int64
	// BytesIn counts request body bytes declared by clients; BytesOut the
	// response body bytes written to them.
	BytesIn, BytesOut int64
}

// Stats returns the handler's counters.
func (h *Handler) Stats() HandlerStats {
	return HandlerStats{Total: h.total.Load(), Active: h.active.Load(), BytesIn: h.bytesIn.Load(), BytesOut: h.bytesOut.Load()}
}

// copyBufSize is the relay buffer size (one per streamed response).
const copyBufSize = 32 << 10

// shortStream: when max_stream_duration is below this, each request gets
// its own context with that deadline, so routing (an admission park) and
// tokenizing end at it too. Longer bounds are enforced on the upstream
// connections alone: the router's and tokenizer's own bounds are far
// shorter, and the request needs no context of its own.
const shortStream = 10 * time.Minute

// NewHandler builds the data plane of compiled rule c (which it keeps and
// never changes) with the daemon's options.
func NewHandler(c *rule.Compiled, opts Options, deps Deps) (*Handler, error) {
	if err := checkCompiled(c); err != nil {
		return nil, err
	}
	if deps.Router == nil {
		return nil, ErrNoRouter
	}
	opts = opts.withDefaults()
	var kv *kvInput
	if c.Spec.KVExactMode != ladder.KVOff {
		hasher := deps.Hasher
		if hasher == nil {
			var err error
			if hasher, err = inventory.NewChainHasher(c.KV.Algo, c.KV.BlockSize, c.KV.Seed, c.KV.TokenKeyed); err != nil {
				return nil, fmt.Errorf("gateway: rule %q hasher: %w", c.Key, err)
			}
		}
		kv = newKVInput(hasher, deps.Tokenizer, opts.TokenizeTimeout)
	}
	input, err := newRouteInput(c, deps.LoRAOf, kv)
	if err != nil {
		return nil, err
	}
	t := &c.Timeouts
	h := &Handler{
		rule:            c,
		opts:            opts,
		router:          deps.Router,
		input:           input,
		met:             deps.Metrics,
		log:             deps.Log,
		maxStream:       t.MaxStream,
		prefillTimeout:  t.Prefill,
		dataTimeout:     t.Data,
		decodeFirstByte: t.Decode,
		streamIdle:      t.StreamIdle,
		bodyLimit:       opts.BodyLimit,
		bodyReadTimeout: opts.BodyReadTimeout,
		maxRetries:      opts.MaxConnectRetries,
		sendTimeout:     max(opts.ClientSendTimeout, 0),
		hopID:           opts.HopID,
		watch:           deps.Watch,
		budget:          deps.Budget,
		conns:           deps.Conns,
	}
	if h.watch == nil {
		h.watch = NewEndpointWatch()
	}
	for i := range c.Endpoints {
		a := c.Endpoints[i].Addr.String()
		h.addrs = append(h.addrs, a)
		h.pools = append(h.pools, newUpstreamPool(a, t.Connect))
	}
	if !opts.HideBackendAddrs {
		h.clientAddrs = h.addrs
	}
	if h.met == nil {
		h.met = NewMetrics(nil, c.Key)
	}
	h.bufs.New = func() any { b := make([]byte, copyBufSize); return &b }
	return h, nil
}

// Rule returns the compiled rule the handler serves.
func (h *Handler) Rule() *rule.Compiled { return h.rule }

// Metrics returns the handler's metrics.
func (h *Handler) Metrics() *Metrics { return h.met }

// closeIdle closes the idle upstream connections (the handler is retired).
func (h *Handler) closeIdle() {
	for _, p := range h.pools {
		p.close()
	}
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

// serveFast serves one request of the HTTP/1.1 front end (fasthttp) on
// client connection cc. The response is sent by the server after it
// returns; a streamed body ends the exchange when the server has written it.
func (h *Handler) serveFast(rc *fasthttp.RequestCtx, cc *clientConn, stopping bool) {
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
		h.fail(x, errBodyBufferFull())
		h.done(x)
		return
	}
	if cc.reserved > 0 {
		cc.trimReservation(int64(len(rc.Request.Body())))
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
		if untilClose(rc) {
			h.relayUntilClose(rc, cc, x)
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

// serve answers the request of x: it routes, proxies and leaves the answer
// in x.out (x.stream set when the body is streamed).
func (h *Handler) serve(x *exchange) {
	if cl := x.in.Header.ContentLength(); cl > 0 {
		h.bytesIn.Add(int64(cl))
	}
	if h.maxStream < shortStream {
		x.setDeadlineCtx()
	}
	if looped(&x.in.Header, h.hopID) {
		x.api = "loop"
		h.met.loops.Inc()
		h.fail(x, planeError(http.StatusLoopDetected, CodeLoopDetected,
			"the request came back to the llb that forwarded it (an endpoint of this rule leads back to llb), or passed through more than "+
				strconv.Itoa(MaxHops)+" llb instances; it was not forwarded again"))
		return
	}
	if h.rule.Paused {
		x.api = "paused"
		e := planeError(http.StatusServiceUnavailable, CodeServiceUnavailable, "the rule is paused (adminStateUp is false); retry later")
		e.RetryAfter = DefaultRetryAfter
		h.fail(x, e)
		return
	}
	if proto := x.in.Header.Protocol(); string(proto) != "HTTP/1.1" && string(proto) != "HTTP/1.0" {
		// fasthttp serves a request line naming HTTP/2.0 or HTTP/9.9 as
		// HTTP/1.0; net/http answers 505, and so does llb.
		x.api = "unknown"
		x.out.SetConnectionClose()
		h.fail(x, requestError(http.StatusHTTPVersionNotSupported, CodeBadRequest, "",
			"this listener speaks HTTP/1.0, HTTP/1.1 and h2c with prior knowledge; not "+string(proto)))
		return
	}
	if h.refuseBadTarget(x) {
		return
	}
	method := x.in.Header.Method()
	// Routed on the path as sent: "//v1/models" or "/v1/../v1/completions"
	// are not the API's paths (fasthttp's Path() would clean them, and the
	// backend would see the raw form).
	switch path := x.in.URI().PathOriginal(); string(path) {
	case PathCompletions, PathChatCompletions:
		kind := KindCompletion
		if string(path) == PathChatCompletions {
			kind = KindChat
		}
		x.api = kind.String()
		if string(method) != fasthttp.MethodPost {
			h.methodNotAllowed(x, "POST")
			return
		}
		h.serveGenerate(x, kind)
	case PathModels, PathHealth:
		x.api = "passthrough"
		if string(method) != fasthttp.MethodGet && string(method) != fasthttp.MethodHead {
			h.methodNotAllowed(x, "GET, HEAD")
			return
		}
		h.servePassthrough(x)
	default:
		x.api = "unknown"
		h.fail(x, requestError(http.StatusNotFound, CodeUnknownURL, "",
			"llb serves POST "+PathCompletions+", POST "+PathChatCompletions+", GET "+PathModels+" and GET "+PathHealth+"; not "+string(method)+" "+string(path)))
	}
}

func (h *Handler) methodNotAllowed(x *exchange, allow string) {
	x.out.Header.Set("Allow", allow)
	h.fail(x, requestError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "", "this path accepts "+allow))
}

// fail answers the client with e (nothing was sent yet).
func (h *Handler) fail(x *exchange, e *ClientError) {
	x.status, x.code = e.Status, e.Code
	x.setRouteHeader(&x.out.Header, h.clientAddrs)
	x.bytes += int64(e.write(x.out, x.scratch[:0]))
}

// clearResponse drops what a failed leg left in the client response (an
// upstream head) before an error is written.
func clearResponse(x *exchange) {
	x.out.Reset()
	x.out.Header.SetNoDefaultContentType(true)
}

// serveGenerate handles the completion and chat APIs.
func (h *Handler) serveGenerate(x *exchange, kind APIKind) {
	h.met.aiRequests.Inc()
	req := &x.req
	// A body over maxKeptBodyBuffer is not reused (serveFast releases it;
	// the h2c front end reads every body into a fresh buffer).
	body := x.in.Body()
	if err := req.parse(kind, body, cap(body) > maxKeptBodyBuffer); err != nil {
		var ce *ClientError
		if !errors.As(err, &ce) {
			ce = requestError(http.StatusBadRequest, CodeInvalidJSON, "", err.Error())
		}
		h.fail(x, ce)
		return
	}
	if v := x.in.Header.Peek(HeaderConversationID); len(v) > 0 {
		req.ConversationID = string(v)
	}
	x.model, x.wantStream = req.Model, req.Stream
	var rr actors.RouteRequest
	h.input.build(x.ctx, x.in, x.remote, x.ip, req, &rr)
	x.kvGuard = rr.Req.KV.Guard
	h.proxy(x, req, &rr)
}

// servePassthrough forwards GET /v1/models and /health to an available
// endpoint chosen by the router (so health and breaker state apply).
func (h *Handler) servePassthrough(x *exchange) {
	rr := actors.RouteRequest{Passthrough: true}
	h.input.buildBasic(x.in, x.remote, x.ip, &rr)
	h.proxy(x, nil, &rr)
}

// attempt is the result of one routed attempt.
type attempt struct {
	// retry asks the loop to route again avoiding failedEP. The attempt has
	// already reported its outcome and finished its ticket.
	retry    bool
	failedEP int
	// prefill is true when the failed leg was a P/D prefill.
	prefill bool
	// err is the answer if no retry can be made.
	err *ClientError
}

// proxy routes and serves, retrying on another endpoint while no byte has
// reached the client and the failure was a connect failure (single leg) or
// a dead prefill (P/D, once). req is nil for pass-through paths.
func (h *Handler) proxy(x *exchange, req *Request, rr *actors.RouteRequest) {
	retriesLeft, prefillRetries := h.maxRetries, 1
	var last *ClientError
	for {
		route, err := h.router.Route(x.ctx, rr)
		if err != nil {
			switch c := x.abortCause(); {
			case c != causeNone:
				x.clientGone()
			case last != nil:
				h.fail(x, last)
			case x.ctx.Err() != nil:
				h.fail(x, errStreamDuration(h.maxStream))
			default:
				h.fail(x, errorForRouteErr(err))
			}
			return
		}
		x.decision, x.decided, x.parked = route.Decision, true, route.Parked
		d := &x.decision
		if !d.Available() {
			if last != nil {
				h.fail(x, last) // the retry found nothing better than what failed
			} else {
				h.fail(x, errorForDecision(d))
			}
			return
		}
		if d.Prefill >= len(h.addrs) || d.Decode >= len(h.addrs) {
			// A decision naming an endpoint this rule does not have is a
			// runtime bug (e.g. a rule replaced under a stale router):
			// release the ticket and answer a retriable 503.
			route.Ticket.Finish(actors.Result{})
			e := planeError(http.StatusServiceUnavailable, CodeServiceUnavailable, "the router chose an endpoint this rule does not have ("+d.String()+")")
			e.RetryAfter = DefaultRetryAfter
			h.fail(x, e)
			return
		}
		x.ticket = route.Ticket
		// Multi-prompt requests are predicted on their first prompt only:
		// the engine's usage sums them all, so they are not compared.
		x.resetTruth(route.Prediction, req != nil && req.PromptCount() <= 1)
		h.met.decision(d)
		if e := h.log.Debug(); e.Enabled() {
			e.Str(logfield.LLBRoute, d.String()).Uint64(logfield.Ticket, route.Ticket.ID).Int(logfield.Retries, x.retries).
				Str(logfield.KVGuard, rr.Req.KV.Guard.String()).Uint32("prompt_blocks", rr.Req.KV.PromptBlocks).Msg("routed")
		}
		var a attempt
		switch {
		case req == nil:
			leg := actors.LegSingle
			if d.Decode >= 0 {
				leg = actors.LegPrefill
			}
			x.prefillEP, x.decodeEP = d.Prefill, -1
			a = h.serveSingle(x, nil, route.Ticket, leg, d.Prefill, retriesLeft > 0, 0, "")
		case d.Decode >= 0 && req.PromptCount() > 1:
			// Multi-prompt P/D request: served whole by the decode endpoint,
			// which computes the prefill itself (a shared remote_block_ids
			// would trip vLLM; see doc.go).
			x.prefillEP, x.decodeEP = -1, d.Decode
			a = h.serveSingle(x, req.Body, route.Ticket, actors.LegDecode, d.Decode, retriesLeft > 0, 0, "")
		case d.Decode >= 0:
			a = h.servePD(x, req, route, prefillRetries > 0, retriesLeft > 0)
		default:
			x.prefillEP, x.decodeEP = d.Prefill, -1
			a = h.serveSingle(x, req.Body, route.Ticket, actors.LegSingle, d.Prefill, retriesLeft > 0, 0, "")
		}
		if !a.retry {
			return
		}
		// A fresh RouteRequest per attempt: the router may still hold the
		// previous one (it learns the prompt when that ticket finishes).
		next := *rr
		if a.failedEP >= 0 && a.failedEP < 32 {
			next.Avoid |= 1 << uint(a.failedEP)
		}
		rr = &next
		x.retries++
		h.met.connectFailover.Inc()
		last = a.err
		if a.prefill {
			prefillRetries--
		} else {
			retriesLeft--
		}
	}
}
