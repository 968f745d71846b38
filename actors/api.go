package actors

import (
	"context"
	"errors"
	"time"

	"github.com/llbproject/llb/ladder"
)

// This file is the runtime's contract with the data plane (gateway/): what a
// request asks the service's router actor, what it gets back, and how it
// reports through the ticket it was given: the first byte, each leg's
// outcome and the request's end. The gateway calls Route (a Router) and the
// Ticket's methods from its request goroutines; every call turns into a
// message to the service's router actor, which owns all mutable routing
// state.

// Errors returned by Service.Route. Test with errors.Is.
var (
	// ErrParkTimeout: the request was parked by the admission gate and no
	// capacity freed before its deadline (answer 504
	// pd_admission_park_timeout).
	ErrParkTimeout = errors.New("actors: parked request timed out")
	// ErrStopped: the service is stopping or stopped (answer 503
	// service_unavailable).
	ErrStopped = errors.New("actors: service stopped")
	// ErrRouterTimeout: the router actor handled no message for 10
	// RouteTimeouts in a row while the request waited for its decision
	// (answer 503; counted — the router is stuck; a merely slow one is
	// waited for).
	ErrRouterTimeout = errors.New("actors: router did not answer in time")
)

// RouteRequest is one request's routing input, built by the gateway in the
// request's own goroutine (parsing, tokenizing and hashing happen there, in
// parallel across requests).
type RouteRequest struct {
	// Req is the ladder input: session key, prompt bytes for the Tier-1
	// trie, prefix/conversation hashes for CHWBL, and the Tier-1.5 KV input
	// (prompt blocks/tokens, or the guard reason when no chain could be
	// computed). Req.Session is filled by the router from its session shard;
	// the gateway leaves it zero.
	Req ladder.Request
	// Chain is the prompt's block-key chain (inventory keys) for Tier 1.5;
	// nil when KV-exact is off or Req.KV.Guard is set. Read-only once sent:
	// the router and inventory actors share it without copying.
	Chain []uint64
	// Avoid is a bitmask of endpoint indexes the decision must not use —
	// the endpoints an earlier attempt of this same client request failed
	// to connect to (retry before the first byte).
	Avoid uint32
	// Streamed is true when the client asked for a stream: its first body
	// byte is its first token, and the ticket's FirstByte ends its
	// prefill charge (EndpointView.PrefillBlocks) there. A single-pool
	// request that does not stream answers in one piece at the end; its
	// charge ends at the first engine scrape, begun after it was sent,
	// that reports no waiting request (its prefill has been scheduled),
	// or with its answer, whichever comes first.
	Streamed bool
	// Chat and ExtraKeys describe the prompt for the cache-truth check's
	// diagnosis: a chat completion (llb applied a chat template), blocks
	// carrying extra keys (a LoRA adapter or a cache_salt).
	Chat, ExtraKeys bool
	// Tenant is the request's fairness identity (the API key's tenant, or
	// the client's x-gateway-inference-fairness-id when the rule does not
	// check keys); "" is the anonymous tenant. Within a class, the
	// admission queue serves the tenant that has received the least
	// service first (ladder.FlowQueue). The class is Req.Class.
	Tenant string
	// PromptTokens is the prompt's size in tokens, exact when the gateway
	// tokenized it, else estimated (4 bytes a token): what the admission
	// queue charges the tenant when the request is admitted. Its
	// completion tokens are charged when it ends (Usage).
	PromptTokens uint32
	// Passthrough marks a request that is not inference (GET /v1/models,
	// /health, /tokenize, GET /v1/responses/{id}): it goes to the
	// least-loaded available endpoint of any role, bypassing the ladder and
	// the admission gate (a health check must not be parked or shed), and
	// teaches nothing. Its decision has Tier ladder.TierNone.
	Passthrough bool
	// Model is the served-model name the request asks for (the body's
	// model, or the multipart form's); "" when it names none, and then any
	// endpoint may serve it. The router decides among the endpoints whose
	// /v1/models lists it (Service.SetServedModels; an endpoint whose list
	// is not known yet counts as serving it); when none does, the decision
	// is unavailable with ladder.ReasonModelNotServed.
	Model string
	// Pin is the session-table key of a stored response the request
	// continues or names (ResponseKey of a Responses API
	// previous_response_id, or of GET /v1/responses/{id}); "" for none.
	// When the table holds the key, only the endpoint that stored the
	// response may serve the request (on a P/D rule: the only decode
	// endpoint); when it does not, routing is as usual.
	Pin string
}

