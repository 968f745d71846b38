package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/tenant"
)

// keyGate is a gate holding the keys reqs describe; it returns their raw
// forms in order.
func keyGate(t *testing.T, lim *tenant.Limit, reqs ...tenant.NewKey) (*tenant.Gate, []string) {
	t.Helper()
	tb := tenant.EmptyTable()
	var raws []string
	for _, r := range reqs {
		raw, id, err := tenant.NewRawKey(nil)
		if err != nil {
			t.Fatal(err)
		}
		if tb, _, err = tb.Create(r, raw, id, time.Now()); err != nil {
			t.Fatal(err)
		}
		raws = append(raws, raw)
	}
	if lim != nil {
		tb, _, _ = tb.SetLimit(*lim, time.Now())
	}
	g := tenant.NewGate()
	g.SetTable(tb)
	return g, raws
}

func TestKeys_EnforcedOnSSEModeRules(t *testing.T) {
	g, raws := keyGate(t, nil,
		tenant.NewKey{TenantID: "team-a", AllowedModels: []string{"llama-3"}},
		tenant.NewKey{TenantID: "team-b", Class: "critical"})
	be := newFakeVLLM(t)
	fr := newFakeRouter(fixedRoute(decision(ladder.Tier2, 0, -1)))
	c := singlePool(be.addr())
	c.APIKeys = true
	url, _ := startGateway(t, c, Deps{Router: fr, Keys: g})
	cl := testClient(t)
	body := `{"model":"llama-3","prompt":"hi"}`
	tests := []struct {
		name      string
		body      string
		hdr       []string
		status    int
		code      string
		wantRoute string
	}{
		{name: "no key", body: body, status: 401, code: CodeInvalidAPIKey},
		{name: "unknown key", body: body, hdr: []string{HeaderAPIKey, "lxb_00000000000000000000000000000000"}, status: 401, code: CodeInvalidAPIKey},
		{name: "valid key", body: body, hdr: []string{HeaderAPIKey, raws[0]}, status: 200, wantRoute: " class=standard tenant=team-a"},
		{name: "bearer form", body: body, hdr: []string{"Authorization", "Bearer " + raws[0]}, status: 200},
		{name: "model in the body not allowed", body: `{"model":"mistral-7b","prompt":"hi"}`, hdr: []string{HeaderAPIKey, raws[0]}, status: 403, code: CodeModelNotAllowed},
		{name: "X-Model not allowed", body: body, hdr: []string{HeaderAPIKey, raws[0], HeaderModel, "mistral-7b"}, status: 403, code: CodeModelNotAllowed},
		{name: "fairness id ignored with a key", body: body, hdr: []string{HeaderAPIKey, raws[0], HeaderFairnessID, "spoof"}, status: 200, wantRoute: " class=standard tenant=team-a"},
		{name: "a header cannot raise the class", body: body, hdr: []string{HeaderAPIKey, raws[0], HeaderObjective, "critical"}, status: 200, wantRoute: " class=standard tenant=team-a"},
		{name: "the key's class is the default", body: body, hdr: []string{HeaderAPIKey, raws[1]}, status: 200, wantRoute: " class=critical tenant=team-b"},
		{name: "a header may lower it", body: body, hdr: []string{HeaderAPIKey, raws[1], HeaderPriority, "sheddable"}, status: 200, wantRoute: " class=sheddable tenant=team-b"},
	}
	for _, tt := range tests {
		resp, b := post(t, cl, url+PathCompletions, tt.body, tt.hdr...)
		if resp.StatusCode != tt.status {
			t.Errorf("%s: status %d %s; want %d", tt.name, resp.StatusCode, b, tt.status)
			continue
		}
		if tt.code != "" {
			if e := decodeError(t, b); e.Error.Code != tt.code {
				t.Errorf("%s: code %q; want %q", tt.name, e.Error.Code, tt.code)
			}
		}
		if r := resp.Header.Get(HeaderRoute); tt.wantRoute != "" && !strings.HasSuffix(r, tt.wantRoute) {
			t.Errorf("%s: %s = %q; want suffix %q", tt.name, HeaderRoute, r, tt.wantRoute)
		}
	}
	for _, r := range be.requests() {
		if r.Header.Get(HeaderAPIKey) != "" || strings.Contains(r.Header.Get("Authorization"), "lxb_") {
			t.Fatalf("the engine got the API key: %v", r.Header)
		}
	}
	// GET /v1/models names no model: any live key passes; none is 401.
	for _, tc := range []struct {
		hdr  []string
		want int
	}{{nil, 401}, {[]string{HeaderAPIKey, raws[0]}, 200}} {
		req, _ := http.NewRequest(http.MethodGet, url+PathModels, nil)
		for i := 0; i+1 < len(tc.hdr); i += 2 {
			req.Header.Set(tc.hdr[i], tc.hdr[i+1])
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET /v1/models with %v: %d; want %d", tc.hdr, resp.StatusCode, tc.want)
		}
	}
}

