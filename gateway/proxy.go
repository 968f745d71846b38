package gateway

import (
	"bytes"
	"context"
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

// idleWatch cancels a leg when the backend stays silent for d
// (timeoutMemberData). A nil *idleWatch is a disabled watch.
type idleWatch struct {
	t     *time.Timer
	d     time.Duration
	fired atomic.Bool
}

func newIdleWatch(d time.Duration, cancel context.CancelFunc) *idleWatch {
	if d <= 0 {
		return nil
	}
	w := &idleWatch{d: d}
	w.t = time.AfterFunc(d, func() { w.fired.Store(true); cancel() })
	return w
}

func (w *idleWatch) reset() {
	if w != nil {
		w.t.Reset(w.d)
	}
}

func (w *idleWatch) stop() {
	if w != nil {
		w.t.Stop()
	}
}

func (w *idleWatch) timedOut() bool { return w != nil && w.fired.Load() }

// failCause is why a leg failed, in the order causes are checked.
type failCause uint8

const (
	causeNone     failCause = iota
	causeClient             // the client left (its context is done)
	causeDeadline           // the request's max stream duration passed
	causeIdle               // timeoutMemberData
	causePrefill            // the prefill deadline passed
	causeConnect            // no connection
	causeReset              // the connection broke
)

// legFailure classifies err from a leg. legCtx is the leg's own context
// (prefill deadline), reqCtx the request's (max duration).
func legFailure(err error, in *http.Request, reqCtx, legCtx context.Context, idle *idleWatch) (actors.Failure, failCause) {
	switch {
	case in.Context().Err() != nil:
		return actors.FailClientGone, causeClient
	case reqCtx.Err() != nil:
		return actors.FailTimeout, causeDeadline
	case idle.timedOut():
		return actors.FailTimeout, causeIdle
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
	if err != nil {
		detail = err.Error()
	}
	switch c {
	case causeClient:
		return nil
	case causeDeadline:
		return errStreamDuration(h.maxStream)
	case causeIdle:
		return errIdleTimeout(h.dataTimeout)
	case causePrefill:
		return errPrefillTimeout(h.prefillTimeout)
	}
	if leg == actors.LegDecode {
		return errDecodeDied(detail)
	}
	return errBackendUnreachable(detail)
}

// serveSingle runs one leg that answers the client directly, reports it and
// finishes the ticket. canRetry allows asking for a re-route after a
// connect failure. The caller has set x.prefillEP/x.decodeEP.
func (h *Handler) serveSingle(ctx context.Context, w http.ResponseWriter, r *http.Request, hdr http.Header, body []byte,
	t actors.Ticket, leg actors.Leg, ep int, canRetry bool, x *exchange) attempt {
	start := time.Now()
	lctx := ctx
	var idle *idleWatch
	if h.dataTimeout > 0 {
		var lcancel context.CancelFunc
		lctx, lcancel = context.WithCancel(ctx)
		defer lcancel()
		idle = newIdleWatch(h.dataTimeout, lcancel)
		defer idle.stop()
	}
	resp, err := h.rt.RoundTrip(h.newUpstream(lctx, r, ep, hdr, body))
	if err != nil {
		fail, cause := legFailure(err, r, ctx, lctx, idle)
		h.router.Report(actors.Outcome{Ticket: t, Leg: leg, Failure: fail, Duration: time.Since(start)})
		h.finish(x, t, actors.Result{})
		if leg == actors.LegDecode && fail != actors.FailClientGone {
			h.met.decodeDied.Inc()
		}
		ce := h.clientErrorFor(cause, leg, err)
		if cause == causeConnect && canRetry {
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
	x.ttfb = time.Since(x.start)
	ttfb := time.Since(start)
	var first func()
	if fb, ok := h.router.(actors.FirstByter); ok && leg != actors.LegDecode {
		first = func() { fb.FirstByte(t) }
	}
	rel := h.relay(w, r, ctx, lctx, resp, idle, leg == actors.LegDecode, x, first)
	if leg == actors.LegDecode && !rel.firstByte.IsZero() {
		h.met.decodeTTFT.Update(seconds(rel.firstByte.Sub(start)))
	}
	h.router.Report(actors.Outcome{Ticket: t, Leg: leg, Status: resp.StatusCode, Failure: rel.failure, TTFB: ttfb, Duration: time.Since(start)})
	h.finish(x, t, actors.Result{OK: rel.failure == actors.FailNone && resp.StatusCode/100 == 2})
	return attempt{}
}

// relayResult is how a relay ended.
type relayResult struct {
	failure actors.Failure
	// firstByte is when the first body byte was read from the backend (zero
	// when none was).
	firstByte time.Time
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
// body byte; when the backend fails before that, the client gets a JSON
// error instead (zeroByteIsDeath also treats a clean but empty 2xx body
// without Content-Length: 0 as a death — the P/D decode rule). It closes
// resp.Body and leaves x describing what the client saw. first, when set,
// is called once as the first body byte arrives.
func (h *Handler) relay(w http.ResponseWriter, r *http.Request, reqCtx, legCtx context.Context, resp *http.Response,
	idle *idleWatch, zeroByteIsDeath bool, x *exchange, first func()) relayResult {
	defer resp.Body.Close()
	bp := h.bufs.Get().(*[]byte)
	defer h.bufs.Put(bp)
	buf := *bp

	var res relayResult
	n, rerr := readSome(resp.Body, buf)
	idle.reset()
	if n > 0 {
		res.firstByte = time.Now()
		if first != nil {
			first()
		}
	}
	if n == 0 && rerr != nil {
		empty2xx := rerr == io.EOF && resp.StatusCode/100 == 2 && resp.ContentLength != 0
		if rerr != io.EOF || (zeroByteIsDeath && empty2xx) {
			fail, cause := legFailure(rerr, r, reqCtx, legCtx, idle)
			if rerr == io.EOF {
				fail, cause = actors.FailReset, causeReset
				h.met.decodeZeroByte.Inc()
			}
			if zeroByteIsDeath && fail != actors.FailClientGone {
				h.met.decodeDied.Inc()
			}
			res.failure, x.failure = fail, fail
			if ce := h.clientErrorFor(cause, leg(zeroByteIsDeath), rerr); ce != nil {
				h.fail(w, x, ce)
			} else {
				x.clientGone()
			}
			return res
		}
	}

	// Commit the response.
	hdr := w.Header()
	copyResponseHeader(hdr, resp.Header)
	x.setRouteHeader(hdr, h.addrs)
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
		idle.reset()
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

// leg maps relay's decode flag back to the leg kind for error wording.
func leg(decode bool) actors.Leg {
	if decode {
		return actors.LegDecode
	}
	return actors.LegSingle
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
