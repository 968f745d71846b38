package gateway

import (
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"
)

// guardBody bounds how long the client may take to send the request body:
// reads fail after deadline (readBody answers 408), and so does the drain
// net/http does after the handler returns for a body nobody read (the
// connection is then closed instead of waiting on a trickling client). A
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
	if r.ContentLength == 0 {
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(deadline) // unsupported writers just skip it
}

// readBody reads the request body up to limit bytes. Too large → 413; too
// slow (the deadline guardBody set) → 408; another read failure → 400 (or
// the client is gone, which the caller notices from the request context).
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *ClientError) {
	if r.ContentLength > limit {
		return nil, bodyTooLarge(limit)
	}
	size := 512
	if r.ContentLength > 0 {
		size = int(r.ContentLength) + 1 // +1 so ReadAll sees EOF without growing
	}
	body, err := readAllSized(http.MaxBytesReader(w, r.Body, limit), size)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, bodyTooLarge(limit)
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, requestError(http.StatusRequestTimeout, CodeBodyTimeout, "",
				"the request body did not arrive in time ("+strconv.Itoa(len(body))+" bytes read); send it faster or split the request")
		}
		return nil, requestError(http.StatusBadRequest, CodeBodyRead, "", "the request body could not be read: "+err.Error())
	}
	return body, nil
}

func bodyTooLarge(limit int64) *ClientError {
	return requestError(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "", "the request body exceeds the limit of "+strconv.FormatInt(limit, 10)+" bytes")
}

// readAllSized is io.ReadAll starting from a buffer of the given capacity.
func readAllSized(r io.Reader, size int) ([]byte, error) {
	b := make([]byte, 0, size)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err != nil {
			if err == io.EOF {
				return b, nil
			}
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}
