package gateway

import (
	"net/http"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"
)

// The request-body budget: one bound, shared by every listener of the
// process (HTTP/1.1 and h2c), on the request bodies the data plane holds at
// once. A rule's body limit bounds one request; without this, N clients
// each sending a body at the limit make llbd hold N times it.
//
// HTTP/1.1: a request reserves its body's size when its head has arrived,
// before a byte of the body is read — the Content-Length (a body declared
// over the rule's limit is refused 413 without a reservation), or the
// rule's limit for a chunked body, whose size is not known yet (trimmed to
// the size read once the body is in). That is also when the server
// allocates a declared body's buffer. A request that does not fit is
// answered 503 body_buffer_full (Retry-After) at once, its body unread,
// and its connection closed (listener.go, headerReceived).
//
// h2c: one connection carries many streams, so a reservation at the head
// would let one connection of idle streams hold the whole budget. A
// stream's body takes the budget as it arrives instead (body.go,
// readBody): at most 64 KiB before its first bytes, then its declared
// length, or for an unknown length by doubling; one that outgrows the
// budget is answered 503 body_buffer_full and its stream reset.
//
// Either way the reservation lasts until the answer is written, streams
// included: the body stays in memory while the request may still be sent
// to another endpoint.

// DefaultBodyBufferBytes is the process's request-body budget unless
// configured otherwise (llbd --body-buffer-bytes): 1 GiB, 64 bodies at the
// default 16 MiB limit.
const DefaultBodyBufferBytes = 1 << 30

// BodyBudget is the process-wide request-body budget. A nil *BodyBudget is
// no budget: every reservation succeeds. Safe for concurrent use.
//
// Invariant: 0 ≤ reserved ≤ limit, and reserved is the sum of the
// reservations not yet released.
type BodyBudget struct {
	limit    int64
	reserved atomic.Int64
	refused  *metrics.Counter
	trim     *memTrim // gives large bodies' memory back after a burst
}

// NewBodyBudget returns a budget of limit bytes (limit > 0) with its
// series registered in set (a private set when nil):
//
//	llb_body_buffer_limit_bytes     the budget
//	llb_body_buffer_reserved_bytes  bytes reserved by requests in flight
//	llb_body_buffer_refused_total   requests refused 503 body_buffer_full
func NewBodyBudget(limit int64, set *metrics.Set) *BodyBudget {
	if set == nil {
		set = metrics.NewSet()
	}
	b := &BodyBudget{limit: limit, refused: set.GetOrCreateCounter("llb_body_buffer_refused_total")}
	b.trim = newMemTrim(limit, b.reserved.Load)
	set.GetOrCreateGauge("llb_body_buffer_limit_bytes", func() float64 { return float64(b.limit) })
	set.GetOrCreateGauge("llb_body_buffer_reserved_bytes", func() float64 { return float64(b.reserved.Load()) })
	return b
}

// Limit returns the budget in bytes (0 for a nil budget: none).
func (b *BodyBudget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// Reserved returns the bytes reserved now.
func (b *BodyBudget) Reserved() int64 {
	if b == nil {
		return 0
	}
	return b.reserved.Load()
}

// Refused returns how many reservations were refused.
func (b *BodyBudget) Refused() uint64 {
	if b == nil {
		return 0
	}
	return b.refused.Get()
}

// Reserve takes n bytes of the budget and reports whether they fit; when
// they do not, nothing is taken and the refusal is counted. n ≤ 0 always
// fits.
func (b *BodyBudget) Reserve(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	for {
		cur := b.reserved.Load()
		if n > b.limit-cur {
			b.refused.Inc()
			return false
		}
		if b.reserved.CompareAndSwap(cur, cur+n) {
			b.trim.reserve(n)
			return true
		}
	}
}

// Release gives back n bytes of an earlier reservation.
func (b *BodyBudget) Release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.trim.release(b.reserved.Add(-n))
}

// bodyReservation is how many bytes a request with this head reserves
// before its body is read: the declared length up to the rule's limit,
// the limit for a chunked body (contentLength -1, fasthttp's spelling),
// nothing for no body (0, or -2: neither header) or one declared over the
// limit (answered 413 without reading it).
func bodyReservation(contentLength, limit int64) int64 {
	switch {
	case contentLength > 0 && contentLength <= limit:
		return contentLength
	case contentLength == -1:
		return limit
	}
	return 0
}

// errBodyBufferFull is the answer to a request whose body does not fit in
// the budget.
func errBodyBufferFull() *ClientError {
	e := planeError(http.StatusServiceUnavailable, CodeBodyBufferFull,
		"llb holds as many request bodies as its body buffer budget allows; retry later")
	e.RetryAfter = DefaultRetryAfter
	return e
}
