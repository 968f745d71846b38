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

	"github.com/llbproject/llb/rule"
)

const memDir = "/state"

// recsOf builds table records from request bodies.
func recsOf(t *testing.T, bodies ...string) []*record {
	t.Helper()
	tbl := newTable(nil)
	ids := seqIDs()
	for _, b := range bodies {
		e, err := DecodeEntry([]byte(b))
		if err != nil {
			t.Fatal(err)
		}
		r, err := rule.NormalizeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		if tbl, _, err = tbl.upsert(r, 0, testEpoch, ids); err != nil {
			t.Fatal(err)
		}
	}
	return tbl.order
}

func keysOf(rules []storedRule, t *testing.T) []string {
	t.Helper()
	var out []string
	for _, sr := range rules {
		e, err := DecodeEntry(sr.Entry)
		if err != nil {
			t.Fatalf("stored entry does not decode: %v", err)
		}
		r, err := rule.NormalizeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.Key.String())
	}
	return out
}

func TestSave_CrashAtEveryStepLeavesOldOrNewConfig(t *testing.T) {
	oldRecs := recsOf(t, pdExample)
	newRecs := recsOf(t, pdExample, chwblExample)
	oldKeys, newKeys := []string{"tcp:127.0.0.1:2020@127.0.0.1"}, []string{"tcp:127.0.0.1:2020@127.0.0.1", "tcp:127.0.0.1:2021@127.0.0.1"}
	clock := newFakeClock()
	steps := 0
	for crashAfter := 1; ; crashAfter++ {
		m := newMemFS()
		if err := NewStore(m, memDir, clock.Now).save(oldRecs); err != nil {
			t.Fatal(err)
		}
		m.crashAfter = m.ops + crashAfter
		err := NewStore(m, memDir, clock.Now).save(newRecs)
		if err == nil && !m.crashed {
			// Past the last step: a save that returned nil must be durable.
			for i, img := range m.images() {
				ld, err := NewStore(img, memDir, clock.Now).load()
				if err != nil || ld.movedTo != "" || !slices.Equal(keysOf(ld.rules, t), newKeys) {
					t.Errorf("after a successful save, image %d: got %v, moved %q, err %v; want the new config", i, keysOf(ld.rules, t), ld.movedTo, err)
				}
			}
			break
		}
		if !errors.Is(err, errCrash) {
			t.Fatalf("crash after %d ops: save returned %v; want the crash", crashAfter, err)
		}
		steps++
		for i, img := range m.images() {
			ld, err := NewStore(img, memDir, clock.Now).load()
			if err != nil {
				t.Fatalf("crash after step %d, image %d: load: %v", crashAfter, i, err)
			}
			if ld.movedTo != "" {
				t.Fatalf("crash after step %d, image %d: rules.json is corrupt (%s)", crashAfter, i, ld.problem)
			}
			got := keysOf(ld.rules, t)
			if !slices.Equal(got, oldKeys) && !slices.Equal(got, newKeys) {
				t.Fatalf("crash after step %d, image %d: got rules %v; want the old %v or the new %v", crashAfter, i, got, oldKeys, newKeys)
			}
		}
	}
	if steps < 5 {
		t.Errorf("crash points explored: got %d; want every step of create, write, sync, close, rename, syncdir", steps)
	}
}

// TestCrashModel_CatchesAWriterThatSkipsFsync shows the model above can fail:
// renaming a file whose data was never synced leaves an empty rules.json
// after a crash, which the model reports as corrupt.
func TestCrashModel_CatchesAWriterThatSkipsFsync(t *testing.T) {
	m := newMemFS()
	f, err := m.CreateTemp(memDir, tempPrefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(`{"format":"llb-rules","version":1,"rules":[]}`)); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	_ = m.Rename(f.Name(), filepath.Join(memDir, StateFileName))
	_ = m.SyncDir(memDir)
	corrupt := false
	for _, img := range m.images() {
		ld, err := NewStore(img, memDir, newFakeClock().Now).load()
		if err == nil && ld.movedTo != "" {
			corrupt = true
		}
	}
	if !corrupt {
		t.Fatal("the crash model did not notice a rename of unsynced data")
	}
}

