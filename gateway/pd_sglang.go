package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/internal/logfield"
)

// SGLang's P/D protocol (its router's PD mode, sgl-model-gateway and
// mini_lb): concurrent dual dispatch through a bootstrap room.
//
//  1. The client body gets three members — bootstrap_host (the prefill
//     endpoint's address, an IPv6 one in brackets), bootstrap_port (the
//     rule's pdBootstrapPort: the prefill's --disaggregation-bootstrap-port)
//     and bootstrap_room (a fresh random integer in 0..2^63-1, as SGLang's
//     routers draw it) — replacing any the client sent.
//  2. That one body goes to the prefill and the decode endpoint at once:
//     the prefill waits on its bootstrap server until the decode joins the
//     room, computes the prompt's KV and sends it over; the decode
//     generates from it. Neither leg can wait for the other: a router that
//     sent the decode only after the prefill answered would hang both.
//  3. The client gets the decode's answer (streamed or not), relayed like
//     any answering leg (relay.go); the prefill's answer is read whole
//     (bounded) for its status, its timing and the engine's usage (cache
//     truth), in a goroutine of its own (pairLeg).
//
// Failure rules, before the client has a byte:
//
//   - the prefill fails (no connection, a reset, a non-2xx answer, its
//     deadline): the decode leg is cut at once and the pair is retried
//     elsewhere, avoiding the prefill endpoint, once (as vLLM's dead
//     prefill); an answer the prefill gave (a 4xx such as a prompt that is
//     too long, or a 5xx with no retry left) goes to the client verbatim,
//     never masked as a 502;
//   - the decode fails: the prefill leg is cut (it would wait for a room
//     nobody joins) and the answering leg's rules apply (attempt.go): a
//     decode that never answered is retried on a new pair, one that died
//     is resent within the migration limit or answered 502
//     pd_decode_backend_died; a decode 5xx (typically a KV transfer that
//     failed) is retried on a new pair while retries are left, else
//     relayed; a decode 4xx is relayed verbatim.
//
// After the client's first byte the prefill's fate no longer matters (the
// decode has the KV); a decode that breaks then is migrated or cut as any
// stream (migrate.go): a continuation is a new pair with a new room. Every
// leg is reported on the ticket (breakers, origin-5xx demotion, cache
// truth, the prefill's TTFT) before it is concluded.
//
// The decode leg's first-byte bound (pd_decode_timeout, or
// timeoutMemberData when the rule sets it) runs from the dispatch, so it is
// extended by the prefill deadline: the decode's first token comes only
// after the prefill computed and sent the prompt's KV.

// sglang is SGLang's bootstrap-room dual dispatch.
type sglang struct {
	port uint16 // the prefill endpoints' bootstrap port (pdBootstrapPort)
}

// serve implements pdDialect.
func (d sglang) serve(x *exchange) attempt {
	dec := &x.decision
	x.prefillEP, x.decodeEP, x.pd = dec.Prefill, dec.Decode, true
	body, err := BootstrapBody(x.req.Body, bootstrapHost(x.h.addrs[dec.Prefill]), int(d.port), newBootstrapRoom())
	if err != nil { // unreachable: the body parsed as an object
		return x.notAnObject()
	}
	x.startPair(dec.Prefill, body)
	dl := x.clientLeg(actors.LegDecode, dec.Decode)
	if dl.first > 0 {
		// The decode's first byte waits for the prefill's KV, whichever
		// bound guards it: pd_decode_timeout, or timeoutMemberData, which
		// would otherwise blame the decode for a prefill longer than it.
		dl.first += x.h.prefillTimeout
	}
	return x.answer(dl, body)
}

// bootstrapHost is the bootstrap_host of a prefill endpoint at addr
// (ip:port): its IP, an IPv6 one in brackets (SGLang joins host and port
// with a colon).
func bootstrapHost(addr string) string {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		host = addr
	}
	if ip := net.ParseIP(host); ip != nil && ip.To4() == nil {
		return "[" + host + "]"
	}
	return host
}

