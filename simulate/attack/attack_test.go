package attack

import (
	"context"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/harness"
)

// daemonBuild is the llbd binary shared by the package's tests.
var daemonBuild struct {
	once     sync.Once
	bin, dir string
	err      error
}

func TestMain(m *testing.M) {
	ServeWorkerIfAsked() // the faults family re-executes this test binary as its workers
	code := m.Run()
	if daemonBuild.dir != "" {
		_ = os.RemoveAll(daemonBuild.dir)
	}
	os.Exit(code)
}

// llbdBin builds llbd once per test binary.
func llbdBin(t *testing.T) string {
	t.Helper()
	daemonBuild.once.Do(func() {
		if daemonBuild.dir, daemonBuild.err = os.MkdirTemp("", "attack-llbd-"); daemonBuild.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		daemonBuild.bin, daemonBuild.err = harness.BuildDaemon(ctx, daemonBuild.dir, "")
	})
	if daemonBuild.err != nil {
		t.Fatal(daemonBuild.err)
	}
	return daemonBuild.bin
}

// runShort runs cfg against a real llbd and fails the test on an error,
// on any defect, or on a family that ran no case or no check; it returns
// the report and its text (logged at the end).
func runShort(t *testing.T, cfg Config) (*Report, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts llbd and worker processes")
	}
	cfg.LLBD, cfg.WorkDir = llbdBin(t), t.TempDir()
	rep, err := Run(context.Background(), cfg)
	var b strings.Builder
	if rep != nil {
		rep.Write(&b)
	}
	out := b.String()
	t.Cleanup(func() { t.Log(out) })
	if err != nil {
		t.Fatalf("run: %v\n%s", err, out)
	}
	if rep.Defects() != 0 {
		t.Fatalf("%d defects:\n%s", rep.Defects(), out)
	}
	for _, tl := range rep.Tallies {
		if tl.Tried == 0 || tl.Checks == 0 {
			t.Errorf("family %s ran %d cases and %d checks; want some of each", tl.Family, tl.Tried, tl.Checks)
		}
	}
	if cfg.Engine != "" && !strings.Contains(out, "engine "+cfg.Engine) {
		t.Errorf("the report does not name the engine:\n%s", out)
	}
	return rep, out
}

// A short seeded run of every family against a real llbd: each family
// runs cases and its closing checks, and today's llbd shows no defect in
// them (the expensive cases — slow clients, oversized and many-frame KV
// messages — need a longer budget: make attack).
func TestRun_AShortRunOfEveryFamilyFindsNoDefect(t *testing.T) {
	runShort(t, Config{Seed: 7, Duration: 16 * time.Second})
}

// The same against TensorRT-LLM's dialect: strict workers, a P/D rule
// speaking context_only / generation_only under SIGKILL and SIGSTOP, a
// hostile POST /kv_cache_events.
func TestRun_AShortTRTLLMRunFindsNoDefect(t *testing.T) {
	runShort(t, Config{Seed: 7, Duration: 12 * time.Second, Engine: "trtllm",
		Families: []string{FamilyDataPlane, FamilyKV, FamilyFaults}})
}

// The kv family against SGLang's dialect: two DP ranks, each its own
// publisher and sequence, rank 0 hostile (SGLang's pages of the wrong
// size, page hashes that are not the tokens', another rank's sequence)
// while rank 1 stays honest, and the closing mirror check over the union
// of the ranks.
func TestRun_AShortSGLangKVRunFindsNoDefect(t *testing.T) {
	rep, out := runShort(t, Config{Seed: 3, Duration: 10 * time.Second, Engine: "sglang", Families: []string{FamilyKV}})
	if len(rep.Tallies) != 1 {
		t.Fatalf("%d families:\n%s", len(rep.Tallies), out)
	}
	sglangRan := 0
	for _, k := range sglangKinds {
		sglangRan += rep.Tallies[0].Kinds[k.name]
	}
	if sglangRan == 0 {
		t.Errorf("no SGLang case ran:\n%s", out)
	}
}

// The faults family against SGLang's dialect: a P/D rule whose legs go
// to the prefill and the decode at once, meeting in the prefill worker's
// bootstrap room, under SIGKILL and SIGSTOP.
func TestRun_AShortSGLangFaultsRunFindsNoDefect(t *testing.T) {
	rep, out := runShort(t, Config{Seed: 7, Duration: 8 * time.Second, Engine: "sglang", Families: []string{FamilyFaults}})
	if len(rep.Tallies) != 1 {
		t.Fatalf("%d families:\n%s", len(rep.Tallies), out)
	}
	if tl := rep.Tallies[0]; tl.Accepted == 0 {
		t.Errorf("faults served none of its %d cases; want some served", tl.Tried)
	}
}

