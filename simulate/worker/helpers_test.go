package worker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testConfig is a fast worker: latencies scaled by 0.01, small cache,
// events published at every step.
func testConfig() Config {
	c := DefaultConfig()
	c.Name = "t"
	c.EventInterval = 0
	c.Engine.NumBlocks = 512
	c.Engine.MaxModelLen = 4096
	c.Engine.Latency.TimeScale = 0.01
	return c
}

func startWorker(t *testing.T, mutate func(*Config)) *Worker {
	t.Helper()
	c := testConfig()
	if mutate != nil {
		mutate(&c)
	}
	w, err := Start(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

// client is an HTTP client whose idle connections are closed at cleanup
// (goleak would see their goroutines otherwise).
func client(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{Proxy: nil}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

// post sends a JSON body and returns status, headers and body.
func post(t *testing.T, c *http.Client, url string, body any, hdr map[string]string) (int, http.Header, []byte) {
	t.Helper()
	var raw []byte
	switch b := body.(type) {
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read: %v", url, err)
	}
	return resp.StatusCode, resp.Header, out
}

func get(t *testing.T, c *http.Client, url string) (int, []byte) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

func decode[T any](t *testing.T, raw []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, raw, err)
	}
	return v
}

// tokenize calls /tokenize.
func tokenize(t *testing.T, c *http.Client, w *Worker, body map[string]any) tokenizeResponse {
	t.Helper()
	st, _, raw := post(t, c, w.URL()+"/tokenize", body, nil)
	if st != http.StatusOK {
		t.Fatalf("tokenize: %d %s", st, raw)
	}
	return decode[tokenizeResponse](t, raw)
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	blank := true
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			blank = true
			continue
		}
		if !blank {
			t.Fatalf("SSE line %q not separated by a blank line", line)
		}
		blank = false
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("SSE line %q lacks the data: prefix", line)
		}
		out = append(out, data)
	}
	return out
}

// apiErr is the error body as a client sees it.
type apiErr struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    int    `json:"code"`
	} `json:"error"`
}

// words builds a prompt of n single-token words.
func words(prefix string, n int) string {
	var sb strings.Builder
	sb.WriteString(prefix)
	for i := range n {
		sb.WriteString(" w")
		sb.WriteString(string(rune('a' + i%26)))
		sb.WriteString(string(rune('a' + (i/26)%26)))
	}
	return sb.String()
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	// Generous: the full suite runs packages in parallel on 2 cores, and a
	// starved ZMQ feed goroutine can take seconds to catch up.
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // polling a condition with a deadline
	}
}