// newBootstrapRoom draws a room id: a random non-negative int64, as
// SGLang's routers do (the engine keeps rooms as signed 64-bit integers).
func newBootstrapRoom() uint64 { return rand.Uint64() & math.MaxInt64 }

// isBootstrapMember reports whether key is one of the members
// BootstrapBody sets.
func isBootstrapMember(key string) bool {
	switch key {
	case "bootstrap_host", "bootstrap_port", "bootstrap_room":
		return true
	}
	return false
}

// BootstrapBody returns a client body (a valid JSON object) with
// bootstrap_host, bootstrap_port and bootstrap_room set to host, port and
// room, after every other member (copied byte for byte, in order); the
// client's own bootstrap members are dropped.
func BootstrapBody(body []byte, host string, port int, room uint64) ([]byte, error) {
	ed := newObjectEditor(len(body) + len(host) + 96)
	err := forEachMember(body, func(m *member) error {
		if !isBootstrapMember(string(m.key)) {
			ed.copyMember(body, m)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var num [24]byte
	ed.add("bootstrap_host", strconv.AppendQuote(num[:0], host))
	ed.add("bootstrap_port", strconv.AppendInt(num[:0], int64(port), 10))
	ed.add("bootstrap_room", strconv.AppendUint(num[:0], room, 10))
	return ed.bytes(), nil
}

// Pair gate states: whether the answering leg committed to the client
// first, or the prefill's failure cut it first.
const (
	pairOpen uint32 = iota
	pairCommitted
	pairCut
)

// pairLeg is a P/D prefill leg running beside the answering leg, in a
// goroutine of its own. It is the exchange's (pooled with it) and never
// outlives the attempt: the attempt's end (conclude, finish) settles it,
// cutting it first when the answer failed. Until done is closed the
// goroutine owns lg, head, iov, the results and the exchange side's preHead and preBody;
// mu guards up and cut.
type pairLeg struct {
	x      *exchange
	lg     leg
	ticket actors.Ticket
	head   []byte // the request head, then the send's scratch
	body   []byte
	iov    net.Buffers
	iovArr [2][]byte
	done   chan struct{}
	// gate is pairOpen until the answering leg commits to the client
	// (pairCommitted) or the prefill's failure cuts it (pairCut).
	gate atomic.Uint32

	// ctx is the leg's dial context: the exchange's, cancelled by kill.
	ctx    context.Context
	cancel context.CancelFunc

	mu  sync.Mutex
	up  *upConn
	cut failCause // why the exchange cut the leg (causeNone: it did not)

	// The outcome, read once done is closed.
	pr      prefillAnswer
	err     error
	fail    actors.Failure
	cause   failCause
	elapsed time.Duration
}

// startPair sends body to the prefill endpoint ep in a goroutine of its
// own; the attempt's end settles it (settlePair).
func (x *exchange) startPair(ep int, body []byte) {
	p := &x.sides().pair
	*p = pairLeg{x: x, ticket: x.ticket, head: p.head[:0], body: body, done: make(chan struct{})}
	p.ctx, p.cancel = context.WithCancel(x.ctx)
	p.lg = x.newLeg(actors.LegPrefill, ep)
	p.lg.pair = p
	p.lg.limit, p.lg.limitCause = p.lg.start.Add(x.h.prefillTimeout), causePrefill
	// The head is built here: the client's request is this goroutine's.
	p.head = x.appendRequestHead(p.head, &p.lg, len(body))
	x.mu.Lock()
	x.pair = p
	x.mu.Unlock()
	go p.run()
}

// run is the prefill leg's goroutine.
func (p *pairLeg) run() {
	x := p.x
	defer func() {
		if r := recover(); r != nil { // a bug: the leg fails, the process goes on
			buf := make([]byte, 16<<10)
			buf = buf[:runtime.Stack(buf, false)]
			x.h.log.Error().Str(logfield.Panic, fmt.Sprint(r)).Bytes(logfield.Stack, buf).Msg("panic in a P/D prefill leg")
			p.lg.end(false)
			p.err, p.fail, p.cause = errPairPanic, actors.FailReset, causeReset
		}
		close(p.done)
	}()
	p.pr, p.err = x.sendPrefill(&p.lg, p.head, p.body)
	p.elapsed = time.Since(p.lg.start)
	o := actors.Outcome{Leg: actors.LegPrefill, Status: p.pr.status, TTFB: p.pr.ttfb, Duration: p.elapsed}
	if p.err != nil {
		p.fail, p.cause = p.lg.failure(p.err)
		o.Failure = p.fail
	} else {
		// The prefill leg computes one token: its answer is its first.
		o.TTFT, o.Usage = p.elapsed, p.pr.usage
		if !x.observe {
			o.Usage.Reported, o.Usage.CachedTokens = false, 0 // counted, not compared
		}
	}
	p.ticket.Report(o)
	if p.failed() && p.gate.CompareAndSwap(pairOpen, pairCut) {
		x.abortLeg(causePair)
		if c := x.h.pairCuts[0]; c != nil {
			c.Inc()
		}
	}
}

// failed reports whether the prefill failed of itself (not cut by the
// exchange): no answer, or a non-2xx one. Read once done is closed.
func (p *pairLeg) failed() bool {
	if p.err != nil {
		return p.fail != actors.FailClientGone
	}
	return p.pr.status/100 != 2
}

// attach registers c as the pair leg's connection (leg.attach).
func (p *pairLeg) attach(c *upConn) (failCause, bool) {
	if cause := p.x.abortCause(); cause != causeNone {
		return cause, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut != causeNone {
		return p.cut, false
	}
	p.up = c
	return causeNone, true
}

// detach ends attach's registration (leg.detach).
func (p *pairLeg) detach() (killed bool) {
	p.mu.Lock()
	if p.up != nil {
		killed = p.up.killed.Load()
	}
	p.up = nil
	p.mu.Unlock()
	return killed
}

// cutCause is why the exchange cut the leg (leg.cutCause).
func (p *pairLeg) cutCause() failCause {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// kill cuts the leg from outside its goroutine: its connection wakes at
// once and is never pooled; a send not started yet is refused.
func (p *pairLeg) kill(c failCause) {
	p.mu.Lock()
	if p.cut == causeNone {
		p.cut = c
	}
	if p.up != nil {
		p.up.killed.Store(true)
		_ = p.up.nc.SetDeadline(aLongTimeAgo)
	}
	p.mu.Unlock()
	p.cancel() // a dial in progress ends too
}

// pairCommit marks the answering leg as going to the client; false when
// the pair's prefill failed and cut it first. A prefill already over
// gives X-Llb-Route the engine's cached tokens (cache truth).
func (x *exchange) pairCommit() bool {
	p := x.pair
	if p == nil {
		return true
	}
	if !p.gate.CompareAndSwap(pairOpen, pairCommitted) && p.gate.Load() != pairCommitted {
		return false
	}
	select {
	case <-p.done:
		if p.err == nil && x.observe {
			x.cached = p.pr.usage
		}
	default:
	}
	return true
}

// pairGrace is how long a pair's prefill leg may still run once the
// answer it fed succeeded: it ends when the KV was sent, about when the
// decode's first token went out, so only a prefill frozen since is cut.
const pairGrace = 2 * time.Second

// errPairPanic is the failure of a prefill leg whose goroutine panicked.
var errPairPanic = errors.New("gateway: the prefill leg panicked")

// settlePair ends the attempt's prefill leg, if one runs beside the
// answering leg: when the answer succeeded it is given pairGrace to finish
// (it ends with the KV sent, at about the decode's first token), otherwise
// it is cut at once. Its outcome was reported on
// the ticket by its goroutine, before the caller concludes the ticket.
func (x *exchange) settlePair(ok bool) {
	p := x.pair
	if p == nil {
		return
	}
	if ok {
		t := time.NewTimer(pairGrace)
		select {
		case <-p.done:
		case <-t.C:
		}
		t.Stop()
	}
	select {
	case <-p.done:
	default:
		p.kill(causePair)
		<-p.done
		if c := x.h.pairCuts[1]; c != nil && !ok {
			c.Inc()
		}
	}
	p.cancel()
	x.mu.Lock()
	x.pair = nil
	if x.legCause == causePair {
		x.legCause = causeNone // the cut reached an answering leg already over
	}
	x.mu.Unlock()
	x.prefill = p.elapsed
	if p.err == nil {
		x.h.met.prefillDuration.Update(seconds(p.elapsed))
		if x.observe {
			x.cached = p.pr.usage
		}
	} else if p.cause == causeConnect || p.cause == causeReset {
		x.h.met.prefillDied.Inc()
	}
}

// pairFailed ends an attempt whose answering leg lg the pair's failed
// prefill cut before the client got a byte: the pair is retried avoiding
// the prefill (once), or the client gets the prefill's answer verbatim, or
// the error for how it failed (pd.go's prefill rules).
func (x *exchange) pairFailed(lg *leg) attempt {
	x.conclude(actors.Outcome{Leg: lg.kind, Failure: actors.FailClientGone, Duration: time.Since(lg.start)}, actors.Result{})
	p := &x.sides().pair
	if p.err != nil {
		x.detail = p.err.Error()
	} else {
		x.detail = "the prefill answered " + strconv.Itoa(p.pr.status)
	}
	if x.following {
		return attempt{retry: p.err != nil && p.cause.workerFault() || p.pr.status >= 500, failedEP: p.lg.ep, prefill: true}
	}
	x.clearResponse()
	if p.err == nil {
		if p.pr.status >= 500 && x.prefillRetries > 0 {
			return attempt{retry: true, failedEP: p.lg.ep, prefill: true, err: errBackendUnreachable(x.detail)}
		}
		x.relayPrefillError(&p.pr)
		return attempt{}
	}
	died := p.cause == causeConnect || p.cause == causeReset
	if died && x.prefillRetries > 0 {
		return attempt{retry: true, failedEP: p.lg.ep, prefill: true, err: x.clientErrorFor(p.cause, actors.LegPrefill, p.err)}
	}
	x.answerLeg(p.fail, p.cause, actors.LegPrefill, p.err)
	return attempt{}
}

// pairErrorGrace is how long a decode's 5xx waits for the pair's prefill
// answer: a prefill that refused the request (a 4xx) fails its room, and
// its decode then answers 5xx, a moment after the prefill's own answer.
const pairErrorGrace = 250 * time.Millisecond

// pairAnswered looks at the head of the answering leg lg of a pair: on a
// 5xx (a KV transfer that failed, typically) the prefill's answer, when it
// refused the request, goes to the client verbatim; otherwise the pair is
// retried while retries are left — avoiding the prefill when it failed,
// else the decode — and done is true. Anything else is relayed as usual
// (done false).
func (x *exchange) pairAnswered(lg *leg, ttfb time.Duration) (a attempt, done bool) {
	status := x.out.Header.StatusCode()
	if status < 500 {
		return attempt{}, false
	}
	p := x.pair
	t := time.NewTimer(pairErrorGrace)
	over := false
	select {
	case <-p.done:
		over = true
	case <-t.C:
	}
	t.Stop()
	refused := over && p.err == nil && p.pr.status/100 == 4
	prefillDown := over && p.failed() && !refused
	if !refused && !(prefillDown && x.prefillRetries > 0) && x.retriesLeft == 0 {
		return attempt{}, false // the decode's own answer, relayed
	}
	lg.end(false)
	x.unwatch()
	x.conclude(actors.Outcome{Leg: lg.kind, Status: status, TTFB: ttfb, Duration: time.Since(lg.start)}, actors.Result{})
	x.clearResponse()
	x.detail = "the decode answered " + strconv.Itoa(status)
	switch {
	case refused:
		x.relayPrefillError(&p.pr)
		return attempt{}, true
	case prefillDown && x.prefillRetries > 0:
		return attempt{retry: true, failedEP: p.lg.ep, prefill: true, err: errBackendUnreachable(x.detail)}, true
	}
	return attempt{retry: true, failedEP: lg.ep, err: errDecodeDied(x.detail)}, true
}
