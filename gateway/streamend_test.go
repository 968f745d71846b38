package gateway

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
)

// A backend that ends its connection right behind an event (the FIN in
// the same instant as the data, so both may wake the relay as one) has
// its stream ended at once, with the poller on and off: the relay looks at
// the socket before each wait, since a read that returned the event does
// not tell the end behind it and Go's netpoller reports no EPOLLRDHUP.
// The client gets both events and then the cut (a close, or the poller's
// reset), well before the 5 s it
// would wait for an end that was missed (the test's streams have no idle
// bound).
func TestStream_AnEndRightBehindAnEventEndsTheStreamAtOnce(t *testing.T) {
	ev0, ev1 := sseEvent(0), sseEvent(1)
	frame := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }
	for _, poller := range []bool{false, true} {
		t.Run(fmt.Sprintf("poller=%v", poller), func(t *testing.T) {
			defer SetStreamPoller(streamPollerOn.Load())
			SetStreamPoller(poller)
			backend := serveTCP(t, func(c net.Conn) {
				if !readRequest(c) {
					return
				}
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"+frame(ev0))
				time.Sleep(20 * time.Millisecond) // the stream waits for its next event
				_, _ = io.WriteString(c, frame(ev1))
				_ = c.Close() // no last chunk: the engine died
			})
			cfg := singlePool(backend)
			cfg.MigrationLimit = 0
			url, _ := startGateway(t, cfg, Deps{Router: newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))})
			for i := range 10 {
				c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				req := `{"model":"m","prompt":"p","max_tokens":100,"stream":true}`
				start := time.Now()
				_, _ = fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", PathCompletions, len(req), req)
				got, err := io.ReadAll(c)
				c.Close()
				if errors.Is(err, syscall.ECONNRESET) {
					err = nil // the poller's cut is a reset
				}
				if took := time.Since(start); err != nil || took > 3*time.Second {
					t.Fatalf("stream %d: ended after %v with %v; want the cut at once", i, took, err)
				}
				if !strings.Contains(string(got), ev1) || strings.HasSuffix(string(got), "0\r\n\r\n") {
					t.Fatalf("stream %d: %q; want both events and no last chunk", i, got)
				}
			}
		})
	}
}
