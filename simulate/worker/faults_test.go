package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func setFaults(t *testing.T, c *http.Client, w *Worker, body string) FaultsView {
	t.Helper()
	st, _, raw := post(t, c, w.URL()+"/_sim/faults", body, nil)
	if st != http.StatusOK {
		t.Fatalf("faults %s: %d %s", body, st, raw)
	}
	return decode[FaultsView](t, raw)
}

func TestFaults_InjectErrorsAndDeadEngine(t *testing.T) {
	tests := []struct {
		name       string
		give       []string // patches, in order
		wantStatus []int    // statuses of three consecutive requests
		wantHealth int
	}{
		{"fail next two", []string{`{"fail_next":2}`}, []int{500, 500, 200}, 200},
		{"fail next with 503", []string{`{"fail_next":1,"error_status":503}`}, []int{503, 200, 200}, 200},
		{"error rate one", []string{`{"error_rate":1}`}, []int{500, 500, 500}, 200},
		{"dead engine", []string{`{"dead":true}`}, []int{500, 500, 500}, 503},
		{"cleared", []string{`{"fail_next":3,"dead":true}`, `{"clear":true}`}, []int{200, 200, 200}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := startWorker(t, nil)
			c := client(t)
			for _, p := range tt.give {
				setFaults(t, c, w, p)
			}
			for i, want := range tt.wantStatus {
				st, _, raw := post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 1}, nil)
				if st != want {
					t.Fatalf("request %d: status %d; want %d (%s)", i, st, want, raw)
				}
				if st >= 500 && decode[apiErr](t, raw).Error.Code != st {
					t.Fatalf("request %d: error body %s", i, raw)
				}
			}
			if st, _ := get(t, c, w.URL()+"/health"); st != tt.wantHealth {
				t.Fatalf("health %d; want %d", st, tt.wantHealth)
			}
			if st := w.Stats(); st.Running != 0 || st.BlocksInUse != 0 {
				t.Fatalf("faulted requests left state: %+v", st)
			}
		})
	}
}

func TestFaults_ControlEndpointRejectsBadPatches(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	tests := []struct {
		name string
		give string
	}{
		{"unknown field", `{"eror_rate":0.5}`},
		{"rate above one", `{"error_rate":1.5}`},
		{"status not 5xx", `{"error_status":404}`},
		{"negative count", `{"fail_next":-1}`},
		{"unknown drop mode", `{"drop_mode":"sometimes"}`},
		{"negative latency", `{"latency_ms":-5}`},
		{"not JSON", `dead`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _, raw := post(t, c, w.URL()+"/_sim/faults", tt.give, nil)
			if st != http.StatusBadRequest || decode[apiErr](t, raw).Error.Code != 400 {
				t.Fatalf("status %d %s; want 400", st, raw)
			}
		})
	}
	st, raw := get(t, c, w.URL()+"/_sim/faults")
	if v := decode[FaultsView](t, raw); st != 200 || v.ErrorRate != 0 || v.Dead {
		t.Fatalf("a rejected patch changed the faults: %s", raw)
	}
}

func TestFaults_DropBeforeHeadersClosesTheConnection(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	setFaults(t, c, w, `{"drop_next":1}`)
	req, _ := http.NewRequest(http.MethodPost, w.URL()+"/v1/completions", strings.NewReader(`{"prompt":"hi"}`))
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("got status %d; want the connection dropped", resp.StatusCode)
	}
	if st, _, _ := post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 1}, nil); st != 200 {
		t.Fatalf("next request %d; want 200", st)
	}
	if got := metric(t, scrape(t, c, w), "llbsim_faults_injected_total", `kind="drop"`); got != 1 {
		t.Fatalf("drops counted %v; want 1", got)
	}
}

func TestFaults_DropMidStreamTruncatesTheResponse(t *testing.T) {
	tests := []struct {
		name   string
		stream bool
	}{{"stream", true}, {"whole response", false}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := startWorker(t, nil)
			c := client(t)
			setFaults(t, c, w, `{"drop_next":1,"drop_mode":"mid_stream","drop_after_tokens":2}`)
			body, _ := json.Marshal(map[string]any{"prompt": "hello there", "max_tokens": 8, "stream": tt.stream})
			resp, err := c.Post(w.URL()+"/v1/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatalf("headers should arrive before the drop: %v", err)
			}
			defer resp.Body.Close()
			got, err := io.ReadAll(resp.Body)
			if err == nil {
				t.Fatalf("read %q without error; want a truncated body", got)
			}
			if tt.stream && (strings.Count(string(got), "data: ") != 2 || strings.Contains(string(got), "[DONE]")) {
				t.Fatalf("stream before the drop %q; want exactly 2 token events", got)
			}
			eventually(t, "the dropped request to be aborted", func() bool { return w.Stats().Running == 0 && w.Stats().BlocksInUse == 0 })
		})
	}
}

