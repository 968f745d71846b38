package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
)

// With the poller off, a stream whose events come one a read waits for
// them within one wait on its upstream socket (relaysteady.go) — not one
// wait, and one look at the socket, per event — and the client gets every
// event, migration following the stream or not.
func TestStream_EventsOneAReadAreRelayedWithinOneWait(t *testing.T) {
	const events = 20
	for _, migration := range []bool{true, false} {
		t.Run(fmt.Sprintf("migration=%v", migration), func(t *testing.T) {
			defer SetStreamPoller(streamPollerOn.Load())
			SetStreamPoller(false)
			backend := serveTCP(t, func(c net.Conn) {
				if !readRequest(c) {
					return
				}
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
				for i := range events {
					time.Sleep(10 * time.Millisecond) // one event a read
					_, _ = io.WriteString(c, chunk(fmt.Sprintf(`data: {"choices":[{"index":0,"text":"e%d"}]}`+"\n\n", i)))
				}
				_, _ = io.WriteString(c, chunk("data: [DONE]\n\n")+"0\r\n\r\n")
			})
			cfg := singlePool(backend)
			if !migration {
				cfg.MigrationLimit = 0
			}
			fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
			base, _ := startGateway(t, cfg, Deps{Router: fr})
			waits := steadyWaits.Load()
			resp, err := http.Post(base+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"hello","stream":true}`))
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || !bytes.HasSuffix(b, []byte("data: [DONE]\n\n")) {
				t.Fatalf("stream: %d, %v, %q", resp.StatusCode, err, b)
			}
			for i := range events {
				if !bytes.Contains(b, fmt.Appendf(nil, `"e%d"`, i)) {
					t.Fatalf("the stream lacks event %d: %q", i, b)
				}
			}
			if w := steadyWaits.Load() - waits; w < 1 || w > events/4 {
				t.Errorf("%d steady waits for a stream of %d events apart; want 1 to %d", w, events, events/4)
			}
			fr.checkTicketsClosed(t, 1)
		})
	}
}
