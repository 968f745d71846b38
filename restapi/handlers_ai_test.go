package restapi

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llbproject/llb/tenant"
)

func TestAPIKeys_LifecycleWithLoxiLBStatusCodes(t *testing.T) {
	gate := tenant.NewGate()
	ts := started(t, func(c *Config) { c.Keys = gate; c.Token = "s3cret" })
	auth := []string{"Authorization", "Bearer s3cret", "Content-Type", "application/json"}
	create := ts.do(http.MethodPost, apikeyPath, `{"tenant_id":"cicd-tenant","name":"cicd-key-1","allowed_models":["Qwen/Qwen3-0.6B","llama-3"],
		"rate_limit_rps":5,"burst_size":10,"tokens_per_min":1000,"enabled":true,"rate_limit":{"rps":1}}`, auth...)
	if create.status != http.StatusCreated {
		t.Fatalf("create: %d %s", create.status, create.body)
	}
	var cr APIKeyCreateResponse
	if err := json.Unmarshal([]byte(create.body), &cr); err != nil || !strings.HasPrefix(cr.RawKey, "lxb_") || cr.KeyID == "" {
		t.Fatalf("create answer %s", create.body)
	}
	if k := gate.Lookup(cr.RawKey, ts.clock.Now()); k == nil || k.ID != cr.KeyID {
		t.Fatal("the data plane's gate did not get the key")
	}
	if r := ts.do(http.MethodPost, apikeyPath, `{"tenant_id":"other-tenant","name":"other-key","allowed_models":[]}`, auth...); r.status != 201 {
		t.Fatalf("second: %d", r.status)
	}
	list := ts.do(http.MethodGet, apikeyPath+"?tenant_id=cicd-tenant", "", auth...)
	var sums []map[string]any
	if err := json.Unmarshal([]byte(list.body), &sums); err != nil || list.status != 200 || len(sums) != 1 ||
		sums[0]["name"] != "cicd-key-1" || strings.Contains(list.body, "key_hash") || strings.Contains(list.body, cr.RawKey[4:]) {
		t.Fatalf("list: %d %s", list.status, list.body)
	}
	get := ts.do(http.MethodGet, apikeyPath+"/"+cr.KeyID, "", auth...)
	if get.status != 200 || !strings.Contains(get.body, `"tenant_id":"cicd-tenant"`) || strings.Contains(get.body, "key_hash") ||
		!strings.Contains(get.body, `"enabled":true`) {
		t.Fatalf("get: %d %s", get.status, get.body)
	}
	if r := ts.do(http.MethodPost, ratelimitPath, `{"tenant_id":"cicd-tenant","rps":50,"tokens_per_min":2000}`, auth...); r.status != 204 {
		t.Fatalf("set limit: %d %s", r.status, r.body)
	}
	rl := ts.do(http.MethodGet, ratelimitPath+"/cicd-tenant", "", auth...)
	if rl.status != 200 || !strings.Contains(rl.body, `"rps":50`) || !strings.Contains(rl.body, `"tokens_per_min":2000`) {
		t.Fatalf("get limit: %d %s", rl.status, rl.body)
	}
	if r := ts.do(http.MethodGet, ratelimitPath+"/nobody", "", auth...); r.status != 404 {
		t.Fatalf("unknown limit: %d", r.status)
	}
	if r := ts.do(http.MethodPatch, apikeyPath+"/"+cr.KeyID, `{"allowed_models":["mistral-7b"],"enabled":false}`, auth...); r.status != 204 {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}
	if g := ts.do(http.MethodGet, apikeyPath+"/"+cr.KeyID, "", auth...); !strings.Contains(g.body, `"enabled":false`) || !strings.Contains(g.body, `"mistral-7b"`) {
		t.Fatalf("after patch: %s", g.body)
	}
	if gate.Lookup(cr.RawKey, ts.clock.Now()) != nil {
		t.Fatal("a disabled key still authenticates")
	}
	if r := ts.do(http.MethodDelete, apikeyPath+"/"+cr.KeyID, "", auth...); r.status != 204 {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	for _, r := range []response{
		ts.do(http.MethodGet, apikeyPath+"/"+cr.KeyID, "", auth...),
		ts.do(http.MethodDelete, apikeyPath+"/"+cr.KeyID, "", auth...),
		ts.do(http.MethodPatch, apikeyPath+"/"+cr.KeyID, `{"enabled":true}`, auth...),
	} {
		if r.status != 404 {
			t.Fatalf("after delete: %d %s; want 404", r.status, r.body)
		}
	}
	// Bad input: 400 with the problem; no token: 401.
	for _, body := range []string{`{"tenant_id":"","name":"x","enabled":true}`, `{"name":"x"}`, `{"tenant_id":"a","rate_limit_rps":-1}`,
		`{"tenant_id":"a","expires_at":"tomorrow"}`, `not json`, ``} {
		if r := ts.do(http.MethodPost, apikeyPath, body, auth...); r.status != 400 {
			t.Errorf("create %q: %d %s; want 400", body, r.status, r.body)
		}
	}
	for _, r := range []response{
		ts.do(http.MethodPost, apikeyPath, `{"tenant_id":"a","name":"unauth"}`),
		ts.do(http.MethodGet, apikeyPath+"?tenant_id=a", ""),
		ts.do(http.MethodDelete, apikeyPath+"/x", ""),
		ts.do(http.MethodPost, ratelimitPath, `{"tenant_id":"a","requests_per_minute":10}`),
		ts.do(http.MethodGet, apikeyPath+"/x", ""),
		ts.do(http.MethodGet, ratelimitPath+"/a", ""),
	} {
		if r.status != 401 {
			t.Errorf("unauthenticated: %d %s; want 401", r.status, r.body)
		}
	}
}

func TestAPIKeys_PersistAcrossRestartAsHashesOnly(t *testing.T) {
	dir := t.TempDir()
	ts := started(t, func(c *Config) { c.StateDir = dir })
	r := ts.do(http.MethodPost, apikeyPath, `{"tenant_id":"a","name":"k","class":"critical"}`)
	var cr APIKeyCreateResponse
	_ = json.Unmarshal([]byte(r.body), &cr)
	ts.do(http.MethodPost, ratelimitPath, `{"tenant_id":"a","rps":7}`)
	data, err := os.ReadFile(filepath.Join(dir, "rules.json"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), cr.RawKey[4:]) || !strings.Contains(string(data), tenant.HashRaw(cr.RawKey)) {
		t.Fatalf("state file holds the raw key or not its hash:\n%s", data)
	}
	gate := tenant.NewGate()
	again := started(t, func(c *Config) { c.StateDir = dir; c.Keys = gate })
	if k := gate.Lookup(cr.RawKey, again.clock.Now()); k == nil || k.Class != "critical" || gate.Table().Limit("a").RPS != 7 {
		t.Fatalf("after restart: key %+v, limits %+v", k, gate.Table().Limits())
	}
}
