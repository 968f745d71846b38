//go:build linux

package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// gatedListener is a loopback listener with an accept queue of one
// connection (listen backlog 0) whose accepting can be paused: while it
// is, the kernel completes one handshake more and then drops new SYNs,
// which the dialer sends again 1 s later — a loaded backend's full
// accept queue.
type gatedListener struct {
	*net.TCPListener
	mu     sync.Mutex
	open   chan struct{} // closed while accepting
	parked chan struct{} // an Accept waits at the gate
}

func listenGated(t *testing.T) *gatedListener {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(fd, 0); err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "gated")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedListener{TCPListener: ln.(*net.TCPListener), open: make(chan struct{}), parked: make(chan struct{}, 1)}
	close(g.open)
	t.Cleanup(func() { g.resume(); ln.Close() })
	return g
}

// Accept waits at the gate while paused; an Accept already in the kernel
// when the pause came is woken by the listener's deadline (http.Server
// retries the timeout) and comes back to the gate.
func (g *gatedListener) Accept() (net.Conn, error) {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
	default:
		select {
		case g.parked <- struct{}{}:
		default:
		}
		<-open
	}
	return g.TCPListener.Accept()
}

// pause stops accepting and returns once no Accept is left in the kernel.
func (g *gatedListener) pause(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	g.open = make(chan struct{})
	g.mu.Unlock()
	_ = g.SetDeadline(time.Unix(1, 0))
	select {
	case <-g.parked:
	case <-time.After(5 * time.Second):
		t.Fatal("the server's accept loop never came back to the gate")
	}
}

func (g *gatedListener) resume() {
	g.mu.Lock()
	defer g.mu.Unlock()
	_ = g.SetDeadline(time.Time{})
	select {
	case <-g.open:
	default:
		close(g.open)
	}
}

// fill queues connections until the accept queue is full (a dial that
// does not complete within 200 ms), closing them at cleanup.
func (g *gatedListener) fill(t *testing.T) {
	t.Helper()
	for range 8 {
		c, err := net.DialTimeout("tcp", g.Addr().String(), 200*time.Millisecond)
		if err != nil {
			return
		}
		t.Cleanup(func() { c.Close() })
	}
	t.Fatal("the accept queue never filled: 8 dials completed")
}

func (g *gatedListener) addr() netip.AddrPort { return netip.MustParseAddrPort(g.Addr().String()) }

// sseOnGated serves completions on ln: a stream of an event every
// 50 ms for 3 s, or a small JSON answer.
func sseOnGated(t *testing.T, ln *gatedListener) {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"c","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"stop"}]}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			if _, err := io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"text\":\"t\"}]}\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { ln.resume(); _ = srv.Close() })
}

// A dial to an endpoint whose accept queue is full waits past the connect
// timeout (500 ms) while the endpoint keeps answering its other requests:
// the backend is loaded, not gone, and its SYN is sent again 1 s later
// (issue 31: dials timed out at 500 ms under load, 502
// backend_unreachable where HAProxy served).
func TestDial_WaitsPastTheConnectTimeoutWhileTheEndpointStreams(t *testing.T) {
	g := listenGated(t)
	sseOnGated(t, g)
	c := singlePool(g.addr())
	url, _ := startGateway(t, c, Deps{Router: newFakeRouter(firstAllowed(c))})
	client := testClient(t)

	// A stream holds the gateway's one upstream connection and keeps
	// producing bytes.
	req, _ := http.NewRequest(http.MethodPost, url+PathCompletions, strings.NewReader(`{"model":"m","prompt":"hi","stream":true}`))
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatalf("first event: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, br) }()

	g.pause(t)
	g.fill(t)
	time.AfterFunc(800*time.Millisecond, g.resume)
	start := time.Now()
	other, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"hi"}`)
	if other.StatusCode != http.StatusOK {
		t.Fatalf("a request needing a new connection while the accept queue is full for 800 ms: %d after %v (%s); want 200",
			other.StatusCode, time.Since(start).Round(time.Millisecond), body)
	}
}

// The same full accept queue with nothing answering: the connect timeout
// bounds the dial, and the client gets 502 backend_unreachable.
func TestDial_GivesUpAtTheConnectTimeoutWhenTheEndpointIsSilent(t *testing.T) {
	g := listenGated(t)
	sseOnGated(t, g)
	g.pause(t)
	g.fill(t)
	c := singlePool(g.addr())
	url, _ := startGateway(t, c, Deps{Router: newFakeRouter(firstAllowed(c))})
	start := time.Now()
	resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"hi"}`)
	took := time.Since(start)
	if resp.StatusCode != http.StatusBadGateway || decodeError(t, body).Error.Code != CodeBackendUnreachable {
		t.Fatalf("status %d (%s); want 502 %s", resp.StatusCode, body, CodeBackendUnreachable)
	}
	if took > 3*time.Second {
		t.Fatalf("took %v; want about the connect timeout", took)
	}
}

// A dial to an endpoint whose accept queue is full waits past the connect
// timeout when no leg reads from it but its probe passed within the probe
// cycle: the endpoint answered, so the dropped SYN is load, not death. A
// rule's first requests after a quiet spell find no leg to vouch for the
// endpoint; the probe does.
func TestDial_WaitsPastTheConnectTimeoutWhenTheProbeJustPassed(t *testing.T) {
	g := listenGated(t)
	sseOnGated(t, g)
	c := singlePool(g.addr())
	watch := NewEndpointWatch()
	url, _ := startGateway(t, c, Deps{Router: newFakeRouter(firstAllowed(c)), Watch: watch})
	if err := watch.Probe(0, func(context.Context) error { return nil }, c.Probe)(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.pause(t)
	g.fill(t)
	time.AfterFunc(800*time.Millisecond, g.resume)
	start := time.Now()
	resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"hi"}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("a request needing a new connection while the accept queue is full for 800 ms, the probe passed just before: %d after %v (%s); want 200",
			resp.StatusCode, time.Since(start).Round(time.Millisecond), body)
	}
}
