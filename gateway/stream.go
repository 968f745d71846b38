package gateway

import (
	"fmt"
	"io"
	"net"
	"runtime"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/internal/logfield"
)

// relayStream is a streamed response body: the server pulls it after the
// handler returned, in the connection's own goroutine (no goroutine, no
// pipe). The server (fasthttp) calls WriteTo with a writer that frames
// every Write as one chunk and flushes it, then CloseWithError with the
// write error (nil when the body went out); the net/http front end does the
// same with a flushing writer. CloseWithError ends the leg (report, ticket)
// and the exchange (access log, metrics).
type relayStream struct {
	x      *exchange
	lg     leg
	body   bodyReader
	buf    *[]byte // relay buffer (copyBufSize), from Handler.bufs
	off, n int     // buf[off:off+n]: bytes of the first read, not yet written
	rerr   error   // error of the first read
	ttfb   time.Duration
	status int
	decode bool
	sse    bool
	// scan passes every body byte through the exchange's usage scanner
	// (every answering leg of a generation request: its tokens are
	// counted); truth also keeps what it found for the cache-truth check
	// (a single leg with a prediction).
	scan, truth bool
	// firstByte is when the first body byte was read from the backend
	// (zero when none was).
	firstByte time.Time
	// upErr is the upstream failure that ended the stream early; written
	// tells that a client write failed.
	upErr    error
	writeErr bool
	closed   bool
	// deferDone leaves ending the exchange to the caller of CloseWithError
	// (the net/http front end, which still reads it).
	deferDone bool
	// track: migration follows the stream's events (migrate.go); ended:
	// the current leg was ended (endLeg); completed: llb ended the stream
	// itself after its leg broke past the last token.
	track, ended, completed bool
	// park, when set, parks the stream with the poller where it would wait
	// for the next event, and reports whether it did (streamhijack.go);
	// woken: the stream resumes from the poller, its upstream readable.
	park  func() bool
	woken bool
	// carry: the relay buffer starts with this many bytes of an event
	// held for its end (the stream poller's step hands them on).
	carry int
	// detaching: the server lets go of the stream, which it does not end
	// (relayHijacked).
	detaching bool
}

func (s *relayStream) reset() { *s = relayStream{} }

// SupportsBodyWriteTo tells fasthttp to frame WriteTo's writes directly
// (fasthttp.BodyWriterTo).
func (s *relayStream) SupportsBodyWriteTo() bool { return true }

// WriteTo writes the body to w, one upstream read per Write. It returns
// the upstream's error when the backend broke (the server then closes the
// client connection without ending the body), or w's error. A stream that
// migration follows (s.track) is written event by event (see ssetrack.go)
// and, when its leg breaks, goes on on another endpoint (migrate.go).
func (s *relayStream) WriteTo(w io.Writer) (int64, error) {
	var total int64
	var buf []byte
	if s.buf != nil {
		buf = *s.buf // nil when resumed from the poller: taken below
	}
	off, n, rerr := s.off, s.n, s.rerr
	s.n, s.rerr = 0, nil
	// buf[:carry]: the start of an event, held for its end (one the
	// stream poller carried, when resumed).
	carry := s.carry
	s.carry = 0
	for {
		if n > 0 {
			var p []byte
			p, carry = s.pass(buf, off, n, carry)
			if len(p) > 0 {
				wn, werr := w.Write(p)
				total += int64(wn)
				s.x.bytes += int64(wn)
				if werr != nil {
					s.writeErr = true
					return total, werr
				}
			}
			if carry > 0 {
				copy(buf, buf[off+n-carry:off+n])
			}
		}
		if rerr != nil {
			if s.track && carry > 0 {
				// The event it holds will never be whole on this leg.
				s.scanCarry(buf[:carry])
				s.truthObserved()
			}
			if rerr == io.EOF && (!s.track || s.x.mig.sse.done && carry == 0) {
				return total, nil
			}
			if !s.track {
				s.cutUntracked(rerr)
				break
			}
			ok, done := s.migrate(rerr)
			if done {
				end := s.x.mig.sse.appendEnd(s.x.mig.sse.out[:0])
				s.x.mig.sse.out = end
				wn, werr := w.Write(end)
				total += int64(wn)
				s.x.bytes += int64(wn)
				s.completed = werr == nil
				if werr != nil {
					s.writeErr = true
					return total, werr
				}
				return total, nil
			}
			if !ok {
				if rerr == io.EOF {
					// The engine ended the body: so does the relay.
					return total, nil
				}
				break
			}
			off, carry, n, rerr = 0, 0, 0, nil
		}
		s.lg.armRead()
		off = 0
		if carry == 0 && s.body.drained() {
			// Nothing of the next event is here yet: wait for it holding
			// neither the relay buffer nor the connection's read buffer.
			// A stream spends nearly all its life here; its buffers are
			// taken again only while a chunk is in flight.
			s.release()
			switch {
			case s.woken:
				s.woken = false
			case s.park != nil && s.park():
				return total, errParked
			default:
				s.body.wait()
			}
		}
		if s.buf == nil {
			// Given back while the stream waited (or parked).
			s.buf = s.x.h.bufs.Get().(*[]byte)
			buf = *s.buf
		}
		var nr int
		nr, rerr = s.body.Read(buf[carry:])
		// What is already buffered behind it goes in the same chunk: a
		// stream that fell behind catches up one write per buffer, not per
		// event (bodyready.go).
		for rerr == nil && nr > 0 && s.body.ready(len(buf)-carry-nr) {
			var k int
			k, rerr = s.body.Read(buf[carry+nr:])
			nr += k
		}
		if nr > 0 {
			s.lg.alive()
			if s.firstByte.IsZero() {
				s.legStarted()
			}
		}
		n = carry + nr
		if nr == 0 {
			n = 0 // nothing new: the carried bytes wait
		}
	}
	s.upErr = rerr
	return total, rerr
}

