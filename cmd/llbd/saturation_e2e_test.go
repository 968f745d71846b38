package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Saturation slows llbd down; it does not make it refuse. A CPU-starved
// engine answers its health probe late and every one of its streams
// stalls while it does, yet it serves; through the real llbd, with its
// probe on, every request must be answered 200 — and a worker that
// stops answering altogether must still be probed down.

// starvedWorker is a worker whose process is starved whenever its health
// probe arrives, once starving is set: from that moment nothing it serves
// moves for stall (the probe's answer included), then everything goes on.
// With frozen set it answers nothing at all.
type starvedWorker struct {
	addr       string
	stall      time.Duration
	starving   atomic.Bool
	stallUntil atomic.Int64 // Unix nanoseconds
	frozen     atomic.Bool
	probes     atomic.Int64 // probes that starved it
}

// startStarvedWorker serves on ip:8000 until the test ends: completions
// streamed as events 250 ms apart (JSON when not streamed), GET /health.
func startStarvedWorker(t *testing.T, ip string, stall time.Duration) *starvedWorker {
	t.Helper()
	w := &starvedWorker{addr: ip + ":8000", stall: stall}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(_ http.ResponseWriter, r *http.Request) {
		if !w.starving.Load() {
			w.wait(r, time.Time{})
			return
		}
		w.probes.Add(1)
		until := time.Now().Add(w.stall)
		w.stallUntil.Store(until.UnixNano())
		w.wait(r, until)
	})
	mux.HandleFunc("/v1/completions", func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.wait(r, time.Time{})
		if !strings.Contains(string(body), `"stream":true`) {
			rw.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(rw, `{"id":"c","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"stop"}]}`)
			return
		}
		rw.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(rw)
		for range 12 {
			w.wait(r, time.Time{})
			if _, err := io.WriteString(rw, "data: {\"choices\":[{\"index\":0,\"text\":\"t\"}]}\n\n"); err != nil || rc.Flush() != nil {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
		_, _ = io.WriteString(rw, "data: [DONE]\n\n")
	})
	ln, err := net.Listen("tcp", w.addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return w
}

// wait holds r while the worker is starved (at least until until) or
// frozen, or until r's client leaves.
func (w *starvedWorker) wait(r *http.Request, until time.Time) {
	for {
		now := time.Now()
		if !w.frozen.Load() && now.UnixNano() >= w.stallUntil.Load() && !now.Before(until) {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// The 4 000-stream run lost 4 227 requests to 503
// no_healthy_backend: the probe's 2 s timeout expired while the starved
// backend's streams produced no byte, and two such probes took the only
// endpoint down. Here every probe starves the worker for 2.5 s (the probe
// times out at 2 s, nothing moves meanwhile), and between probes it serves:
// streams and short requests through llbd all get 200 and whole streams.
// Then the worker stops answering anything: its probe takes it down within
// a few probe cycles, as a frozen engine's must.
func TestE2E_AStarvedWorkerThatServesIsNeverRefused(t *testing.T) {
	n := newChaosNet()
	w := startStarvedWorker(t, n.ip(10), 2500*time.Millisecond)
	d := startDataPlane(t)
	vip := n.ip(1)
	// Probes every 3 s (2 s each), down after 2 failures; 5 s to connect.
	d.post(fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":2020,"protocol":"tcp","sel":0,"mode":4,"timeoutMemberConnect":5000,"probeTimeout":3},`+
		`"endpoints":[{"endpointIP":%q,"targetPort":8000,"weight":1}]}`, vip, n.ip(10)))
	d.waitActive(2020)
	base := "http://" + vip + ":2020/v1/completions"

	var mu sync.Mutex
	codes := map[string]int{}
	count := func(k string) { mu.Lock(); codes[k]++; mu.Unlock() }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, Timeout: 30 * time.Second}
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if i == 0 { // short requests, one at a time
					count(shortCompletion(client, base))
					time.Sleep(200 * time.Millisecond)
					continue
				}
				count(streamCompletion(client, base))
			}
		}()
	}
	// Four probe cycles once the load flows: before the fix, two timed-out
	// probes in a row took the endpoint down (a 2.5 s stall leaves no byte
	// in a 2 s attempt).
	time.Sleep(time.Second)
	w.starving.Store(true)
	start := w.probes.Load()
	for end := time.Now().Add(40 * time.Second); w.probes.Load()-start < 4 && time.Now().Before(end); {
		time.Sleep(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if w.probes.Load()-start < 4 {
		t.Fatalf("%d probes in 40 s; want 4 (answers %v)", w.probes.Load()-start, codes)
	}
	t.Logf("%d probes, each starving the worker for 2.5 s; answers %v", w.probes.Load()-start, codes)
	if len(codes) != 2 || codes["stream 200"] == 0 || codes["200"] == 0 {
		t.Fatalf("answers %v; want only 200s and whole streams", codes)
	}

	// Frozen: nothing answers, no byte flows; the probe's timeouts now
	// count (one cycle excused by the last bytes, then two failures).
	w.frozen.Store(true)
	frozenAt := time.Now()
	waitUntil(t, "the frozen worker probed down", 25*time.Second, func() bool {
		var st struct {
			Endpoints []endpointState `json:"endpoints"`
		}
		d.getJSON(fmt.Sprintf("/netlox/v1/config/loadbalancer/externalipaddress/%s/port/2020/protocol/tcp/status", vip), &st)
		return len(st.Endpoints) == 1 && st.Endpoints[0].Probe == "down"
	})
	t.Logf("the frozen worker was probed down %v after it froze", time.Since(frozenAt).Round(time.Millisecond))
	w.frozen.Store(false)
}

// shortCompletion sends a non-streamed completion and names its answer.
func shortCompletion(c *http.Client, url string) string {
	res, err := c.Post(url, "application/json", strings.NewReader(`{"model":"m","prompt":"hi"}`))
	if err != nil {
		return "error " + err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Sprintf("%d %s (%s)", res.StatusCode, strings.TrimSpace(string(b)), res.Header.Get("X-Llb-Route"))
	}
	return "200"
}

// streamCompletion reads a streamed completion to its [DONE] and names
// its answer.
func streamCompletion(c *http.Client, url string) string {
	res, err := c.Post(url, "application/json", strings.NewReader(`{"model":"m","prompt":"hi","stream":true}`))
	if err != nil {
		return "stream error " + err.Error()
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		return fmt.Sprintf("stream %d %s (%s)", res.StatusCode, strings.TrimSpace(string(b)), res.Header.Get("X-Llb-Route"))
	}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		if sc.Text() == "data: [DONE]" {
			return "stream 200"
		}
	}
	return fmt.Sprintf("stream 200 without [DONE] (%v)", sc.Err())
}
