package attack

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"
)

// Raw HTTP exchanges: bytes written as the case says (in pieces, with
// pauses), every response read back as it comes, and how the connection
// ended. The Go client would refuse to send most of what the cases send.

// rawStep is one write: after pause, data.
type rawStep struct {
	pause time.Duration
	data  []byte
}

// rawPlan is one connection's worth of attack.
type rawPlan struct {
	// steps are written in order.
	steps []rawStep
	// halfClose shuts the write side after the last step.
	halfClose bool
	// wait bounds the whole exchange from the dial; past it the
	// connection counts as left open (timedOut).
	wait time.Duration
	// head marks every response as one to a HEAD request (no body).
	head bool
	// stopAfter stops reading after this many responses (0: read to the
	// end); the connection is then closed by the client.
	stopAfter int
}

// rawResponse is one parsed response.
type rawResponse struct {
	status int
	header http.Header
	body   []byte
	at     time.Duration // since the dial, when its headers arrived
	cut    bool          // the body ended early (connection closed or reset mid-body)
	// framed tells the body had a length or chunks (not ended by the close).
	framed bool
}

// rawResult is how an exchange went.
type rawResult struct {
	responses []rawResponse
	// Exactly one of closed (the server closed: EOF), reset (ECONNRESET),
	// timedOut (still open at the wait bound) or stopped (the client had
	// what it wanted) describes the end; readErr holds anything else.
	closed, reset, timedOut, stopped bool
	readErr                          error
	// garbage holds the bytes that did not parse as an HTTP/1 response
	// (an HTTP/2 server's frames), up to 4 KiB.
	garbage []byte
	// writeErr is the first write failure (the server had closed).
	writeErr error
	// ended is when the connection ended, since the dial.
	ended time.Duration
	// dialErr is set when the connection could not be made.
	dialErr error
}

// first is the first response, if any.
func (r rawResult) first() (rawResponse, bool) {
	if len(r.responses) == 0 {
		return rawResponse{}, false
	}
	return r.responses[0], true
}

// codes lists the response statuses.
func (r rawResult) codes() []int {
	out := make([]int, len(r.responses))
	for i, x := range r.responses {
		out[i] = x.status
	}
	return out
}

// end names how the connection ended.
func (r rawResult) end() string {
	switch {
	case r.dialErr != nil:
		return "dial failed: " + r.dialErr.Error()
	case r.closed:
		return "closed"
	case r.reset:
		return "reset"
	case r.timedOut:
		return "still open"
	case r.stopped:
		return "stopped by client"
	case r.readErr != nil:
		return "read error: " + r.readErr.Error()
	}
	return "?"
}

// exchange runs plan against addr.
func exchange(ctx context.Context, addr string, plan rawPlan) rawResult {
	start := time.Now()
	var res rawResult
	d := net.Dialer{Timeout: 3 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		res.dialErr = err
		return res
	}
	defer conn.Close()
	deadline := start.Add(plan.wait)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetReadDeadline(deadline)

	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		readAll(conn, plan, start, &res)
	}()
	go func() { // the caller's cancellation ends the exchange at once
		select {
		case <-ctx.Done():
			_ = conn.SetDeadline(time.Now())
		case <-readDone:
		}
	}()
	tc := conn.(*net.TCPConn)
write:
	for _, s := range plan.steps {
		if s.pause > 0 {
			select {
			case <-time.After(s.pause):
			case <-readDone:
				break write // the server ended the connection: stop trickling
			}
		}
		_ = conn.SetWriteDeadline(deadline)
		if _, err := conn.Write(s.data); err != nil {
			res.writeErr = err
			break
		}
	}
	if plan.halfClose && res.writeErr == nil {
		_ = tc.CloseWrite()
	}
	<-readDone
	return res
}

// readAll reads responses until the connection ends, the deadline
// passes, or plan.stopAfter responses arrived.
func readAll(conn net.Conn, plan rawPlan, start time.Time, res *rawResult) {
	defer func() { res.ended = time.Since(start) }()
	br := bufio.NewReaderSize(conn, 64<<10)
	req := &http.Request{Method: http.MethodPost}
	if plan.head {
		req.Method = http.MethodHead
	}
	for {
		if _, err := br.Peek(1); err != nil {
			classifyEnd(err, res)
			return
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			if isNetErr(err) {
				classifyEnd(err, res)
				return
			}
			res.garbage, _ = io.ReadAll(io.LimitReader(br, 4<<10))
			_, err := io.Copy(io.Discard, br)
			if err == nil {
				err = io.EOF
			}
			classifyEnd(err, res)
			return
		}
		r := rawResponse{status: resp.StatusCode, header: resp.Header, at: time.Since(start),
			framed: resp.ContentLength >= 0 || len(resp.TransferEncoding) > 0}
		r.body, err = io.ReadAll(io.LimitReader(resp.Body, 32<<20))
		resp.Body.Close()
		if err != nil {
			r.cut = true
			res.responses = append(res.responses, r)
			classifyEnd(err, res)
			return
		}
		res.responses = append(res.responses, r)
		if resp.StatusCode == http.StatusContinue || resp.StatusCode == http.StatusSwitchingProtocols {
			continue
		}
		if plan.stopAfter > 0 && len(res.responses) >= plan.stopAfter {
			res.stopped = true
			return
		}
	}
}

// isNetErr reports whether err is the connection ending rather than a
// malformed response.
func isNetErr(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.As(err, &ne) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed)
}

// classifyEnd records how the connection ended.
func classifyEnd(err error, res *rawResult) {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		res.timedOut = true
	case errors.Is(err, syscall.ECONNRESET):
		res.reset = true
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		res.closed = true
	default:
		res.readErr = err
	}
}