func TestSave_FailureRemovesTheTempFileAndKeepsTheOldConfig(t *testing.T) {
	for _, op := range []string{"write", "sync", "close", "rename"} {
		t.Run(op, func(t *testing.T) {
			m := newMemFS()
			s := NewStore(m, memDir, newFakeClock().Now)
			if err := s.save(recsOf(t, pdExample)); err != nil {
				t.Fatal(err)
			}
			before := m.content(s.Path())
			m.fail[op] = errors.New("disk on fire")
			if err := s.save(recsOf(t, pdExample, chwblExample)); err == nil || !strings.Contains(err.Error(), "disk on fire") {
				t.Fatalf("save: got %v; want the injected error", err)
			}
			delete(m.fail, op)
			names, _ := m.ReadDir(memDir)
			if !slices.Equal(names, []string{StateFileName}) {
				t.Errorf("files: got %v; want only %s", names, StateFileName)
			}
			if string(m.content(s.Path())) != string(before) {
				t.Errorf("rules.json changed by a failed save")
			}
		})
	}
}

func TestPOST_StateWriteFailureIs500AndChangesNothing(t *testing.T) {
	m := newMemFS()
	ts := started(t, func(c *Config) { c.FS = m; c.StateDir = memDir })
	m.fail["rename"] = errors.New("read-only file system")
	r := ts.post(pdExample)
	b := r.errBody(t)
	if r.status != http.StatusInternalServerError || !strings.Contains(b.Result, "state write failed, the change was not made") {
		t.Fatalf("got %d %+v; want 500 saying the change was not made", r.status, b)
	}
	if n := len(ts.all()); n != 0 {
		t.Errorf("rules after a failed write: got %d; want 0", n)
	}
	delete(m.fail, "rename")
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
			path := filepath.Join(dir, StateFileName)
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
	m := newMemFS()
	m.put(filepath.Join(memDir, StateFileName), []byte("garbage"))
	m.fail["rename"] = errors.New("permission denied")
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
	m := newMemFS()
	m.put(filepath.Join(memDir, StateFileName), []byte("{}"))
	m.fail["read"] = errors.New("input/output error")
	ts := newTestServer(t, func(c *Config) { c.FS = m; c.StateDir = memDir })
	rep := ts.restore()
	if !strings.Contains(rep.Problem, "unreadable: input/output error") || !m.has(rep.CorruptMovedTo) {
		t.Errorf("report: got %+v; want the unreadable file moved aside", rep)
	}
}

func TestRestore_RulesThatNoLongerValidateAreKeptAside(t *testing.T) {
	m := newMemFS()
	s := NewStore(m, memDir, newFakeClock().Now)
	recs := recsOf(t, pdExample, chwblExample)
	bad := recs[1].rule.Clone()
	bad.Entry.ServiceArguments.Sel = rule.SelReserved // a rule an older llbd accepted
	var err error
	if recs[1], err = newRecord(bad, testEpoch); err != nil {
		t.Fatal(err)
	}
	if err := s.save(recs); err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, func(c *Config) { c.FS = m; c.StateDir = memDir })
	rep := ts.restore()
	if rep.RestoredRules != 1 || len(rep.RejectedRules) != 1 || !strings.Contains(rep.RejectedRules[0].Error, "sel=7 is reserved") {
		t.Fatalf("report: got %+v; want 1 restored and 1 rejected for sel=7", rep)
	}
	ld, err := NewStore(m, memDir, newFakeClock().Now).load()
	if err != nil || len(ld.rules) != 1 {
		t.Fatalf("rules.json after restore: %d rules, %v; want the 1 valid rule", len(ld.rules), err)
	}
	if !strings.Contains(string(m.content(rep.RejectedFile)), `"sel": 7`) && !strings.Contains(string(m.content(rep.RejectedFile)), `"sel":7`) {
		t.Errorf("rejected file %s: got %s; want the rejected rule verbatim", rep.RejectedFile, m.content(rep.RejectedFile))
	}
}

func TestRestore_RemovesTempFilesLeftByACrash(t *testing.T) {
	m := newMemFS()
	m.put(filepath.Join(memDir, tempPrefix+"123"), []byte("half a file"))
	ts := newTestServer(t, func(c *Config) { c.FS = m; c.StateDir = memDir })
	if rep := ts.restore(); rep.StaleTempsRemoved != 1 || m.has(filepath.Join(memDir, tempPrefix+"123")) {
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
