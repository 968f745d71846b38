package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
	"github.com/valyala/fasthttp"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/tenant"
	"github.com/llbproject/llb/tokenizer"
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
	// Tokenizer tokenizes prompts for Tier 1.5 (tokenizer.New's: the
	// rule's engines' /tokenize, or in process); nil makes every text
	// prompt a tokenize guard (token-id prompts still hash).
	Tokenizer tokenizer.Tokenizer
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
	// ModelsBody returns the answer of GET /v1/models: the union of the
	// endpoints' model lists, each id once (nil while no list is known,
	// and then the request goes to an endpoint). nil: always an endpoint.
	ModelsBody func() []byte
	// EnsureAdapter makes endpoint ep serve LoRA adapter model before a
	// request for it is sent there (loading it at runtime when the rule
	// allows); nil when the endpoint serves it or the model is no adapter.
	// An error reroutes the request away from ep. nil: never called.
	EnsureAdapter func(ctx context.Context, ep int, model string) error
	// Budget is the process-wide request-body budget every listener
	// shares; nil bounds bodies per request only.
	Budget *BodyBudget
	// Conns is the process-wide client connection limit every listener
	// shares; nil sets none.
	Conns *ConnLimit
	// TenantMetrics receives the per-tenant and per-class series, shared
	// by every rule; nil keeps them in a private set.
	TenantMetrics *TenantMetrics
	// Keys are the API keys and tenant limits a rule with sse_mode
	// enforces; nil: none.
	Keys *tenant.Gate
}

