package gateway

import (
	"net/http"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// The send bound: a client that accepts no byte of its answer for
// Options.ClientSendTimeout loses its connection (nginx's send_timeout,
// Go's HTTP2Config.WriteByteTimeout). Without it a client that stops
// reading held its client connection and, for a stream, the upstream
// connection and the engine's request until the max stream duration (a
// day by default). When it fires, the write fails: the client
// connection is closed — on HTTP/1 with a reset (clientConn.resetOnClose)
// — a stream's upstream leg with it (reported client-gone, no health
// penalty), and llb_client_send_timeouts_total counts it.
//
// "Accepts no byte" is measured where a write waits on a full socket: on
// HTTP/1.1, no byte of the socket's unacknowledged data acknowledged by
// the client's TCP for the bound, from the start of the write (checked
// every eighth of the bound, so a stall is cut within 9/8 of it; see
// clientConn.Write); on h2c, one write (at most one upstream read) that
// the stream's flow control or the connection keeps waiting for the
// bound. A slow reader that keeps taking bytes is never cut by it,
// however long its answer lasts. It costs a clock read per write and, at
// most every 1/64 of the bound, a deadline update; no timer or goroutine
// of its own.

// DefaultClientSendTimeout is the send bound's default (nginx's
// send_timeout).
const DefaultClientSendTimeout = 60 * time.Second

// maxH2Streams bounds the concurrent streams of one h2c connection (RFC
// 9113 §6.5.2 recommends no fewer than 100; HAProxy's default): each
// stream may hold an upstream connection, so a client connection holds at
// most this many.
const maxH2Streams = 100

// sendClock is the send bound of one client connection (HTTP/1.1) or one
// h2c stream: it arms the write deadline before each write at the nearer
// of now + the bound and the stream's own limit (its max stream duration),
// and tells which one fired.
//
// Concurrency: owned by the goroutine writing the connection or stream.
type sendClock struct {
	// timeout is the bound (0: off).
	timeout time.Duration
	// limit is the stream's max-duration deadline while a streamed answer
	// is written (zero: none).
	limit time.Time
	// armed is the write deadline the socket has now (zero: none).
	armed time.Time
	// bounded tells that armed is the send bound's (not limit's).
	bounded bool
	// stalled is set once the send bound fired.
	stalled bool
	// stalls counts the send bounds that fired (the rule's
	// llb_client_send_timeouts_total).
	stalls *metrics.Counter
}

// next returns the write deadline a write starting at now needs — the
// nearer of now + span (the bound, or the period a clientConn checks for
// progress in) and the stream's limit — and whether it must be set (the
// armed one is more than 1/64 of the bound stale, or later than needed).
// ok is false when no deadline applies.
func (c *sendClock) next(now time.Time, span time.Duration) (d time.Time, set, ok bool) {
	c.bounded = c.timeout > 0
	if c.bounded {
		d = now.Add(span)
	}
	if !c.limit.IsZero() && (!c.bounded || c.limit.Before(d)) {
		d, c.bounded = c.limit, false
	}
	if d.IsZero() {
		return d, !c.armed.IsZero(), false
	}
	set = c.armed.IsZero() || c.armed.After(d) || d.Sub(c.armed) > c.timeout/64
	return d, set, true
}

// fired records a write that failed at the armed deadline: when it was the
// send bound's, the connection or stream is stalled, and counted.
func (c *sendClock) fired() bool {
	if !c.bounded || c.stalled {
		return c.stalled
	}
	c.stalled = true
	if c.stalls != nil {
		c.stalls.Inc()
	}
	return true
}

// stallDetail is the access log's detail for an answer cut by the send
// bound.
func stallDetail(d time.Duration) string {
	return "the client accepted no byte of its answer for " + d.String() + " (client send timeout)"
}

// Write implements net.Conn for the HTTP/1.1 server under the send bound
// and a stream's limit. While the socket is full, the write deadline
// comes every eighth of the bound to see whether the client took bytes
// meanwhile: whether the socket's unacknowledged bytes fell (SIOCOUTQ,
// what the client's TCP acknowledged). Neither the kernel waking the
// writer nor the socket taking bytes tells: it wakes a writer only once a
// third of a full buffer is free, which a slow but steady reader can take
// far longer than the bound to free, and its send buffer goes on growing
// (up to tcp_wmem's maximum) for a client that reads nothing. Where the
// acknowledged bytes are unknown, bytes the socket took count. The bound
// counts from the start of the write or the last progress seen.
func (cc *clientConn) Write(p []byte) (int, error) {
	s := &cc.send
	if s.timeout <= 0 && s.limit.IsZero() && s.armed.IsZero() {
		return cc.Conn.Write(p)
	}
	done := 0
	now := time.Now() // one clock read per write: on a VM it costs ~0.1–0.5 µs
	last := now
	// unsent is the socket's unacknowledged bytes at the last check
	// (marked), added what was written since.
	unsent, added, marked := 0, 0, false
	for {
		if d, set, _ := s.next(now, s.timeout/8); set {
			_ = cc.Conn.SetWriteDeadline(d)
			s.armed = d
		}
		n, err := cc.Conn.Write(p[done:])
		done += n
		if err == nil || !isTimeout(err) || !s.bounded {
			return done, err
		}
		now = time.Now()
		added += n
		u, known := 0, false
		if cc.raw != nil {
			u, known = unsentBytes(cc.raw)
		}
		switch {
		case known:
			if marked && u < unsent+added {
				last = now // acknowledged by the client
			}
			unsent, added, marked = u, 0, true
		case n > 0:
			last = now
		}
		if now.Sub(last) >= s.timeout {
			s.fired()
			cc.resetOnClose()
			return done, err
		}
	}
}

// resetOnClose makes the connection's close a reset (SO_LINGER 0, nginx's
// reset_timedout_connection): a client cut by the send bound reads nothing,
// so a graceful close would leave its unsent answer (up to the socket's
// send buffer, 4 MiB) queued in an orphaned socket behind a zero window.
// The kernel gives up on such a socket after its zero-window probes,
// silently: the client, were it to read later, would get the bytes its
// own buffer held and then neither an end nor an error; and the end of an
// HTTP/1.0 stream delimited by the close would read as complete. A reset
// frees the bytes at once and tells the client its answer was cut.
func (cc *clientConn) resetOnClose() {
	cc.linger = false // nothing to linger for: the client reads nothing
	if tc, ok := cc.Conn.(interface{ SetLinger(sec int) error }); ok {
		_ = tc.SetLinger(0)
	}
}

// SetWriteDeadline implements net.Conn, keeping the armed deadline known.
func (cc *clientConn) SetWriteDeadline(t time.Time) error {
	cc.send.armed = t
	return cc.Conn.SetWriteDeadline(t)
}

// SetDeadline implements net.Conn, keeping the armed deadlines known (the
// read deadline armed at once).
func (cc *clientConn) SetDeadline(t time.Time) error {
	cc.send.armed = t
	cc.rd, cc.rdArmed, cc.rdSlack = t, t, 0
	return cc.Conn.SetDeadline(t)
}

// limitWrites bounds the connection's writes by the stream's deadline as
// well (a client reading slowly cannot hold a stream past its max stream
// duration); zero lifts it.
func (cc *clientConn) limitWrites(d time.Time) { cc.send.limit = d }

// netHTTPSend arms the send bound on a net/http answer (an h2c stream)
// before each write: rc's write deadline at the nearer of now + the bound
// and the stream's limit. net/http resets a stream whose deadline passed.
type netHTTPSend struct {
	rc    *http.ResponseController
	clock sendClock
}

// arm sets the write deadline a write starting now needs.
func (s *netHTTPSend) arm() {
	if d, set, ok := s.clock.next(time.Now(), s.clock.timeout); ok && set {
		_ = s.rc.SetWriteDeadline(d)
		s.clock.armed = d
	}
}

// failed tells whether a failed write failed at the send bound (counting
// it once).
func (s *netHTTPSend) failed() bool {
	if s.clock.armed.IsZero() || time.Now().Before(s.clock.armed) {
		return false
	}
	return s.clock.fired()
}
