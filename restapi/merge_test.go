package restapi

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/rule/ruletest"
)

func endpointAddrs(e rule.LoadbalanceEntry) []string {
	var out []string
	for i := range e.Endpoints {
		out = append(out, e.Endpoints[i].Identity())
	}
	return out
}

func TestUpsert_IdenticalRePOSTIs409(t *testing.T) {
	ts := started(t)
	ts.mustPost(pdExample)
	r := ts.post(pdExample)
	if r.status != http.StatusConflict {
		t.Fatalf("status: got %d; want 409; body %s", r.status, r.body)
	}
	b := r.errBody(t)
	if b.Code != 409 || b.Message != msgConflict || !strings.HasPrefix(b.Result, "lbrule-exists error") {
		t.Errorf("body: got %+v; want code 409, %q, result starting lbrule-exists error", b, msgConflict)
	}
}

func TestUpsert_SameNormalizedRuleIs409(t *testing.T) {
	ts := started(t)
	ts.mustPost(single(t).Set("serviceArguments.externalIP", "2001:db8::1").
		Set("endpoints.0.endpointIP", "2001:db8::a").Set("endpoints.1.endpointIP", "2001:db8::b").JSON(t))
	// Different spelling, explicit empty lists, a default made explicit,
	// unknown keys and the GET-only fields: the same normalized rule.
	again := single(t).Set("serviceArguments.externalIP", "2001:DB8:0::1").
		Set("endpoints.0.endpointIP", "2001:db8:0:0::A").Set("endpoints.1.endpointIP", "2001:db8::b").
		Set("secondaryIPs", []any{}).Set("allowedSources", []any{}).Set("serviceArguments.path_match_mode", "disabled").
		Set("serviceArguments.backend_protocol", "http1").Set("serviceArguments.whatever", 1).
		Set("endpoints.0.state", "active").Set("endpoints.0.counter", "9:9").Set("serviceArguments.id", "id-1")
	if r := ts.post(again.JSON(t)); r.status != http.StatusConflict {
		t.Fatalf("status: got %d; want 409; body %s", r.status, r.body)
	}
}

func TestUpsert_GETOutputRePOSTedIs409(t *testing.T) {
	ts := started(t)
	ts.mustPost(pdExample)
	got := ts.all()[0]
	if r := ts.post(mustJSON(t, got)); r.status != http.StatusConflict {
		t.Fatalf("re-POST of GET output: got %d; want 409; body %s", r.status, r.body)
	}
}

func TestUpsert_ChangedRuleReplacesInPlace(t *testing.T) {
	ts := started(t)
	ts.mustPost(pdExample)
	ts.mustPost(chwblExample)
	ts.clock.Advance(time.Minute)
	ts.mustPost(pd(t).Set("endpoints.0.weight", 7).Set("serviceArguments.name", "pd").JSON(t))
	rules := ts.all()
	if len(rules) != 2 {
		t.Fatalf("rules: got %d; want 2", len(rules))
	}
	sa := rules[0].ServiceArguments
	if *rules[0].Endpoints[0].Weight != 7 || sa.Name != "pd" || sa.ID != "id-1" {
		t.Errorf("replaced rule: got weight %d name %q id %q; want 7, pd, id-1 (same id, same position)", *rules[0].Endpoints[0].Weight, sa.Name, sa.ID)
	}
	st := ts.do(http.MethodGet, lbPath+"/externalipaddress/127.0.0.1/port/2020/protocol/tcp/status", "")
	if !strings.Contains(st.body, `"lastUpdated":"2026-03-01T12:01:00Z"`) {
		t.Errorf("status after replace: got %s; want lastUpdated 12:01:00", st.body)
	}
}

func TestUpsert_ReplaceKeepsStoredEndpointOrder(t *testing.T) {
	ts := started(t)
	ts.mustPost(single(t).Set("endpoints", ruletest.EndpointEntries(3)).JSON(t)) // :8000 :8001 :8002
	eps := ruletest.EndpointEntries(4)                                           // post :8002 :8003 :8000 in that order
	ts.mustPost(single(t).Set("endpoints", []any{eps[2], eps[3], eps[0]}).JSON(t))
	got := endpointAddrs(ts.all()[0])
	want := []string{"127.0.0.1:8000", "127.0.0.1:8002", "127.0.0.1:8003"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("endpoints: got %v; want %v (stayers keep their slots, newcomers appended)", got, want)
	}
}

