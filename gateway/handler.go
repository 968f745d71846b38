package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/inventory"
)

// ErrNoRouter is returned by NewHandler when Deps.Router is nil.
var ErrNoRouter = errors.New("gateway: no router")

// Deps are the runtime services a rule's data plane uses.
type Deps struct {
	// Router is the service's router (a *actors.Service); required.
	Router actors.Router
	// Hasher computes Tier-1.5 block keys. nil builds one from
	// RuleConfig.Hasher when kvExactMode is on; pass the runtime's own to
	// share it with the inventory mirror.
	Hasher inventory.ChainHasher
	// Tokenizer is the engine /tokenize client for Tier 1.5 (an
	// *inventory.RemoteTokenizer for one of the rule's endpoints); nil
	// makes every text prompt a tokenize guard (token-id prompts still
	// hash).
	Tokenizer inventory.Tokenizer
	// Metrics receives the rule's metrics; nil keeps them in a private set.
	Metrics *Metrics
	// Log receives the access log (one line per request: Info with
	// RuleConfig.AccessLog, else Debug) and decision traces (Debug). The
	// zero Logger discards.
	Log zerolog.Logger
	// Transport carries upstream requests; nil builds NewTransport with the
	// rule's connect timeout.
	Transport http.RoundTripper
	// Watch cancels legs to an endpoint the router takes out of service;
	// the runtime wires it to the service's OnEndpointDown. nil builds an
	// unconnected one.
	Watch *EndpointWatch
}

