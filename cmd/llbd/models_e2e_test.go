package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/worker"
)

// modelIDs reads GET /v1/models's ids.
func modelIDs(t *testing.T, url string) []string {
	t.Helper()
	res, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var l struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	b, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("/v1/models %s: %v", b, err)
	}
	var ids []string
	for _, d := range l.Data {
		ids = append(ids, d.ID)
	}
	return ids
}

func TestE2E_ARuleOverWorkersServingThreeModels(t *testing.T) {
	models := []string{"llama-70b", "mistral-7b", "qwen-7b"}
	tmpl := workerCfg("", 0, engine.KVNone, 0, 0.02)
	tmpl.RuntimeLoRA = true
	f, err := fleet.Start(fleet.Config{Single: 6, BaseIP: "127.0.26.32", Template: &tmpl,
		Customize: func(i int, _ ladder.Role, c *worker.Config) {
			c.Model = models[i%3]
			if i%3 == 0 {
				c.Aliases = []string{"llama"}
			}
		}})
	if err != nil {
		t.Fatalf("fleet: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.Stop(ctx)
	})
	d := startDataPlane(t)
	d.post(ruleJSON(t, f, "127.0.26.31", 2026, nil))
	d.waitActive(2026)
	const vip = "http://127.0.26.31:2026"
	deadline := time.Now().Add(15 * time.Second)
	for len(modelIDs(t, vip)) != 4 {
		if time.Now().After(deadline) {
			t.Fatalf("/v1/models never became the union: %v", modelIDs(t, vip))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := strings.Join(modelIDs(t, vip), ","); got != "llama-70b,llama,mistral-7b,qwen-7b" {
		t.Errorf("/v1/models ids %s; want each of the pool's models once", got)
	}
	for _, name := range append(models, "llama") {
		seen := map[int]bool{}
		for range 6 {
			res, b := post(t, vip+"/v1/chat/completions", fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":"hi"}],"max_tokens":1}`, name))
			if res.StatusCode != 200 {
				t.Fatalf("%s: %d %s", name, res.StatusCode, b)
			}
			_, ep, _ := routeOf(t, res.Header)
			seen[ep] = true
		}
		for ep := range seen {
			if f.Workers()[ep].Config().Model != name && !(name == "llama" && ep%3 == 0) {
				t.Errorf("%s went to endpoint %d, which serves %s", name, ep, f.Workers()[ep].Config().Model)
			}
		}
		if len(seen) != 2 {
			t.Errorf("%s spread over %v; want both of its endpoints", name, seen)
		}
	}
	// A model no endpoint serves: vLLM's own 404, in Anthropic's shape on
	// the Messages API.
	res, b := post(t, vip+"/v1/completions", `{"model":"gpt-9","prompt":"x"}`)
	var e struct {
		Error struct {
			Message, Type string
			Param         string
			Code          int
		} `json:"error"`
	}
	_ = json.Unmarshal([]byte(b), &e)
	if res.StatusCode != 404 || e.Error.Type != "NotFoundError" || e.Error.Code != 404 || e.Error.Message != "The model `gpt-9` does not exist." {
		t.Errorf("unknown model: %d %s; want vLLM's 404", res.StatusCode, b)
	}
	res, b = post(t, vip+"/v1/messages", `{"model":"gpt-9","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`)
	if res.StatusCode != 404 || !strings.HasPrefix(b, `{"type":"error","error":{"type":"NotFoundError"`) {
		t.Errorf("unknown model on /v1/messages: %d %s; want Anthropic's shape", res.StatusCode, b)
	}
	// LoxiLB's case-sensitivity: MISTRAL-7B is not mistral-7b.
	if res, _ := post(t, vip+"/v1/completions", `{"model":"MISTRAL-7B","prompt":"x"}`); res.StatusCode != 404 {
		t.Errorf("wrong case: %d; want 404", res.StatusCode)
	}
	// An adapter loaded on one endpoint at runtime shows within a refresh
	// and is served there only.
	if res, b := post(t, f.Workers()[1].URL()+"/v1/load_lora_adapter", `{"lora_name":"fr-lora","lora_path":"/adapters/fr"}`); res.StatusCode != 200 {
		t.Fatalf("load: %d %s", res.StatusCode, b)
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		res, b := post(t, vip+"/v1/completions", `{"model":"fr-lora","prompt":"bonjour","max_tokens":1}`)
		if res.StatusCode == 200 {
			if _, ep, _ := routeOf(t, res.Header); ep != 1 {
				t.Fatalf("fr-lora served by %d; want 1", ep)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the loaded adapter never became routable: %d %s", res.StatusCode, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