// ResponseKey is the session-table key under which the endpoint that
// stored response id is pinned (Ticket.Pin, RouteRequest.Pin). The prefix
// keeps response ids apart from Tier-0 session keys.
func ResponseKey(id string) string { return "response\x1f" + id }

// Ticket is an admitted request's claim on the service that admitted it,
// and the data plane's one way back to that service (grpc's
// PickResult.Done): through it the gateway tells of the answering leg's
// first byte, reports each leg's outcome and finishes the request. A
// ticket is bound to the service that issued it, so its reports reach
// that service wherever the request was routed from (a replaced rule's
// late reports go to the retired service, where they change nothing).
//
// The zero Ticket is not admitted; its methods do nothing.
type Ticket struct {
	// ID is unique per process for the process's lifetime; 0 is never
	// used.
	ID uint64
	// Prefill and Decode are the endpoints whose in-flight counts this
	// ticket holds (Decode is -1 for single-pool and rescue routes).
	Prefill int
	Decode  int
	// ledger is the issuing service's account of its tickets.
	ledger Ledger
}

// NewTicket returns ticket id, holding endpoints prefill and decode,
// whose reports go to l. *Service binds its own tickets; other routers
// (test fakes, benchmarks) use this.
func NewTicket(l Ledger, id uint64, prefill, decode int) Ticket {
	return Ticket{ID: id, Prefill: prefill, Decode: decode, ledger: l}
}

// FirstByte tells the service that the answering leg's first body byte
// arrived: for a streamed single-pool request its first token, so its
// prefill is over (the headroom law stops counting it as queued work on
// the endpoint). A P/D prefill leg ends with its Report instead.
func (t Ticket) FirstByte() {
	if t.ledger != nil {
		t.ledger.FirstByte(t)
	}
}

// Report records one leg attempt's outcome: it releases that leg's
// in-flight count and feeds the endpoint's breaker. Reporting the same leg
// twice is a no-op. o.Ticket is set to t.
func (t Ticket) Report(o Outcome) {
	if t.ledger != nil {
		o.Ticket = t
		t.ledger.Report(o)
	}
}

// Conclude reports the ticket's last leg and finishes it, as Report then
// Finish do, in one message.
func (t Ticket) Conclude(o Outcome, res Result) {
	if t.ledger != nil {
		o.Ticket = t
		t.ledger.Conclude(o, res)
	}
}

// Pin records that the ticket's answering endpoint now holds key (a
// response it stored, ResponseKey): requests naming key (RouteRequest.Pin)
// go there only, across replicas too (the session table). The data plane
// pins as soon as it sees the response's id, before the client has the
// whole answer, so the client's next turn finds the pin.
func (t Ticket) Pin(key string) {
	if t.ledger != nil && key != "" {
		t.ledger.Pin(t, key)
	}
}

// Finish ends the ticket: it releases whatever legs were not reported,
// and when res.OK pins the session and teaches the trie. Every admitted
// ticket is finished (or concluded) exactly once; later calls are no-ops.
func (t Ticket) Finish(res Result) {
	if t.ledger != nil {
		t.ledger.Finish(t, res)
	}
}

// Ledger is a service's account of the tickets it issued: in-flight
// counts, queued prefill work, breakers, session pins and the trie's
// lessons. *Service is the ledger of its own tickets. The data plane
// reaches it only through a Ticket's methods, which document the
// contract; a ledger ignores what it hears about tickets it does not
// hold.
type Ledger interface {
	FirstByte(t Ticket)
	Report(o Outcome)
	Conclude(o Outcome, res Result)
	Finish(t Ticket, res Result)
	Pin(t Ticket, key string)
}

// Route is the router's answer to Route.
type Route struct {
	// Decision is the ladder's decision, trace included. When
	// Decision.Available() is false the gateway answers the client with the
	// error the decision names (429 shed, 503 refuse/unavailable).
	Decision ladder.Decision
	// Ticket is set when the decision admitted the request (the zero
	// Ticket otherwise, whose methods do nothing).
	Ticket Ticket
	// Parked is how long the request waited in an admission queue before it
	// was admitted (0 when it never parked).
	Parked time.Duration
	// Prediction is how many prompt tokens llb expects the prefill (or
	// single-pool) endpoint to find in its prefix cache.
	Prediction Prediction
}

// Prediction is llb's cached-token prediction for the endpoint a request
// goes to, from its mirrored KV inventory.
type Prediction struct {
	// OK is false when llb has none (KV-exact off, no block chain for the
	// prompt, or an endpoint whose KV events are not mirrored).
	OK bool
	// CachedTokens is ladder.PredictedCachedTokens of the endpoint's
	// overlap (every mirrored tier).
	CachedTokens uint32
}

