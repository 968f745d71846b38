package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// echoLength reads n request bytes after wait, then answers with their
// count, so a test can tell the request arrived whole.
func echoLength(n int, wait time.Duration) func(net.Conn) {
	return func(c net.Conn) {
		time.Sleep(wait)
		got, _ := io.CopyN(io.Discard, c, int64(n))
		body := strconv.FormatInt(got, 10)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body)
		_, _ = io.Copy(io.Discard, c) // until the client closes
	}
}

func TestUpConn_SendEarlyWritesTheRequestAndReadsTheAnswer(t *testing.T) {
	tests := []struct {
		name string
		size int           // request bytes
		wait time.Duration // before the backend reads
		past bool          // the connection's deadline is already past (an abort)
		want string        // the answer's body; "" for a write error
	}{
		{"the answer comes after the request", 200, 0, false, "200"},
		{"the backend reads late", 200, 50 * time.Millisecond, false, "200"},
		// Larger than what loopback's buffers take at once while the backend
		// does not read: the rest goes through the connection's write.
		{"the socket takes part of the request", 8 << 20, 50 * time.Millisecond, false, strconv.Itoa(8 << 20)},
		{"an abort put the deadline in the past", 200, 0, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := serveTCP(t, echoLength(tt.size, tt.wait))
			p := newUpstreamPool(be.String(), time.Second, nil, 0)
			c, err := p.dial(context.Background(), false)
			if err != nil {
				t.Fatal(err)
			}
			defer c.nc.Close()
			if c.raw == nil {
				t.Skip("no raw connection on this platform")
			}
			d := time.Now().Add(10 * time.Second)
			if tt.past {
				d = time.Now().Add(-time.Second)
			}
			_ = c.nc.SetDeadline(d)
			err = c.sendEarly([]byte(strings.Repeat("x", tt.size)))
			if tt.want == "" {
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("sendEarly: %v; want the deadline's error", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("sendEarly: %v", err)
			}
			var h fasthttp.ResponseHeader
			if err := c.readHead(&h); err != nil {
				t.Fatalf("readHead: %v", err)
			}
			body := make([]byte, h.ContentLength())
			if _, err := io.ReadFull(c.reader(), body); err != nil {
				t.Fatalf("body: %v", err)
			}
			if string(body) != tt.want {
				t.Errorf("the backend read %s bytes; want %s", body, tt.want)
			}
		})
	}
}

// A backend that went away (a reset): the request's write or the wait
// after it fails, with an error a stale keep-alive connection is retried on.
func TestUpConn_SendEarlyToABackendThatWentAwayFailsAsStale(t *testing.T) {
	leave := make(chan struct{})
	be := serveTCP(t, func(c net.Conn) {
		<-leave
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // close with a reset
		}
	})
	p := newUpstreamPool(be.String(), time.Second, nil, 0)
	c, err := p.dial(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer c.nc.Close()
	close(leave)
	for end := time.Now().Add(5 * time.Second); connAlive(c.nc); {
		if time.Now().After(end) {
			t.Fatal("the backend's reset never arrived")
		}
		time.Sleep(time.Millisecond)
	}
	_ = c.nc.SetDeadline(time.Now().Add(5 * time.Second))
	err = c.sendEarly([]byte("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n"))
	if err == nil {
		var h fasthttp.ResponseHeader
		err = h.Read(bufio.NewReader(c))
	}
	if err == nil || !staleConnError(err) {
		t.Fatalf("got %v; want a reset or an end (retried on a new connection)", err)
	}
}
