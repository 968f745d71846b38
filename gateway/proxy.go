package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/llbproject/llb/actors"
)

// Single-leg proxying (single pool, P/D rescue, pass-through, multi-prompt
// P/D) and the response relay every leg that talks to the client shares.
//
// The relay holds the response headers back until the backend's first body
// byte (or a clean end) arrives, so a backend that dies before producing
// anything still gets a proper JSON error (502) instead of a truncated 200;
// once a byte went out, a broken upstream aborts the client connection.

// newUpstream builds the outbound request for endpoint ep. It never touches
// the inbound request; hdr must not be shared with a concurrent request.
func (h *Handler) newUpstream(ctx context.Context, in *http.Request, ep int, hdr http.Header, body []byte) *http.Request {
	u := &url.URL{Scheme: "http", Host: h.addrs[ep], Path: in.URL.Path, RawPath: in.URL.RawPath, RawQuery: in.URL.RawQuery}
	out := (&http.Request{
		Method:     in.Method,
		URL:        u,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     hdr,
		Host:       h.addrs[ep],
	}).WithContext(ctx)
	if len(body) > 0 {
		// A *bytes.Reader (inside NopCloser) is a body net/http knows to be in
		// memory: it writes headers and body in one syscall instead of
		// flushing the headers first.
		out.ContentLength = int64(len(body))
		out.Body = io.NopCloser(bytes.NewReader(body))
		// GetBody lets the transport replay the body on a stale keep-alive
		// connection that closed before the request was written.
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	return out
}

// idleWatch cancels a leg when the backend stays silent too long: first
// bounds the wait for its first byte (0: no bound), idle every silence after
// it (0: no bound). A nil *idleWatch is a disabled watch. Every method but
// timedOut runs on the leg's goroutine.
type idleWatch struct {
	t      *time.Timer
	idle   time.Duration
	cancel context.CancelCauseFunc
	fired  atomic.Bool
	// decode is true when first is the decode-stream bound (its expiry is
	// pd_decode_timeout, retried) rather than timeoutMemberData
	// (pd_idle_timeout).
	decode  bool
	started bool // a byte arrived: idle bounds now apply
}

func newIdleWatch(b legBounds, cancel context.CancelCauseFunc) *idleWatch {
	first, idle := b.first, b.idle
	if first <= 0 && idle <= 0 {
		return nil
	}
	w := &idleWatch{idle: idle, cancel: cancel, decode: b.decodeFirst}
	if first > 0 {
		w.t = time.AfterFunc(first, w.fire)
	}
	return w
}

func (w *idleWatch) fire() {
	w.fired.Store(true)
	w.cancel(errSilent)
}

// reset records that bytes arrived: the idle bound starts again.
func (w *idleWatch) reset() {
	if w == nil {
		return
	}
	w.started = true
	switch {
	case w.idle <= 0:
		if w.t != nil {
			w.t.Stop()
		}
	case w.t == nil:
		w.t = time.AfterFunc(w.idle, w.fire)
	default:
		w.t.Reset(w.idle)
	}
}

func (w *idleWatch) stop() {
	if w != nil && w.t != nil {
		w.t.Stop()
	}
}

func (w *idleWatch) timedOut() bool { return w != nil && w.fired.Load() }

// decodeFirstByte reports whether the watch fired on the decode-stream
// bound, while the leg still waited for its first byte.
func (w *idleWatch) decodeFirstByte() bool { return w.timedOut() && !w.started && w.decode }

// errSilent is the cause of a leg cancelled by its idleWatch.
var errSilent = errors.New("gateway: backend silent too long")

// failCause is why a leg failed, in the order causes are checked.
type failCause uint8

const (
	causeNone      failCause = iota
	causeClient              // the client left (its context is done)
	causeDeadline            // the request's max stream duration passed
	causeFirstByte           // a decode stream's first byte did not come in time
	causeIdle                // silent too long (timeoutMemberData, the stream idle bound)
	causeDown                // the endpoint was excluded (probe, breaker) before it answered
	causePrefill             // the prefill deadline passed
	causeConnect             // no connection
	causeReset               // the connection broke
)

// retryable reports whether a leg that failed this way, before the client
// got a byte, may be sent again elsewhere: the endpoint never answered
// (refused the connection, went down, or kept a decode stream silent past
// its first-byte bound).
func (c failCause) retryable() bool {
	return c == causeConnect || c == causeDown || c == causeFirstByte
}

// legFailure classifies err from a leg. legCtx is the leg's own context
// (prefill deadline, idle watch, endpoint watch), reqCtx the request's (max
// duration).
func legFailure(err error, in *http.Request, reqCtx, legCtx context.Context, idle *idleWatch) (actors.Failure, failCause) {
	switch {
	case in.Context().Err() != nil:
		return actors.FailClientGone, causeClient
	case reqCtx.Err() != nil:
		return actors.FailTimeout, causeDeadline
	case idle.decodeFirstByte():
		return actors.FailTimeout, causeFirstByte
	case idle.timedOut():
		return actors.FailTimeout, causeIdle
	case errors.Is(context.Cause(legCtx), errEndpointDown):
		return actors.FailTimeout, causeDown
	case legCtx.Err() != nil:
		return actors.FailTimeout, causePrefill
	}
	switch f := classifyUpstream(err, in.Context()); f {
	case actors.FailConnect:
		return f, causeConnect
	case actors.FailTimeout:
		return f, causeIdle
	default:
		return f, causeReset
	}
}

// clientErrorFor returns the answer for a leg that failed before the client
// got a byte (nil when the client is gone).
func (h *Handler) clientErrorFor(c failCause, leg actors.Leg, err error) *ClientError {
	detail := "no detail"
	switch {
	case h.cfg.HideBackendAddrs:
		detail = "the cause is in llb's access log"
	case err != nil:
		detail = err.Error()
	}
	switch c {
	case causeClient:
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

// legTimeouts are the silence bounds of one leg that answers the client:
// timeoutMemberData when the rule sets it (both before and after the first
// byte); otherwise a decode leg of a streamed request waits at most
// decodeFirstByte for its first event, and every leg at most streamIdle
// between reads once bytes flow. A non-streamed answer comes whole at the
// end of the generation, however long it is: nothing bounds its first byte
// but the max stream duration and the endpoint watch (a frozen worker is
// excluded by its probe, which cancels the leg).
func (h *Handler) legTimeouts(leg actors.Leg, stream bool) legBounds {
	if h.dataTimeout > 0 {
		return legBounds{first: h.dataTimeout, idle: h.dataTimeout}
	}
	b := legBounds{idle: h.streamIdle}
	if leg == actors.LegDecode && stream && h.decodeFirstByte > 0 {
		b.first, b.decodeFirst = h.decodeFirstByte, true
	}
	return b
}

// legBounds are a leg's silence bounds (0: none).
type legBounds struct {
	first, idle time.Duration
	decodeFirst bool // first is the decode-stream bound
}

// legIdle is the idle bound named in a 504 pd_idle_timeout.
func (h *Handler) legIdle() time.Duration {
	if h.dataTimeout > 0 {
		return h.dataTimeout
	}
	return h.streamIdle
}

// serveSingle runs one leg that answers the client directly, reports it and
// finishes the ticket. canRetry allows asking for a re-route when the
// endpoint never answered (see failCause.retryable). The caller has set
// x.prefillEP/x.decodeEP.
func (h *Handler) serveSingle(ctx context.Context, w http.ResponseWriter, r *http.Request, hdr http.Header, body []byte,
	t actors.Ticket, leg actors.Leg, ep int, canRetry bool, x *exchange) attempt {
	start := time.Now()
	lctx, lcancel := context.WithCancelCause(ctx)
	defer lcancel(nil)
	idle := newIdleWatch(h.legTimeouts(leg, x.stream), lcancel)
	defer idle.stop()
	watched := h.watch.add(ep, lcancel)
	defer h.watch.remove(ep, watched)
	resp, err := h.rt.RoundTrip(h.newUpstream(lctx, r, ep, hdr, body))
	if err != nil {
		fail, cause := legFailure(err, r, ctx, lctx, idle)
		return h.legFailed(w, x, t, leg, ep, fail, cause, err, time.Since(start), canRetry)
	}
	x.ttfb = time.Since(x.start)
	ttfb := time.Since(start)
	rel := h.relay(w, r, ctx, lctx, resp, idle, watched, leg == actors.LegDecode, x)
	if !rel.committed && rel.cause != causeNone {
		return h.legFailed(w, x, t, leg, ep, rel.failure, rel.cause, rel.err, time.Since(start), canRetry)
	}
	if leg == actors.LegDecode && !rel.firstByte.IsZero() {
		h.met.decodeTTFT.Update(seconds(rel.firstByte.Sub(start)))
	}
	h.router.Report(actors.Outcome{Ticket: t, Leg: leg, Status: resp.StatusCode, Failure: rel.failure, TTFB: ttfb, Duration: time.Since(start)})
	h.finish(x, t, actors.Result{OK: rel.failure == actors.FailNone && resp.StatusCode/100 == 2})
	return attempt{}
}

// legFailed reports a leg that failed before the client got a byte and
// finishes its ticket; then either asks for a re-route (retryable cause,
// canRetry) or answers the client.
func (h *Handler) legFailed(w http.ResponseWriter, x *exchange, t actors.Ticket, leg actors.Leg, ep int,
	fail actors.Failure, cause failCause, err error, took time.Duration, canRetry bool) attempt {
	h.router.Report(actors.Outcome{Ticket: t, Leg: leg, Failure: fail, Duration: took})
	h.finish(x, t, actors.Result{})
	if leg == actors.LegDecode && fail != actors.FailClientGone {
		h.met.decodeDied.Inc()
	}
	if err != nil {
		x.detail = err.Error()
	}
	ce := h.clientErrorFor(cause, leg, err)
	if cause.retryable() && canRetry {
		return attempt{retry: true, failedEP: ep, err: ce}
	}
	x.failure = fail
	if ce == nil {
		x.clientGone()
	} else {
		h.fail(w, x, ce)
	}
	return attempt{}
}

// relayResult is how a relay ended.
type relayResult struct {
	failure actors.Failure
	// firstByte is when the first body byte was read from the backend (zero
	// when none was).
	firstByte time.Time
	// committed is true once the response headers went to the client.
	committed bool
	// cause and err say why a relay that committed nothing failed; the
	// caller answers the client (or retries).
	cause failCause
	err   error
}

// isEventStream reports whether a response is SSE.
func isEventStream(resp *http.Response) bool {
	ct := resp.Header.Get("Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}

// relay streams resp to the client. Headers are committed with the first
// body byte; when the backend fails before that, relay commits nothing and
// returns the cause for the caller to answer or retry (zeroByteIsDeath also
// treats a clean but empty 2xx body without Content-Length: 0 as a death —
// the P/D decode rule). It closes resp.Body; watched stops answering to the
// endpoint watch once the response is committed.
func (h *Handler) relay(w http.ResponseWriter, r *http.Request, reqCtx, legCtx context.Context, resp *http.Response,
	idle *idleWatch, watched *watchedLeg, zeroByteIsDeath bool, x *exchange) relayResult {
	defer resp.Body.Close()
	bp := h.bufs.Get().(*[]byte)
	defer h.bufs.Put(bp)
	buf := *bp

	var res relayResult
	n, rerr := readSome(resp.Body, buf)
	if n > 0 {
		// Only bytes restart the silence bound: a read that failed (the
		// watch fired) must still be classified as a first-byte timeout.
		idle.reset()
		res.firstByte = time.Now()
	}
	if n == 0 && rerr != nil {
		empty2xx := rerr == io.EOF && resp.StatusCode/100 == 2 && resp.ContentLength != 0
		if rerr != io.EOF || (zeroByteIsDeath && empty2xx) {
			fail, cause := legFailure(rerr, r, reqCtx, legCtx, idle)
			if rerr == io.EOF {
				fail, cause = actors.FailReset, causeReset
				h.met.decodeZeroByte.Inc()
			}
			res.failure, res.cause, res.err = fail, cause, rerr
			return res
		}
	}
	if !watched.commit() {
		// The endpoint was taken out just now: its cancel is under way.
		fail, cause := legFailure(context.Cause(legCtx), r, reqCtx, legCtx, idle)
		res.failure, res.cause, res.err = fail, cause, context.Cause(legCtx)
		return res
	}
	res.committed = true

	// Commit the response.
	hdr := w.Header()
	copyResponseHeader(hdr, resp.Header)
	x.setRouteHeader(hdr, h.clientAddrs)
	for k := range resp.Trailer {
		hdr.Add("Trailer", k)
	}
	sse := isEventStream(resp)
	var fl http.Flusher
	if sse || resp.ContentLength == -1 {
		fl, _ = w.(http.Flusher)
	}
	if sse {
		h.met.activeStreams.Inc()
		defer h.met.activeStreams.Dec()
	}
	w.WriteHeader(resp.StatusCode)
	x.status = resp.StatusCode
	x.ttft = time.Since(x.start)
	setWriteDeadline(reqCtx, w)

	for {
		if n > 0 {
			wn, werr := w.Write(buf[:n])
			x.bytes += int64(wn)
			if werr != nil {
				res.failure, x.failure = actors.FailClientGone, actors.FailClientGone
				return res
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if rerr != nil {
			break
		}
		n, rerr = resp.Body.Read(buf)
		if n > 0 {
			idle.reset()
		}
	}
	if rerr != io.EOF {
		fail, _ := legFailure(rerr, r, reqCtx, legCtx, idle)
		res.failure, x.failure = fail, fail
		if fail != actors.FailClientGone {
			x.aborted = true
		}
		return res
	}
	if len(resp.Trailer) > 0 {
		for k, vv := range resp.Trailer {
			hdr[http.TrailerPrefix+k] = vv
		}
	}
	return res
}

// setWriteDeadline puts ctx's deadline (the max stream duration) on the
// client connection's writes, so a client that stopped reading cannot pin
// the handler beyond it (a shutdown cut closes the connection itself). It
// also bounds net/http's final flush after the handler returns; the server
// clears the deadline before reading the next request on the connection.
func setWriteDeadline(ctx context.Context, w http.ResponseWriter) {
	if dl, ok := ctx.Deadline(); ok {
		_ = http.NewResponseController(w).SetWriteDeadline(dl)
	}
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
