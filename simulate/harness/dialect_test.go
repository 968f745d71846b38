package harness

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/worker"
	"github.com/llbproject/llb/simulate/workload"
)

func TestTokenIDPrompts_SendsCompletionsAsTheirTokensAndLeavesChatsAlone(t *testing.T) {
	sp := smokeSpec()
	chat := sp
	chat.Chat = true
	hot := workload.HotPrefix{Options: workload.Options{Stream: true}, Sessions: true}
	spec := workload.Mix{Parts: []workload.Part{{Weight: 1, Spec: sp}, {Weight: 1, Spec: chat}, {Weight: 1, Spec: hot}}}
	tr, err := workload.NewTrace(workload.TraceConfig{Spec: spec, Requests: 40, Seed: 1, BlockSize: 16, KeepTokens: true})
	if err != nil {
		t.Fatal(err)
	}
	got, err := tokenIDPrompts(tr)
	if err != nil {
		t.Fatal(err)
	}
	var completions, chats, sessions int
	for i, r := range got.Requests {
		var body struct {
			Prompt json.RawMessage `json:"prompt"`
			UserID *string         `json:"user_id"`
			User   *string         `json:"user"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		var orig struct {
			UserID *string `json:"user_id"`
		}
		_ = json.Unmarshal(tr.Requests[i].Body, &orig)
		if orig.UserID != nil {
			sessions++
			if body.UserID != nil || body.User == nil || *body.User != *orig.UserID {
				t.Fatalf("request %d: %s; want its user_id %q as user (trtllm-serve refuses user_id)", i, r.Body, *orig.UserID)
			}
			continue
		}
		if r.Tokens != nil {
			t.Fatalf("request %d keeps its tokens", i)
		}
		switch r.Path {
		case workload.PathCompletions:
			completions++
			var ids []uint32
			if err := json.Unmarshal(body.Prompt, &ids); err != nil || !slices.Equal(ids, tr.Requests[i].Tokens) {
				t.Fatalf("request %d prompt %s (%v); want its %d token ids", i, body.Prompt, err, len(tr.Requests[i].Tokens))
			}
		default:
			chats++
			if string(r.Body) != string(tr.Requests[i].Body) {
				t.Fatalf("chat %d rewritten: %s", i, r.Body)
			}
		}
	}
	if completions == 0 || chats == 0 || sessions == 0 {
		t.Fatalf("%d completions, %d chats, %d with a session: want some of each", completions, chats, sessions)
	}
	if _, err := tokenIDPrompts(&workload.Trace{Requests: []workload.TraceRequest{{Path: workload.PathCompletions, Body: []byte(`{}`)}}}); err == nil {
		t.Fatal("a trace without tokens was converted")
	}
}

// A short bench through the real llbd on SGLang and TensorRT-LLM workers:
// the rules name the engine, llbd reads each engine's events (SGLang's
// pages over ZMQ, TensorRT-LLM's drained from POST /kv_cache_events) and
// Tier 1.5 finds the cached prefixes, on a single pool and on P/D (SGLang's
// bootstrap rooms, TensorRT-LLM's context and generation legs). The hits
// are the workers' own: the usage they report, or their counters on P/D.
func TestBench_SGLangAndTRTLLMWorkersGetTierOneAndAHalfHits(t *testing.T) {
	for _, d := range []worker.Dialect{worker.DialectSGLang, worker.DialectTRTLLM} {
		t.Run(string(d), func(t *testing.T) {
			hard, _ := strategy.ByName(strategy.NameHard)
			pd, _ := strategy.ByName(strategy.NamePDHard)
			eng := smallEngine(4000, 32)
			// As in TestRun_KVExactHardThroughTheRealDaemon: at a quarter of
			// real time the events reach llbd well before a group's next
			// request.
			eng.Latency.TimeScale = 0.25
			b := Bench{
				Scenario: Scenario{
					Name: "sp-" + string(d), Workload: smokeSpec(), Requests: 60, Seed: 1, Warmup: 0.2,
					Fleet: FleetConfig{Workers: 2, BaseIP: "127.0.9.2", Engine: eng, Dialect: d},
				},
				Strategies: []strategy.Strategy{hard, pd}, Rates: []float64{10},
				Daemon: DaemonSource{Bin: llbdBin(t)}, WorkDir: t.TempDir(), KeepRecords: true,
			}
			out, err := b.Execute(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, run := range out.Runs {
				res := run.Result
				checkRun(t, res)
				for _, rec := range res.Records {
					if rec.Route.Engine != string(d) {
						t.Fatalf("%s: route %+v; want the rule's engine %s in X-Llb-Route", res.Strategy, rec.Route, d)
					}
					if res.Strategy == strategy.NamePDHard && rec.Route.Decode < 2 {
						t.Fatalf("%s: route %+v; want a decode endpoint", res.Strategy, rec.Route)
					}
				}
				wantSource := map[string]string{strategy.NameHard: "usage", strategy.NamePDHard: "counters"}[res.Strategy]
				if res.TierMix["1.5"] < res.Requests/2 || res.HitRateSource != wantSource || res.HitRate < 0.5*res.OracleHitRate {
					t.Fatalf("%s: tier mix %v, hit rate %.3f from %s (oracle %.3f): want Tier 1.5 to decide most of %d requests and the workers to report at least half the oracle's hits from %s",
						res.Strategy, res.TierMix, res.HitRate, res.HitRateSource, res.OracleHitRate, res.Requests, wantSource)
				}
				t.Logf("%s on %s: tier mix %v, hit rate %.3f (%s), oracle %.3f", res.Strategy, d, res.TierMix, res.HitRate, res.HitRateSource, res.OracleHitRate)
			}
		})
	}
}