// Handler is one rule's data plane. Both front ends (the HTTP/1.1 server
// and the h2c one, see Listener) hand it each request as an exchange, and
// its front door (serve) dispatches the exchange to the API the path
// names; the rest of the walk is the exchange's own (see doc.go). It is
// safe for concurrent use; each request runs entirely in its connection's
// goroutine, with no goroutine per request or token.
type Handler struct {
	rule  *rule.Compiled // read-only
	opts  Options        // defaults applied
	addrs []string       // endpoint ip:port, by index
	// clientAddrs is addrs, or nil when Options.HideBackendAddrs keeps
	// them out of what clients see (X-Llb-Route).
	clientAddrs []string
	pools       []*upstreamPool // keep-alive connections, by endpoint index
	router      actors.Router
	pd          pdDialect // the engines' P/D protocol
	// pdEngine names the rule's engine (its P/D dialect) in X-Llb-Route,
	// the access log and the pair metrics when it is not vLLM ("" for
	// vLLM).
	pdEngine string
	// pairCuts count the legs of concurrent P/D pairs cut because the
	// other leg failed first: [0] decode legs, [1] prefill legs (nil
	// without such a dialect).
	pairCuts   [2]*metrics.Counter
	modelsBody func() []byte
	ensure     func(ctx context.Context, ep int, model string) error
	input      *routeInput
	met        *Metrics
	tmet       *TenantMetrics
	keys       *tenant.Gate
	log        zerolog.Logger
	hopID      string // this instance in X-Llb-Hop
	watch      *EndpointWatch

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
	migrationLimit  int           // migrations per request (0: none)
	engine          engineRules   // what a continuation may send the rule's engine

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

// copyBufSize is the relay buffer size. A stream holds one only while a
// chunk is in flight (relayStream.WriteTo), not while it waits for the next.
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
		pd:              dialectFor(c),
		pdEngine:        pdEngineName(c),
		modelsBody:      deps.ModelsBody,
		ensure:          deps.EnsureAdapter,
		input:           input,
		met:             deps.Metrics,
		tmet:            deps.TenantMetrics,
		keys:            deps.Keys,
		log:             deps.Log,
		maxStream:       t.MaxStream,
		prefillTimeout:  t.Prefill,
		dataTimeout:     t.Data,
		decodeFirstByte: t.Decode,
		streamIdle:      t.StreamIdle,
		bodyLimit:       opts.BodyLimit,
		bodyReadTimeout: opts.BodyReadTimeout,
		maxRetries:      opts.MaxConnectRetries,
		migrationLimit:  c.MigrationLimit,
		engine:          engineRulesFor(c.Engine),
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
		h.pools = append(h.pools, newUpstreamPool(a, t.Connect, h.watch.signs(i), quietCycle(c.Probe)))
	}
	if !opts.HideBackendAddrs {
		h.clientAddrs = h.addrs
	}
	if h.met == nil {
		h.met = NewMetrics(nil, c.Key)
	}
	h.met.engine(c.Engine)
	if _, dual := h.pd.(sglang); dual {
		for i, leg := range [...]string{"decode", "prefill"} {
			h.pairCuts[i] = h.met.counter("llb_pd_pair_cuts_total", `engine="`+h.pdEngine+`",leg="`+leg+`"`)
		}
	}
	if h.tmet == nil {
		h.tmet = NewTenantMetrics(nil, 0)
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

// The front door. serve takes every request either front end accepted:
// the checks that hold for any path (a request that looped back, a paused
// rule, an HTTP version llb does not speak), then dispatch by method and
// path through the API table. Routed on the path as sent: "//v1/models" or
// "/v1/../v1/completions" are not the API's paths (fasthttp's Path() would
// clean them, and the backend would see the raw form).

// serve answers the request of x: it dispatches x to its API, which leaves
// the answer in x.out (x.stream set when the body is streamed).
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
		x.fail(planeError(http.StatusLoopDetected, CodeLoopDetected,
			"the request came back to the llb that forwarded it (an endpoint of this rule leads back to llb), or passed through more than "+
				strconv.Itoa(MaxHops)+" llb instances; it was not forwarded again"))
		return
	}
	if h.rule.Paused {
		x.api = "paused"
		e := planeError(http.StatusServiceUnavailable, CodeServiceUnavailable, "the rule is paused (adminStateUp is false); retry later")
		e.RetryAfter = DefaultRetryAfter
		x.fail(e)
		return
	}
	if proto := x.in.Header.Protocol(); string(proto) != "HTTP/1.1" && string(proto) != "HTTP/1.0" {
		// fasthttp serves a request line naming HTTP/2.0 or HTTP/9.9 as
		// HTTP/1.0; net/http answers 505, and so does llb.
		x.api = "unknown"
		x.out.SetConnectionClose()
		x.fail(requestError(http.StatusHTTPVersionNotSupported, CodeBadRequest, "",
			"this listener speaks HTTP/1.0, HTTP/1.1 and h2c with prior knowledge; not "+string(proto)))
		return
	}
	if x.refuseBadTarget() {
		return
	}
	method, path := x.in.Header.Method(), x.in.URI().PathOriginal()
	a := apiFor(path)
	x.generation = a != nil && a.gen
	if !x.classify() || !x.readObjective() || h.keysEnforced() && !x.authenticate() {
		x.api = apiOfPath(path)
		return
	}
	if a == nil {
		x.api = "unknown"
		x.fail(requestError(http.StatusNotFound, CodeUnknownURL, "",
			"llb serves "+served+"; not "+string(method)+" "+string(path)))
		return
	}
	x.api = a.name
	if !a.takes(method) {
		allow := strings.Join(a.methods, ", ")
		x.out.Header.Set("Allow", allow)
		x.fail(requestError(http.StatusMethodNotAllowed, CodeMethodNotAllowed, "", "this path accepts "+allow))
		return
	}
	a.serve(x)
}

// serveGenerate serves the inference APIs: it parses the request, builds
// its routing input and proxies it.
func (x *exchange) serveGenerate(kind APIKind) {
	x.h.met.aiRequests.Inc()
	req := &x.req
	// A body over maxKeptBodyBuffer is not reused (serveFast releases it;
	// the h2c front end reads every body into a fresh buffer).
	body := x.in.Body()
	var err error
	if kind.multipart() {
		err = req.parseMultipart(kind, body, x.in.Header.ContentType())
	} else {
		err = req.parse(kind, body, cap(body) > maxKeptBodyBuffer)
	}
	if err != nil {
		var ce *ClientError
		if !errors.As(err, &ce) {
			ce = requestError(http.StatusBadRequest, CodeInvalidJSON, "", err.Error())
		}
		x.fail(ce)
		return
	}
	if v := x.in.Header.Peek(HeaderConversationID); len(v) > 0 {
		req.ConversationID = string(v)
	}
	if len(x.in.Header.Peek(HeaderModel)) == 0 && !x.allowModel(req.Model) || !x.admitKey() {
		return
	}
	if x.h.rule.EnginePriority && (kind == KindCompletion || kind == KindChat || kind == KindResponses) {
		// The engine schedules by priority: the class decides it, not the
		// client (a key's class caps what a request may ask for).
		nb, err := withMember(req.Body, "priority", strconv.AppendInt(nil, int64(x.class.EnginePriority()), 10))
		if err != nil {
			x.fail(requestError(http.StatusBadRequest, CodeInvalidJSON, "", err.Error()))
			return
		}
		req.Body = nb
	}
	x.model, x.wantStream = req.Model, req.Stream
	rr := x.routeRequest()
	x.h.input.build(x.ctx, x.in, x.remote, x.ip, req, rr)
	x.kvGuard = rr.Req.KV.Guard
	x.tag(rr)
	x.proxy(rr)
}

