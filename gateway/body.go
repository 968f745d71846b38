package gateway

import (
	"errors"
	"io"
	"net/http"
	"strconv"
)

// readBody reads the request body up to limit bytes. Too large → 413; a
// read failure → 400 (or the client is gone, which the caller notices from
// the request context).
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
