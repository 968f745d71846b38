package gateway

import (
	"net/http"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/ladder"
)

// The attempt loop: ask the router where the request goes, run the plan
// its decision calls for, and — while no byte has reached the client —
// route again avoiding an endpoint that never answered. The plans:
//
//   - one leg that answers the client (relay.go): a single pool, a P/D
//     rescue to a role-0 endpoint, a pass-through API, and on a P/D rule a
//     multi-prompt completion or an API other than completions and chat,
//     which go whole to the decision's decode endpoint (it computes the
//     prefill itself; see doc.go);
//   - a P/D pair: the rule's engine dialect runs the legs (pd.go).
//
// What may be retried: a leg whose endpoint never answered — refused the
// connection, was taken out of service (probe, breaker) before it
// answered, or kept a decode stream silent past its first-byte bound —
// within Options.MaxConnectRetries; a P/D prefill that could not be
// connected to or broke before answering, once. Every attempt reports its
// legs and finishes its ticket before the next one routes. Once a byte
// went out, nothing is retried.

// attempt is how one routed attempt ended.
type attempt struct {
	// retry asks the loop to route again avoiding failedEP. The attempt has
	// already reported its outcome and finished its ticket.
	retry    bool
	failedEP int
	// prefill is true when the failed leg was a P/D prefill.
	prefill bool
	// resend: the retry is a resend that spends a migration (migrate.go).
	resend bool
	// follow: a leg continuing a migrated stream answered; the relay reads
	// it (x.relay).
	follow bool
	// err is the answer if no retry can be made.
	err *ClientError
}

// proxy routes x with routing input rr and runs its attempts until one
// answers the client (or leaves it to a stream) or none can.
func (x *exchange) proxy(rr *actors.RouteRequest) {
	x.rr = rr
	x.retriesLeft, x.prefillRetries, x.lastErr = x.h.maxRetries, 1, nil
	if !rr.Passthrough {
		x.prepareMigration()
	}
	for x.route() {
		a := x.run()
		if !a.retry {
			return
		}
		x.reroute(a)
	}
}

// route asks the router for the current attempt's decision and takes its
// ticket. It answers the client and reports false when there is nothing
// to run: a routing error, a decision that admits nothing (after a retry:
// the answer of what failed), or one that names an endpoint the rule does
// not have.
func (x *exchange) route() bool {
	h := x.h
	x.rr.Req.TTFTObjective = x.objectiveLeft()
	route, err := h.router.Route(x.ctx, x.rr)
	if err != nil {
		switch c := x.abortCause(); {
		case c != causeNone:
			x.clientGone()
		case x.lastErr != nil:
			x.fail(x.lastErr)
		case x.ctx.Err() != nil:
			x.fail(errStreamDuration(h.maxStream))
		default:
			x.fail(errorForRouteErr(err))
		}
		return false
	}
	x.spareRR = x.rr // answered: the router holds no pointer to it (see spareRR)
	if !route.Decision.Available() && x.lastErr != nil {
		// The retry found nothing better than what failed: the client gets
		// that failure, and X-Llb-Route keeps the decision of the attempt
		// that ran (the header and the body tell the same story).
		x.fail(x.lastErr)
		return false
	}
	x.decision, x.decided, x.parked = route.Decision, true, route.Parked
	d := &x.decision
	if !d.Available() {
		switch {
		case d.Unavailable == ladder.ReasonModelNotServed:
			x.fail(errModelNotServed(x.req.Kind, x.rr.Model))
		default:
			x.fail(errorForDecision(d))
		}
		return false
	}
	if d.Prefill >= len(h.addrs) || d.Decode >= len(h.addrs) {
		// A decision naming an endpoint this rule does not have is a
		// runtime bug (e.g. a rule replaced under a stale router): release
		// the ticket and answer a retriable 503.
		route.Ticket.Finish(actors.Result{})
		e := planeError(http.StatusServiceUnavailable, CodeServiceUnavailable, "the router chose an endpoint this rule does not have ("+d.String()+")")
		e.RetryAfter = DefaultRetryAfter
		x.fail(e)
		return false
	}
	x.ticket = route.Ticket
	// Multi-prompt requests are predicted on their first prompt only: the
	// engine's usage sums them all, so they are not compared.
	x.resetTruth(route.Prediction, !x.rr.Passthrough && x.req.PromptCount() <= 1 && !x.following)
	h.met.decision(d)
	if e := h.log.Debug(); e.Enabled() {
		e.Str(logfield.LLBRoute, d.String()).Uint64(logfield.Ticket, route.Ticket.ID).Int(logfield.Retries, x.retries).
			Str(logfield.KVGuard, x.rr.Req.KV.Guard.String()).Uint32("prompt_blocks", x.rr.Req.KV.PromptBlocks).Msg("routed")
	}
	return true
}

// run runs the plan the attempt's decision calls for.
func (x *exchange) run() attempt {
	d := &x.decision
	if a, ok := x.ensureAdapter(); !ok {
		return a
	}
	switch {
	case x.rr.Passthrough:
		kind := actors.LegSingle
		if d.Decode >= 0 {
			kind = actors.LegPrefill
		}
		x.prefillEP, x.decodeEP = d.Prefill, -1
		var body []byte
		if b := x.in.Body(); len(b) > 0 {
			body = b
		}
		return x.answer(x.clientLeg(kind, d.Prefill), body)
	case d.Decode >= 0 && (x.req.PromptCount() > 1 || !x.req.Kind.splitsOnPD()):
		x.prefillEP, x.decodeEP = -1, d.Decode
		return x.answer(x.clientLeg(actors.LegDecode, d.Decode), x.req.Body)
	case d.Decode >= 0:
		return x.h.pd.serve(x)
	}
	x.prefillEP, x.decodeEP = d.Prefill, -1
	return x.answer(x.clientLeg(actors.LegSingle, d.Prefill), x.req.Body)
}

