package catalog

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/catalog/statefs"
	"github.com/llbproject/llb/catalog/statefs/memfs"
	"github.com/llbproject/llb/rule"
)

const memDir = "/state"

// rulesOf builds a rule table from request bodies.
func rulesOf(t *testing.T, bodies ...string) *Rules {
	t.Helper()
	tbl := newRules(nil)
	ids := seqIDs()
	for _, b := range bodies {
		var err error
		if tbl, _, err = tbl.Upsert(normalized(t, b), 0, testEpoch, ids); err != nil {
			t.Fatal(err)
		}
	}
	return tbl
}

func keysOf(rules []storedRule, t *testing.T) []string {
	t.Helper()
	var out []string
	for _, sr := range rules {
		e, err := decodeEntry(sr.Entry)
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
	oldRecs := rulesOf(t, pdExample)
	newRecs := rulesOf(t, pdExample, chwblExample)
	oldKeys, newKeys := []string{"tcp:127.0.0.1:2020@127.0.0.1"}, []string{"tcp:127.0.0.1:2020@127.0.0.1", "tcp:127.0.0.1:2021@127.0.0.1"}
	steps := 0
	for crashAfter := 1; ; crashAfter++ {
		m := memfs.New()
		if err := newFile(m, memDir, testNow).save(oldRecs, nil); err != nil {
			t.Fatal(err)
		}
		m.CrashAfter = m.Ops() + crashAfter
		err := newFile(m, memDir, testNow).save(newRecs, nil)
		if err == nil && !m.Crashed() {
			// Past the last step: a save that returned nil must be durable.
			for i, img := range m.Images() {
				ld, err := newFile(img, memDir, testNow).load()
				if err != nil || ld.movedTo != "" || !slices.Equal(keysOf(ld.rules, t), newKeys) {
					t.Errorf("after a successful save, image %d: got %v, moved %q, err %v; want the new config", i, keysOf(ld.rules, t), ld.movedTo, err)
				}
			}
			break
		}
		if !errors.Is(err, memfs.ErrCrash) {
			t.Fatalf("crash after %d ops: save returned %v; want the crash", crashAfter, err)
		}
		steps++
		for i, img := range m.Images() {
			ld, err := newFile(img, memDir, testNow).load()
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
	m := memfs.New()
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
	for _, img := range m.Images() {
		ld, err := newFile(img, memDir, testNow).load()
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
			m := memfs.New()
			s := newFile(m, memDir, testNow)
			if err := s.save(rulesOf(t, pdExample), nil); err != nil {
				t.Fatal(err)
			}
			before := m.Content(s.Path())
			m.Fail[op] = errors.New("disk on fire")
			if err := s.save(rulesOf(t, pdExample, chwblExample), nil); err == nil || !strings.Contains(err.Error(), "disk on fire") {
				t.Fatalf("save: got %v; want the injected error", err)
			}
			delete(m.Fail, op)
			names, _ := m.ReadDir(memDir)
			if !slices.Equal(names, []string{StateFileName}) {
				t.Errorf("files: got %v; want only %s", names, StateFileName)
			}
			if string(m.Content(s.Path())) != string(before) {
				t.Errorf("rules.json changed by a failed save")
			}
		})
	}
}

func TestRestore_RulesThatNoLongerValidateAreKeptAside(t *testing.T) {
	m := memfs.New()
	s := newFile(m, memDir, testNow)
	recs := slices.Clone(rulesOf(t, pdExample, chwblExample).All())
	bad := recs[1].Rule.Clone()
	bad.Entry.ServiceArguments.Sel = rule.SelReserved // a rule an older llbd accepted
	var err error
	if recs[1], err = newRecord(bad, testEpoch); err != nil {
		t.Fatal(err)
	}
	if err := s.save(newRules(recs), nil); err != nil {
		t.Fatal(err)
	}
	rep, err := newTestCatalog(t, m, memDir).Restore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.RestoredRules != 1 || len(rep.RejectedRules) != 1 || !strings.Contains(rep.RejectedRules[0].Error, "sel=7 is reserved") {
		t.Fatalf("report: got %+v; want 1 restored and 1 rejected for sel=7", rep)
	}
	ld, err := newFile(m, memDir, testNow).load()
	if err != nil || len(ld.rules) != 1 {
		t.Fatalf("rules.json after restore: %d rules, %v; want the 1 valid rule", len(ld.rules), err)
	}
	if !strings.Contains(string(m.Content(rep.RejectedFile)), `"sel": 7`) && !strings.Contains(string(m.Content(rep.RejectedFile)), `"sel":7`) {
		t.Errorf("rejected file %s: got %s; want the rejected rule verbatim", rep.RejectedFile, m.Content(rep.RejectedFile))
	}
}

// newFile is the state file rules.json in dir on fsys.
func newFile(fsys statefs.FS, dir string, now func() time.Time) *StateFile {
	return NewStateFile(fsys, dir, StateFileName, now)
}
