package gateway

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/valyala/fasthttp"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

// instantRouter answers every Route with a fixed decision and ignores
// what its tickets report: the gateway's cost without the router's.
type instantRouter struct{ d ladder.Decision }

func (r *instantRouter) Route(context.Context, *actors.RouteRequest) (actors.Route, error) {
	return actors.Route{Decision: r.d, Ticket: actors.NewTicket(r, 1, r.d.Prefill, r.d.Decode)}, nil
}
func (*instantRouter) FirstByte(actors.Ticket)                {}
func (*instantRouter) Pin(actors.Ticket, string)              {}
func (*instantRouter) Report(actors.Outcome)                  {}
func (*instantRouter) Conclude(actors.Outcome, actors.Result) {}
func (*instantRouter) Finish(actors.Ticket, actors.Result)    {}

const benchCompletion = `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" world","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`

// fastBackend answers completions instantly (streaming when asked).
func fastBackend(b *testing.B) *httptest.Server {
	b.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength > 0 && r.ContentLength < 1<<20 {
			body, _ := io.ReadAll(r.Body)
			if bytes.Contains(body, []byte(`"do_remote_decode":true`)) {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, `{"id":"p","choices":[{"index":0,"text":"x"}],"kv_transfer_params":{"remote_block_ids":[[1]],"remote_engine_id":"e","remote_host":"h","remote_port":1}}`)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		fastCompletion(w, r)
	}))
	b.Cleanup(srv.Close)
	return srv
}

// latencyRun sends b.N requests with one client and reports p50/p99 in µs.
func latencyRun(b *testing.B, c *http.Client, url, body string) {
	b.Helper()
	h := hdrhistogram.New(1, int64(10*time.Second/time.Microsecond), 3)
	do := func() {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		_ = h.RecordValue(time.Since(start).Microseconds())
	}
	for range 200 { // warm the connection pools
		do()
	}
	h.Reset()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		do()
	}
	b.StopTimer()
	b.ReportMetric(float64(h.ValueAtQuantile(50)), "p50-µs")
	b.ReportMetric(float64(h.ValueAtQuantile(99)), "p99-µs")
}

// BenchmarkAddedLatency compares calling a fast backend directly with
// calling it through the gateway (in-process listener, instant router),
// side by side in one run. The added latency is the difference of the
// p50-µs figures; allocations include the client and the backend, which
// are the same on both sides.
func BenchmarkAddedLatency(b *testing.B) {
	be := fastBackend(b)
	beAddr := netip.MustParseAddrPort(be.Listener.Addr().String())
	cfg := singlePool(beAddr)
	l := benchListener(b, cfg, &instantRouter{d: decision(ladder.TierSelector, 0, -1)})
	if err := l.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	gw := "http://" + l.Addr().String()

	pdBE := fastBackend(b)
	pdAddr := netip.MustParseAddrPort(pdBE.Listener.Addr().String())
	pdCfg := pdPool([]netip.AddrPort{pdAddr}, []netip.AddrPort{pdAddr})
	pl := benchListener(b, pdCfg, &instantRouter{d: decision(ladder.Tier2, 0, 1)})
	if err := pl.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pl.Close() })
	pdURL := "http://" + pl.Addr().String()

	small := `{"model":"m","prompt":"Hello, my name is","max_tokens":1}`
	big := `{"model":"m","prompt":"` + strings.Repeat("lorem ipsum ", 1365) + `","max_tokens":1}` // ~16 KiB
	stream := `{"model":"m","prompt":"Hello, my name is","max_tokens":8,"stream":true}`
	cases := []struct{ name, url, body string }{
		{"direct/small", be.URL + PathCompletions, small},
		{"gateway/small", gw + PathCompletions, small},
		{"direct/prompt=16KiB", be.URL + PathCompletions, big},
		{"gateway/prompt=16KiB", gw + PathCompletions, big},
		{"direct/stream=8", be.URL + PathCompletions, stream},
		{"gateway/stream=8", gw + PathCompletions, stream},
		{"gateway-pd/small", pdURL + PathCompletions, small},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			tr := &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}
			defer tr.CloseIdleConnections()
			latencyRun(b, &http.Client{Transport: tr}, tc.url, tc.body)
		})
	}
}