func TestUpsert_ImmutableFieldsAre409(t *testing.T) {
	tests := []struct {
		name    string
		create  func(t testing.TB) entry
		replace func(t testing.TB) entry
		want    string
	}{
		{"kv engine type", func(t testing.TB) entry { return single(t) },
			func(t testing.TB) entry { return single(t).Set("serviceArguments.kvEngineType", "llamacpp") },
			`lbrule-exist error: cant modify rule kv engine type (stored "vllm", got "llamacpp")`},
		{"fullproxy-ness", func(t testing.TB) entry { return single(t) },
			func(t testing.TB) entry { return single(t).Set("serviceArguments.mode", 2) },
			"lbrule-exist error: cant modify rule fullproxy mode"},
		{"security", func(t testing.TB) entry { return single(t) },
			func(t testing.TB) entry { return single(t).Set("serviceArguments.security", 1) },
			"lbrule-exist error: cant modify rule security"},
		{"egress", func(t testing.TB) entry { return l4(t) },
			func(t testing.TB) entry { return l4(t).Set("serviceArguments.egress", true) },
			"lbrule-exist error: cant modify rule egress"},
		{"secondary ips", func(t testing.TB) entry {
			return l4(t).Set("serviceArguments.protocol", "sctp").Set("secondaryIPs", []any{map[string]any{"secondaryIP": "127.0.0.5"}})
		}, func(t testing.TB) entry {
			return l4(t).Set("serviceArguments.protocol", "sctp").Set("secondaryIPs", []any{map[string]any{"secondaryIP": "127.0.0.6"}})
		}, "secIP modify error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts := started(t)
			ts.mustPost(tt.create(t).JSON(t))
			r := ts.post(tt.replace(t).JSON(t))
			if r.status != http.StatusConflict {
				t.Fatalf("status: got %d; want 409; body %s", r.status, r.body)
			}
			if b := r.errBody(t); b.Code != 409 || !strings.Contains(b.Result, tt.want) {
				t.Errorf("body: got %+v; want code 409 and result containing %q", b, tt.want)
			}
		})
	}
}

func TestUpsert_AllImmutableChangesReportedTogether(t *testing.T) {
	ts := started(t)
	ts.mustPost(single(t).JSON(t))
	r := ts.post(single(t).Set("serviceArguments.kvEngineType", "llamacpp").Set("serviceArguments.security", 2).JSON(t))
	b := r.errBody(t)
	if r.status != 409 || !strings.Contains(b.Result, "kv engine type") || !strings.Contains(b.Result, "cant modify rule security") {
		t.Errorf("got %d %+v; want 409 naming both the engine and the security change", r.status, b)
	}
}

func TestUpsert_IDTakenByAnotherRuleIs409(t *testing.T) {
	ts := started(t)
	ts.mustPost(single(t).Set("serviceArguments.id", "mine").JSON(t))
	r := ts.post(single(t).Set("serviceArguments.port", 3001).Set("serviceArguments.id", "mine").JSON(t))
	if b := r.errBody(t); r.status != 409 || !strings.Contains(b.Result, `id "mine" is already used by rule tcp:127.0.0.1:3000`) {
		t.Errorf("got %d %+v; want 409 naming the rule holding the id", r.status, b)
	}
}

func TestUpsert_IDIsMintedThenKept(t *testing.T) {
	ts := started(t)
	ts.mustPost(single(t).JSON(t))
	ts.mustPost(single(t).Set("endpoints.0.weight", 9).JSON(t))
	ts.mustPost(single(t).Set("serviceArguments.port", 3001).Set("serviceArguments.id", "given").JSON(t))
	rules := ts.all()
	if rules[0].ServiceArguments.ID != "id-1" || rules[1].ServiceArguments.ID != "given" {
		t.Errorf("ids: got %q, %q; want id-1 (minted, kept on replace) and given", rules[0].ServiceArguments.ID, rules[1].ServiceArguments.ID)
	}
}

func TestUpsert_OmittedAdmissionFieldKeepsStoredValue(t *testing.T) {
	ts := started(t)
	ts.mustPost(pd(t).Set("serviceArguments.fc_mode", "enforce").Set("serviceArguments.fc_ep_max_inflight", 8).JSON(t))
	ts.mustPost(pd(t).Set("serviceArguments.fc_ep_max_inflight", 0).Set("endpoints.0.weight", 2).JSON(t))
	sa := ts.all()[0].ServiceArguments
	if sa.FCMode == nil || *sa.FCMode != "enforce" {
		t.Errorf("fc_mode: got %v; want enforce kept from the stored rule", sa.FCMode)
	}
	if sa.FCEpMaxInflight == nil || *sa.FCEpMaxInflight != 0 {
		t.Errorf("fc_ep_max_inflight: got %v; want 0 (reset to inherit)", sa.FCEpMaxInflight)
	}
}