func TestConfig_EnginesRunTheirFamilies(t *testing.T) {
	tests := []struct {
		engine   string
		families []string
		wantErr  string
		want     []string
	}{
		{engine: "", want: Families},
		{engine: "trtllm", want: Families},
		{engine: "sglang", want: Families},
		{engine: "trtllm", families: []string{FamilyKV}, want: []string{FamilyKV}},
		{engine: "sglang", families: []string{FamilyKV}, want: []string{FamilyKV}},
		{engine: "sglang", families: []string{"zmq"}, wantErr: `family "zmq"`},
		{engine: "tgi", wantErr: `engine "tgi"`},
	}
	for _, tt := range tests {
		c := Config{LLBD: "x", WorkDir: "y", Engine: tt.engine, Families: tt.families}
		err := c.Validate()
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s %v: %v; want %q", tt.engine, tt.families, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", tt.engine, err)
		case strings.Join(c.families(), ",") != strings.Join(tt.want, ","):
			t.Errorf("%s runs %v; want %v", tt.engine, c.families(), tt.want)
		}
	}
	sa := (&Config{Engine: "trtllm"}).engineRule(map[string]any{"kvZmqPort": 1, "kvHashAlgo": "sha256_cbor", "kvNoneHashSeed": "0", "mode": 4})
	if sa["kvEngineType"] != "trtllm" || len(sa) != 2 {
		t.Errorf("trtllm rule arguments %v; want mode and kvEngineType only", sa)
	}
	sa = (&Config{Engine: "sglang"}).engineRule(map[string]any{"kvZmqPort": 1, "kvHashAlgo": "sha256_cbor", "kvNoneHashSeed": "0", "kvDpRankCount": 2})
	if sa["kvEngineType"] != "sglang" || sa["kvZmqPort"] != 1 || sa["kvDpRankCount"] != 2 || len(sa) != 3 {
		t.Errorf("sglang rule arguments %v; want kvZmqPort, kvDpRankCount and kvEngineType (the page hash left to the engine's default)", sa)
	}
}

// The data-plane oracle fails what it must: a smuggled second answer, a
// 200 for an invalid request, a hang, a 5xx; and passes a clean refusal.
func TestJudge_DataPlaneOracle(t *testing.T) {
	ok200 := rawResponse{status: 200, header: http.Header{"Content-Type": {"application/json"}}, body: []byte(`{}`), at: time.Millisecond}
	r400 := rawResponse{status: 400, header: http.Header{}, body: []byte(`{}`), at: time.Millisecond}
	r500 := rawResponse{status: 500, header: http.Header{}, body: []byte(`{}`), at: time.Millisecond}
	tests := []struct {
		name string
		exp  dpExpect
		res  rawResult
		want Verdict
	}{
		{name: "valid request served", exp: dpExpect{want200: true}, res: rawResult{responses: []rawResponse{ok200}, stopped: true}, want: Accepted},
		{name: "invalid request refused", res: rawResult{responses: []rawResponse{r400}, stopped: true}, want: Refused},
		{name: "invalid request closed", res: rawResult{closed: true, ended: time.Second}, want: Refused},
		{name: "invalid request served", res: rawResult{responses: []rawResponse{ok200}, stopped: true}, want: Defective},
		{name: "a 5xx", res: rawResult{responses: []rawResponse{r500}, stopped: true}, want: Defective},
		{name: "smuggled second answer", exp: dpExpect{ok200: true, mustClose: true}, res: rawResult{responses: []rawResponse{ok200, ok200}, closed: true}, want: Defective},
		{name: "kept open after an ambiguous request", exp: dpExpect{ok200: true, mustClose: true}, res: rawResult{responses: []rawResponse{ok200}, timedOut: true}, want: Defective},
		{name: "no answer, still open", res: rawResult{timedOut: true, ended: 20 * time.Second}, want: Defective},
		{name: "closed past the bound", exp: dpExpect{bound: time.Second}, res: rawResult{closed: true, ended: 10 * time.Second}, want: Defective},
		{name: "a cut 200", exp: dpExpect{ok200: true}, res: rawResult{responses: []rawResponse{{status: 200, header: http.Header{}, cut: true}}, closed: true}, want: Defective},
		{name: "a stream without its end", exp: dpExpect{want200: true}, res: rawResult{responses: []rawResponse{{status: 200,
			header: http.Header{"Content-Type": {"text/event-stream"}}, body: []byte("data: {}\n\n")}}, stopped: true}, want: Defective},
		{name: "an HTTP/1.0 stream held whole", exp: dpExpect{want200: true, mustClose: true, untilClose: true}, res: rawResult{responses: []rawResponse{{status: 200,
			header: http.Header{"Content-Type": {"text/event-stream"}, "Content-Length": {"24"}}, body: []byte("data: {}\n\ndata: [DONE]\n\n"), framed: true}}, closed: true}, want: Defective},
		{name: "an HTTP/1.0 stream ended by the close", exp: dpExpect{want200: true, mustClose: true, untilClose: true}, res: rawResult{responses: []rawResponse{{status: 200,
			header: http.Header{"Content-Type": {"text/event-stream"}}, body: []byte("data: {}\n\ndata: [DONE]\n\n")}}, closed: true}, want: Accepted},
	}
	f := &dpFamily{}
	for _, tt := range tests {
		if got := f.judge(dpCase{exp: tt.exp}, tt.res); got.Verdict != tt.want {
			t.Errorf("%s: verdict %v (%s); want %v", tt.name, got.Verdict, got.Why, tt.want)
		}
	}
}

// A report names each defect's family, case and reproducer.
func TestReport_WritesReproducers(t *testing.T) {
	tl := newTally(FamilyDataPlane)
	tl.add(12, "smuggle", defect("2 responses"), func() string { return `write "GET / HTTP/1.1"` })
	tl.add(13, "valid", accepted(), nil)
	rep := &Report{Seed: 3, Net: "127.201.1", Tallies: []*Tally{tl}}
	var b strings.Builder
	rep.Write(&b)
	for _, want := range []string{"llbsim attack --seed 3 --net 127.201.1 --family dataplane --case 12", `write "GET / HTTP/1.1"`, "2 responses"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	if rep.Defects() != 1 {
		t.Errorf("Defects() = %d; want 1", rep.Defects())
	}
}
