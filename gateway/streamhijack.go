package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llbproject/llb/internal/logfield"
)

// The stream poller (LLB_STREAM_POLLER, llbd --stream-poller): a streamed
// SSE answer to an HTTP/1.1 client is written past fasthttp, as an
// HTTP/1.0 stream is (stream.go), so that between events it holds no
// goroutine. fasthttp pulls a body in the connection's goroutine, which
// then sleeps in the relay for the stream's whole life, with its stack,
// the server's 4 KiB writer and request context. Hijacked instead, the
// stream is relayed by the same code (relayStream.WriteTo) with its own
// chunk framing; each time it waits for the next event with nothing
// buffered and nothing carried, it parks: its upstream socket is watched
// by the poller (streampoll_linux.go) and its goroutine returns. The
// upstream turning readable, its read deadline, or an abort (killUp)
// resumes it in a new goroutine, which goes on from where it parked.
// Whatever ends the stream (its end, an error, a migration's outcome, the
// send bound, a cut) is met by the relay's own code in a goroutine, so the
// end of a stream (CloseWithError, the exchange's end, the access log)
// stays in one place. A stream that ended cleanly gives its connection
// back to the server for the next request (Server.KeepHijackedConns).

// streamPollerOn is the knob (SetStreamPoller).
var streamPollerOn atomic.Bool

// SetStreamPoller turns the stream poller on or off for the streams that
// start from now on. It is off by default; without epoll (other than
// Linux) it has no effect.
func SetStreamPoller(on bool) {
	if on {
		startStreamPoller() // its descriptor is the process's from the start
	}
	streamPollerOn.Store(on)
}

// errParked ends a relay that parked its stream with the poller: its
// goroutine returns; a new one resumes the stream.
var errParked = errors.New("gateway: stream parked")

// hijackable reports whether x's streamed answer is written past the
// server: the poller is on, the client speaks HTTP/1.1 (chunks), the body
// is an SSE stream from one leg and both sockets can be watched.
func hijackable(rc *fasthttp.RequestCtx, cc *clientConn, x *exchange) bool {
	s := x.stream
	return streamPollerOn.Load() && streamPolls && rc.Request.Header.IsHTTP11() && s.sse && x.pair == nil &&
		cc.raw != nil && cc.rejoin != nil && s.body.c != nil && s.body.c.raw != nil
}

// hijackedStream is the state of a stream written past the server, beyond
// its relayStream's.
type hijackedStream struct {
	h  *Handler
	cc *clientConn
	x  *exchange
	// in and out are the exchange's request and response, moved out of
	// the server's request context (which the server takes back when the
	// hijack handler returns): the access log and a migration read the
	// request after that.
	in  *fasthttp.Request
	out *fasthttp.Response
	// closeAfter: the head said Connection: close.
	closeAfter bool
	// hand is closed once the server's goroutine let go of the connection;
	// the connection goes back to the server only after that.
	hand chan struct{}
	// parked is the stream's poller registration while it waits.
	parked parkedStream
	// pending is the rest of a chunk the poller's step could not write
	// whole (in pendingBuf, from chunkFrames), pendingBody the body bytes
	// the chunk carries: resume writes it first.
	pending     []byte
	pendingBuf  *[]byte
	pendingBody int
	wrote       bool
	// drained: the poller's last read of the upstream socket found it
	// empty, so the next park need not re-arm the registration.
	drained bool
}

// relayHijacked has x's streamed answer written by the hijack handler
// (writeHijacked) instead of the server.
func (h *Handler) relayHijacked(rc *fasthttp.RequestCtx, cc *clientConn, x *exchange) {
	// Not pooled: a timer or an abort may still reach a stream's
	// registration after the stream ended (a stale wake, ignored).
	st := &hijackedStream{h: h, cc: cc, x: x, hand: make(chan struct{})}
	cc.handoff = st.hand
	rc.HijackSetNoResponse(true)
	rc.Hijack(func(c net.Conn) {
		drainHijacked(c, cc)
		st.start(rc)
	})
}

// drainHijacked moves what the server read past the request (a pipelined
// request: its read buffer, hc's) back into cc, so the server finds it when
// the connection comes back to it. A read deadline in the past makes the
// read stop at what is buffered.
func drainHijacked(hc net.Conn, cc *clientConn) {
	_ = cc.setReadDeadline(aLongTimeAgo)
	var got []byte
	var tmp [512]byte
	for {
		n, err := hc.Read(tmp[:])
		got = append(got, tmp[:n]...)
		if err != nil || n == 0 {
			break
		}
	}
	_ = cc.setReadDeadline(time.Time{})
	if len(got) > 0 {
		cc.prefix = got
	}
}

