package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
)

// An upstream leg: one request to one endpoint on behalf of an exchange,
// with its deadlines. Every bound is a deadline on the upstream
// connection, re-armed before each read: the request's max stream
// duration, the leg's own limit (the P/D prefill deadline) and, when the
// rule sets timeoutMemberData, the idle bound. No timer or goroutine per
// request; a read that hits a deadline is classified by which bound was
// the nearest when it was armed.

// failCause is why a leg failed, in the order causes are checked.
type failCause uint8

const (
	causeNone      failCause = iota
	causeClient              // the client left
	causeCut                 // the listener cut the request (drain deadline, Close)
	causeDeadline            // the request's max stream duration passed
	causeFirstByte           // a decode stream's first byte did not come in time
	causeIdle                // silent too long (timeoutMemberData, the stream idle bound)
	causeDown                // the endpoint was excluded (probe, breaker) before it answered
	causePrefill             // the prefill deadline passed
	causeConnect             // no connection
	causeReset               // the connection broke
	causePair                // the other leg of a concurrent P/D pair failed first (pd_sglang.go)
)

// retryable reports whether a leg that failed this way, before the client
// got a byte, may be sent again elsewhere: the endpoint never answered
// (refused the connection, went down, or kept a decode stream silent past
// its first-byte bound).
func (c failCause) retryable() bool {
	return c == causeConnect || c == causeDown || c == causeFirstByte
}

// workerFault reports whether a leg that failed this way failed because
// of its endpoint (not the client, the listener or the request's own
// deadline): a migrated stream's next leg may then go elsewhere.
func (c failCause) workerFault() bool {
	switch c {
	case causeClient, causeCut, causeDeadline, causeNone:
		return false
	}
	return true
}

// leg is one upstream request in progress.
type leg struct {
	x     *exchange
	kind  actors.Leg
	ep    int
	c     *upConn // the connection, nil before send and after end
	start time.Time
	// own names the headers the leg sets itself instead of the client's
	// (id is its X-Request-Id).
	own legHeaders
	id  string
	// limit is the leg's own deadline (zero: none), reported as limitCause.
	limit      time.Time
	limitCause failCause
	// first bounds the wait for the first body byte, from start (0: none),
	// reported as firstCause; idle bounds every silence after it (0: none).
	first      time.Duration
	firstCause failCause
	idle       time.Duration
	started    bool      // a body byte arrived: the idle bound applies
	headAt     time.Time // when send read the response head
	bound      failCause // which bound the last arm chose
	// pair is set on a prefill leg running beside the answering leg
	// (pd_sglang.go): its connection, cut and scratch buffers are the
	// pair's, not the exchange's.
	pair *pairLeg
}

// newLeg starts a leg with no silence bounds (see clientLeg).
func (x *exchange) newLeg(kind actors.Leg, ep int) leg {
	return leg{x: x, kind: kind, ep: ep, start: time.Now()}
}

// clientLeg starts a leg whose response goes to the client, with its
// silence bounds: timeoutMemberData when the rule sets it (before and after
// the first byte); otherwise a decode leg of a streamed request waits at
// most the decode bound for its first event (pd_decode_timeout, retried
// elsewhere), and every leg at most the stream idle bound between reads
// once bytes flow. A non-streamed answer comes whole at the end of the
// generation, however long it is: nothing bounds its first byte but the
// max stream duration and the endpoint watch (a frozen worker is excluded
// by its probe, which cancels the leg).
func (x *exchange) clientLeg(kind actors.Leg, ep int) leg {
	l := x.newLeg(kind, ep)
	h := x.h
	switch {
	case h.dataTimeout > 0:
		l.first, l.firstCause, l.idle = h.dataTimeout, causeIdle, h.dataTimeout
	default:
		l.idle = h.streamIdle
		if kind == actors.LegDecode && x.wantStream && h.decodeFirstByte > 0 {
			l.first, l.firstCause = h.decodeFirstByte, causeFirstByte
		}
	}
	return l
}

// nearest returns the earliest bound from now and which one it is.
func (l *leg) nearest(now time.Time) (time.Time, failCause) {
	d, c := l.x.deadline, causeDeadline
	if !l.limit.IsZero() && l.limit.Before(d) {
		d, c = l.limit, l.limitCause
	}
	switch {
	case !l.started && l.first > 0:
		if t := l.start.Add(l.first); t.Before(d) {
			d, c = t, l.firstCause
		}
	case l.started && l.idle > 0:
		if t := now.Add(l.idle); t.Before(d) {
			d, c = t, causeIdle
		}
	}
	return d, c
}

// begin marks the first body byte: from now on the idle bound applies.
func (l *leg) begin() {
	if !l.started {
		l.started = true
		l.arm(time.Now())
	}
}

// arm arms the nearest bound on the leg's connection, with a slack of a
// 64th of the time left (at most a second): a 24-hour stream bound fires
// within a second of its time, a 50 ms one within a millisecond.
func (l *leg) arm(now time.Time) {
	var d time.Time
	d, l.bound = l.nearest(now)
	l.c.arm(d, min(max(d.Sub(now)/64, 0), time.Second))
}

// armRead re-arms the bounds before a body read: once bytes flow only the
// idle bound moves (without one the deadline already armed still holds).
func (l *leg) armRead() {
	if l.started && l.idle > 0 {
		l.arm(time.Now())
	}
}

// alive notes that the leg read response bytes: a sign of its endpoint's
// life (liveness.go).
func (l *leg) alive() {
	if l.c != nil {
		l.c.pool.life.note(time.Now())
	}
}

