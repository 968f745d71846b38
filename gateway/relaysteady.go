package gateway

import (
	"io"
	"os"
	"sync/atomic"
	"time"
)

// The relay's steady state: a stream between events, with nothing
// buffered, waits for the next one inside a single wait on the upstream
// socket (RawConn.Read) and relays each event from within it — one read
// into a pooled buffer, de-chunked (dechunk), passed through the usage
// scanner and the migration tracker (relayStream.pass), written to the
// client — and waits again in the same call. Go's netpoller forgets a
// readiness it saw whenever a new read or wait begins, so a wait that
// begins anew must first look at the socket: a system call that, one
// event at a time, finds nothing (EAGAIN). Within one call the readiness
// is kept: a read shorter than its buffer took all the socket held, and
// whatever arrives after it wakes the wait, so an event costs one read,
// as HAProxy's does, instead of a look and a read. Anything else — the
// body's end, a chunk cut across reads (left to bodyReader as the
// connection's early bytes), an event cut across chunks (carried), a read
// that filled its buffer, an error, a deadline (the wait reports it) —
// goes back to the relay's own code, so the stream's end stays in one
// place.

// steadyWaits counts the waits steady entered (tests: a stream waits once
// for many events).
var steadyWaits atomic.Uint64

// steady waits for the stream's next event and relays whole events as
// they come, until one needs the relay (above). It returns the bytes
// written to w and w's error. Where it does not apply (no raw socket, a
// body not chunked or inside a chunk, bytes already read) it only waits.
func (s *relayStream) steady(w io.Writer) (int64, error) {
	c := s.body.c
	if c.raw == nil || s.body.framing != framingChunked || s.body.inChunk || s.firstByte.IsZero() ||
		c.preErr != nil || c.buffered() > 0 {
		s.body.wait()
		return 0, nil
	}
	c.shed()
	steadyWaits.Add(1)
	var total int64
	var werr error
	_ = c.raw.Read(func(fd uintptr) bool {
		n, wait, err := s.steadyStep(fd, w)
		total += n
		werr = err
		return !wait
	})
	return total, werr
}

// steadyStep is one turn of steady: one read of the upstream socket and,
// when it brought whole chunks, their events relayed to w. wait tells
// that the stream waits for its next event within the same wait.
func (s *relayStream) steadyStep(fd uintptr, w io.Writer) (written int64, wait bool, err error) {
	c := s.body.c
	bp, n, ok, rerr := readPooled(fd)
	switch {
	case !ok:
		return 0, true, nil // nothing yet
	case rerr != nil:
		earlyReads.Put(bp)
		c.preErr = os.NewSyscallError("read", rerr)
		return 0, false, nil
	case n == 0:
		earlyReads.Put(bp)
		c.preErr = io.EOF
		return 0, false, nil
	}
	s.lg.readAt(time.Now())
	raw := (*bp)[:n]
	drained := n < len(*bp)
	if s.buf == nil {
		s.buf = s.x.h.bufs.Get().(*[]byte)
	}
	body, whole := dechunk((*s.buf)[:0], raw)
	if !whole {
		c.early, c.pre = bp, raw // read first by bodyReader
		return 0, false, nil
	}
	earlyReads.Put(bp)
	buf := *s.buf
	p, carry := s.pass(buf, 0, len(body), 0)
	if len(p) > 0 {
		wn, werr := w.Write(p)
		written = int64(wn)
		s.x.bytes += written
		if werr != nil {
			s.writeErr = true
			return written, false, werr
		}
	}
	if carry > 0 {
		copy(buf, buf[len(body)-carry:len(body)])
		s.carry = carry
		return written, false, nil
	}
	s.release()
	if !drained {
		return written, false, nil // more may be there: the relay reads it
	}
	return written, true, nil
}