func TestFaults_LatencyAndStall(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	setFaults(t, c, w, `{"latency_ms":40}`)
	start := time.Now()
	if st, _, _ := post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 1}, nil); st != 200 {
		t.Fatalf("status %d", st)
	}
	if took := time.Since(start); took < 40*time.Millisecond {
		t.Fatalf("request took %v; want at least the injected 40ms", took)
	}
	setFaults(t, c, w, `{"latency_ms":0,"stall":true}`)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, w.URL()+"/v1/completions", strings.NewReader(`{"prompt":"hi"}`))
	if resp, err := c.Do(req); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		if resp != nil {
			resp.Body.Close()
		}
		t.Fatalf("stalled request returned %v; want the client deadline", err)
	}
	setFaults(t, c, w, `{"stall":false}`)
	if v := setFaults(t, c, w, `{}`); v.Injected["stall"] != 1 {
		t.Fatalf("injected %v; want one stall", v.Injected)
	}
}

func TestWorker_StopLetsStreamsFinish(t *testing.T) {
	w := startWorker(t, func(c *Config) { c.Engine.Latency.TimeScale = 0.2 }) // ITL 2.4ms
	c := client(t)
	body, _ := json.Marshal(map[string]any{"prompt": "long answer", "max_tokens": 40, "stream": true})
	resp, err := c.Post(w.URL()+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if line, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(line, "data: ") {
		t.Fatalf("first event %q %v", line, err)
	}
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		stopped <- w.Stop(ctx)
	}()
	rest, err := io.ReadAll(rd)
	if err != nil || !strings.HasSuffix(string(rest), "data: [DONE]\n\n") || strings.Count(string(rest), "data: ") != 40 {
		t.Fatalf("stream cut by a graceful stop (%v): %d events", err, strings.Count(string(rest), "data: "))
	}
	if err := <-stopped; err != nil {
		t.Fatalf("stop: %v", err)
	}
	if w.Crashed() {
		t.Fatal("a graceful stop reported a crash")
	}
}

func TestWorker_CrashCutsStreamsAndFreesEveryPort(t *testing.T) {
	cfgs := func(c *Config) {
		c.Engine.Latency.TimeScale = 0.5
		c.Replay = true
	}
	w := startWorker(t, cfgs)
	c := client(t)
	body, _ := json.Marshal(map[string]any{"prompt": "long answer", "max_tokens": 400, "stream": true})
	resp, err := c.Post(w.URL()+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if _, err := rd.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	setFaults(t, c, w, `{"crash":true}`)
	<-w.Done()
	if !w.Crashed() {
		t.Fatal("Crashed() false after a crash fault")
	}
	if _, err := io.ReadAll(rd); err == nil {
		t.Fatal("stream ended cleanly; want it cut by the crash")
	}
	if conn, err := net.DialTimeout("tcp", w.Addr(), time.Second); err == nil {
		conn.Close()
		t.Fatal("the crashed worker still accepts connections")
	}
	// A new worker binds the same addresses (a restarted process).
	cfg := w.Config()
	cfg.HTTPPort = w.HTTPPort()
	cfg.KVPort = portOf(t, w.KVEndpoint())
	cfg.ReplayPort = portOf(t, w.ReplayEndpoint())
	w2, err := Start(cfg)
	if err != nil {
		t.Fatalf("restart on the same ports: %v", err)
	}
	defer w2.Crash()
	// The client's pooled connections went to the crashed process: a POST
	// on one of them fails with EOF (not retried, not idempotent) when the
	// client has not yet read the close. A restarted process is new
	// connections.
	c.CloseIdleConnections()
	if st, _, _ := post(t, c, w2.URL()+"/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 1}, nil); st != 200 {
		t.Fatalf("restarted worker answered %d", st)
	}
}

func portOf(t *testing.T, endpoint string) int {
	t.Helper()
	_, port, err := net.SplitHostPort(strings.TrimPrefix(endpoint, "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := net.LookupPort("tcp", port)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestWorker_SetFaultsValidates(t *testing.T) {
	w := startWorker(t, nil)
	if err := w.SetFaults(Faults{ErrorRate: 2}); !errors.Is(err, ErrConfig) {
		t.Fatalf("error %v; want ErrConfig", err)
	}
	if err := w.SetFaults(Faults{Dead: true}); err != nil {
		t.Fatal(err)
	}
	if st, _ := get(t, client(t), w.URL()+"/health"); st != 503 {
		t.Fatalf("health %d; want 503", st)
	}
}

func TestStart_RejectsBadConfigAndBusyPorts(t *testing.T) {
	busy := startWorker(t, nil)
	tests := []struct {
		name string
		give func(*Config)
		want error
	}{
		{"bad ip", func(c *Config) { c.IP = "localhost:1" }, ErrConfig},
		{"replay without events", func(c *Config) { c.KVEvents = false; c.Replay = true }, ErrConfig},
		{"duplicate lora", func(c *Config) { c.LoRAs = []string{"a", "a"} }, ErrConfig},
		{"bad faults", func(c *Config) { c.Faults.DropRate = -1 }, ErrConfig},
		{"bad engine", func(c *Config) { c.Engine.NumBlocks = 0 }, ErrConfig},
		{"http port in use", func(c *Config) { c.HTTPPort = busy.HTTPPort() }, ErrListen},
		{"kv port in use", func(c *Config) { c.KVPort = portOf(t, busy.KVEndpoint()); c.KVBindRetry = 10 * time.Millisecond }, ErrListen},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig()
			tt.give(&c)
			w, err := Start(c)
			if !errors.Is(err, tt.want) {
				if w != nil {
					w.Crash()
				}
				t.Fatalf("error %v; want %v", err, tt.want)
			}
		})
	}
}