// inlineBody is the largest request body copied behind its head for one
// write; larger ones go out with the head in one writev.
const inlineBody = 4 << 10

// send writes the request (head and body in one system call) on a pooled or
// new connection to the leg's endpoint and reads the response head into
// dst. head is the exchange's scratch buffer. A failure before any response byte on a reused connection — the
// backend closing an idle keep-alive connection as the request went out —
// is retried once on a new connection. On success the leg holds the
// connection; end releases it.
func (l *leg) send(head, body []byte, dst *fasthttp.ResponseHeader) error {
	x := l.x
	pool := x.h.pools[l.ep]
	now := l.start
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			now = time.Now()
		}
		c, err := pool.get(l.ctx(), now, x.decision.Flags.Has(ladder.FlagPanic))
		if err != nil {
			return err
		}
		if cause, ok := l.attach(c); !ok {
			_ = c.nc.Close()
			return &abortError{cause: cause}
		}
		l.c = c
		l.arm(now)
		scratch, iov, iovArr := &x.scratch, &x.iov, &x.iovArr
		if l.pair != nil {
			scratch, iov, iovArr = &l.pair.head, &l.pair.iov, &l.pair.iovArr
		}
		if len(body) <= inlineBody {
			// One write of head and body copied together costs less than
			// a writev for small bodies. The copy goes behind the head in
			// the scratch buffer, which keeps what it grew to.
			buf := append(head, body...)
			head = buf[:len(head)]
			*scratch = head
			err = c.sendEarly(buf)
		} else {
			*iovArr = [2][]byte{head, body}
			*iov = iovArr[:]
			_, err = iov.WriteTo(c.nc)
		}
		if err == nil {
			err = c.readHead(dst)
		}
		if err == nil {
			l.headAt = time.Now()
			pool.life.note(l.headAt) // the endpoint answers (liveness.go)
			return nil
		}
		l.end(false)
		if attempt == 0 && c.reused && staleConnError(err) && x.abortCause() == causeNone {
			continue
		}
		return err
	}
}

// end releases the leg's connection: to the pool when reusable (the
// response was read to its end), closed otherwise.
func (l *leg) end(reusable bool) {
	if l.c == nil {
		return
	}
	if l.detach() {
		reusable = false
	}
	l.c.release(reusable)
	l.c = nil
}

// attach registers c as the leg's connection, so that an abort reaches
// it: the exchange's (the answering leg's), or the pair's.
func (l *leg) attach(c *upConn) (failCause, bool) {
	if l.pair != nil {
		return l.pair.attach(c)
	}
	return l.x.attach(c)
}

// detach ends attach's registration; killed reports that an abort reached
// the connection meanwhile.
func (l *leg) detach() (killed bool) {
	if l.pair != nil {
		return l.pair.detach()
	}
	return l.x.detach()
}

// ctx is what the leg's dial waits under: the exchange's context, or the
// pair's, which its cut cancels too.
func (l *leg) ctx() context.Context {
	if l.pair != nil {
		return l.pair.ctx
	}
	return l.x.ctx
}

// cutCause is why this leg alone was cut (causeNone: it was not).
func (l *leg) cutCause() failCause {
	if l.pair != nil {
		return l.pair.cutCause()
	}
	return l.x.legAbortCause(false)
}

// abortError is a leg refused because its exchange was already aborted.
type abortError struct{ cause failCause }

func (e *abortError) Error() string { return "gateway: exchange aborted" }

// staleConnError reports whether err is what a reused connection the
// backend had closed produces before any response byte: a reset or broken
// pipe on the write, or an end of stream where the response should start
// (fasthttp reports any non-timeout error on the first byte as io.EOF).
func staleConnError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// isTimeout reports whether err is a deadline (ours or the kernel's).
func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, fasthttp.ErrTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// failure classifies err from the leg: an abort first (client gone, cut),
// then the endpoint watch, a failed dial, which deadline fired, else a
// broken connection.
func (l *leg) failure(err error) (actors.Failure, failCause) {
	switch c := l.x.abortCause(); c {
	case causeClient, causeCut:
		return actors.FailClientGone, c
	}
	switch l.cutCause() {
	case causeDown:
		return actors.FailTimeout, causeDown
	case causePair:
		return actors.FailClientGone, causePair // not this endpoint's doing
	}
	var ae *abortError
	if errors.As(err, &ae) {
		if ae.cause == causeDown {
			return actors.FailTimeout, causeDown
		}
		return actors.FailClientGone, ae.cause
	}
	var de *dialError
	if errors.As(err, &de) {
		return actors.FailConnect, causeConnect
	}
	if isTimeout(err) {
		if l.bound == causeNone {
			return actors.FailTimeout, causeIdle
		}
		return actors.FailTimeout, l.bound
	}
	if !time.Now().Before(l.x.deadline) {
		return actors.FailTimeout, causeDeadline
	}
	return classifyUpstream(err), causeReset
}

// classifyUpstream classifies an upstream error that is neither an abort
// nor one of the leg's deadlines, for the breaker.
func classifyUpstream(err error) actors.Failure {
	var de *dialError
	var op *net.OpError
	var dns *net.DNSError
	switch {
	case errors.As(err, &de), errors.As(err, &op) && op.Op == "dial", errors.As(err, &dns):
		return actors.FailConnect
	case isTimeout(err):
		return actors.FailTimeout
	}
	return actors.FailReset
}
