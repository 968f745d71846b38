package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// vLLM's priority field through the real llbd: a rule with
// priority_scheduling sets it from the request's class (critical −1,
// standard 0, sheddable 1) on completions and chat; a rule without it
// passes the client's own; an SGLang rule with it sets none (neither does
// a TensorRT-LLM one: trtllm_pd_e2e_test.go).
func TestE2E_EnginePriorityOnlyWherePriorityScheduling(t *testing.T) {
	var mu sync.Mutex
	var seen []map[string]any
	be := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/health" {
			return
		}
		b, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(b, &body)
		mu.Lock()
		seen = append(seen, body)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"x","object":"text_completion","model":"m","choices":[{"index":0,"text":"ok","finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	ln, err := net.Listen("tcp", "127.0.39.2:0")
	if err != nil {
		t.Fatal(err)
	}
	be.Listener = ln
	be.Start()
	t.Cleanup(be.Close)
	bePort := ln.Addr().(*net.TCPAddr).Port

	d := startDataPlane(t)
	rule := func(port int, sa map[string]any) string {
		m := map[string]any{"externalIP": "127.0.0.1", "port": port, "protocol": "tcp", "mode": 4}
		for k, v := range sa {
			m[k] = v
		}
		b, _ := json.Marshal(map[string]any{"serviceArguments": m, "endpoints": []map[string]any{{"endpointIP": "127.0.39.2", "targetPort": bePort, "weight": 1}}})
		return string(b)
	}
	withPolicy, without, sglang := freePort(t), freePort(t), freePort(t)
	d.post(rule(withPolicy, map[string]any{"priority_scheduling": true}))
	d.post(rule(without, nil))
	d.post(rule(sglang, map[string]any{"priority_scheduling": true, "kvEngineType": "sglang"}))
	d.waitActive(withPolicy)
	d.waitActive(without)
	d.waitActive(sglang)

	tests := []struct {
		name, path, body, class string
		port                    int
		want                    any // the engine's priority; nil: absent
	}{
		{"critical completion", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`, "critical", withPolicy, -1.0},
		{"standard chat", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1}`, "standard", withPolicy, 0.0},
		{"sheddable replaces the client's", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1,"priority":-100}`, "sheddable", withPolicy, 1.0},
		{"no policy: the client's as sent", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1,"priority":7}`, "critical", without, 7.0},
		{"no policy: none added", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`, "critical", without, nil},
		{"sglang: none added", "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":1}`, "critical", sglang, nil},
		{"sglang: the client's as sent", "/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"priority":3}`, "sheddable", sglang, 3.0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			n := len(seen)
			mu.Unlock()
			req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1:"+strconv.Itoa(tc.port)+tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("X-Llb-Priority", tc.class)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("%d %s", res.StatusCode, b)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != n+1 {
				t.Fatalf("the engine saw %d requests; want one", len(seen)-n)
			}
			got, has := seen[n]["priority"]
			if tc.want == nil && has || tc.want != nil && got != tc.want {
				t.Fatalf("engine priority %v (present %v); want %v", got, has, tc.want)
			}
		})
	}
}