// Handler is one rule's data plane as an http.Handler: parsing, routing
// input, single-pool and P/D proxying, client errors, access log and
// metrics. It is safe for concurrent use; each request runs entirely in
// its own goroutine (the server's), with no goroutine per token.
type Handler struct {
	cfg   RuleConfig
	addrs []string // endpoint ip:port, by index
	// clientAddrs is addrs, or nil when RuleConfig.HideBackendAddrs keeps
	// them out of what clients see (X-Llb-Route).
	clientAddrs []string
	router      actors.Router
	rt          http.RoundTripper
	ownRT       *http.Transport // rt when the handler built it (closed on stop)
	input       *routeInput
	met         *Metrics
	log         zerolog.Logger
	hopID       string // this instance in X-Llb-Hop
	watch       *EndpointWatch

	// Effective settings (defaults applied).
	maxStream       time.Duration
	prefillTimeout  time.Duration
	dataTimeout     time.Duration
	decodeFirstByte time.Duration // 0: no bound
	streamIdle      time.Duration // 0: no bound
	bodyLimit       int64
	bodyReadTimeout time.Duration
	maxRetries      int

	bufs sync.Pool // *[]byte, copyBufSize

	// inflight counts ServeHTTP calls in progress (Listener.Shutdown waits
	// for them so no Report/Finish follows a stop).
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

// copyBufSize is the relay buffer size (one per active response).
const copyBufSize = 32 << 10

// NewHandler validates cfg and builds the rule's handler.
func NewHandler(cfg RuleConfig, deps Deps) (*Handler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Router == nil {
		return nil, ErrNoRouter
	}
	var kv *kvInput
	if cfg.KVExactMode != 0 {
		hasher := deps.Hasher
		if hasher == nil {
			var err error
			if hasher, err = cfg.Hasher.Build(); err != nil {
				return nil, fmt.Errorf("gateway: rule %q hasher: %w", cfg.Name, err)
			}
		}
		kv = newKVInput(hasher, deps.Tokenizer, cfg.tokenizeTimeout())
	}
	input, err := newRouteInput(&cfg, kv)
	if err != nil {
		return nil, err
	}
	h := &Handler{
		cfg:             cfg,
		router:          deps.Router,
		rt:              deps.Transport,
		input:           input,
		met:             deps.Metrics,
		log:             deps.Log,
		maxStream:       cfg.maxStreamDuration(),
		prefillTimeout:  cfg.prefillTimeout(),
		dataTimeout:     cfg.dataTimeout(),
		bodyLimit:       cfg.bodyLimit(),
		bodyReadTimeout: cfg.bodyReadTimeout(),
		maxRetries:      cfg.maxConnectRetries(),
		hopID:           cfg.HopID,
		watch:           deps.Watch,
		decodeFirstByte: cfg.decodeTimeout(),
		streamIdle:      cfg.streamIdleTimeout(),
	}
	if h.watch == nil {
		h.watch = NewEndpointWatch()
	}
	if h.hopID == "" {
		h.hopID = newHopID()
	}
	h.cfg.Endpoints = append([]EndpointConfig(nil), cfg.Endpoints...)
	for _, ep := range cfg.Endpoints {
		h.addrs = append(h.addrs, ep.Addr.String())
	}
	if !cfg.HideBackendAddrs {
		h.clientAddrs = h.addrs
	}
	if h.rt == nil {
		t := NewTransport(TransportConfig{ConnectTimeout: cfg.connectTimeout()})
		h.rt, h.ownRT = t, t
	}
	if h.met == nil {
		h.met = NewMetrics(nil, cfg.Name)
	}
	h.bufs.New = func() any { b := make([]byte, copyBufSize); return &b }
	return h, nil
}

// Metrics returns the handler's metrics.
func (h *Handler) Metrics() *Metrics { return h.met }

// ServeHTTP serves one client request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.inflight.Add(1)
	defer h.inflight.Done()
	h.total.Add(1)
	h.active.Add(1)
	defer h.active.Add(-1)
	if r.ContentLength > 0 {
		h.bytesIn.Add(r.ContentLength)
	}
	x := exchange{start: time.Now(), prefillEP: -1, decodeEP: -1}
	guardBody(w, r, x.start.Add(h.bodyReadTimeout))
	if looped(r.Header, h.hopID) {
		x.api = "loop"
		h.met.loops.Inc()
		h.fail(w, &x, planeError(http.StatusLoopDetected, CodeLoopDetected,
			"the request came back to the llb that forwarded it (an endpoint of this rule leads back to llb), or passed through more than "+
				strconv.Itoa(MaxHops)+" llb instances; it was not forwarded again"))
		h.record(r, &x)
		return
	}
	if h.cfg.Paused {
		x.api = "paused"
		e := planeError(http.StatusServiceUnavailable, CodeServiceUnavailable, "the rule is paused (adminStateUp is false); retry later")
		e.RetryAfter = DefaultRetryAfter
		h.fail(w, &x, e)
		h.record(r, &x)
		return
	}
	defer func() {
		// Only a panic (a bug) leaves a ticket open here: release it so the
		// endpoint's in-flight count does not leak, then let it propagate.
		if x.ticket.ID != 0 {
			h.router.Finish(x.ticket, actors.Result{})
		}
	}()
	switch r.URL.Path {
	case PathCompletions, PathChatCompletions:
		kind := KindCompletion
		if r.URL.Path == PathChatCompletions {
			kind = KindChat
		}
		x.api = kind.String()
		if r.Method != http.MethodPost {
			h.methodNotAllowed(w, &x, "POST")
			break
		}
		h.serveGenerate(w, r, kind, &x)
	case PathModels, PathHealth:
		x.api = "passthrough"
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.methodNotAllowed(w, &x, "GET, HEAD")
			break
		}
		h.servePassthrough(w, r, &x)
	default:
		x.api = "unknown"
		h.fail(w, &x, requestError(http.StatusNotFound, CodeUnknownURL, "",
			"llb serves POST "+PathCompletions+", POST "+PathChatCompletions+", GET "+PathModels+" and GET "+PathHealth+"; not "+r.Method+" "+r.URL.Path))
	}
	if errors.Is(context.Cause(r.Context()), errCut) {
		// The listener cut the request (drain deadline, Close), not the
		// client: whatever was or was not written, it is not an answer.
		x.aborted = true
	}
	h.record(r, &x)
	if x.aborted || x.status == StatusClientGone {
		// The response was already under way when the upstream broke: cut
		// the client connection rather than fake a clean end (httputil's
		// rule; net/http recovers this panic silently). So for a client
		// net/http took for gone — it may only have shut its write side,
		// and would otherwise read net/http's default answer, an empty
		// 200, for a request nobody served.
		panic(http.ErrAbortHandler)
	}
}

func (h *Handler) methodNotAllowed(w http.ResponseWriter, x *exchange, allow string) {
	w.Header().Set("Allow", allow)
	h.fail(w, x, requestError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "", "this path accepts "+allow))
}

// finish ends ticket t once and forgets it.
func (h *Handler) finish(x *exchange, t actors.Ticket, res actors.Result) {
	h.router.Finish(t, res)
	if x.ticket.ID == t.ID {
		x.ticket = actors.Ticket{}
	}
}

// fail answers the client with e (nothing was sent yet).
func (h *Handler) fail(w http.ResponseWriter, x *exchange, e *ClientError) {
	x.status, x.code = e.Status, e.Code
	x.setRouteHeader(w.Header(), h.clientAddrs)
	x.bytes += int64(e.write(w))
}

