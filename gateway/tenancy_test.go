package gateway

import (
	"bytes"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llbproject/llb/ladder"
)

func TestTenancy_HeadersSetClassTenantAndRouteHeader(t *testing.T) {
	tests := []struct {
		name       string
		hdr        []string
		wantClass  ladder.Class
		wantTenant string
		wantRoute  string // suffix of X-Llb-Route's tenancy part, "" when absent
	}{
		{name: "no headers", wantClass: ladder.ClassStandard},
		{name: "objective by name", hdr: []string{HeaderObjective, "critical"}, wantClass: ladder.ClassCritical, wantRoute: " class=critical"},
		{name: "objective as priority", hdr: []string{HeaderObjective, "-2"}, wantClass: ladder.ClassSheddable, wantRoute: " class=sheddable"},
		{name: "unknown objective is standard", hdr: []string{HeaderObjective, "gold-tier"}, wantClass: ladder.ClassStandard, wantRoute: " class=standard"},
		{name: "plain priority header", hdr: []string{HeaderPriority, "5"}, wantClass: ladder.ClassCritical, wantRoute: " class=critical"},
		{name: "objective wins over the plain header", hdr: []string{HeaderObjective, "sheddable", HeaderPriority, "critical"}, wantClass: ladder.ClassSheddable, wantRoute: " class=sheddable"},
		{name: "fairness id", hdr: []string{HeaderFairnessID, "team-a"}, wantClass: ladder.ClassStandard, wantTenant: "team-a", wantRoute: " class=standard tenant=team-a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be := newFakeVLLM(t)
			fr := newFakeRouter(fixedRoute(decision(ladder.Tier2, 0, -1)))
			url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
			resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"hello world!"}`, tt.hdr...)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d %s", resp.StatusCode, body)
			}
			routes, _, _ := fr.snapshot()
			rr := routes[0]
			if rr.Req.Class != tt.wantClass || rr.Tenant != tt.wantTenant {
				t.Errorf("class %v tenant %q; want %v %q", rr.Req.Class, rr.Tenant, tt.wantClass, tt.wantTenant)
			}
			if rr.PromptTokens != 3 {
				t.Errorf("prompt tokens %d; want 3 (12 bytes at 4 a token)", rr.PromptTokens)
			}
			route := resp.Header.Get(HeaderRoute)
			if tt.wantRoute == "" && strings.Contains(route, "class=") {
				t.Errorf("%s = %q; want no class", HeaderRoute, route)
			}
			if tt.wantRoute != "" && !strings.HasSuffix(route, tt.wantRoute) {
				t.Errorf("%s = %q; want suffix %q", HeaderRoute, route, tt.wantRoute)
			}
		})
	}
}

func TestTenancy_MalformedHeadersAre400(t *testing.T) {
	for _, hdr := range [][]string{
		{HeaderPriority, "urgent"},
		{HeaderFairnessID, strings.Repeat("x", 129)},
		{HeaderFairnessID, "two words"},
	} {
		be := newFakeVLLM(t)
		fr := newFakeRouter(fixedRoute(decision(ladder.Tier2, 0, -1)))
		url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
		resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"hi"}`, hdr...)
		e := decodeError(t, body)
		if resp.StatusCode != 400 || e.Error.Code != CodeInvalidField || e.Error.Param == nil || *e.Error.Param != hdr[0] {
			t.Errorf("%s: %q → %d %s; want 400 invalid_field naming the header", hdr[0], hdr[1], resp.StatusCode, body)
		}
		if routes, _, _ := fr.snapshot(); len(routes) != 0 {
			t.Errorf("%s: routed a malformed request", hdr[0])
		}
	}
}

func TestTenancy_MetricsCountTokensPerTenantAndBoundTheLabel(t *testing.T) {
	set := metrics.NewSet()
	tm := NewTenantMetrics(set, 2)
	be := newFakeVLLM(t)
	fr := newFakeRouter(fixedRoute(decision(ladder.Tier2, 0, -1)))
	url, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr, TenantMetrics: tm})
	for _, tenant := range []string{"a", "b", "c", "a"} {
		resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"hi"}`,
			HeaderFairnessID, tenant, HeaderObjective, "critical")
		if resp.StatusCode != 200 {
			t.Fatalf("status %d %s", resp.StatusCode, body)
		}
	}
	var out bytes.Buffer
	set.WritePrometheus(&out)
	text := out.String()
	for _, want := range []string{
		`llb_tenant_requests_total{tenant="a",class="critical"} 2`,
		`llb_tenant_requests_total{tenant="b",class="critical"} 1`,
		`llb_tenant_requests_total{tenant="_other",class="critical"} 1`,
		// The fake engine reports prompt_tokens 3, completion_tokens 1.
		`llb_tenant_tokens_total{tenant="a",class="critical",kind="prompt"} 6`,
		`llb_tenant_tokens_total{tenant="a",class="critical",kind="completion"} 2`,
		`llb_class_ttft_seconds_count{class="critical"} 4`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s\n%s", want, text)
		}
	}
	if strings.Contains(text, `tenant="c"`) {
		t.Errorf("the third tenant got its own label past the bound of 2")
	}
}
