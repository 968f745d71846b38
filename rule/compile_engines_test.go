package rule_test

import (
	"encoding/json"
	"testing"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/rule/ruletest"
)

// compileEntry validates, normalizes and compiles an entry.
func compileEntry(t *testing.T, e ruletest.Entry) *rule.Compiled {
	t.Helper()
	var le rule.LoadbalanceEntry
	if err := json.Unmarshal([]byte(e.JSON(t)), &le); err != nil {
		t.Fatal(err)
	}
	if err := rule.Validate(&le); err != nil {
		t.Fatalf("validate: %v", err)
	}
	r, err := rule.NormalizeEntry(&le)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rule.Compile(&r, rule.Defaults{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCompile_EngineFeeds: an SGLang endpoint subscribes to one publisher
// per DP rank on kvZmqPort + rank; a TensorRT-LLM endpoint is drained on its
// own serving port; each rule's contract names its engine's hash.
func TestCompile_EngineFeeds(t *testing.T) {
	sg := compileEntry(t, ruletest.SingleEntry(t).Set("serviceArguments.kvEngineType", "sglang").Set("serviceArguments.kvExactMode", 3).
		Set("serviceArguments.kvDpRankCount", 3).Set("serviceArguments.kvZmqPort", 5561))
	if sg.KV.Algo != "sha256_sglang" || sg.KV.TokenKeyed {
		t.Errorf("sglang contract %+v", sg.KV)
	}
	for i, ep := range sg.Endpoints {
		if len(ep.Feeds) != 3 {
			t.Fatalf("sglang endpoint %d feeds %+v; want 3 ranks", i, ep.Feeds)
		}
		for r, f := range ep.Feeds {
			want := "tcp://" + ep.Addr.Addr().String() + ":" + []string{"5561", "5562", "5563"}[r]
			if f.Rank != r || f.Endpoint != want {
				t.Errorf("sglang endpoint %d rank %d feed %+v; want %s", i, r, f, want)
			}
		}
	}
	tr := compileEntry(t, ruletest.SingleEntry(t).Set("serviceArguments.kvEngineType", "trtllm").Set("serviceArguments.kvExactMode", 3).
		Set("serviceArguments.kvBlockSize", 32))
	if tr.KV.Algo != "blockhash_trtllm" || tr.KV.BlockSize != 32 || tr.Engine != "trtllm" {
		t.Errorf("trtllm engine %q contract %+v", tr.Engine, tr.KV)
	}
	for i, ep := range tr.Endpoints {
		if want := "http://" + ep.Addr.String() + "/kv_cache_events"; len(ep.Feeds) != 1 || ep.Feeds[0].Endpoint != want {
			t.Errorf("trtllm endpoint %d feeds %+v; want one drain of %s", i, ep.Feeds, want)
		}
	}
}

// TestCompile_SGLangPD: an SGLang P/D rule compiles with its engine and
// bootstrap port (0 → 8998) for the gateway's dialect, and feeds on its
// prefill endpoints only.
func TestCompile_SGLangPD(t *testing.T) {
	for _, tc := range []struct {
		port any
		want uint16
	}{{nil, rule.DefaultPDBootstrapPort}, {9100, 9100}} {
		e := ruletest.PDEntry(t).Set("serviceArguments.kvEngineType", "sglang").Del("serviceArguments.kvHashAlgo")
		if tc.port != nil {
			e = e.Set("serviceArguments.pdBootstrapPort", tc.port)
		}
		c := compileEntry(t, e)
		if c.Engine != rule.EngineSGLang || c.BootstrapPort != tc.want || c.KV.Algo != "sha256_sglang" || !c.Spec.PDDisagg {
			t.Errorf("port %v: engine %q bootstrap port %d algo %q pd %v; want sglang, %d, sha256_sglang, P/D", tc.port, c.Engine, c.BootstrapPort, c.KV.Algo, c.Spec.PDDisagg, tc.want)
		}
		for i, ep := range c.Endpoints {
			if fed := len(ep.Feeds) > 0; fed != (ep.Role() == ladder.RolePrefill) {
				t.Errorf("endpoint %d (%v) feeds %+v; want feeds on prefill endpoints only", i, ep.Role(), ep.Feeds)
			}
		}
	}
	if v := compileEntry(t, ruletest.PDEntry(t)); v.Engine != rule.EngineVLLM {
		t.Errorf("a rule without kvEngineType compiles with engine %q; want vllm", v.Engine)
	}
}

func TestCompile_TRTLLMPDDrainsItsContextEndpoints(t *testing.T) {
	c := compileEntry(t, ruletest.PDEntry(t).Set("serviceArguments.kvEngineType", "trtllm").
		Del("serviceArguments.kvHashAlgo").Del("serviceArguments.kvZmqPort"))
	if c.Engine != "trtllm" || !c.Spec.PDDisagg {
		t.Fatalf("engine %q, P/D %v; want trtllm P/D", c.Engine, c.Spec.PDDisagg)
	}
	for i, ep := range c.Endpoints {
		want := 0
		if ep.Role() == ladder.RolePrefill {
			want = 1
		}
		if len(ep.Feeds) != want || want == 1 && ep.Feeds[0].Endpoint != "http://"+ep.Addr.String()+"/kv_cache_events" {
			t.Errorf("endpoint %d (%v) feeds %+v; want %d drain(s)", i, ep.Role(), ep.Feeds, want)
		}
	}
	if v := compileEntry(t, ruletest.SingleEntry(t)); v.Engine != "vllm" {
		t.Errorf("a rule without kvEngineType compiles to engine %q; want vllm", v.Engine)
	}
}

func TestCompile_EnginePriorityOnlyOnVLLMRules(t *testing.T) {
	tests := []struct {
		engine string // "" leaves kvEngineType absent (vLLM)
		want   bool
	}{{"", true}, {"vllm", true}, {"sglang", false}, {"trtllm", false}, {"llamacpp", false}}
	for _, tt := range tests {
		t.Run(tt.engine, func(t *testing.T) {
			e := ruletest.SingleEntry(t).Set("serviceArguments.priority_scheduling", true)
			if tt.engine != "" {
				e = e.Set("serviceArguments.kvEngineType", tt.engine)
			}
			if c := compileEntry(t, e); c.EnginePriority != tt.want {
				t.Fatalf("EnginePriority %v; want %v", c.EnginePriority, tt.want)
			}
		})
	}
}
