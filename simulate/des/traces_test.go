package des

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/workload"
)

// mooncakeExcerpt is a 48-request trace in the Mooncake format made for the
// tests (simulate/workload/testdata).
var mooncakeExcerpt = filepath.Join("..", "workload", "testdata", "mooncake_excerpt.jsonl")

// excerptDir is a directory holding the excerpt as the conversation trace
// only.
func excerptDir(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(mooncakeExcerpt)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "conversation_trace.jsonl"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestTraceScenarios_ReplaysTheFilesItFindsOnBothModels(t *testing.T) {
	scs, missing, err := TraceScenarios(excerptDir(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) != 1 || !strings.HasSuffix(missing[0], "synthetic_trace.jsonl") {
		t.Fatalf("missing %v; want the synthetic trace", missing)
	}
	if len(scs) != 2 || scs[0].Name != ScenarioMooncakeConversation || scs[1].Name != ScenarioMooncakeConversation+StepSuffix || scs[1].Model != engine.SchedStep {
		t.Fatalf("scenarios %v", scs)
	}
	if scs[0].Trace.Requests != 48 || scs[0].NativeRate() <= 0 {
		t.Fatalf("%d requests at %v req/s", scs[0].Trace.Requests, scs[0].NativeRate())
	}
	if desc := DescribeWorkload(scs[0].Trace.Spec); !strings.Contains(desc, "48 requests") || !strings.Contains(desc, "32 blocks of 16") {
		t.Fatalf("description %q", desc)
	}
	head, _, err := TraceScenarios(excerptDir(t), 10)
	if err != nil || head[0].Trace.Requests != 10 {
		t.Fatalf("first 10: %v, %v", head, err)
	}
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, "synthetic_trace.jsonl"), []byte(`{"timestamp": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := TraceScenarios(bad, 0); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a bad trace file: %v; want an error naming the line", err)
	}
}

// TestRun_ReplaysARecordedTraceAtItsOwnTimesCompressed runs the excerpt at
// twice its recorded rate: every request arrives at half its recorded
// offset, and the shared ids are cache hits.
func TestRun_ReplaysARecordedTraceAtItsOwnTimesCompressed(t *testing.T) {
	scs, _, err := TraceScenarios(excerptDir(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	sc := scs[1]
	tc := sc.Trace
	tc.Name = sc.Name
	tr, err := NewTrace(tc)
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := sc.Fleet(tr)
	if err != nil {
		t.Fatal(err)
	}
	bt := sc.Trace.Spec.(workload.Mooncake).Trace
	for _, name := range []string{"headroom", "llm-d"} {
		cfg := RunConfig{Fleet: fleet, Strategy: mustStrategy(t, name), Rate: 2 * sc.NativeRate(), RecordRoutes: true, ScrapeEvery: DefaultScrape}
		cfg.Fleet.Workers = 2
		res, err := Run(tr, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Routes) != 48 {
			t.Fatalf("%s: %d routes; want 48", name, len(res.Routes))
		}
		for _, r := range res.Routes {
			want := bt.Requests[r.Seq].At / 2
			if d := r.Arrive - want; d < -time.Microsecond || d > time.Microsecond {
				t.Fatalf("%s: request %d arrived at %v; want %v (recorded %v at twice the rate)", name, r.Seq, r.Arrive, want, bt.Requests[r.Seq].At)
			}
		}
		if res.HitRate <= 0 {
			t.Fatalf("%s: hit rate %v on a trace whose every prompt starts with id 0", name, res.HitRate)
		}
	}
}