// start runs in the hijack handler, the request context still the
// exchange's: it moves the request and response out of it, writes the
// head and relays the stream until it ends or parks.
func (st *hijackedStream) start(rc *fasthttp.RequestCtx) {
	x, s := st.x, st.x.stream
	// The server would close the body stream when it takes the context
	// back: it is no longer the server's.
	s.detaching = true
	_ = rc.Response.CloseBodyStream()
	s.detaching = false
	st.closeAfter = rc.Response.Header.ConnectionClose()
	x.scratch = rc.Response.Header.AppendBytes(x.scratch[:0])
	st.in, st.out = fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	body := rc.Request.SwapBody(nil) // parsed strings share the body's bytes: moved, not copied
	rc.Request.CopyTo(st.in)
	st.in.SwapBody(body)
	rc.Response.Header.CopyTo(&st.out.Header)
	x.in, x.out = st.in, st.out
	s.deferDone = true
	s.park = st.park
	if _, err := st.cc.Write(x.scratch); err != nil {
		s.writeErr = true
		st.end(err)
		return
	}
	st.run()
}

// run relays the stream until it ends (then ends it) or parks.
func (st *hijackedStream) run() {
	ended := false
	defer func() {
		if p := recover(); p != nil {
			if ended {
				buf := make([]byte, 16<<10)
				buf = buf[:runtime.Stack(buf, false)]
				st.h.log.Error().Str(logfield.Panic, fmt.Sprint(p)).Bytes(logfield.Stack, buf).Msg("panic ending a stream; connection dropped")
			} else {
				st.h.recoverPanic(st.x, p)
			}
			_ = st.cc.Close()
			st.release()
			st.leave(false)
		}
	}()
	_, err := st.x.stream.WriteTo(chunkWriter{st.cc})
	if err == errParked {
		return
	}
	ended = true
	st.end(err)
}

// end ends the stream after its relay returned err: the last chunk when
// it went out whole, the stream's and the exchange's end, and the
// connection back to the server (or closed).
func (st *hijackedStream) end(err error) {
	x, s, cc := st.x, st.x.stream, st.cc
	var wErr error
	if err == nil && !s.writeErr {
		if _, wErr = cc.Write(lastChunk); wErr != nil {
			s.writeErr = true
		}
	} else if err != nil && s.upErr == nil {
		wErr = err
	}
	_ = s.CloseWithError(wErr)
	keep := err == nil && wErr == nil && !s.writeErr && !st.closeAfter
	if x.aborted {
		keep = false
		if tc, ok := cc.Conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	st.h.done(x)
	st.release()
	if !keep {
		_ = cc.Close()
	}
	st.leave(keep)
}

// release gives back the request and response taken from the server.
func (st *hijackedStream) release() {
	if st.in != nil {
		fasthttp.ReleaseRequest(st.in)
		fasthttp.ReleaseResponse(st.out)
		st.in, st.out = nil, nil
	}
}

// leave hands the connection back to its listener: to the server for the
// next request (keep), or to be forgotten.
func (st *hijackedStream) leave(keep bool) {
	cc, hand := st.cc, st.hand
	st.parked.stop()
	cc.endRequest()
	go func() {
		<-hand
		cc.rejoin(cc, keep)
	}()
}

// lastChunk ends a chunked body (no trailer).
var lastChunk = []byte("0\r\n\r\n")

// chunkWriter frames each Write as one chunk, written with one write
// (a pooled buffer holds the frame).
type chunkWriter struct{ cc *clientConn }

// chunkFrames pools chunkWriter's buffers: a relay write is at most the
// relay buffer, framed.
var chunkFrames = sync.Pool{New: func() any { b := make([]byte, 0, copyBufSize+chunkOverhead); return &b }}

// chunkOverhead is the most a chunk's framing adds: up to 16 hex digits,
// two CRLFs.
const chunkOverhead = 20

func (w chunkWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	bp := chunkFrames.Get().(*[]byte)
	b := appendChunk((*bp)[:0], p)
	n, err := w.cc.Write(b)
	*bp = b[:0]
	if cap(b) <= copyBufSize+chunkOverhead {
		chunkFrames.Put(bp)
	}
	if n < len(b) {
		if err == nil {
			err = io.ErrShortWrite
		}
		return 0, err // a chunk cut short: the body cannot go on
	}
	return len(p), err
}

// appendChunk appends p framed as one chunk.
func appendChunk(dst, p []byte) []byte {
	dst = strconv.AppendUint(dst, uint64(len(p)), 16)
	dst = append(dst, '\r', '\n')
	dst = append(dst, p...)
	return append(dst, '\r', '\n')
}
