package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/fleet"
)

// LoxiLB's model routing (docs/load-balancing/19-ai-gateway-controls.md,
// cicd/ai-model-routing) with every rule on one VIP:port: the rule key
// carries host, path_prefix, path_match_mode and model_name; X-Model, else
// the body's model, picks the rule; the wildcard rule takes the rest; 503
// model_unavailable when no rule does.

// modelPool starts one worker serving model on ip.
func modelPool(t *testing.T, ip, model string) *fleet.Fleet {
	t.Helper()
	tmpl := workerCfg("", 0, engine.KVNone, 0, 0.02)
	tmpl.Model = model
	f, err := fleet.Start(fleet.Config{Single: 1, BaseIP: ip, Template: &tmpl})
	if err != nil {
		t.Fatalf("fleet: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.Stop(ctx)
	})
	return f
}

// request sends a completion with an optional X-Model and returns status,
// body and the model the worker served (its "model" field).
func request(t *testing.T, url, xmodel, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if xmodel != "-" {
		req.Header.Set("X-Model", xmodel)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func TestE2E_LoxiLBModelRulesShareOneAddress(t *testing.T) {
	pools := map[string]*fleet.Fleet{
		"llama-70b":  modelPool(t, "127.0.26.42", "llama-70b"),
		"mistral-7b": modelPool(t, "127.0.26.43", "mistral-7b"),
		"":           modelPool(t, "127.0.26.44", "wild-model"),
	}
	d := startDataPlane(t)
	rule := func(model string, port int) string {
		return fmt.Sprintf(`{"serviceArguments":{"externalIP":"127.0.26.41","port":%d,"protocol":"tcp","sel":0,"mode":4,`+
			`"host":"127.0.26.41","path_prefix":"/","path_match_mode":"prefix","model_name":%q,"inactiveTimeOut":30},`+
			`"endpoints":[{"endpointIP":%q,"targetPort":%d,"weight":1}]}`,
			port, model, pools[model].Workers()[0].Config().IP, pools[model].Workers()[0].HTTPPort())
	}
	for _, m := range []string{"llama-70b", "mistral-7b", ""} {
		d.post(rule(m, 2026))
	}
	if n := len(d.rules()); n != 3 {
		t.Fatalf("%d rules stored; want 3 on one address (the key carries model_name)", n)
	}
	d.waitActive(2026)
	const vip = "http://127.0.26.41:2026"
	tests := []struct {
		name, xmodel, body string
		want               int
		served             string
	}{
		{"T1 X-Model picks llama", "llama-70b", `{"model":"llama-70b","prompt":"hi","max_tokens":1}`, 200, `"model":"llama-70b"`},
		{"T2 the body's model picks mistral", "-", `{"model":"mistral-7b","prompt":"hi","max_tokens":1}`, 200, `"model":"mistral-7b"`},
		{"T3 no model: the wildcard", "-", `{"prompt":"hi","max_tokens":1}`, 200, `"model":"wild-model"`},
		{"T5 X-Model overrides the body", "llama-70b", `{"prompt":"hi","max_tokens":1}`, 200, `"model":"llama-70b"`},
		{"T7 an empty X-Model counts as none", "", `{"prompt":"hi","max_tokens":1}`, 200, `"model":"wild-model"`},
		// The wildcard rule takes an unknown model; its workers do not serve
		// it: vLLM's own 404.
		{"unknown model to the wildcard", "unknown-xyz", `{"model":"unknown-xyz","prompt":"hi"}`, 404, "does not exist"},
		{"T10 case-sensitive", "MISTRAL-7B", `{"model":"MISTRAL-7B","prompt":"hi"}`, 404, "does not exist"},
		{"T9 a slash in the model", "llama/3.1", `{"model":"llama/3.1","prompt":"hi"}`, 404, "does not exist"},
	}
	for _, tt := range tests {
		code, b := request(t, vip, tt.xmodel, tt.body)
		if code != tt.want || !strings.Contains(b, tt.served) {
			t.Errorf("%s: %d %s; want %d with %s", tt.name, code, b, tt.want, tt.served)
		}
	}
	// T8: delete the llama rule by its full key; llama now falls to the
	// wildcard rule, whose workers do not serve it.
	if code, b := d.do(http.MethodDelete, "/netlox/v1/config/loadbalancer/hosturl/127.0.26.41/externalipaddress/127.0.26.41/port/2026/protocol/tcp?path_prefix=/&path_match_mode=prefix&model_name=llama-70b", ""); code != 200 {
		t.Fatalf("delete: %d %s", code, b)
	}
	if code, b := request(t, vip, "llama-70b", `{"model":"llama-70b","prompt":"hi"}`); code != 404 {
		t.Errorf("after deleting the llama rule: %d %s; want the wildcard's 404", code, b)
	}
	if code, _ := request(t, vip, "mistral-7b", `{"model":"mistral-7b","prompt":"hi","max_tokens":1}`); code != 200 {
		t.Errorf("mistral after the delete: %d; want its rule to keep serving", code)
	}
	// T4: a rule naming a model alone on its address, no wildcard: 503
	// model_unavailable for anything else.
	d.post(rule("llama-70b", 2027))
	d.waitActive(2027)
	code, b := request(t, "http://127.0.26.41:2027", "unknown-xyz", `{"prompt":"hi"}`)
	if code != 503 || !strings.Contains(b, "model_unavailable") {
		t.Errorf("T4: %d %s; want 503 model_unavailable", code, b)
	}
	if code, b := request(t, "http://127.0.26.41:2027", "llama-70b", `{"prompt":"hi","max_tokens":1}`); code != 200 {
		t.Errorf("T4 llama: %d %s", code, b)
	}
}
