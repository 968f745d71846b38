package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sweepArgs is a sweep small enough for a unit test: two scenarios (one
// with the ε and λ sweeps), four strategies, one load.
func sweepArgs(out string, parallel string) []string {
	return []string{"sweep", "--quick", "--requests", "400", "--out", out, "--parallel", parallel,
		"--scenarios", "shared-prefix,hot-prefix", "--strategies", "rr,chwbl,off,hard",
		"--loads", "0.7", "--factors", "150,300", "--lambdas", "32", "--commit", "test"}
}

func TestSweepCommand_WritesTheSameReportWhateverItsParallelism(t *testing.T) {
	var files [2][]byte
	for i, par := range []string{"1", "2"} {
		dir := filepath.Join(t.TempDir(), "r")
		var out, errOut bytes.Buffer
		root := newRootCmd(&out, &errOut)
		root.SetArgs(sweepArgs(dir, par))
		if err := root.Execute(); err != nil {
			t.Fatalf("sweep --parallel %s: %v\n%s", par, err, errOut.String())
		}
		for _, want := range []string{"shared-prefix at 70% load", "hot-prefix at 70% load", "targets (issues 7, 16 and 18):", "simulated requests/s"} {
			if !strings.Contains(out.String(), want) {
				t.Fatalf("summary lacks %q:\n%s", want, out.String())
			}
		}
		for _, f := range []string{ResultsFile, "README.md", "shared-prefix-ttft.svg", "shared-prefix-epsilon-heat.svg", "shared-prefix-lambda-heat.svg", "hot-prefix-hit.svg"} {
			if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
				t.Fatalf("sweep did not write %s: %v", f, err)
			}
		}
		b, err := os.ReadFile(filepath.Join(dir, ResultsFile))
		if err != nil {
			t.Fatal(err)
		}
		files[i] = b

		// The report command rebuilds the same page from the results file.
		readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		again := filepath.Join(t.TempDir(), "again")
		root = newRootCmd(&out, &errOut)
		root.SetArgs([]string{"report", "--in", filepath.Join(dir, ResultsFile), "--out", again})
		if err := root.Execute(); err != nil {
			t.Fatalf("report: %v", err)
		}
		rebuilt, err := os.ReadFile(filepath.Join(again, "README.md"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(readme, rebuilt) {
			t.Fatal("llbsim report wrote a different README from the same results")
		}
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Fatal("--parallel 1 and 2 wrote different results")
	}
}

func TestSweepCommand_RejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"sweep", "--requests", "5"},
		{"sweep", "--parallel", "0"},
		{"sweep", "--scenarios", "nope"},
		{"sweep", "--strategies", "nope"},
		{"sweep", "--strategies", "rr"}, // the reference (hard) is missing
		{"sweep", "--loads", "0"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			root := newRootCmd(&out, &errOut)
			root.SetArgs(args)
			err := root.Execute()
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Fatalf("got %v; want a usage error", err)
			}
		})
	}
}

func TestReportCommand_FailsOnAMissingOrBadFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(bad, []byte("{\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{filepath.Join(dir, "missing.jsonl"), bad} {
		var out, errOut bytes.Buffer
		root := newRootCmd(&out, &errOut)
		root.SetArgs([]string{"report", "--in", in, "--out", dir})
		if err := root.Execute(); err == nil {
			t.Fatalf("report --in %s succeeded", in)
		}
	}
}

func TestSweepFlags_TracesAddTheReplaysOrNameTheMissingFiles(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "simulate", "workload", "testdata", "mooncake_excerpt.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "conversation_trace.jsonl"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	f := &sweepFlags{requests: 100, parallel: 1, traces: dir}
	var ue *usageError
	if _, err := f.plan(); !errors.As(err, &ue) || !strings.Contains(err.Error(), "synthetic_trace.jsonl") || !strings.Contains(err.Error(), "make traces") {
		t.Fatalf("one trace missing: %v; want a usage error naming it", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "synthetic_trace.jsonl"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	f.scenarios = []string{"mooncake-synthetic-step", "mooncake-conversation"}
	f.traceReqs = 20
	p, err := f.plan()
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Scenarios) != 2 || p.Scenarios[0].Name != "mooncake-synthetic-step" || p.Scenarios[1].Trace.Requests != 20 {
		t.Fatalf("scenarios %+v", p.Scenarios)
	}
}