// benchIdle is how long the benchmarks' own fasthttp servers and clients
// keep an idle worker or connection. Their cleaners sleep this long between
// passes and end only after one, so fasthttp's 10 s defaults outlive the
// package's goroutine-leak check (TestMain).
const benchIdle = 50 * time.Millisecond

// fastBackendFast is a fasthttp backend answering benchCompletion (or the
// P/D prefill's answer): it allocates nothing per request, so the
// allocations BenchmarkHandler reports are the gateway's.
func fastBackendFast(b *testing.B) netip.AddrPort {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	prefill := []byte(`{"id":"p","choices":[],"kv_transfer_params":{"remote_block_ids":[[1]],"remote_engine_id":"e"}}`)
	srv := &fasthttp.Server{MaxIdleWorkerDuration: benchIdle, Handler: func(rc *fasthttp.RequestCtx) {
		rc.SetContentType("application/json")
		if bytes.Contains(rc.PostBody(), []byte(`"do_remote_decode":true`)) {
			rc.SetBody(prefill)
			return
		}
		rc.SetBodyString(benchCompletion)
	}}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Shutdown() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

// BenchmarkHandler measures the gateway's own cost per proxied request —
// HTTP/1.1 server, parse, routing input, upstream request, relay, log and
// metrics — over loopback between a fasthttp client and a fasthttp
// backend (neither allocates), with a router that answers at once.
func BenchmarkHandler(b *testing.B) {
	be := fastBackendFast(b)
	for _, size := range []int{64, 4 << 10, 64 << 10, 1 << 20} {
		b.Run("single/prompt="+strconv.Itoa(size), func(b *testing.B) {
			_, l := startBenchGateway(b, singlePool(be), &instantRouter{d: decision(ladder.TierSelector, 0, -1)})
			benchHandler(b, l, `{"model":"m","prompt":"`+strings.Repeat("a", size)+`","max_tokens":1,"user_id":"u"}`)
		})
	}
	// The floor a Go proxy reaches on the same client and backend: fasthttp's
	// server and HostClient with nothing of llb's (no parse, routing,
	// bounds, log or metrics), the body checked for the members a router
	// reads.
	b.Run("bare-fasthttp/prompt=64", func(b *testing.B) {
		benchHandler(b, bareProxy(b, be), `{"model":"m","prompt":"`+strings.Repeat("a", 64)+`","max_tokens":1,"user_id":"u"}`)
	})
	b.Run("pd/prompt=4096", func(b *testing.B) {
		_, l := startBenchGateway(b, pdPool([]netip.AddrPort{be}, []netip.AddrPort{be}), &instantRouter{d: decision(ladder.Tier2, 0, 1)})
		benchHandler(b, l, `{"model":"m","prompt":"`+strings.Repeat("a", 4096)+`","max_tokens":1}`)
	})
	// Streams of 64 chat events: with migration (the default) the events
	// are followed and, max_tokens being set, the engine is asked for usage
	// in every chunk, which is deleted from what the client gets; without
	// it they are relayed untouched.
	sbe := streamBackendFast(b, 64)
	for _, mig := range []int{rule.DefaultMigrationLimit, 0} {
		b.Run("stream/events=64/migration="+strconv.Itoa(mig), func(b *testing.B) {
			cfg := singlePool(sbe)
			cfg.MigrationLimit = mig
			_, l := startBenchGateway(b, cfg, &instantRouter{d: decision(ladder.TierSelector, 0, -1)})
			benchHandlerPath(b, l, PathChatCompletions, `{"model":"m","messages":[{"role":"user","content":"`+strings.Repeat("a", 1024)+`"}],"max_tokens":64,"stream":true}`)
		})
	}
}

// streamBackendFast is a fasthttp backend streaming n chat chunks, with
// usage in each when the request asks for continuous usage (as vLLM).
func streamBackendFast(b *testing.B, n int) netip.AddrPort {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	plain := make([][]byte, n)
	usage := make([][]byte, n)
	for i := range n {
		ev := `data: {"id":"chatcmpl-0123456789abcdef","object":"chat.completion.chunk","created":1700000000,"model":"m","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}]`
		plain[i] = []byte(ev + "}\n\n")
		usage[i] = []byte(ev + `,"usage":{"prompt_tokens":300,"total_tokens":` + strconv.Itoa(301+i) + `,"completion_tokens":` + strconv.Itoa(i+1) + "}}\n\n")
	}
	done := []byte("data: [DONE]\n\n")
	srv := &fasthttp.Server{MaxIdleWorkerDuration: benchIdle, Handler: func(rc *fasthttp.RequestCtx) {
		evs := plain
		if bytes.Contains(rc.PostBody(), []byte(`"continuous_usage_stats":true`)) {
			evs = usage
		}
		rc.SetContentType("text/event-stream")
		rc.SetBodyStreamWriter(func(w *bufio.Writer) {
			for _, ev := range evs {
				_, _ = w.Write(ev)
				_ = w.Flush()
			}
			_, _ = w.Write(done)
			_ = w.Flush()
		})
	}}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Shutdown() })
	return netip.MustParseAddrPort(ln.Addr().String())
}

