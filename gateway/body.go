package gateway

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"time"
)

// guardBody bounds how long an HTTP/1 client may take to send the request
// body: reads fail after deadline (readBody answers 408), and so does the
// drain net/http does after the handler returns for a body nobody read
// (the connection is then closed instead of waiting on a trickling
// client). An HTTP/2 stream is bounded by readBody itself: net/http arms a
// stream's read deadline on its connection's serve loop, and one that
// arrives after the stream was reset (a rapid-reset client) arms a timer
// nothing stops, which keeps the stream's state for the whole deadline
// (make attack: 45 MB of reset streams held 60 s). A
// request with a chunked body is answered with Connection: close: net/http
// removes a Content-Length sent beside Transfer-Encoding before the handler
// sees it, so a request-smuggling attempt cannot be told from a plain
// chunked upload, and RFC 9112 §6.1 has the server close after one. So is
// every HTTP/1.0 request: net/http drops an HTTP/1.0 request's
// Transfer-Encoding unseen (and frames it by Content-Length), where RFC
// 9112 §6.1 calls the framing faulty and has the server close.
func guardBody(w http.ResponseWriter, r *http.Request, deadline time.Time) {
	if r.ProtoMajor == 1 && (r.ProtoMinor == 0 || len(r.TransferEncoding) > 0) {
		w.Header().Set("Connection", "close")
	}
	if r.ContentLength == 0 || r.ProtoMajor != 1 {
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(deadline) // unsupported writers just skip it
}

// readBody reads the request body up to limit bytes (the h2c front end),
// reserving in budget the memory it takes as it takes it: the buffer
// starts at h2cFirstReservation at most (512 bytes for a body of unknown
// length) and grows — to the declared length, else by doubling — only
// once its bytes have arrived and the growth fits in the budget. So a
// stream that sends nothing holds next to nothing, however much it
// declared, and one HTTP/2 connection cannot pin the budget with many
// idle streams; a body that outgrows the budget is refused mid-read.
// Too large → 413; too slow (past deadline: the one guardBody set on an
// HTTP/1 connection, or for HTTP/2 a timer of readBody's own that closes
// the body) → 408; no room in the budget → 503 body_buffer_full; another
// read failure → 400 (or the client is gone, which the caller notices from
// the request context). reserved is what the buffer holds of the budget,
// errors included; the caller releases it when the request is done.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, budget *BodyBudget, deadline time.Time) (body []byte, reserved int64, cerr *ClientError) {
	if r.ContentLength > limit {
		return nil, 0, bodyTooLarge(limit)
	}
	var late atomic.Bool
	if r.ProtoMajor >= 2 && !deadline.IsZero() {
		t := time.AfterFunc(time.Until(deadline), func() { late.Store(true); _ = r.Body.Close() })
		defer t.Stop()
	}
	size := int64(512)
	if r.ContentLength >= 0 {
		size = min(r.ContentLength+1, h2cFirstReservation) // +1 so the read sees EOF without growing
	}
	if !budget.Reserve(size) {
		return nil, 0, errBodyBufferFull()
	}
	reserved = size
	rd := http.MaxBytesReader(w, r.Body, limit)
	b := make([]byte, 0, size)
	for {
		n, err := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, reserved, nil
		}
		if err != nil {
			var mbe *http.MaxBytesError
			switch {
			case errors.As(err, &mbe):
				return nil, reserved, bodyTooLarge(limit)
			case errors.Is(err, os.ErrDeadlineExceeded) || late.Load():
				return nil, reserved, requestError(http.StatusRequestTimeout, CodeBodyTimeout, "",
					"the request body did not arrive in time ("+strconv.Itoa(len(b))+" bytes read); send it faster or split the request")
			}
			return nil, reserved, requestError(http.StatusBadRequest, CodeBodyRead, "", "the request body could not be read: "+err.Error())
		}
		if len(b) < cap(b) {
			continue
		}
		next := 2 * int64(cap(b))
		if r.ContentLength >= 0 {
			next = max(next, r.ContentLength+1)
		}
		next = min(next, limit+1)
		if !budget.Reserve(next - int64(cap(b))) {
			return nil, reserved, errBodyBufferFull()
		}
		reserved = next
		grown := make([]byte, len(b), next)
		copy(grown, b)
		b = grown
	}
}

// h2cFirstReservation is the most an h2c request body reserves (and its
// buffer takes) before its first bytes have arrived.
const h2cFirstReservation = 64 << 10

func bodyTooLarge(limit int64) *ClientError {
	return requestError(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "", "the request body exceeds the limit of "+strconv.FormatInt(limit, 10)+" bytes")
}