func TestKeys_NotEnforcedWithoutSSEModeOrWithoutKeys(t *testing.T) {
	g, _ := keyGate(t, nil, tenant.NewKey{TenantID: "a"})
	be := newFakeVLLM(t)
	fr := newFakeRouter(fixedRoute(decision(ladder.Tier2, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr, Keys: g}) // sse_mode off
	if resp, b := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"hi"}`); resp.StatusCode != 200 {
		t.Fatalf("rule without sse_mode: %d %s", resp.StatusCode, b)
	}
	c := singlePool(be.addr())
	c.APIKeys = true
	url2, _ := startGateway(t, c, Deps{Router: fr, Keys: tenant.NewGate()}) // no key held
	if resp, b := post(t, testClient(t), url2+PathCompletions, `{"model":"m","prompt":"hi"}`); resp.StatusCode != 200 {
		t.Fatalf("no keys held: %d %s", resp.StatusCode, b)
	}
}

func TestKeys_RateAndTokenLimitsAnswer429WithRetryAfter(t *testing.T) {
	g, raws := keyGate(t, &tenant.Limit{TenantID: "a", TokensPerMin: 6},
		tenant.NewKey{TenantID: "a", RateLimitRPS: 1, BurstSize: 1},
		tenant.NewKey{TenantID: "a"})
	be := newFakeVLLM(t)
	fr := newFakeRouter(fixedRoute(decision(ladder.Tier2, 0, -1)))
	c := singlePool(be.addr())
	c.APIKeys = true
	url, _ := startGateway(t, c, Deps{Router: fr, Keys: g})
	cl := testClient(t)
	if resp, _ := post(t, cl, url+PathCompletions, `{"model":"m","prompt":"hi"}`, HeaderAPIKey, raws[0]); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	resp, b := post(t, cl, url+PathCompletions, `{"model":"m","prompt":"hi"}`, HeaderAPIKey, raws[0])
	if e := decodeError(t, b); resp.StatusCode != 429 || e.Error.Code != tenant.CodeKeyRate || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("second at once: %d %s Retry-After %q; want 429 rate_limit_exceeded, Retry-After 1", resp.StatusCode, b, resp.Header.Get("Retry-After"))
	}
	// The tenant's 6 tokens a minute: the fake engine's answers cost 4
	// (prompt 3, completion 1), so the first answer of the other key puts
	// the tenant at 6 − 4 − 4 < 0 and the next is refused.
	if resp, _ := post(t, cl, url+PathCompletions, `{"model":"m","prompt":"hi"}`, HeaderAPIKey, raws[1]); resp.StatusCode != 200 {
		t.Fatalf("other key: %d", resp.StatusCode)
	}
	resp, b = post(t, cl, url+PathCompletions, `{"model":"m","prompt":"hi"}`, HeaderAPIKey, raws[1])
	if e := decodeError(t, b); resp.StatusCode != 429 || e.Error.Code != tenant.CodeTokens || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("after the tokens: %d %s; want 429 token_quota_exceeded with Retry-After", resp.StatusCode, b)
	}
}

func TestKeys_EnginePrioritySetFromTheClass(t *testing.T) {
	be := newFakeVLLM(t)
	fr := newFakeRouter(fixedRoute(decision(ladder.Tier2, 0, -1)))
	c := singlePool(be.addr())
	c.EnginePriority = true
	url, _ := startGateway(t, c, Deps{Router: fr})
	resp, b := post(t, testClient(t), url+PathCompletions, `{"model":"m","priority":-50,"prompt":"hi"}`, HeaderObjective, "critical")
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	got := string(be.requests()[0].Body)
	if got != `{"model":"m","prompt":"hi","priority":-1}` {
		t.Fatalf("engine body %s; want the client's priority replaced by the class's", got)
	}
}