func TestAttach_AddsNewAndUpdatesExistingEndpoints(t *testing.T) {
	ts := started(t)
	ts.mustPost(single(t).JSON(t)) // 127.0.0.1:8000, 127.0.0.2:8000
	ts.mustPost(single(t).Set("serviceArguments.oper", 1).Set("endpoints", []any{
		map[string]any{"endpointIP": "127.0.0.2", "targetPort": 8000, "weight": 5},
		map[string]any{"endpointIP": "127.0.0.3", "targetPort": 8000, "weight": 1},
	}).JSON(t))
	got := ts.all()[0]
	if a := endpointAddrs(got); strings.Join(a, ",") != "127.0.0.1:8000,127.0.0.2:8000,127.0.0.3:8000" || *got.Endpoints[1].Weight != 5 {
		t.Errorf("after attach: got %v weight[1]=%d; want three endpoints, the second updated to weight 5", a, *got.Endpoints[1].Weight)
	}
	if got.ServiceArguments.Oper != 0 {
		t.Errorf("stored oper: got %d; want 0 (oper is a verb, not stored)", got.ServiceArguments.Oper)
	}
}

func TestAttach_ToMissingRuleCreatesIt(t *testing.T) {
	ts := started(t)
	ts.mustPost(single(t).Set("serviceArguments.oper", 1).JSON(t))
	if n := len(ts.all()); n != 1 {
		t.Fatalf("rules: got %d; want 1", n)
	}
}

func TestAttach_Beyond32EndpointsIs400(t *testing.T) {
	ts := started(t)
	ts.mustPost(single(t).Set("endpoints", ruletest.EndpointEntries(32)).JSON(t))
	r := ts.post(single(t).Set("serviceArguments.oper", 1).Set("endpoints.0.targetPort", 9999).Set("endpoints", []any{
		map[string]any{"endpointIP": "127.0.0.9", "targetPort": 9999, "weight": 1}}).JSON(t))
	if b := r.errBody(t); r.status != 400 || !strings.Contains(b.Result, "endpoints-range error") {
		t.Errorf("got %d %+v; want 400 endpoints-range error", r.status, b)
	}
}

func TestDetach_RemovesEndpointsAndTheLastOneDeletesTheRule(t *testing.T) {
	ts := started(t)
	ts.mustPost(single(t).JSON(t))
	ts.mustPost(single(t).Set("serviceArguments.oper", 2).Set("endpoints", []any{
		map[string]any{"endpointIP": "127.0.0.1", "targetPort": 8000, "weight": 1}}).JSON(t))
	if a := endpointAddrs(ts.all()[0]); strings.Join(a, ",") != "127.0.0.2:8000" {
		t.Fatalf("after detach: got %v; want [127.0.0.2:8000]", a)
	}
	ts.mustPost(single(t).Set("serviceArguments.oper", 2).Set("endpoints", []any{
		map[string]any{"endpointIP": "127.0.0.2", "targetPort": 8000, "weight": 1}}).JSON(t))
	if n := len(ts.all()); n != 0 {
		t.Errorf("rules after detaching the last endpoint: got %d; want 0", n)
	}
}

func TestDetach_UnknownEndpointOrRuleIs404(t *testing.T) {
	ts := started(t)
	detach := single(t).Set("serviceArguments.oper", 2).Set("endpoints", []any{
		map[string]any{"endpointIP": "127.0.0.7", "targetPort": 8000, "weight": 1}}).JSON(t)
	if r := ts.post(detach); r.status != 404 || !strings.Contains(r.errBody(t).Result, "no-rule error") {
		t.Errorf("detach from a missing rule: got %d %s; want 404 no-rule error", r.status, r.body)
	}
	ts.mustPost(single(t).JSON(t))
	if r := ts.post(detach); r.status != 404 || !strings.Contains(r.errBody(t).Result, "has no endpoint [127.0.0.7:8000]") {
		t.Errorf("detach of an unknown endpoint: got %d %s; want 404 naming it", r.status, r.body)
	}
}

func TestDetach_LeavingPDWithoutDecodeIs400(t *testing.T) {
	ts := started(t)
	ts.mustPost(pdExample)
	r := ts.post(pd(t).Set("serviceArguments.oper", 2).Set("endpoints", []any{
		map[string]any{"endpointIP": "127.0.0.1", "targetPort": 8200, "weight": 1, "ep_role": 2}}).JSON(t))
	if b := r.errBody(t); r.status != 400 || !strings.Contains(b.Result, "pd-disagg requires at least 1 prefill") {
		t.Errorf("got %d %+v; want 400: the merged rule is validated", r.status, b)
	}
}
