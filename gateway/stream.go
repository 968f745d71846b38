package gateway

import (
	"io"
	"time"

	"github.com/llbproject/llb/actors"
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
	// (the cache-truth observer; a single leg with a prediction).
	scan bool
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
}

func (s *relayStream) reset() { *s = relayStream{} }

// SupportsBodyWriteTo tells fasthttp to frame WriteTo's writes directly
// (fasthttp.BodyWriterTo).
func (s *relayStream) SupportsBodyWriteTo() bool { return true }

// WriteTo writes the body to w, one upstream read per Write. It returns
// the upstream's error when the backend broke (the server then closes the
// client connection without ending the body), or w's error.
func (s *relayStream) WriteTo(w io.Writer) (int64, error) {
	var total int64
	buf := *s.buf
	off, n, rerr := s.off, s.n, s.rerr
	s.n, s.rerr = 0, nil
	for {
		if n > 0 {
			s.observe(buf[off : off+n])
			wn, werr := w.Write(buf[off : off+n])
			total += int64(wn)
			s.x.bytes += int64(wn)
			if werr != nil {
				s.writeErr = true
				return total, werr
			}
		}
		if rerr != nil {
			break
		}
		s.lg.armRead()
		off = 0
		n, rerr = s.body.Read(buf)
	}
	if rerr == io.EOF {
		return total, nil
	}
	s.upErr = rerr
	return total, rerr
}

// Read implements io.Reader for servers that pull instead (fasthttp does
// for some clients).
func (s *relayStream) Read(p []byte) (int, error) {
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
	if s.closed || s.x == nil {
		return nil
	}
	s.closed = true
	x := s.x
	fail := actors.FailNone
	switch {
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
	if s.scan && len(b) > 0 {
		s.x.usage.Write(b)
		s.x.cached = s.x.usage.Usage()
	}
}

// finish ends the leg: the connection back to the pool (when the body was
// read to its end) or closed, the decode TTFT, the outcome (with the
// engine's usage when the leg scanned) and the ticket.
func (s *relayStream) finish(fail actors.Failure) {
	x := s.x
	h := x.h
	s.lg.end(fail == actors.FailNone && s.body.reusable())
	s.release()
	if s.sse && x.stream == s {
		h.met.activeStreams.Dec()
	}
	if s.decode && !s.firstByte.IsZero() {
		h.met.decodeTTFT.Update(seconds(s.firstByte.Sub(s.lg.start)))
	}
	var usage actors.Usage
	if s.scan {
		usage = x.cached
	}
	x.conclude(actors.Outcome{Leg: s.lg.kind, Status: s.status, Failure: fail, TTFB: s.ttfb, Duration: time.Since(s.lg.start), Usage: usage},
		actors.Result{OK: fail == actors.FailNone && s.status/100 == 2})
}