// serveLight serves the model-aware APIs that are not inference
// (/tokenize, /detokenize, count_tokens): the least-loaded available
// endpoint serving the request's model answers, without admission.
func (x *exchange) serveLight(kind APIKind) {
	req := &x.req
	body := x.in.Body()
	if err := req.parse(kind, body, cap(body) > maxKeptBodyBuffer); err != nil {
		var ce *ClientError
		if !errors.As(err, &ce) {
			ce = requestError(http.StatusBadRequest, CodeInvalidJSON, "", err.Error())
		}
		x.fail(ce)
		return
	}
	if len(x.in.Header.Peek(HeaderModel)) == 0 && !x.allowModel(req.Model) || !x.admitKey() {
		return
	}
	x.model = req.Model
	rr := &actors.RouteRequest{Passthrough: true, Model: req.Model}
	x.h.input.buildBasic(x.in, x.remote, x.ip, rr)
	x.tag(rr)
	x.proxy(rr)
}

// serveStoredResponse serves GET /v1/responses/{id} and POST
// /v1/responses/{id}/cancel: the endpoint that stored the response
// answers (its pin), else any available endpoint (which answers vLLM's
// 404 when it does not hold the response).
func (x *exchange) serveStoredResponse() {
	rest := string(x.in.URI().PathOriginal()[len(PathResponses)+1:])
	id, op, _ := strings.Cut(rest, "/")
	method := string(x.in.Header.Method())
	if id == "" || !(op == "" && method == fasthttp.MethodGet || op == "cancel" && method == fasthttp.MethodPost) {
		x.api = "unknown"
		x.fail(requestError(http.StatusNotFound, CodeUnknownURL, "",
			"llb serves GET /v1/responses/{id} and POST /v1/responses/{id}/cancel; not "+method+" "+string(x.in.URI().PathOriginal())))
		return
	}
	if !x.admitKey() {
		return
	}
	rr := &actors.RouteRequest{Passthrough: true, Pin: actors.ResponseKey(id)}
	x.h.input.buildBasic(x.in, x.remote, x.ip, rr)
	x.tag(rr)
	x.proxy(rr)
}

// serveModels answers GET /v1/models with the union of the endpoints'
// lists, each model id once, as one vLLM server lists its own; before any
// list is known, an endpoint answers.
func (x *exchange) serveModels() {
	var body []byte
	if f := x.h.modelsBody; f != nil {
		body = f()
	}
	if body == nil {
		x.servePassthrough()
		return
	}
	x.status = http.StatusOK
	x.setRouteHeader(&x.out.Header, x.h.clientAddrs)
	x.out.Header.SetContentType("application/json")
	if !x.in.Header.IsHead() {
		x.out.SetBody(body)
		x.bytes = int64(len(body))
	} else {
		x.out.Header.SetContentLength(len(body))
	}
}

// servePassthrough forwards GET /health (and /ping, /version) to an
// available endpoint chosen by the router (so health and breaker state
// apply).
func (x *exchange) servePassthrough() {
	if !x.admitKey() {
		return
	}
	rr := &actors.RouteRequest{Passthrough: true}
	x.h.input.buildBasic(x.in, x.remote, x.ip, rr)
	x.tag(rr)
	x.proxy(rr)
}
