package restapi

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/llbproject/llb/catalog"
	"github.com/llbproject/llb/catalog/statefs/memfs"
)

const memDir = "/state"

func TestPOST_StateWriteFailureIs500AndChangesNothing(t *testing.T) {
	m := memfs.New()
	ts := started(t, func(c *Config) { c.FS = m; c.StateDir = memDir })
	m.Fail["rename"] = errors.New("read-only file system")
	r := ts.post(pdExample)
	b := r.errBody(t)
	if r.status != http.StatusInternalServerError || !strings.Contains(b.Result, "state write failed, the change was not made") {
		t.Fatalf("got %d %+v; want 500 saying the change was not made", r.status, b)
	}
	if n := len(ts.all()); n != 0 {
		t.Errorf("rules after a failed write: got %d; want 0", n)
	}
	delete(m.Fail, "rename")
	ts.mustPost(pdExample)
}

func TestRestore_RoundTripsRulesIdsAndTimestamps(t *testing.T) {
	dir := t.TempDir()
	ts := started(t, func(c *Config) { c.StateDir = dir })
	ts.mustPost(pdExample)
	ts.mustPost(chwblExample)
	before := ts.do(http.MethodGet, lbPath+"/all", "").body
	status := ts.do(http.MethodGet, lbPath+"/externalipaddress/127.0.0.1/port/2021/protocol/tcp/status", "").body

	rt := &recordingRuntime{NoDataPlane: NewNoDataPlane()}
	ts2 := newTestServer(t, func(c *Config) { c.StateDir = dir; c.Runtime = rt })
	ts2.clock.Advance(3600e9)
	rep := ts2.restore()
	if rep.RestoredRules != 2 || rep.CorruptMovedTo != "" || len(rep.RejectedRules) != 0 {
		t.Fatalf("report: got %+v; want 2 restored, nothing moved or rejected", rep)
	}
	if after := ts2.do(http.MethodGet, lbPath+"/all", "").body; after != before {
		t.Errorf("GET all after restart:\n got %s\nwant %s", after, before)
	}
	if s := ts2.do(http.MethodGet, lbPath+"/externalipaddress/127.0.0.1/port/2021/protocol/tcp/status", "").body; s != status {
		t.Errorf("status after restart: got %s; want %s (lastUpdated survives)", s, status)
	}
	if got := rt.appliedKeys(); !slices.Equal(got, []string{"tcp:127.0.0.1:2020@127.0.0.1", "tcp:127.0.0.1:2021@127.0.0.1"}) {
		t.Errorf("runtime saw: got %v; want both rules applied in order", got)
	}
}

func TestRestore_CorruptFileIsMovedAsideAndReported(t *testing.T) {
	tests := []struct {
		name, content, wantProblem string
	}{
		{"truncated json", `{"format":"llb-rules","version":1,"rules":[{"entry":`, "not valid JSON"},
		{"not ours", `{"hello":"world"}`, `unknown format ""`},
		{"newer version", `{"format":"llb-rules","version":9,"rules":[]}`, "version 9"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, catalog.StateFileName)
			if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
				t.Fatal(err)
			}
			ts := newTestServer(t, func(c *Config) { c.StateDir = dir })
			rep := ts.restore()
			wantMoved := path + ".corrupt-20260301T120000Z"
			if rep.CorruptMovedTo != wantMoved || !strings.Contains(rep.Problem, tt.wantProblem) {
				t.Fatalf("report: got moved %q problem %q; want %q and a problem containing %q", rep.CorruptMovedTo, rep.Problem, wantMoved, tt.wantProblem)
			}
			if b, err := os.ReadFile(wantMoved); err != nil || string(b) != tt.content {
				t.Errorf("moved-aside file: got %q, %v; want the original bytes", b, err)
			}
			v := ts.do(http.MethodGet, basePath+"/version", "").body
			if !strings.Contains(v, `"corruptMovedTo":"`+wantMoved+`"`) {
				t.Errorf("version: got %s; want it to report the moved file", v)
			}
			ts.mustPost(pdExample)
			if _, err := os.Stat(path); err != nil {
				t.Errorf("a fresh rules.json after the next write: %v", err)
			}
		})
	}
}

func TestRestore_UnmovableCorruptFileRefusesToStart(t *testing.T) {
	m := memfs.New()
	m.Put(filepath.Join(memDir, catalog.StateFileName), []byte("garbage"))
	m.Fail["rename"] = errors.New("permission denied")
	ts := newTestServer(t, func(c *Config) { c.FS = m; c.StateDir = memDir })
	_, err := ts.srv.Restore(context.Background())
	if err == nil || !strings.Contains(err.Error(), "refusing to start and overwrite it") {
		t.Fatalf("Restore: got %v; want a refusal", err)
	}
	if ts.srv.WritesAccepted() {
		t.Error("writes accepted after a failed restore")
	}
}

func TestRestore_UnreadableFileIsMovedAside(t *testing.T) {
	m := memfs.New()
	m.Put(filepath.Join(memDir, catalog.StateFileName), []byte("{}"))
	m.Fail["read"] = errors.New("input/output error")
	ts := newTestServer(t, func(c *Config) { c.FS = m; c.StateDir = memDir })
	rep := ts.restore()
	if !strings.Contains(rep.Problem, "unreadable: input/output error") || !m.Has(rep.CorruptMovedTo) {
		t.Errorf("report: got %+v; want the unreadable file moved aside", rep)
	}
}

func TestRestore_RemovesTempFilesLeftByACrash(t *testing.T) {
	m := memfs.New()
	m.Put(filepath.Join(memDir, catalog.StateFileName+".tmp-"+"123"), []byte("half a file"))
	ts := newTestServer(t, func(c *Config) { c.FS = m; c.StateDir = memDir })
	if rep := ts.restore(); rep.StaleTempsRemoved != 1 || m.Has(filepath.Join(memDir, catalog.StateFileName+".tmp-"+"123")) {
		t.Errorf("report: got %+v; want the stale temp file removed", rep)
	}
}

func TestRestore_WritesAre503UntilRestoreFinishes(t *testing.T) {
	ts := newTestServer(t)
	r := ts.post(pdExample)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "5" {
		t.Fatalf("POST before restore: got %d Retry-After %q; want 503 and 5", r.status, r.header.Get("Retry-After"))
	}
	want := `{"code":503,"message":"Maintenance mode","result":"configuration writes are rejected until the boot config replay settles"}` + "\n"
	if r.body != want {
		t.Errorf("body: got %s; want %s", r.body, want)
	}
	for _, path := range []string{lbPath + "/all", lbPath + "/name/x"} {
		method := http.MethodGet
		if strings.HasSuffix(path, "/x") {
			method = http.MethodDelete
		}
		got := ts.do(method, path, "").status
		want := map[string]int{http.MethodGet: 200, http.MethodDelete: 503}[method]
		if got != want {
			t.Errorf("%s %s before restore: got %d; want %d", method, path, got, want)
		}
	}
	ts.restore()
	ts.mustPost(pdExample)
	if _, err := ts.srv.Restore(context.Background()); err == nil {
		t.Error("a second Restore succeeded; want an error")
	}
}
