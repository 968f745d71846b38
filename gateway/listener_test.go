package gateway

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

func TestListener_BindFailureIsReturnedAndOthersKeepRunning(t *testing.T) {
	be := newFakeVLLM(t)
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, first := startGateway(t, singlePool(be.addr()), Deps{Router: fr})

	cfg := singlePool(be.addr())
	cfg.Port = uint16(first.Addr().(*net.TCPAddr).Port)
	h, err := NewHandler(cfg, Options{}, Deps{Router: fr})
	if err != nil {
		t.Fatal(err)
	}
	second := NewListener(h)
	err = second.Start()
	if !errors.Is(err, ErrBind) || !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("Start on a used port = %v; want ErrBind wrapping EADDRINUSE", err)
	}
	if second.Addr() != nil {
		t.Errorf("a failed listener reports address %v", second.Addr())
	}
	if err := second.Close(); err != nil {
		t.Errorf("Close of an unstarted listener: %v", err)
	}
	if resp, _ := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"p"}`); resp.StatusCode != 200 {
		t.Errorf("the first rule answered %d after the second failed to bind", resp.StatusCode)
	}
}

func TestNewHandler_RefusesARuleThatWasNotCompiled(t *testing.T) {
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	ep := []rule.CompiledEndpoint{{Addr: netip.MustParseAddrPort("127.0.0.1:1")}}
	tune := func(f func(c *rule.Compiled)) *rule.Compiled {
		c := singlePool(netip.MustParseAddrPort("127.0.0.1:1"))
		f(c)
		return c
	}
	tests := []struct {
		name string
		give *rule.Compiled
		deps Deps
		want error
	}{
		{"nil", nil, Deps{Router: fr}, ErrInvalidConfig},
		{"hand-filled, no bounds", &rule.Compiled{VIP: netip.MustParseAddr("127.0.0.1"), Endpoints: ep}, Deps{Router: fr}, ErrInvalidConfig},
		{"no endpoints", tune(func(c *rule.Compiled) { c.Endpoints = nil }), Deps{Router: fr}, ErrInvalidConfig},
		{"no vip", tune(func(c *rule.Compiled) { c.VIP = netip.Addr{} }), Deps{Router: fr}, ErrInvalidConfig},
		{"bad session header", tune(func(c *rule.Compiled) { c.SessionHeaderName = "cookie:" }), Deps{Router: fr}, ErrInvalidConfig},
		{"bad hash contract", tune(func(c *rule.Compiled) { c.Spec.KVExactMode, c.KV.Algo = ladder.KVSinglePool, "md5" }), Deps{Router: fr}, inventory.ErrConfig},
		{"no router", singlePool(netip.MustParseAddrPort("127.0.0.1:1")), Deps{}, ErrNoRouter},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := NewHandler(tt.give, Options{}, tt.deps); !errors.Is(err, tt.want) {
				t.Errorf("err = %v; want %v", err, tt.want)
			}
		})
	}
}

// streamingBackend sends one event, waits for release, then finishes.
func streamingBackend(t *testing.T, release <-chan struct{}) *fakeVLLM {
	be := newFakeVLLM(t)
	be.answer = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		_, _ = io.WriteString(w, "data: two\n\ndata: [DONE]\n\n")
	}
	return be
}

func TestListener_ShutdownFinishesInFlightStreams(t *testing.T) {
	release := make(chan struct{})
	be := streamingBackend(t, release)
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, l := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	req, _ := http.NewRequest(http.MethodPost, url+PathCompletions, strings.NewReader(`{"model":"m","prompt":"p","stream":true}`))
	resp, err := testClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); line != "data: one\n" {
		t.Fatalf("first line %q", line)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- l.Shutdown(ctx)
	}()
	// New connections are refused once shutdown began; wait for that.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatal("the listener still accepts after Shutdown")
		}
		<-time.After(5 * time.Millisecond)
	}
	close(release)
	rest, err := io.ReadAll(br)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") {
		t.Errorf("rest = %q, %v; want the in-flight stream to complete", rest, err)
	}
	if err := <-done; err != nil {
		t.Errorf("Shutdown = %v; want nil after draining", err)
	}
	<-l.Done()
	if l.Err() != nil {
		t.Errorf("Err() = %v after a requested stop", l.Err())
	}
}

func TestListener_ShutdownDeadlineCutsRemainingStreams(t *testing.T) {
	release := make(chan struct{}) // never closed
	be := streamingBackend(t, release)
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, l := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	req, _ := http.NewRequest(http.MethodPost, url+PathCompletions, strings.NewReader(`{"model":"m","prompt":"p","stream":true}`))
	resp, err := testClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); line != "data: one\n" {
		t.Fatalf("first line %q", line)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := l.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown = %v; want the deadline error", err)
	}
	// Shutdown returned: the cut handler already finished its ticket.
	if _, _, fin := fr.snapshot(); len(fin) != 1 {
		t.Errorf("%d tickets finished when Shutdown returned; want 1", len(fin))
	}
	if _, err := io.ReadAll(br); err == nil {
		t.Error("the stream ended cleanly; want it cut at the drain deadline")
	}
}

func TestListener_ShutdownDeadlineNeverEndsARequestAsIfComplete(t *testing.T) {
	tests := []struct {
		name string
		// headersFirst: the backend sends a first event, so the cut lands
		// mid-stream; otherwise it lands before the first byte.
		headersFirst bool
	}{
		{"mid-stream", true},
		{"before the first byte", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newFakeVLLM(t)
			be.answer = func(w http.ResponseWriter, r *http.Request, _ []byte) {
				if tt.headersFirst {
					w.Header().Set("Content-Type", "text/event-stream")
					_, _ = io.WriteString(w, "data: one\n\n")
					w.(http.Flusher).Flush()
				}
				<-r.Context().Done()
			}
			fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
			url, l := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
			const n = 16
			c := testClient(t)
			type result struct {
				status int
				body   string
				err    error
			}
			results := make(chan result, n)
			for i := 0; i < n; i++ {
				go func() {
					req, _ := http.NewRequest(http.MethodPost, url+PathCompletions, strings.NewReader(`{"model":"m","prompt":"p","stream":true}`))
					resp, err := c.Do(req)
					if err != nil {
						results <- result{err: err}
						return
					}
					defer resp.Body.Close()
					b, err := io.ReadAll(resp.Body)
					results <- result{status: resp.StatusCode, body: string(b), err: err}
				}()
			}
			// Every request reached the backend before the drain starts.
			for i := 0; i < n; i++ {
				select {
				case <-be.got:
				case <-time.After(5 * time.Second):
					t.Fatalf("only %d of %d requests reached the backend", i, n)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			defer cancel()
			if err := l.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Shutdown = %v; want the deadline error", err)
			}
			for i := 0; i < n; i++ {
				r := <-results
				if r.err == nil {
					t.Errorf("request %d ended cleanly (%d %q); want its connection cut at the drain deadline", i, r.status, r.body)
				}
			}
		})
	}
}
