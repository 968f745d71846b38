package lifecycle

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/rule/ruletest"
)

// busyBackend streams completions (an event every 50 ms for streamFor) and
// answers GET /health at once, 1.5 s late while stall is set, never while
// mute is: an engine whose health endpoint starves under load while its
// streams flow.
func busyBackend(t *testing.T, stall, mute *atomic.Bool, streamFor time.Duration) netip.AddrPort {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			switch {
			case mute.Load():
				<-r.Context().Done()
			case stall.Load():
				select {
				case <-time.After(1500 * time.Millisecond):
				case <-r.Context().Done():
				}
			}
			return
		}
		body, _ := io.ReadAll(r.Body)
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"id":"c","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"stop"}]}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for end := time.Now().Add(streamFor); time.Now().Before(end); {
			if _, err := io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"text\":\"t\"}]}\n\n"); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(50 * time.Millisecond)
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(srv.Listener.Addr().String())
}

// A probe that times out while its endpoint streams answers does not take
// the endpoint down: it is busy, not dead (issue 31: the probe's timeout
// expired on a CPU-starved backend that was serving every stream, and the
// only endpoint was marked down, 503 no_healthy_backend). Once nothing
// flows and the probe gets no answer at all, its timeouts take it down —
// slow, not dead: a request then goes to it anyway (panic routing).
func TestRuleSet_AProbeTimingOutOnAnEndpointThatStreamsKeepsItUp(t *testing.T) {
	var stall, mute atomic.Bool
	be := busyBackend(t, &stall, &mute, 6*time.Second)
	rs := newTestRuleSet(t)
	port := freePort(t)
	// Probes every second, 1 s each, down after 2 failures.
	c := ruletest.Rule(ruletest.Options{Port: port, Probe: rule.ProbeHTTP, Extra: fmt.Sprintf(`"probeport":%d,"probeTimeout":1,"probeRetries":2`, be.Port())}, ruletest.Endpoint{Addr: be})
	if err := rs.apply(context.Background(), runSpec{rule: c, service: actors.NewServiceConfig(c, ladder.DefaultEnv())}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, port, http.StatusOK, 10*time.Second)

	stall.Store(true)
	streamed := make(chan error, 1)
	go func() { streamed <- readStream(port) }()
	// 5 s of stalled probes while the stream flows: two or three timeouts,
	// each excused.
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if code, route := completion(t, port); code != http.StatusOK {
			t.Fatalf("completion while the endpoint streams and its probe times out: %d (%s); want 200", code, route)
		}
	}
	if err := <-streamed; err != nil {
		t.Fatalf("the stream: %v", err)
	}
	// Nothing flows any more (the test's own requests would be answers, so
	// it sends none until then) and the probe gets no answer, not even a
	// late one (a late answer is a sign of life): the first timeout is
	// excused by the stream's last bytes, the next two take the endpoint
	// down — within three probe cycles (a second's wait and a second's
	// attempt each).
	mute.Store(true)
	quiet := time.Now()
	waitDown(t, rs, c.Key, 10*time.Second)
	if took := time.Since(quiet); took > 8*time.Second {
		t.Errorf("the endpoint went down %v after its last stream ended; want about three probe cycles (6 s)", took.Round(time.Millisecond))
	}
	if code, route := completion(t, port); code != http.StatusOK || !strings.Contains(route, "panic") {
		t.Fatalf("completion once the endpoint is down by timeouts alone: %d (%s); want 200, flag panic", code, route)
	}
}

// waitDown waits until rule key's first endpoint is probed down.
func waitDown(t *testing.T, rs *ruleSet, key string, within time.Duration) {
	t.Helper()
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if st, ok := rs.status(key); ok && st.ServiceOK && len(st.Service.Endpoints) > 0 && !st.Service.Endpoints[0].Up {
			return
		}
	}
	t.Fatalf("the endpoint was not probed down within %v", within)
}

// waitStatus waits until a completion on port answers want.
func waitStatus(t *testing.T, port uint16, want int, within time.Duration) {
	t.Helper()
	var code int
	var route string
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if code, route = completion(t, port); code == want {
			return
		}
	}
	t.Fatalf("completion: %d (%s) for %v; want %d", code, route, within, want)
}

// readStream reads a streamed completion on port to its [DONE].
func readStream(port uint16) error {
	res, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/completions", port), "application/json",
		strings.NewReader(`{"model":"m","prompt":"hi","stream":true}`))
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", res.StatusCode)
	}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if sc.Text() == "data: [DONE]" {
			return nil
		}
	}
	return fmt.Errorf("no [DONE]: %v", sc.Err())
}