// ensureAdapter makes the endpoint that will answer serve the request's
// LoRA adapter (a runtime load, LLB_LORA_RUNTIME_LOAD). When it cannot,
// the ticket is finished and the attempt asks for a route avoiding it (or
// answers 502 when no retry is left).
func (x *exchange) ensureAdapter() (attempt, bool) {
	h, d := x.h, &x.decision
	if h.ensure == nil || x.rr.Model == "" || h.input.lora(x.rr.Model) == "" {
		return attempt{}, true
	}
	ep := d.Prefill
	if d.Decode >= 0 {
		ep = d.Decode
	}
	err := h.ensure(x.ctx, ep, x.rr.Model)
	if err == nil {
		return attempt{}, true
	}
	x.finish(actors.Result{})
	x.detail = err.Error()
	ce := errBackendUnreachable("the endpoint could not load LoRA adapter " + x.rr.Model + ": " + err.Error())
	if x.retriesLeft > 0 {
		return attempt{retry: true, failedEP: ep, err: ce}, false
	}
	x.fail(ce)
	return attempt{}, false
}

// reroute prepares the next attempt after a, which asked for a retry.
func (x *exchange) reroute(a attempt) {
	// A fresh RouteRequest per attempt: the previous one is the spare
	// (x.spareRR), which the exchange's next request zeroes and reuses.
	next := *x.rr
	if a.failedEP >= 0 && a.failedEP < 32 {
		next.Avoid |= 1 << uint(a.failedEP)
	}
	x.rr = &next
	x.retries++
	x.lastErr = a.err
	switch {
	case a.resend:
		x.mig.left--
		x.mig.count++
		x.h.met.migration(migResent)
	case a.prefill:
		x.h.met.connectFailover.Inc()
		x.prefillRetries--
	default:
		x.h.met.connectFailover.Inc()
		x.retriesLeft--
	}
}

// legFailed concludes the ticket for a leg that answers the client and
// failed before the client got a byte; then either asks for a re-route
// (the endpoint never answered, and retries are left) or answers the
// client (answerLeg).
func (x *exchange) legFailed(lg *leg, fail actors.Failure, cause failCause, err error) attempt {
	if cause == causePair {
		return x.pairFailed(lg) // the pair's prefill failed first (pd_sglang.go)
	}
	x.conclude(actors.Outcome{Leg: lg.kind, Failure: fail, Duration: time.Since(lg.start)}, actors.Result{})
	if lg.kind == actors.LegDecode && fail != actors.FailClientGone {
		x.h.met.decodeDied.Inc()
	}
	if err != nil {
		x.detail = err.Error()
	}
	if x.following {
		// A leg continuing a migrated stream: another endpoint may take
		// it, within the migration limit (migrate.go).
		return attempt{retry: cause.workerFault(), failedEP: lg.ep}
	}
	if cause.retryable() && x.retriesLeft > 0 {
		x.clearResponse()
		return attempt{retry: true, failedEP: lg.ep, err: x.clientErrorFor(cause, lg.kind, err)}
	}
	if cause == causeReset && x.mig.left > 0 && !x.rr.Passthrough {
		// The worker died mid-generation; the client has nothing yet.
		x.clearResponse()
		return attempt{retry: true, resend: true, failedEP: lg.ep, err: x.clientErrorFor(cause, lg.kind, err)}
	}
	x.answerLeg(fail, cause, lg.kind, err)
	return attempt{}
}

// answerLeg answers the client for a leg that failed before it got a
// byte: the client error for cause, or client-gone accounting (the
// exchange is marked aborted when the listener cut it).
func (x *exchange) answerLeg(fail actors.Failure, cause failCause, kind actors.Leg, err error) {
	x.failure = fail
	ce := x.clientErrorFor(cause, kind, err)
	if ce == nil {
		x.clientGone()
		x.aborted = x.aborted || cause == causeCut
		return
	}
	x.clearResponse()
	x.fail(ce)
}

// clientErrorFor returns the answer for a leg that failed before the client
// got a byte (nil when the client is gone or the request was cut).
func (x *exchange) clientErrorFor(c failCause, leg actors.Leg, err error) *ClientError {
	h := x.h
	detail := "no detail"
	switch {
	case h.opts.HideBackendAddrs:
		detail = "the cause is in llb's access log"
	case err != nil:
		detail = err.Error()
	}
	switch c {
	case causeClient, causeCut:
		return nil
	case causeDeadline:
		return errStreamDuration(h.maxStream)
	case causeFirstByte:
		return errDecodeTimeout(h.decodeFirstByte)
	case causeIdle:
		idle := h.streamIdle
		if h.dataTimeout > 0 {
			idle = h.dataTimeout
		}
		return errIdleTimeout(idle)
	case causeDown:
		return errBackendUnreachable("the endpoint was taken out of service (probe or breaker) before it answered")
	case causePrefill:
		return errPrefillTimeout(h.prefillTimeout)
	}
	if leg == actors.LegDecode {
		return errDecodeDied(detail)
	}
	return errBackendUnreachable(detail)
}
