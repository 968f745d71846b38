package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/fleet"
)

// LoxiLB's cicd/ai-apikey scenario (validation.sh and validate_cli.sh),
// call by call, against the real llbd: every control-plane call with the
// status code LoxiLB's scenario checks, and the data-plane checks on an
// sse_mode rule. LoxiLB's data-plane checks send GET / to a TCP echo
// server; llb serves the OpenAI API, so they send a completion instead.

// aiClient talks to llbd's REST API with a bearer token ("" for none).
type aiClient struct {
	t     *testing.T
	base  string
	token string
}

func (c aiClient) do(method, path, body string) (int, string, http.Header) {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

// createKey POSTs a key and returns its raw key and id.
func (c aiClient) createKey(body string) (raw, id string) {
	c.t.Helper()
	code, resp, _ := c.do(http.MethodPost, "/netlox/v1/config/ai/apikey", body)
	if code != 201 {
		c.t.Fatalf("create key %s: %d %s", body, code, resp)
	}
	var out struct {
		RawKey string `json:"raw_key"`
		KeyID  string `json:"key_id"`
	}
	if err := json.Unmarshal([]byte(resp), &out); err != nil || !strings.HasPrefix(out.RawKey, "lxb_") || out.KeyID == "" {
		c.t.Fatalf("create answer %s", resp)
	}
	return out.RawKey, out.KeyID
}

// vipCall sends a completion to the VIP with the given headers (name,
// value pairs) and returns the status and body.
func vipCall(t *testing.T, vip string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, vip+"/v1/completions", strings.NewReader(`{"model":"sim-model","prompt":"hello","max_tokens":2}`))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("VIP: %v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b), res.Header
}

// parallel sends n completions with key at once and counts the statuses.
func parallel(t *testing.T, vip, key string, n int) map[int]int {
	t.Helper()
	var mu sync.Mutex
	got := map[int]int{}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _, _ := vipCall(t, vip, "X-Api-Key", key)
			mu.Lock()
			got[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	return got
}

func startKeyedDaemon(t *testing.T, baseIP string) (aiClient, string, string) {
	t.Helper()
	tmpl := workerCfg("", 0, engine.KVNone, 0, 0.01)
	f, err := fleet.Start(fleet.Config{Single: 1, BaseIP: baseIP, Template: &tmpl})
	if err != nil {
		t.Fatalf("fleet: %v", err)
	}
	t.Cleanup(func() { _ = f.Stop(t.Context()) })
	dir := t.TempDir()
	tokenPath := filepath.Join(dir, "token")
	if err := os.WriteFile(tokenPath, []byte("Admin123!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := buildDaemon(t)
	d := startDaemonEnv(t, bin, nil, "--listen", "127.0.0.1:0", "--state-dir", filepath.Join(dir, "state"),
		"--token-file", tokenPath, "--log-format", "json", "--log-level", "debug")
	c := aiClient{t: t, base: "http://" + d.addr, token: "Admin123!"}
	port := freePort(t)
	// LoxiLB's config.sh rule: mode 4 with sse_mode (the enforcement switch).
	if code, resp, _ := c.do(http.MethodPost, "/netlox/v1/config/loadbalancer", ruleJSON(t, f, "127.0.0.1", port, map[string]any{"sse_mode": true, "inactiveTimeOut": 60})); code != 200 {
		t.Fatalf("rule: %d %s", code, resp)
	}
	vip := fmt.Sprintf("http://127.0.0.1:%d", port)
	eventually(t, "the VIP answers", func() (bool, string) {
		code, body, _ := vipCall(t, vip)
		return code == 200, fmt.Sprint(code, body)
	})
	return c, vip, tokenPath
}

func TestE2E_LoxiLBAIAPIKeyScenario(t *testing.T) {
	c, vip, _ := startKeyedDaemon(t, "127.0.0.91")
	noAuth := aiClient{t: t, base: c.base}
	check := func(name string, got, want int, body string) {
		t.Helper()
		if got != want {
			t.Errorf("%s: %d; want %d (%s)", name, got, want, body)
		}
	}

	// T1, T2: create two keys of two tenants.
	raw1, id1 := c.createKey(`{"tenant_id":"cicd-tenant","name":"cicd-key-1","allowed_models":["Qwen/Qwen3-0.6B","llama-3"],"rate_limit_rps":5,"burst_size":10,"tokens_per_min":1000,"enabled":true}`)
	_, id2 := c.createKey(`{"tenant_id":"other-tenant","name":"other-key","allowed_models":[],"rate_limit_rps":10,"burst_size":20,"tokens_per_min":5000,"enabled":true}`)
	_ = raw1
	// T3: list by tenant: the key, not the other tenant's.
	code, body, _ := c.do(http.MethodGet, "/netlox/v1/config/ai/apikey?tenant_id=cicd-tenant", "")
	check("T3 list", code, 200, body)
	if !strings.Contains(body, "cicd-key-1") || strings.Contains(body, "other-tenant") || strings.Contains(body, "key_hash") {
		t.Errorf("T3 list %s", body)
	}
	// T4: get by id, no key_hash.
	code, body, _ = c.do(http.MethodGet, "/netlox/v1/config/ai/apikey/"+id1, "")
	check("T4 get", code, 200, body)
	if !strings.Contains(body, "cicd-tenant") || !strings.Contains(body, "cicd-key-1") || strings.Contains(body, "key_hash") {
		t.Errorf("T4 get %s", body)
	}
	// T5, T6: tenant rate limit set (2xx) and read back.
	code, body, _ = c.do(http.MethodPost, "/netlox/v1/config/ai/tenant/ratelimit", `{"tenant_id":"cicd-tenant","rps":50,"tokens_per_min":2000}`)
	check("T5 set limit", code, 204, body)
	code, body, _ = c.do(http.MethodGet, "/netlox/v1/config/ai/tenant/ratelimit/cicd-tenant", "")
	if code != 200 || !strings.Contains(body, `"rps":50`) || !strings.Contains(body, `"tokens_per_min":2000`) {
		t.Errorf("T6 get limit: %d %s", code, body)
	}
	// T7: no key at the VIP: 401 invalid_api_key.
	code, body, _ = vipCall(t, vip)
	if code != 401 || !strings.Contains(body, "invalid_api_key") {
		t.Errorf("T7: %d %s", code, body)
	}
	// T8: revoke, then 404.
	code, body, _ = c.do(http.MethodDelete, "/netlox/v1/config/ai/apikey/"+id1, "")
	check("T8 delete", code, 204, body)
	code, body, _ = c.do(http.MethodGet, "/netlox/v1/config/ai/apikey/"+id1, "")
	check("T8 get after delete", code, 404, body)
	code, body, _ = c.do(http.MethodDelete, "/netlox/v1/config/ai/apikey/"+id2, "")
	check("cleanup delete", code, 204, body)

	// Data-plane keys.
	openKey, openID := c.createKey(`{"tenant_id":"dp-tenant","name":"dp-open","allowed_models":[],"rate_limit_rps":100,"burst_size":200,"tokens_per_min":100000,"enabled":true}`)
	modelKey, modelID := c.createKey(`{"tenant_id":"dp-tenant","name":"dp-model","allowed_models":["llama-3"],"rate_limit_rps":100,"burst_size":200,"tokens_per_min":100000,"enabled":true}`)
	rlKey, rlID := c.createKey(`{"tenant_id":"dp-tenant","name":"dp-throttl","allowed_models":[],"rate_limit_rps":1,"burst_size":1,"tokens_per_min":100000,"enabled":true}`)
	// DP-T1: a valid key reaches the backend.
	if code, body, _ := vipCall(t, vip, "X-Api-Key", openKey); code != 200 || !strings.Contains(body, `"choices"`) {
		t.Errorf("DP-T1: %d %s", code, body)
	}
	// DP-T2, DP-T3: no key, a fabricated key: 401.
	if code, body, _ := vipCall(t, vip); code != 401 || !strings.Contains(body, "invalid_api_key") {
		t.Errorf("DP-T2: %d %s", code, body)
	}
	if code, body, _ := vipCall(t, vip, "X-Api-Key", "lxb_00000000000000000000000000000000"); code != 401 {
		t.Errorf("DP-T3: %d %s", code, body)
	}
	// DP-T4: a model the key does not allow: 403; DP-T4b the allowed one.
	if code, body, _ := vipCall(t, vip, "X-Api-Key", modelKey, "X-Model", "mistral-7b"); code != 403 || !strings.Contains(body, "model_not_allowed") {
		t.Errorf("DP-T4: %d %s", code, body)
	}
	if code, body, _ := vipCall(t, vip, "X-Api-Key", modelKey, "X-Model", "llama-3"); code != 200 {
		t.Errorf("DP-T4b: %d %s", code, body)
	}
	// DP-T5: six at once against rps 1, burst 1: at least one 429.
	if got := parallel(t, vip, rlKey, 6); got[429] == 0 || got[200] == 0 {
		t.Errorf("DP-T5: %v; want 200s and 429s", got)
	}
	// DP-T6: tenant rps 1: at least one 429; then rps 0 lifts it.
	code, body, _ = c.do(http.MethodPost, "/netlox/v1/config/ai/tenant/ratelimit", `{"tenant_id":"dp-tenant","rps":1,"tokens_per_min":100000}`)
	check("DP-T6 set", code, 204, body)
	if got := parallel(t, vip, openKey, 6); got[429] == 0 {
		t.Errorf("DP-T6: %v; want a 429", got)
	}
	code, body, _ = c.do(http.MethodPost, "/netlox/v1/config/ai/tenant/ratelimit", `{"tenant_id":"dp-tenant","rps":0,"tokens_per_min":100000}`)
	check("DP-T6 reset", code, 204, body)
	// DP-T7: the revoked key is refused (at once: the write is applied
	// before the answer).
	code, body, _ = c.do(http.MethodDelete, "/netlox/v1/config/ai/apikey/"+openID, "")
	check("DP-T7 delete", code, 204, body)
	if code, body, _ := vipCall(t, vip, "X-Api-Key", openKey); code != 401 {
		t.Errorf("DP-T7: %d %s", code, body)
	}
	for _, id := range []string{modelID, rlID} {
		code, body, _ = c.do(http.MethodDelete, "/netlox/v1/config/ai/apikey/"+id, "")
		check("cleanup", code, 204, body)
	}
	// DP-T-DISABLED: a key created disabled is refused.
	disKey, disID := c.createKey(`{"tenant_id":"dp-tenant","name":"dp-disabled-key","enabled":false,"allowed_models":[],"rate_limit":{"rps":100,"burst":200}}`)
	if code, body, _ := vipCall(t, vip, "X-Api-Key", disKey); code != 401 {
		t.Errorf("DP-T-DISABLED: %d %s", code, body)
	}
	c.do(http.MethodDelete, "/netlox/v1/config/ai/apikey/"+disID, "")
	// DP-T-ROTATE: PATCH allowed_models, then the old model is 403.
	rotKey, rotID := c.createKey(`{"tenant_id":"dp-tenant","name":"dp-rotate-key","enabled":true,"allowed_models":["llama-3"],"rate_limit":{"rps":100,"burst":200}}`)
	if code, body, _ := vipCall(t, vip, "X-Api-Key", rotKey, "X-Model", "llama-3"); code != 200 {
		t.Errorf("DP-T-ROTATE before: %d %s", code, body)
	}
	code, body, _ = c.do(http.MethodPatch, "/netlox/v1/config/ai/apikey/"+rotID, `{"allowed_models":["mistral-7b"]}`)
	check("DP-T-ROTATE patch", code, 204, body)
	if code, body, _ := vipCall(t, vip, "X-Api-Key", rotKey, "X-Model", "llama-3"); code != 403 {
		t.Errorf("DP-T-ROTATE after: %d %s", code, body)
	}
	c.do(http.MethodDelete, "/netlox/v1/config/ai/apikey/"+rotID, "")

	// DP-T8 … DP-T15: the management API refuses the unauthenticated, and
	// an empty tenant_id; the first request before a limit passes.
	for _, tc := range []struct {
		name, method, path, body string
	}{
		{"DP-T8 create", http.MethodPost, "/netlox/v1/config/ai/apikey", `{"tenant_id":"cicd-tenant","name":"unauth-test","enabled":true}`},
		{"DP-T9 list", http.MethodGet, "/netlox/v1/config/ai/apikey?tenant_id=cicd-tenant", ""},
		{"DP-T10 delete", http.MethodDelete, "/netlox/v1/config/ai/apikey/nonexistent-id", ""},
		{"DP-T13 set limit", http.MethodPost, "/netlox/v1/config/ai/tenant/ratelimit", `{"tenant_id":"cicd-tenant","requests_per_minute":10}`},
		{"DP-T14 get", http.MethodGet, "/netlox/v1/config/ai/apikey/nonexistent-id", ""},
		{"DP-T15 get limit", http.MethodGet, "/netlox/v1/config/ai/tenant/ratelimit/cicd-tenant", ""},
	} {
		code, body, _ := noAuth.do(tc.method, tc.path, tc.body)
		check(tc.name+" without auth", code, 401, body)
	}
	code, body, _ = c.do(http.MethodPost, "/netlox/v1/config/ai/apikey", `{"tenant_id":"","name":"empty-tenant-test","enabled":true}`)
	if code != 400 && code != 422 {
		t.Errorf("DP-T11 empty tenant: %d %s; want 400 or 422", code, body)
	}
	k12, id12 := c.createKey(`{"tenant_id":"dp-tenant","name":"dp-rl-check","allowed_models":[],"rate_limit_rps":100,"burst_size":200,"tokens_per_min":100000,"enabled":true}`)
	if code, body, _ := vipCall(t, vip, "X-Api-Key", k12); code != 200 {
		t.Errorf("DP-T12: %d %s", code, body)
	}
	c.do(http.MethodDelete, "/netlox/v1/config/ai/apikey/"+id12, "")
}

// TestE2E_LoxiLBAIAPIKeyScenarioCLI is validate_cli.sh: every mutation
// through llbctl (loxicmd's commands and flags), read back through REST.
func TestE2E_LoxiLBAIAPIKeyScenarioCLI(t *testing.T) {
	c, _, tokenPath := startKeyedDaemon(t, "127.0.0.94")
	bin := buildCtl(t)
	ctl := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"--server", c.base, "--token-file", tokenPath}, args...)...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("llbctl: %v", err)
		}
		return code, out.String(), errb.String()
	}
	tenant := fmt.Sprintf("cli-apikey-%d", time.Now().Unix())
	// T-CLI-1: create through the CLI, read through REST.
	if code, out, errs := ctl("create", "apikey", "--tenant-id="+tenant, "--name=cli-key", "--rps=10", "--burst=20", "--tokens-per-min=5000", "-o", "json"); code != 0 {
		t.Fatalf("T-CLI-1 create: %d %s %s", code, out, errs)
	}
	_, list, _ := c.do(http.MethodGet, "/netlox/v1/config/ai/apikey?tenant_id="+tenant, "")
	var keys []map[string]any
	if err := json.Unmarshal([]byte(list), &keys); err != nil || len(keys) != 1 ||
		!strings.Contains(list, `"rate_limit_rps":10`) || !strings.Contains(list, `"tokens_per_min":5000`) || strings.Contains(list, "key_hash") {
		t.Fatalf("T-CLI-1 REST oracle: %s", list)
	}
	id := keys[0]["key_id"].(string)
	// T-CLI-2: the CLI's get matches.
	if code, out, _ := ctl("get", "apikey", id, "-o", "json"); code != 0 || !strings.Contains(out, id) || !strings.Contains(out, tenant) || strings.Contains(out, "key_hash") {
		t.Fatalf("T-CLI-2: %d %s", code, out)
	}
	// T-CLI-3: tenant limit through the CLI.
	if code, out, errs := ctl("set", "ratelimit", "--tenant-id="+tenant, "--rps=200", "--tokens-per-min=100000"); code != 0 {
		t.Fatalf("T-CLI-3 set: %d %s %s", code, out, errs)
	}
	if _, rl, _ := c.do(http.MethodGet, "/netlox/v1/config/ai/tenant/ratelimit/"+tenant, ""); !strings.Contains(rl, `"rps":200`) || !strings.Contains(rl, "100000") {
		t.Fatalf("T-CLI-3 REST oracle: %s", rl)
	}
	if code, out, _ := ctl("get", "ratelimit", tenant, "-o", "json"); code != 0 || !strings.Contains(out, "200") {
		t.Fatalf("T-CLI-3 get: %d %s", code, out)
	}
	// T-CLI-4: disable (still listed, enabled false), enable again.
	if code, out, errs := ctl("set", "apikey", id, "--enabled=false"); code != 0 {
		t.Fatalf("T-CLI-4 disable: %d %s %s", code, out, errs)
	}
	if code, body, _ := c.do(http.MethodGet, "/netlox/v1/config/ai/apikey/"+id, ""); code != 200 || !strings.Contains(body, `"enabled":false`) {
		t.Fatalf("T-CLI-4 disabled view: %d %s", code, body)
	}
	ctl("set", "apikey", id, "--enabled=true")
	if _, body, _ := c.do(http.MethodGet, "/netlox/v1/config/ai/apikey/"+id, ""); !strings.Contains(body, `"enabled":true`) {
		t.Fatalf("T-CLI-4 enabled again: %s", body)
	}
	// T-CLI-5: delete through the CLI, then 404.
	if code, out, errs := ctl("delete", "apikey", id); code != 0 {
		t.Fatalf("T-CLI-5 delete: %d %s %s", code, out, errs)
	}
	if code, _, _ := c.do(http.MethodGet, "/netlox/v1/config/ai/apikey/"+id, ""); code != 404 {
		t.Fatalf("T-CLI-5 after delete: %d", code)
	}
	// T-CLI-6: no tenant: refused with "tenant-id is required", nothing created.
	if code, out, errs := ctl("create", "apikey", "--name=empty-tenant"); code == 0 || !strings.Contains(errs, "tenant-id is required") {
		t.Fatalf("T-CLI-6: %d %s %s", code, out, errs)
	}
	if _, all, _ := c.do(http.MethodGet, "/netlox/v1/config/ai/apikey", ""); strings.Contains(all, "empty-tenant") {
		t.Fatalf("T-CLI-6 created a key: %s", all)
	}
}
