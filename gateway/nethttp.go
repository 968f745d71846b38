package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"
)

// The net/http front end: cleartext HTTP/2 with prior knowledge (h2c),
// which fasthttp does not speak, and anything that wants an http.Handler
// (tests, embedding). The request is copied into a fasthttp.Request so
// Handler.serve sees one shape whichever server accepted it, and the
// answer is copied back; HTTP/2 clients are rare for llb (the OpenAI
// clients speak HTTP/1.1), so the copies cost little overall.

// ServeHTTP serves one request through net/http.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.serveHTTP(w, r, nil) }

// serveHTTP is ServeHTTP answering pre, when set, instead of serving the
// request (no rule on the listener takes it).
func (h *Handler) serveHTTP(w http.ResponseWriter, r *http.Request, pre *ClientError) {
	x := h.begin()
	in, out := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(in)
	defer fasthttp.ReleaseResponse(out)
	x.in, x.out, x.ctx = in, out, r.Context()
	x.noPool = true // the context callback below may outlive the exchange
	x.remote, x.ip, x.tls = r.RemoteAddr, r.RemoteAddr, r.TLS != nil
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		x.ip = host
	}
	out.Header.SetNoDefaultContentType(true)
	// The request context ends when the client resets the stream or the
	// listener cuts: abort the legs then, as the HTTP/1.1 watch does.
	stop := context.AfterFunc(r.Context(), func() {
		if errors.Is(context.Cause(r.Context()), errCut) {
			x.abort(causeCut, errCut)
		} else {
			x.abort(causeClient, errClientGone)
		}
	})
	defer stop()
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			h.recoverPanic(x, p)
			panic(http.ErrAbortHandler)
		}
	}()

	in.Header.SetMethod(r.Method)
	in.Header.SetRequestURI(r.RequestURI)
	in.Header.SetHost(r.Host)
	for k, vv := range r.Header {
		for _, v := range vv {
			in.Header.Add(k, v)
		}
	}
	if r.Body != nil && r.Body != http.NoBody {
		guardBody(w, r, x.start.Add(h.bodyReadTimeout))
		// The body takes the process's body budget as it arrives: one that
		// outgrows it is answered 503 (its stream reset, the connection
		// kept); the reservation ends with the exchange.
		body, reserved, cerr := readBody(w, r, h.bodyLimit, h.budget, x.start.Add(h.bodyReadTimeout))
		defer h.budget.Release(reserved)
		switch {
		case cerr != nil && cerr.Code != CodeBodyTimeout && r.Context().Err() != nil:
			x.clientGone()
		case cerr != nil:
			x.api = "body"
			x.fail(cerr)
		default:
			in.SetBodyRaw(body)
		}
		if cerr != nil {
			h.writeNetHTTP(w, x)
			return
		}
		// The body is in: the rest of the exchange may take as long as the
		// stream does.
		if r.ProtoMajor == 1 {
			_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
		}
	}
	if pre != nil {
		x.api = apiOfPath(x.in.URI().PathOriginal())
		x.fail(pre)
	} else {
		h.serve(x)
	}
	h.writeNetHTTP(w, x)
}

// writeNetHTTP copies x's answer to w (streaming its body when it has a
// stream) and ends the exchange.
func (h *Handler) writeNetHTTP(w http.ResponseWriter, x *exchange) {
	if x.status == StatusClientGone && x.stream == nil {
		// Never net/http's default answer (an empty 200) for a request
		// nobody served: reset the stream.
		h.done(x)
		panic(http.ErrAbortHandler)
	}
	out := x.out
	hdr := w.Header()
	for k, v := range out.Header.All() {
		if string(k) == fasthttp.HeaderContentLength {
			continue
		}
		hdr.Add(string(k), string(v))
	}
	// Every write is bounded by the send bound, a stream's by its deadline
	// too.
	send := &netHTTPSend{rc: http.NewResponseController(w), clock: sendClock{timeout: h.sendTimeout, stalls: h.met.sendTimeouts}}
	s := x.stream
	if s == nil {
		aborted := x.aborted
		body := out.Body()
		if !aborted {
			if !x.in.Header.IsHead() || len(body) > 0 {
				hdr.Set(fasthttp.HeaderContentLength, strconv.Itoa(len(body)))
			}
			send.arm()
			w.WriteHeader(out.StatusCode())
			_, _ = w.Write(body)
		}
		h.done(x)
		if aborted {
			panic(http.ErrAbortHandler)
		}
		return
	}
	send.clock.limit = x.deadline
	send.arm()
	w.WriteHeader(out.StatusCode())
	s.deferDone = true
	_, _ = s.WriteTo(flushWriter{w: w, send: send}) // a failed write sets s.writeErr
	_ = out.CloseBodyStream()                       // s.CloseWithError, once
	if s.writeErr && send.failed() {
		x.detail = stallDetail(h.sendTimeout)
	}
	aborted := x.aborted
	h.done(x)
	if aborted {
		panic(http.ErrAbortHandler) // never end a broken stream as if complete
	}
}

// flushWriter flushes every write: each is one upstream read (an SSE
// event) and must reach the client at once. The send bound is armed
// before each.
type flushWriter struct {
	w    io.Writer
	send *netHTTPSend
}

func (f flushWriter) Write(p []byte) (int, error) {
	f.send.arm()
	n, err := f.w.Write(p)
	if err == nil {
		err = f.send.rc.Flush()
	}
	return n, err
}