// pass passes buf[off:off+n], read behind the carried start of an event
// (buf[:carry]), through the usage scanner and, when the stream is
// followed, the migration tracker. It returns the bytes to write to the
// client and how many bytes of buf[:off+n], at its end, are the start of an
// event held for its end.
func (s *relayStream) pass(buf []byte, off, n, carry int) ([]byte, int) {
	p := buf[off : off+n]
	if !s.track {
		s.observe(p)
		return p, carry
	}
	// The tracker feeds the usage scanner each whole event, as the engine
	// sent it: the bytes of a carried event reach it once the event is
	// whole, or when the leg ends (scanCarry).
	t := &s.x.mig.sse
	s.x.ids.write(s.x, buf[carry:off+n])
	t.us = nil
	if s.scan {
		t.us = &s.x.usage
	}
	var used int
	p, used = t.feed(buf[:off+n])
	carry = off + n - used
	switch {
	case carry == len(buf):
		// One event larger than the buffer: it goes as it is, and the
		// stream is no longer followed.
		s.scanCarry(buf)
		p, carry, s.track = buf, 0, false
		t.refuse(refUnreadable)
	case carry == 0 && t.idle():
		s.track = false // nothing left to follow for
	}
	s.truthObserved()
	return p, carry
}

// legStarted records the first body byte of a leg continuing a migrated
// stream (the first leg's was read before the head went out).
func (s *relayStream) legStarted() {
	s.firstByte = time.Now()
	s.lg.begin()
	if !s.decode {
		s.x.ticket.FirstByte()
	}
}

// Read implements io.Reader for servers that pull instead (fasthttp does
// for some clients).
func (s *relayStream) Read(p []byte) (int, error) {
	// Events are not followed here: migration needs WriteTo, which every
	// front end uses for streams.
	s.track = false
	if s.n > 0 {
		n := copy(p, (*s.buf)[s.off:s.off+s.n])
		s.observe(p[:n])
		s.off += n
		s.n -= n
		s.x.bytes += int64(n)
		return n, nil
	}
	if err := s.rerr; err != nil {
		s.rerr = nil
		if err != io.EOF {
			s.upErr = err
		}
		return 0, err
	}
	s.lg.armRead()
	n, err := s.body.Read(p)
	if n > 0 {
		s.lg.alive()
	}
	s.observe(p[:n])
	s.x.bytes += int64(n)
	if err != nil && err != io.EOF {
		s.upErr = err
	}
	return n, err
}

// CloseWithError ends the stream: wErr is the error writing it to the
// client (nil when it went out). It reports the leg, finishes the ticket
// and ends the exchange.
func (s *relayStream) CloseWithError(wErr error) error {
	if s.closed || s.x == nil || s.detaching {
		return nil
	}
	s.closed = true
	x := s.x
	fail := actors.FailNone
	switch {
	case s.completed:
		// llb ended the stream after its leg broke past the last token.
	case s.upErr != nil:
		fail, _ = s.lg.failure(s.upErr)
		x.detail = s.upErr.Error()
		if fail != actors.FailClientGone || x.abortCause() == causeCut {
			x.aborted = true
		}
	case wErr != nil || s.writeErr || !s.body.eof:
		fail = actors.FailClientGone
		if x.cc != nil && x.cc.send.stalled {
			x.detail = stallDetail(x.h.sendTimeout)
		}
		if x.abortCause() == causeCut {
			x.aborted = true
		}
	}
	x.failure = fail
	s.finish(fail)
	if !s.deferDone {
		x.h.done(x)
	}
	return nil
}

// release returns the relay buffer.
func (s *relayStream) release() {
	if s.buf != nil {
		s.x.h.bufs.Put(s.buf)
		s.buf = nil
	}
}

// observe passes body bytes on their way to the client through the
// cache-truth observer (when the leg scans) and keeps what it found.
func (s *relayStream) observe(b []byte) {
	s.x.ids.write(s.x, b)
	if s.scan && len(b) > 0 {
		s.x.usage.Write(b)
		if s.truth {
			s.x.cached = s.x.usage.Usage()
		}
	}
}