// bareProxy serves the smallest fasthttp reverse proxy in front of be and
// returns its address.
func bareProxy(b *testing.B, be netip.AddrPort) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	hc := &fasthttp.HostClient{Addr: be.String(), MaxConns: 1024, MaxIdleConnDuration: benchIdle}
	srv := &fasthttp.Server{NoDefaultContentType: true, MaxIdleWorkerDuration: benchIdle, Handler: func(rc *fasthttp.RequestCtx) {
		body := rc.PostBody()
		if !bytes.Contains(body, []byte(`"model"`)) || !bytes.Contains(body, []byte(`"prompt"`)) {
			rc.Error("bad request", fasthttp.StatusBadRequest)
			return
		}
		rc.Request.Header.Del("Connection")
		if err := hc.Do(&rc.Request, &rc.Response); err != nil {
			rc.Error(err.Error(), fasthttp.StatusBadGateway)
		}
	}}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(func() {
		_ = srv.Shutdown()
		hc.CloseIdleConnections()
	})
	return ln.Addr().String()
}

// benchListener builds an unbound listener for cfg over router r.
func benchListener(b *testing.B, cfg *rule.Compiled, r actors.Router) *Listener {
	b.Helper()
	// The daemon's process-wide bounds, at their defaults.
	h, err := NewHandler(cfg, Options{}, Deps{Router: r, Budget: NewBodyBudget(DefaultBodyBufferBytes, nil), Conns: NewConnLimit(DefaultMaxConns(), nil)})
	if err != nil {
		b.Fatal(err)
	}
	return NewListener(h)
}

func startBenchGateway(b *testing.B, cfg *rule.Compiled, r actors.Router) (string, *Listener) {
	b.Helper()
	l := benchListener(b, cfg, r)
	if err := l.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return "http://" + l.Addr().String(), l
}

func benchHandler(b *testing.B, addr any, body string) {
	b.Helper()
	benchHandlerPath(b, addr, PathCompletions, body)
}

// benchHandlerPath sends b.N requests to addr (a *Listener or an address)
// with one client.
func benchHandlerPath(b *testing.B, addr any, path, body string) {
	b.Helper()
	var a string
	switch v := addr.(type) {
	case *Listener:
		a = v.Addr().String()
	case string:
		a = v
	}
	c := &fasthttp.HostClient{Addr: a, MaxIdleConnDuration: benchIdle}
	defer c.CloseIdleConnections()
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(http.MethodPost)
	req.SetRequestURI("http://" + a + path)
	req.Header.SetContentType("application/json")
	req.SetBodyString(body)
	do := func() {
		if err := c.Do(req, resp); err != nil || resp.StatusCode() != 200 {
			b.Fatalf("%v, status %d %s", err, resp.StatusCode(), resp.Body())
		}
	}
	for range 100 {
		do()
	}
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	c0 := processCPU()
	for range b.N {
		do()
	}
	// The process's CPU per request — client, gateway and backend, GC
	// included — is what a loaded machine inflates least.
	b.ReportMetric(float64(processCPU()-c0)/float64(b.N)/1e3, "cpu-µs/op")
}

// processCPU is the process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
