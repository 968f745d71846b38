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
	// healthDelay, when not 0, holds every GET /health that long before
	// its answer (< 0: until the prober leaves); health counts them.
	healthDelay atomic.Int64
	health      atomic.Int64
	srv         *http.Server
}

// startStarvedWorker serves on ip:8000 until the test ends: completions
// streamed as events 250 ms apart (JSON when not streamed), GET /health.
func startStarvedWorker(t *testing.T, ip string, stall time.Duration) *starvedWorker {
	t.Helper()
	w := &starvedWorker{addr: ip + ":8000", stall: stall}
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(_ http.ResponseWriter, r *http.Request) {
		w.health.Add(1)
		if d := time.Duration(w.healthDelay.Load()); d != 0 {
			if d < 0 {
				<-r.Context().Done()
				return
			}
			select {
			case <-r.Context().Done():
			case <-time.After(d):
			}
			return
		}
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
	w.srv = srv
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

// probeOf is the probe state llbd reports for the only endpoint of the
// rule on vip:port.
func probeOf(d *daemon, vip string, port int) string {
	var st struct {
		Endpoints []endpointState `json:"endpoints"`
	}
	d.getJSON(fmt.Sprintf("/netlox/v1/config/loadbalancer/externalipaddress/%s/port/%d/protocol/tcp/status", vip, port), &st)
	if len(st.Endpoints) != 1 {
		return fmt.Sprintf("%d endpoints", len(st.Endpoints))
	}
	return st.Endpoints[0].Probe
}

// A worker whose every probe times out, with no request flowing to vouch
// for it, goes down — slow, not dead. The requests that come then are
// served anyway (panic routing: X-Llb-Route flag panic, counted), all 200,
// and the bytes they read bring the endpoint back up at once, long before
// any probe could. Once the worker refuses connections, a request fails
// at once (502, no wait) and, the probe having seen the refusal, 503
// no_healthy_backend without panic; each answer's X-Llb-Route names the
// error its body gives.
func TestE2E_AWorkerWhoseProbesAllTimeOutIsServedInPanic(t *testing.T) {
	n := newChaosNet()
	w := startStarvedWorker(t, n.ip(11), 0)
	w.healthDelay.Store(-1)
	d := startDataPlane(t)
	vip := n.ip(2)
	d.post(fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":2021,"protocol":"tcp","sel":0,"mode":4,"probeTimeout":2},`+
		`"endpoints":[{"endpointIP":%q,"targetPort":8000,"weight":1}]}`, vip, n.ip(11)))
	d.waitActive(2021)
	waitUntil(t, "the silent worker probed down", 30*time.Second, func() bool { return probeOf(d, vip, 2021) == "down" })
	base := "http://" + vip + ":2021/v1/completions"

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}, Timeout: 30 * time.Second}
	res, err := client.Post(base, "application/json", strings.NewReader(`{"model":"m","prompt":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(res.Header.Get("X-Llb-Route"), "panic") {
		t.Fatalf("a request to the slow worker: %d, X-Llb-Route %q; want 200 with flag panic", res.StatusCode, res.Header.Get("X-Llb-Route"))
	}
	answered := time.Now()
	waitUntil(t, "the answering worker back up", 3*time.Second, func() bool { return probeOf(d, vip, 2021) == "up" })
	t.Logf("back up %v after its answer (probes every 2 s, none answers)", time.Since(answered).Round(time.Millisecond))
	if v := d.metricValue("llb_panic_routing_total", ""); v < 1 {
		t.Fatalf("llb_panic_routing_total %v; want at least 1", v)
	}

	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 3 {
				var a string
				if i%2 == 0 {
					a = shortCompletion(client, base)
				} else {
					a = streamCompletion(client, base)
				}
				mu.Lock()
				codes[a]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(codes) != 2 || codes["stream 200"] != 12 || codes["200"] != 12 {
		t.Fatalf("answers %v; want 12 short 200s and 12 whole streams", codes)
	}

	// Refused: never waited for, never panic-routed once the probe saw it.
	_ = w.srv.Close()
	start := time.Now()
	got := shortCompletion(client, base)
	if took := time.Since(start); !strings.HasPrefix(got, "502 ") || !strings.Contains(got, "backend_unreachable") ||
		!strings.Contains(got, "error=backend_unreachable)") || took > 2*time.Second {
		t.Fatalf("a request to the refusing worker: %s after %v; want 502 backend_unreachable (header and body) at once", got, took)
	}
	waitUntil(t, "the refusing worker probed down", 30*time.Second, func() bool { return probeOf(d, vip, 2021) == "down" })
	got = shortCompletion(client, base)
	if !strings.HasPrefix(got, "503 ") || !strings.Contains(got, `"no_healthy_backend"`) ||
		!strings.Contains(got, "unavailable=no_healthy_backend") || strings.Contains(got, "panic") {
		t.Fatalf("a request with the worker refused down: %s; want 503 no_healthy_backend in header and body, no panic", got)
	}
}

// A probe answered late is a sign of life: a worker whose /health takes
// 2.5 s against the probe's 2 s, with no request flowing, stays up over
// four probes (the probe reads on past its timeout, and the late answer
// counts as the endpoint answering). Judged by its timeouts alone it was
// down after two.
func TestE2E_AProbeAnsweredLateKeepsTheWorkerUp(t *testing.T) {
	n := newChaosNet()
	w := startStarvedWorker(t, n.ip(12), 0)
	w.healthDelay.Store(int64(2500 * time.Millisecond))
	d := startDataPlane(t)
	vip := n.ip(3)
	d.post(fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":2022,"protocol":"tcp","sel":0,"mode":4,"probeTimeout":2},`+
		`"endpoints":[{"endpointIP":%q,"targetPort":8000,"weight":1}]}`, vip, n.ip(12)))
	d.waitActive(2022)
	start := w.health.Load()
	for end := time.Now().Add(40 * time.Second); w.health.Load()-start < 5 && time.Now().Before(end); {
		if p := probeOf(d, vip, 2022); p == "down" {
			t.Fatalf("the late-answering worker went down after %d probes", w.health.Load()-start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if w.health.Load()-start < 5 {
		t.Fatalf("%d probes in 40 s; want 5", w.health.Load()-start)
	}
}