// Usage is what the engine reported in a response's usage object.
type Usage struct {
	// Reported is true when the response carried
	// usage.prompt_tokens_details.cached_tokens (vLLM does when started
	// with --enable-prompt-tokens-details).
	Reported bool
	// CachedTokens is usage.prompt_tokens_details.cached_tokens.
	CachedTokens uint32
	// PromptTokens is usage.prompt_tokens (0 when absent).
	PromptTokens uint32
	// CompletionTokens is usage.completion_tokens; for a stream without a
	// usage chunk, the number of content deltas it carried (an engine
	// streams one token per delta unless told otherwise). 0 when unknown.
	CompletionTokens uint32
}

// Leg names the part of a request an Outcome describes.
type Leg uint8

// Legs.
const (
	// LegSingle is a single-pool request (or a P/D rescue to a role-0
	// endpoint): one leg, held on Ticket.Prefill.
	LegSingle Leg = iota
	// LegPrefill is the P/D prefill leg, held on Ticket.Prefill.
	LegPrefill
	// LegDecode is the P/D decode leg, held on Ticket.Decode.
	LegDecode
)

var legNames = [...]string{"single", "prefill", "decode"}

// String returns "single", "prefill" or "decode".
func (l Leg) String() string {
	if int(l) < len(legNames) {
		return legNames[l]
	}
	return "leg(?)"
}

// Failure classifies how a leg failed, for the circuit breaker.
type Failure uint8

// Failure classes.
const (
	// FailNone: the origin answered (Status holds its HTTP status).
	FailNone Failure = iota
	// FailConnect: no connection could be made (refused, unreachable, dial
	// timeout). Counts toward the breaker; the gateway may retry elsewhere.
	FailConnect
	// FailReset: the connection broke after it was made (EOF, reset, read
	// timeout before the response completed). Counts toward the breaker.
	FailReset
	// FailTimeout: the leg exceeded its deadline (prefill timeout, idle
	// timeout). Counts toward the breaker.
	FailTimeout
	// FailClientGone: the client went away; neither success nor failure for
	// the endpoint (Caddy's 499 rule: no health penalty).
	FailClientGone
)

var failureNames = [...]string{"none", "connect", "reset", "timeout", "client_gone"}

// String returns the failure class's snake_case name.
func (f Failure) String() string {
	if int(f) < len(failureNames) {
		return failureNames[f]
	}
	return "failure(?)"
}

// Outcome reports one attempt of one leg on one endpoint. Reporting
// releases that leg's in-flight count on the endpoint and feeds the
// endpoint's circuit breaker.
type Outcome struct {
	// Ticket is the ticket the leg ran under.
	Ticket Ticket
	// Leg is which leg this was; it selects the endpoint the ticket holds.
	Leg Leg
	// Status is the origin's HTTP status; 0 when there was no response.
	Status int
	// Failure classifies a transport failure; FailNone when Status is set.
	Failure Failure
	// TTFB is the time to the origin's first response byte (0 if none).
	TTFB time.Duration
	// Duration is the leg's total time.
	Duration time.Duration
	// TTFT is the leg's measured time to first token, from sending it:
	// a streamed single leg's first body byte (its first token), a P/D
	// prefill leg's whole answer (it computes one token). 0 when not
	// measured (an answer that does not stream comes whole at the end).
	// The router compares it with the decision's TTFT prediction.
	TTFT time.Duration
	// Usage is the engine's usage report, when the leg's response carried
	// one (single and prefill legs). The router compares its cached tokens
	// with the ticket's Prediction.
	Usage Usage
}

// Result is the final word on a ticket.
type Result struct {
	// OK is true when the client got a successful (2xx) answer. Only then
	// does the router pin the session and teach the Tier-1 trie.
	OK bool
}

// Router is what the gateway needs from a running service: where each
// request goes. *Service implements it; lifecycle's swap router hands each
// call to the rule's current service; gateway tests use fakes.
type Router interface {
	// Route decides where a request goes. It blocks while the request is
	// parked by the admission gate, until ctx ends (then it returns
	// ctx.Err() and leaves nothing held), or until the park deadline
	// (ErrParkTimeout). An admitted request's Route.Ticket is bound to the
	// service that decided it; the gateway reports and finishes through
	// it.
	Route(ctx context.Context, rr *RouteRequest) (Route, error)
}
