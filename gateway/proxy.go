package gateway

import (
	"bytes"
	"io"
	"time"

	"github.com/llbproject/llb/actors"
)

// Single-leg proxying (single pool, P/D rescue, pass-through, multi-prompt
// P/D, the P/D decode leg) and the response relay every leg that answers
// the client shares.
//
// The response head is read straight into the client's response. Then:
//
//   - a body of known length up to maxBufferedBody that is not SSE is read
//     whole and handed to the server with the head (one write to the
//     client; streaming such bodies costs a third of the throughput);
//   - anything else is streamed: the first body bytes are awaited before
//     anything is committed, so a backend that dies before producing
//     anything still gets a proper JSON error (502) instead of a truncated
//     200; then relayStream hands each upstream read to the server as one
//     chunk, flushed at once (an SSE event reaches the client as it
//     arrives). Once a byte went out, a broken upstream aborts the client
//     connection: the stream is never ended as if it were complete.

// maxBufferedBody is the largest response body (with a Content-Length, not
// SSE) read whole before it is sent; larger ones are streamed.
const maxBufferedBody = 1 << 20

// clientErrorFor returns the answer for a leg that failed before the client
// got a byte (nil when the client is gone or the request was cut).
func (h *Handler) clientErrorFor(c failCause, leg actors.Leg, err error) *ClientError {
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
		return errIdleTimeout(h.legIdle())
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

// legIdle is the idle bound named in a 504 pd_idle_timeout.
func (h *Handler) legIdle() time.Duration {
	if h.dataTimeout > 0 {
		return h.dataTimeout
	}
	return h.streamIdle
}

// legFailed reports a leg that failed before the client got a byte and
// finishes its ticket; then either asks for a re-route (retryable cause,
// canRetry) or answers the client: the client error for cause, or
// client-gone accounting (the exchange is marked aborted when the listener
// cut it).
func (h *Handler) legFailed(x *exchange, t actors.Ticket, kind actors.Leg, ep int,
	fail actors.Failure, cause failCause, err error, took time.Duration, canRetry bool) attempt {
	x.conclude(actors.Outcome{Leg: kind, Failure: fail, Duration: took}, actors.Result{})
	if kind == actors.LegDecode && fail != actors.FailClientGone {
		h.met.decodeDied.Inc()
	}
	if err != nil {
		x.detail = err.Error()
	}
	if cause.retryable() && canRetry {
		clearResponse(x)
		return attempt{retry: true, failedEP: ep, err: h.clientErrorFor(cause, kind, err)}
	}
	h.answerLeg(x, fail, cause, kind, err)
	return attempt{}
}

// answerLeg answers the client for a leg that failed before it got a
// byte: the client error for cause, or client-gone accounting (the
// exchange is marked aborted when the listener cut it).
func (h *Handler) answerLeg(x *exchange, fail actors.Failure, cause failCause, kind actors.Leg, err error) {
	x.failure = fail
	ce := h.clientErrorFor(cause, kind, err)
	if ce == nil {
		x.clientGone()
		x.aborted = x.aborted || cause == causeCut
		return
	}
	clearResponse(x)
	h.fail(x, ce)
}

// serveSingle runs one leg that answers the client directly, reports it and
// finishes the ticket (at once, or when a streamed body ends). canRetry
// allows asking for a re-route when the endpoint never answered (see
// failCause.retryable). The caller has set x.prefillEP/x.decodeEP.
func (h *Handler) serveSingle(x *exchange, body []byte, t actors.Ticket, kind actors.Leg, ep int, canRetry bool,
	own legHeaders, requestID string) attempt {
	start := time.Now()
	lg := x.clientLeg(kind, ep, start)
	h.watch.add(&x.watched, x, ep)
	x.scratch = x.appendRequestHead(x.scratch[:0], h.addrs[ep], len(body), own, requestID)
	if err := lg.send(x.scratch, body, &x.out.Header); err != nil {
		fail, cause := lg.failure(err)
		h.unwatch(x)
		return h.legFailed(x, t, kind, ep, fail, cause, err, time.Since(start), canRetry)
	}
	now := time.Now()
	x.ttfb = now.Sub(x.start)
	return h.relay(x, lg, t, now.Sub(start), canRetry)
}

// unwatch ends the leg's endpoint watch.
func (h *Handler) unwatch(x *exchange) {
	h.watch.remove(&x.watched)
	x.legAbortCause(true)
}

// relay sends the upstream response whose head is in x.out to the client:
// buffered, or streamed by x.relay (see the top of this file). It reports
// the leg and finishes t when the body ends; for a stream that is when the
// server has written it (relayStream.CloseWithError). A leg that fails
// before anything is committed goes to legFailed (answered or retried).
func (h *Handler) relay(x *exchange, lg leg, t actors.Ticket, ttfb time.Duration, canRetry bool) attempt {
	out := &x.out.Header
	s := &x.relay
	s.x, s.lg, s.ticket, s.ttfb = x, lg, t, ttfb
	s.status = out.StatusCode()
	s.decode = lg.kind == actors.LegDecode
	s.scan = x.observe && lg.kind == actors.LegSingle
	s.sse = isEventStream(out.ContentType())
	stripResponseHop(out)
	s.body.reset(lg.c.br, out, x.in.Header.IsHead())
	cl := out.ContentLength()
	// uncommitted ends the leg before anything went to the client.
	uncommitted := func(fail actors.Failure, cause failCause, err error) attempt {
		s.lg.end(false)
		s.release()
		h.unwatch(x)
		return h.legFailed(x, t, s.lg.kind, s.lg.ep, fail, cause, err, time.Since(s.lg.start), canRetry)
	}

	if !s.sse && (s.body.framing == framingNone || s.body.framing == framingLength && cl <= maxBufferedBody) {
		if s.body.framing == framingLength && cl > 0 {
			if s.lg.first == 0 {
				s.lg.begin() // a buffered body follows its head: the idle bound
			}
			if err := x.out.ReadBody(lg.c.br, cl); err != nil {
				fail, cause := s.lg.failure(err)
				return uncommitted(fail, cause, err)
			}
			s.body.eof = true
			s.firstByte = time.Now()
			x.bytes = int64(cl)
		}
		if !x.watched.commit() {
			return uncommitted(actors.FailTimeout, causeDown, nil)
		}
		h.unwatch(x)
		// The whole answer is in: X-Llb-Route can carry the engine's cached
		// tokens.
		s.observe(x.out.Body())
		h.commit(x)
		s.finish(actors.FailNone)
		return attempt{}
	}

	bp := h.bufs.Get().(*[]byte)
	s.buf = bp
	n, rerr := readSome(&s.body, *bp)
	if n > 0 {
		s.firstByte = time.Now()
		s.lg.begin()
		if !s.decode {
			x.ticket.FirstByte() // the prefill is over: the router stops counting it as queued
		}
	}
	if n == 0 && rerr != nil {
		empty2xx := rerr == io.EOF && s.status/100 == 2
		if rerr != io.EOF || (s.decode && empty2xx) {
			fail, cause := s.lg.failure(rerr)
			if rerr == io.EOF {
				// A decode's 2xx with an empty body is a death (LoxiLB's
				// rule): the decode produced nothing for the client.
				fail, cause = actors.FailReset, causeReset
				h.met.decodeZeroByte.Inc()
			}
			return uncommitted(fail, cause, rerr)
		}
	}
	if !x.watched.commit() {
		return uncommitted(actors.FailTimeout, causeDown, nil)
	}
	h.unwatch(x)
	s.n, s.rerr = n, rerr
	// -1: each upstream read is one chunk, flushed; an HTTP/1.0 client,
	// which cannot read chunks, gets them unframed, the body ending with
	// the connection (stream.go).
	size := -1
	if !s.sse && s.body.framing == framingLength {
		size = cl
	}
	h.commit(x)
	if s.sse {
		h.met.activeStreams.Inc()
	}
	x.out.SetBodyStream(s, size)
	x.stream = s
	return attempt{}
}

// commit completes the client response head: X-Llb-Route, the status and
// TTFT bookkeeping.
func (h *Handler) commit(x *exchange) {
	x.setRouteHeader(&x.out.Header, h.clientAddrs)
	x.status = x.out.StatusCode()
	x.ttft = time.Since(x.start) // when the server writes the head: at once
}

// isEventStream reports whether a Content-Type is SSE.
func isEventStream(ct []byte) bool {
	if i := bytes.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return bytes.EqualFold(bytes.TrimSpace(ct), []byte("text/event-stream"))
}

// readSome reads until at least one byte or an error.
func readSome(r io.Reader, buf []byte) (int, error) {
	for range 64 {
		n, err := r.Read(buf)
		if n > 0 || err != nil {
			return n, err
		}
	}
	return 0, io.ErrNoProgress
}