// serveGenerate handles the completion and chat APIs.
func (h *Handler) serveGenerate(w http.ResponseWriter, r *http.Request, kind APIKind, x *exchange) {
	ctx, cancel := context.WithTimeout(r.Context(), h.maxStream)
	defer cancel()
	h.met.aiRequests.Inc()
	body, cerr := readBody(w, r, h.bodyLimit)
	if cerr != nil {
		// Whatever is left of the body must not be read as the next request
		// (nor drained after we answer, without a deadline): close. (HTTP/2
		// resets just the stream; a Connection header there would end the
		// whole connection.)
		if r.ProtoMajor == 1 {
			w.Header().Set("Connection", "close")
		}
		if cerr.Code != CodeBodyTimeout && r.Context().Err() != nil {
			x.clientGone()
			return
		}
		h.fail(w, x, cerr)
		return
	}
	// The body is in: the rest of the exchange may take as long as the
	// stream does (net/http's background read watches for the client
	// leaving).
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	req, err := ParseRequest(kind, body)
	if err != nil {
		var ce *ClientError
		if !errors.As(err, &ce) {
			ce = requestError(http.StatusBadRequest, CodeInvalidJSON, "", err.Error())
		}
		h.fail(w, x, ce)
		return
	}
	req.ConversationID = r.Header.Get(HeaderConversationID)
	x.model, x.stream = req.Model, req.Stream
	var rr actors.RouteRequest
	h.input.build(ctx, r, req, &rr)
	x.kvGuard = rr.Req.KV.Guard
	h.proxy(ctx, w, r, req, &rr, x)
}

// servePassthrough forwards GET /v1/models and /health to an available
// endpoint chosen by the router (so health and breaker state apply).
func (h *Handler) servePassthrough(w http.ResponseWriter, r *http.Request, x *exchange) {
	ctx, cancel := context.WithTimeout(r.Context(), h.maxStream)
	defer cancel()
	rr := actors.RouteRequest{Passthrough: true}
	h.input.buildBasic(r, &rr)
	h.proxy(ctx, w, r, nil, &rr, x)
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
func (h *Handler) proxy(ctx context.Context, w http.ResponseWriter, r *http.Request, req *Request, rr *actors.RouteRequest, x *exchange) {
	hdr := outboundHeader(r, h.cfg.TrustForwardedHeaders, h.hopID)
	retriesLeft, prefillRetries := h.maxRetries, 1
	var last *ClientError
	for {
		route, err := h.router.Route(ctx, rr)
		if err != nil {
			switch {
			case r.Context().Err() != nil:
				x.clientGone()
			case last != nil:
				h.fail(w, x, last)
			case ctx.Err() != nil:
				h.fail(w, x, errStreamDuration(h.maxStream))
			default:
				h.fail(w, x, errorForRouteErr(err))
			}
			return
		}
		x.decision, x.decided, x.parked = route.Decision, true, route.Parked
		d := &x.decision
		if !d.Available() {
			if last != nil {
				h.fail(w, x, last) // the retry found nothing better than what failed
			} else {
				h.fail(w, x, errorForDecision(d))
			}
			return
		}
		if d.Prefill >= len(h.addrs) || d.Decode >= len(h.addrs) {
			// A decision naming an endpoint this rule does not have is a
			// runtime bug (e.g. a rule replaced under a stale router):
			// release the ticket and answer a retriable 503.
			h.router.Finish(route.Ticket, actors.Result{})
			e := planeError(http.StatusServiceUnavailable, CodeServiceUnavailable, "the router chose an endpoint this rule does not have ("+d.String()+")")
			e.RetryAfter = DefaultRetryAfter
			h.fail(w, x, e)
			return
		}
		x.ticket = route.Ticket
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
			a = h.serveSingle(ctx, w, r, hdr, nil, route.Ticket, leg, d.Prefill, retriesLeft > 0, x)
		case d.Decode >= 0 && req.PromptCount() > 1:
			// Multi-prompt P/D request: served whole by the decode endpoint,
			// which computes the prefill itself (a shared remote_block_ids
			// would trip vLLM; see doc.go).
			x.prefillEP, x.decodeEP = -1, d.Decode
			a = h.serveSingle(ctx, w, r, hdr, req.Body, route.Ticket, actors.LegDecode, d.Decode, retriesLeft > 0, x)
		case d.Decode >= 0:
			a = h.servePD(ctx, w, r, hdr, req, route, prefillRetries > 0, retriesLeft > 0, x)
		default:
			x.prefillEP, x.decodeEP = d.Prefill, -1
			a = h.serveSingle(ctx, w, r, hdr, req.Body, route.Ticket, actors.LegSingle, d.Prefill, retriesLeft > 0, x)
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
