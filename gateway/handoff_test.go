package gateway

import (
	"io"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
)

// A stream whose connection fails as the server hands it to the hijack
// handler (fasthttp then runs no handler and keeps the request context)
// still ends: its leg and ticket as a client that left, its upstream
// request, and the connection in the listener's count, so that the
// listener closes. Before, the HTTP/1.0 path waited for the handler for
// ever and the poller's path never ended the exchange.
func TestStream_AConnectionThatFailsAsItIsHandedOverEndsItsStream(t *testing.T) {
	tests := []struct {
		name   string
		proto  string
		poller bool
	}{
		{"HTTP/1.0 stream written until the close", "HTTP/1.0", false},
		{"HTTP/1.1 stream given to the poller", "HTTP/1.1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.poller && !streamPolls {
				t.Skip("no stream poller on this system")
			}
			was := streamPollerOn.Load()
			SetStreamPoller(tt.poller)
			t.Cleanup(func() { SetStreamPoller(was) })
			hook := func(cc *clientConn) { _ = cc.Conn.Close() }
			handingHook.Store(&hook)
			t.Cleanup(func() { handingHook.Store(nil) })

			be := newFakeVLLM(t)
			upEnded := make(chan struct{})
			be.answer = func(w http.ResponseWriter, r *http.Request, body []byte) {
				defer close(upEnded)
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "data: first\n\n")
				_ = http.NewResponseController(w).Flush()
				select {
				case <-r.Context().Done():
				case <-time.After(10 * time.Second):
				}
			}
			fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
			url, l := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
			c := rawConn(t, url)
			body := `{"model":"m","prompt":"p","stream":true}`
			if _, err := io.WriteString(c, "POST /v1/completions "+tt.proto+"\r\nHost: llb\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, _ = io.ReadAll(c) // the connection closes

			fr.checkTicketsClosed(t, 1)
			if _, outcomes, _ := fr.snapshot(); len(outcomes) != 1 || outcomes[0].Failure != actors.FailClientGone {
				t.Errorf("outcomes %+v; want one leg ended by the client's departure", outcomes)
			}
			select {
			case <-upEnded:
			case <-time.After(5 * time.Second):
				t.Error("the upstream request is still open")
			}
			closed := make(chan struct{})
			go func() { _ = l.Close(); close(closed) }()
			select {
			case <-closed:
			case <-time.After(5 * time.Second):
				t.Fatal("the listener does not close: it still counts the connection")
			}
		})
	}
}