// scanCarry passes the bytes of an event the tracker did not take whole
// through the usage scanner.
func (s *relayStream) scanCarry(b []byte) {
	if s.scan {
		s.x.usage.Write(b)
	}
}

// truthObserved keeps what the usage scanner found for the cache-truth
// check.
func (s *relayStream) truthObserved() {
	if s.scan && s.truth {
		s.x.cached = s.x.usage.Usage()
	}
}

// finish ends the stream: its leg (endLeg), the relay buffer, the
// endpoint watch of a followed stream.
func (s *relayStream) finish(fail actors.Failure) {
	x := s.x
	s.endLeg(fail)
	s.release()
	if s.sse && x.stream == s {
		x.h.met.activeStreams.Dec()
	}
	if x.mig.track {
		x.unwatch()
	}
}

// endLeg ends the current leg, once: the connection back to the pool
// (when the body was read to its end) or closed, the decode TTFT, the
// outcome (with the engine's usage when the leg scanned) and the ticket.
func (s *relayStream) endLeg(fail actors.Failure) {
	if s.ended {
		return
	}
	s.ended = true
	x := s.x
	h := x.h
	s.lg.end(fail == actors.FailNone && s.body.reusable())
	if s.decode && !s.firstByte.IsZero() {
		h.met.decodeTTFT.Update(seconds(s.firstByte.Sub(s.lg.start)))
	}
	var usage actors.Usage
	if s.scan {
		usage = x.usage.Usage()
		x.tokens = usage
		if !s.truth {
			// Counted, not compared: the cache-truth check reads cached
			// tokens only from a leg it predicted.
			usage.Reported, usage.CachedTokens = false, 0
		}
	}
	var ttft time.Duration
	if s.sse && !s.decode && !s.firstByte.IsZero() {
		ttft = s.firstByte.Sub(s.lg.start) // a stream's first body byte is its first token
	}
	x.conclude(actors.Outcome{Leg: s.lg.kind, Status: s.status, Failure: fail, TTFB: s.ttfb, Duration: time.Since(s.lg.start), TTFT: ttft, Usage: usage},
		actors.Result{OK: fail == actors.FailNone && s.status/100 == 2})
}

// An HTTP/1.0 client cannot read chunks. A streamed answer of unknown
// length reaches it as vLLM's own server (uvicorn's h11) sends it: without
// a length, the body ending when the connection closes (RFC 9112 §6.3,
// the last rule), each upstream read written as it arrives. Read whole (up
// to 64 MiB) and sent with a length, 100 such streams of 7.2 MB would take
// llbd from 39 to 447 MiB, and the first byte would wait for the last.
// fasthttp frames every body stream (chunks, or a
// length), so such an answer is written past it: the connection is
// hijacked once the server has sent what it held, and the head and body
// go to the socket from the hijack goroutine, bounded like any stream
// (the send bound, the max stream duration). serveConn waits for it: the
// connection stays the listener's (counted, cut at shutdown).

// untilClose reports whether rc's streamed answer must be delimited by the
// connection's close: an HTTP/1.0 request, a body of unknown length.
func untilClose(rc *fasthttp.RequestCtx) bool {
	return !rc.Request.Header.IsHTTP11() && rc.Response.Header.ContentLength() < 0
}

// relayUntilClose has x's streamed answer written by writeUntilClose
// instead of the server.
func (h *Handler) relayUntilClose(rc *fasthttp.RequestCtx, cc *clientConn, x *exchange) {
	hdr := &x.out.Header
	hdr.Del(fasthttp.HeaderTransferEncoding)
	hdr.SetContentLength(-2) // identity: no length
	hdr.SetConnectionClose()
	cc.hijacked = make(chan struct{})
	rc.HijackSetNoResponse(true)
	rc.Hijack(func(net.Conn) {
		defer close(cc.hijacked)
		h.writeUntilClose(cc, x)
	})
}

// writeUntilClose writes x's head and streamed body to cc, then closes it
// — with a reset when the upstream broke, so the client does not take the
// close for the body's end — and ends the exchange.
func (h *Handler) writeUntilClose(cc *clientConn, x *exchange) {
	ended := false
	defer func() {
		if p := recover(); p != nil {
			if ended {
				buf := make([]byte, 16<<10)
				buf = buf[:runtime.Stack(buf, false)]
				h.log.Error().Str(logfield.Panic, fmt.Sprint(p)).Bytes(logfield.Stack, buf).Msg("panic ending an HTTP/1.0 stream; connection dropped")
			} else {
				h.recoverPanic(x, p)
			}
		}
		_ = cc.Close()
	}()
	s := x.stream
	s.deferDone = true
	x.scratch = x.out.Header.AppendBytes(x.scratch[:0])
	if _, err := cc.Write(x.scratch); err != nil {
		s.writeErr = true
	} else {
		_, _ = s.WriteTo(cc) // a failed write sets s.writeErr
	}
	_ = x.out.CloseBodyStream() // s.CloseWithError, once
	if x.aborted {
		if tc, ok := cc.Conn.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
	}
	ended = true
	h.done(x)
}
