package gateway

import (
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// The connection limit: one bound, shared by every listener of the
// process, on the client connections the data plane serves at once
// (HTTP/1.1 and h2c alike: a connection counts from its accept, before the
// protocol is known, until it is closed). A connection accepted over the
// limit is answered at once, without serving anything on it — HTTP/1.1 503
// too_many_connections with Retry-After and Connection: close, or for h2c
// the server's SETTINGS and a GOAWAY (REFUSED_STREAM: nothing was
// processed, a retry is safe) — and closed. Like HAProxy's maxconn, it
// keeps file descriptors for the upstream legs, the REST API and the KV
// feeds, and bounds the per-connection buffers.

// Defaults derived from the open-file limit (DefaultMaxConns).
const (
	// reservedFDs are kept for what is not a client connection: the REST
	// API, KV feeds, probes, idle upstream connections, log files.
	reservedFDs = 512
	// fdsPerConn: a client connection, its prefill (or single-pool) leg
	// and its P/D decode leg.
	fdsPerConn = 3
	// minDefaultMaxConns and maxDefaultMaxConns clamp the derived default;
	// a client connection holds up to about 32 KiB of buffers and stack
	// while a request is read (less between requests, when its read buffer
	// is released), so the upper bound keeps them under about 512 MiB.
	minDefaultMaxConns = 64
	maxDefaultMaxConns = 16384
	// fallbackMaxConns is the default where the open-file limit is unknown.
	fallbackMaxConns = 4096
)

// Refusal bounds.
const (
	// maxRefusing bounds the refusals being answered at once; beyond it a
	// connection over the limit is closed without an answer.
	maxRefusing = 128
	// lingerTimeout and lingerMaxBytes bound how long and how much of a
	// client's unread input a refused connection reads and drops before it
	// closes (see lingerClose).
	lingerTimeout  = time.Second
	lingerMaxBytes = 32 << 20
)

// DefaultMaxConns is the connection limit llbd derives from its open-file
// limit (RLIMIT_NOFILE, which the Go runtime raises to the hard limit at
// start): (limit − 512) / 3, within 64–16384; 4096 where the limit is
// unknown.
func DefaultMaxConns() int { return maxConnsFor(openFileLimit()) }

// maxConnsFor derives the default from an open-file limit (0: unknown).
func maxConnsFor(nofile uint64) int {
	if nofile == 0 {
		return fallbackMaxConns
	}
	if nofile <= reservedFDs+fdsPerConn*minDefaultMaxConns {
		return minDefaultMaxConns
	}
	return int(min((nofile-reservedFDs)/fdsPerConn, maxDefaultMaxConns))
}

// ConnLimit is the process-wide client connection limit. A nil *ConnLimit
// is no limit. Safe for concurrent use.
//
// Invariant: open counts the connections accepted and not yet closed;
// it exceeds max only transiently, by the acquisitions being refused.
type ConnLimit struct {
	max      int64
	open     atomic.Int64
	refusing atomic.Int64
	refused  *metrics.Counter
	// h1 and h2 are the refusal answers, built once.
	h1, h2 []byte
}

// NewConnLimit returns a limit of max connections (max > 0) with its
// series registered in set (a private set when nil):
//
//	llb_client_connections_limit          the limit
//	llb_client_connections                client connections open now
//	llb_client_connections_refused_total  connections refused over the limit
func NewConnLimit(max int, set *metrics.Set) *ConnLimit {
	if set == nil {
		set = metrics.NewSet()
	}
	c := &ConnLimit{max: int64(max), refused: set.GetOrCreateCounter("llb_client_connections_refused_total")}
	set.GetOrCreateGauge("llb_client_connections_limit", func() float64 { return float64(c.max) })
	set.GetOrCreateGauge("llb_client_connections", func() float64 { return float64(c.open.Load()) })
	e := planeError(http.StatusServiceUnavailable, CodeTooManyConnections,
		"llb serves as many client connections as it is allowed ("+strconv.Itoa(max)+"); retry later")
	e.RetryAfter = DefaultRetryAfter
	body := e.AppendJSON(nil)
	c.h1 = append(c.h1, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: "...)
	c.h1 = strconv.AppendInt(c.h1, int64(len(body)), 10)
	c.h1 = append(append(c.h1, "\r\n\r\n"...), body...)
	c.h2 = h2Refusal(CodeTooManyConnections + ": " + e.Message)
	return c
}

// Max returns the limit (0 for a nil limit: none).
func (c *ConnLimit) Max() int {
	if c == nil {
		return 0
	}
	return int(c.max)
}

// Open returns the connections open now.
func (c *ConnLimit) Open() int64 {
	if c == nil {
		return 0
	}
	return c.open.Load()
}

// Refused returns how many connections were refused.
func (c *ConnLimit) Refused() uint64 {
	if c == nil {
		return 0
	}
	return c.refused.Get()
}

// acquire takes a slot for a new connection; false when none is free.
func (c *ConnLimit) acquire() bool {
	if c == nil {
		return true
	}
	if c.open.Add(1) > c.max {
		c.open.Add(-1)
		return false
	}
	return true
}

// release gives back a slot taken by acquire.
func (c *ConnLimit) release() {
	if c != nil {
		c.open.Add(-1)
	}
}

// refuse answers nc, accepted over the limit, and closes it, in a
// goroutine of its own (the accept loop does not wait on a client); past
// maxRefusing refusals at once it closes nc unanswered.
func (c *ConnLimit) refuse(nc net.Conn) {
	c.refused.Inc()
	if c.refusing.Add(1) > maxRefusing {
		c.refusing.Add(-1)
		_ = nc.Close()
		return
	}
	go func() {
		defer c.refusing.Add(-1)
		c.answer(nc)
	}()
}

// answer reads the connection's first bytes (up to lingerTimeout) to tell
// h2c from HTTP/1.1, writes the refusal in that protocol and closes.
func (c *ConnLimit) answer(nc net.Conn) {
	_ = nc.SetDeadline(time.Now().Add(lingerTimeout))
	var buf [len(h2Preface)]byte
	n := 0
	for n < len(buf) {
		m, err := nc.Read(buf[n:])
		n += m
		if err != nil || string(buf[:n]) != h2Preface[:n] {
			break
		}
	}
	ans := c.h1
	if string(buf[:n]) == h2Preface {
		ans = c.h2
	}
	_, _ = nc.Write(ans)
	lingerClose(nc, lingerTimeout, lingerMaxBytes)
}

// h2Refusal is what a refused h2c connection gets: an empty SETTINGS
// frame (the server's connection preface, RFC 9113 §3.4) and a GOAWAY
// with last stream 0 and REFUSED_STREAM, debug data saying why.
func h2Refusal(debug string) []byte {
	const (
		frameSettings = 0x4
		frameGoAway   = 0x7
		refusedStream = 0x7
	)
	frame := func(b []byte, typ byte, payload []byte) []byte {
		n := len(payload)
		b = append(b, byte(n>>16), byte(n>>8), byte(n), typ, 0, 0, 0, 0, 0)
		return append(b, payload...)
	}
	goAway := make([]byte, 8, 8+len(debug))
	binary.BigEndian.PutUint32(goAway[4:], refusedStream)
	goAway = append(goAway, debug...)
	return frame(frame(nil, frameSettings, nil), frameGoAway, goAway)
}

// lingerClose closes nc after an answer sent before its request was read
// whole. Closing a socket with unread input sends a reset, and the
// client's kernel may then drop the answer before the client read it; so
// the write side is shut first (the answer is complete), then what the
// client still sends is read and dropped for up to d or max bytes.
func lingerClose(nc net.Conn, d time.Duration, max int64) {
	if cw, ok := nc.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_ = nc.SetReadDeadline(time.Now().Add(d))
		_, _ = io.CopyN(io.Discard, nc, max)
	}
	_ = nc.Close()
}
