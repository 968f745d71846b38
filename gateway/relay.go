package gateway

import (
	"bytes"
	"io"
	"time"

	"github.com/llbproject/llb/actors"
)

// The leg that answers the client — the only leg of a single pool, a P/D
// rescue, a pass-through API or a multi-prompt P/D request, the last leg of
// a P/D pair — and the response relay it ends with.
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

// answer runs lg, a leg whose response goes to the client, with body (nil:
// none), and relays its answer. The ticket is concluded when the answer
// ends (at once, or for a stream when the server has written it). A leg
// whose endpoint never answered may ask for a re-route (attempt.go). The
// caller has set x.prefillEP/x.decodeEP.
//
// While a migrated stream follows on (x.following), the leg's head goes to
// the exchange side's legHead instead, and the leg is handed to the running
// relay (follow).
func (x *exchange) answer(lg leg, body []byte) attempt {
	h := x.h
	h.watch.add(&x.watched, x, lg.ep)
	dst := &x.out.Header
	if x.following {
		dst = &x.sides().legHead
	}
	x.scratch = x.appendRequestHead(x.scratch[:0], &lg, len(body))
	if err := lg.send(x.scratch, body, dst); err != nil {
		fail, cause := lg.failure(err)
		x.unwatch()
		return x.legFailed(&lg, fail, cause, err)
	}
	now := lg.headAt
	if x.following {
		return x.follow(lg, now.Sub(lg.start))
	}
	if x.pair != nil {
		if a, done := x.pairAnswered(&lg, now.Sub(lg.start)); done {
			return a
		}
	}
	x.ttfb = now.Sub(x.start)
	return x.deliver(lg, now.Sub(lg.start))
}

// unwatch ends the leg's endpoint watch.
func (x *exchange) unwatch() {
	x.h.watch.remove(&x.watched)
	x.legAbortCause(true)
}

// deliver sends the upstream response whose head is in x.out to the client:
// buffered, or streamed by x.relay (see the top of this file). It
// concludes the ticket when the body ends; for a stream that is when the
// server has written it (relayStream.CloseWithError). A leg that fails
// before anything is committed goes to legFailed (answered or retried).
func (x *exchange) deliver(lg leg, ttfb time.Duration) attempt {
	h := x.h
	out := &x.out.Header
	s := &x.relay
	s.x, s.lg, s.ttfb = x, lg, ttfb
	s.status = out.StatusCode()
	s.decode = lg.kind == actors.LegDecode
	s.truth = x.observe && lg.kind == actors.LegSingle
	s.scan = s.truth || !x.rr.Passthrough
	s.sse = isEventStream(out.ContentType())
	x.ids.start(x, s.status)
	stripResponseHop(out)
	s.body.reset(lg.c, out, x.in.Header.IsHead())
	cl := out.ContentLength()
	// uncommitted ends the leg before anything went to the client.
	uncommitted := func(fail actors.Failure, cause failCause, err error) attempt {
		s.lg.end(false)
		s.release()
		x.unwatch()
		return x.legFailed(&s.lg, fail, cause, err)
	}

	if !s.sse && (s.body.framing == framingNone || s.body.framing == framingLength && cl <= maxBufferedBody) {
		if s.body.framing == framingLength && cl > 0 {
			// A body that came whole with its head waits for nothing: the
			// connection keeps its deadline (re-arming it would cost two
			// deadline updates per request, the next request's first-byte
			// bound being another).
			whole := lg.c.buffered() >= cl
			if s.lg.first == 0 && !whole {
				s.lg.begin() // the rest is still to come: the idle bound
			}
			if err := x.out.ReadBody(lg.c.reader(), cl); err != nil {
				fail, cause := s.lg.failure(err)
				return uncommitted(fail, cause, err)
			}
			s.body.eof = true
			s.firstByte = lg.headAt // it came with the head
			if !whole {
				s.firstByte = time.Now()
			}
			x.bytes = int64(cl)
		}
		if !x.watched.commit() {
			return uncommitted(actors.FailTimeout, causeDown, nil)
		}
		if !x.pairCommit() {
			return uncommitted(actors.FailClientGone, causePair, nil)
		}
		x.unwatch()
		// The whole answer is in: X-Llb-Route can carry the engine's cached
		// tokens.
		s.observe(x.out.Body()) // and pins a stored response's id
		x.commit()
		s.finish(actors.FailNone)
		return attempt{}
	}

	if s.body.drained() {
		s.body.wait() // the first token may be a prefill away: no buffer meanwhile
	}
	bp := h.bufs.Get().(*[]byte)
	s.buf = bp
	n, rerr := readSome(&s.body, *bp)
	if n > 0 {
		s.firstByte = time.Now()
		h.pools[lg.ep].life.note(s.firstByte)
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
	// A stream migration follows stays watched: its endpoint going down
	// cuts the leg, and the stream goes on elsewhere.
	s.track = x.mig.track && s.sse
	if s.track && !x.watched.stream() || !s.track && !x.watched.commit() {
		return uncommitted(actors.FailTimeout, causeDown, nil)
	}
	if !x.pairCommit() {
		return uncommitted(actors.FailClientGone, causePair, nil)
	}
	if !s.track {
		x.unwatch()
	}
	s.n, s.rerr = n, rerr
	// -1: each upstream read is one chunk, flushed; an HTTP/1.0 client,
	// which cannot read chunks, gets them unframed, the body ending with
	// the connection (stream.go).
	size := -1
	if !s.sse && s.body.framing == framingLength {
		size = cl
	}
	x.commit()
	if s.sse {
		h.met.activeStreams.Inc()
	}
	x.out.SetBodyStream(s, size)
	x.stream = s
	return attempt{}
}

// commit completes the client response head: X-Llb-Route, the status and
// TTFT bookkeeping.
func (x *exchange) commit() {
	x.setRouteHeader(&x.out.Header, x.h.clientAddrs)
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
