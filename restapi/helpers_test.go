package restapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/catalog"
	"github.com/llbproject/llb/rule"
)

var testEpoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fakeClock is a manually advanced clock.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(testEpoch.UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }
func seqIDs() func() string {
	var n atomic.Int64
	return func() string { return fmt.Sprintf("id-%d", n.Add(1)) }
}
func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type testServer struct {
	t     *testing.T
	srv   *Server
	url   string
	cfg   Config
	clock *fakeClock
}

// newTestServer starts a restored Server behind httptest with a fake clock,
// sequential ids and a NoDataPlane runtime unless mods change them.
func newTestServer(t *testing.T, mods ...func(*Config)) *testServer {
	t.Helper()
	clock := newFakeClock()
	cfg := Config{
		Logger:   zerolog.Nop(),
		Metrics:  metrics.NewSet(),
		Runtime:  NewNoDataPlane(),
		StateDir: t.TempDir(),
		Version:  "test",
		Now:      clock.Now,
		NewID:    seqIDs(),
	}
	for _, m := range mods {
		m(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	ts := &testServer{t: t, srv: srv, url: hs.URL, cfg: cfg, clock: clock}
	return ts
}

func (ts *testServer) restore() catalog.RestoreReport {
	ts.t.Helper()
	rep, err := ts.srv.Restore(context.Background())
	if err != nil {
		ts.t.Fatalf("Restore: %v", err)
	}
	return rep
}

// started is newTestServer followed by Restore.
func started(t *testing.T, mods ...func(*Config)) *testServer {
	t.Helper()
	ts := newTestServer(t, mods...)
	ts.restore()
	return ts
}

type response struct {
	status int
	body   string
	header http.Header
}

func (r response) errBody(t *testing.T) ErrorBody {
	t.Helper()
	var b ErrorBody
	if err := json.Unmarshal([]byte(r.body), &b); err != nil {
		t.Fatalf("error body %q: %v", r.body, err)
	}
	return b
}

// do sends one request; hdr is name, value pairs.
func (ts *testServer) do(method, path, body string, hdr ...string) response {
	ts.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, ts.url+path, rd)
	if err != nil {
		ts.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		ts.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		ts.t.Fatal(err)
	}
	return response{status: res.StatusCode, body: string(b), header: res.Header}
}

func (ts *testServer) post(body string) response {
	ts.t.Helper()
	return ts.do(http.MethodPost, lbPath, body)
}

func (ts *testServer) mustPost(body string) {
	ts.t.Helper()
	if r := ts.post(body); r.status != http.StatusOK || r.body != `{"result":"Success"}`+"\n" {
		ts.t.Fatalf("POST: got %d %s; want 200 Success", r.status, r.body)
	}
}

func (ts *testServer) all() []rule.LoadbalanceEntry {
	ts.t.Helper()
	r := ts.do(http.MethodGet, lbPath+"/all", "")
	if r.status != http.StatusOK {
		ts.t.Fatalf("GET all: %d %s", r.status, r.body)
	}
	var v AllView
	if err := json.Unmarshal([]byte(r.body), &v); err != nil {
		ts.t.Fatal(err)
	}
	return v.LbAttr
}

func writeFile(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }
