package gateway

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

// table builds a RuleTable over named fake handlers.
func table(routes map[string]rule.Route, order ...string) (*RuleTable, map[*Handler]string) {
	names := map[*Handler]string{}
	var hs []*Handler
	for _, n := range order {
		h := &Handler{rule: &rule.Compiled{Route: routes[n]}}
		names[h] = n
		hs = append(hs, h)
	}
	return NewRuleTable(hs), names
}

func TestRuleTable_PicksAsLoxiLBsFindEndpointLPM(t *testing.T) {
	const l = "" // the listener's own (no host)
	routes := map[string]rule.Route{
		"exact":      {Host: "inference.example", PathPrefix: "/v1/exact", PathMode: "exact", Model: "model-a"},
		"root-a":     {Host: "inference.example", PathPrefix: "/", PathMode: "prefix", Model: "model-a"},
		"host-model": {Host: "inference.example", Model: "qwen"},
		"wild-v1":    {Host: "inference.example", PathPrefix: "/v1", PathMode: "prefix"},
		"lst-root":   {Host: l, PathPrefix: "/", PathMode: "prefix", Model: "model-b"},
		"lst-v1":     {Host: l, PathPrefix: "/v1", PathMode: "prefix", Model: "model-b"},
		"lst-chat":   {Host: l, PathPrefix: "/v1/chat/", PathMode: "prefix", Model: "model-b"},
		"lst-wild":   {Host: l, PathPrefix: "/v1/chat", PathMode: "prefix"},
	}
	tb, names := table(routes, "exact", "root-a", "host-model", "wild-v1", "lst-root", "lst-v1", "lst-chat", "lst-wild")
	tests := []struct {
		host, path, model, want string
	}{
		{"inference.example", "/v1/exact", "model-a", "exact"},
		{"inference.example", "/v1/exact?probe=1", "model-a", "exact"},
		{"inference.example", "/v1/exact/child", "model-a", "root-a"},
		{"inference.example", "/v1/completions", "qwen", "host-model"},
		{"inference.example", "/v1/completions", "unknown", "wild-v1"},
		{"inference.example", "/v10", "unknown", "none"},
		{"floating.example", "/v1/chat/completions", "model-b", "lst-chat"},
		{"floating.example", "/v1/other", "model-b", "lst-v1"},
		{"floating.example", "/other", "model-b", "lst-root"},
		{"floating.example", "/v1/chat", "wrong-model", "lst-wild"},
		{"floating.example", "/outside", "", "none"},
		{"inference.example", "/v1/x", "MODEL-A", "wild-v1"}, // case-sensitive
		{"inference.example", "/other", "model-b", "lst-root"},
	}
	for _, tt := range tests {
		got := "none"
		if h := tb.Pick(tt.host, tt.path, tt.model); h != nil {
			got = names[h]
		}
		if got != tt.want {
			t.Errorf("Pick(%q, %q, %q) = %s; want %s", tt.host, tt.path, tt.model, got, tt.want)
		}
	}
}

func TestRuleTable_LoxiLBsModelRoutingScenario(t *testing.T) {
	// cicd/ai-model-routing, all three rules on one port.
	routes := map[string]rule.Route{
		"llama":   {Host: "10.10.10.254", PathPrefix: "/", PathMode: "prefix", Model: "llama-70b"},
		"mistral": {Host: "10.10.10.254", PathPrefix: "/", PathMode: "prefix", Model: "mistral-7b"},
		"wild":    {Host: "10.10.10.254", PathPrefix: "/", PathMode: "prefix"},
	}
	tb, names := table(routes, "llama", "mistral", "wild")
	for _, tt := range []struct{ model, want string }{
		{"llama-70b", "llama"}, {"mistral-7b", "mistral"}, {"", "wild"}, {"unknown-xyz", "wild"}, {"MISTRAL-7B", "wild"}, {"llama/3.1", "wild"},
	} {
		if got := names[tb.Pick("10.10.10.254", "/v1/chat/completions", tt.model)]; got != tt.want {
			t.Errorf("model %q → %s; want %s", tt.model, got, tt.want)
		}
	}
	// Without the wildcard an unknown model finds no rule (503 model_unavailable).
	tb, _ = table(routes, "llama", "mistral")
	if h := tb.Pick("10.10.10.254", "/", "unknown-xyz"); h != nil {
		t.Errorf("unknown model without a wildcard picked a rule")
	}
	// A lone rule restricting nothing takes everything; one naming a model
	// does not.
	tb, _ = table(map[string]rule.Route{"plain": {Host: "h"}}, "plain")
	if tb.Pick("other", "/x", "m") == nil {
		t.Errorf("a lone plain rule refused a request")
	}
	tb, _ = table(routes, "llama")
	if tb.Pick("10.10.10.254", "/", "") != nil {
		t.Errorf("a lone model rule took a request without a model")
	}
}

// namedBackend answers every request with its name.
func namedBackend(t *testing.T, name string) netip.AddrPort {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"server":"`+name+`"}`)
	}))
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(srv.Listener.Addr().String())
}

func TestListener_SharedByRulesPicksByXModelOrBodyOnBothFrontEnds(t *testing.T) {
	var hs []*Handler
	for _, r := range []struct{ name, model string }{{"llama", "llama-70b"}, {"mistral", "mistral-7b"}, {"wild", ""}} {
		c := singlePool(namedBackend(t, r.name))
		c.Route = rule.Route{PathPrefix: "/", PathMode: "prefix", Model: r.model}
		h, err := NewHandler(c, Options{}, Deps{Router: newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
	}
	l := NewListener(hs[0])
	l.SetTable(NewRuleTable(hs))
	if err := l.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	url := "http://" + l.Addr().String()
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	h2 := &http.Transport{Protocols: &protos}
	t.Cleanup(h2.CloseIdleConnections)
	for _, c := range []*http.Client{testClient(t), {Transport: h2}} {
		for _, tt := range []struct{ xmodel, body, want string }{
			{"llama-70b", `{"model":"x","prompt":"p"}`, "llama"},
			{"", `{"model":"mistral-7b","prompt":"p"}`, "mistral"},
			{"llama-70b", `{"model":"mistral-7b","prompt":"p"}`, "llama"}, // X-Model overrides the body
			{"", `{"prompt":"p"}`, "wild"},
			{"", `{"model":"MISTRAL-7B","prompt":"p"}`, "wild"},
		} {
			var hdr []string
			if tt.xmodel != "" {
				hdr = []string{HeaderModel, tt.xmodel}
			}
			resp, b := post(t, c, url+PathCompletions, tt.body, hdr...)
			if resp.StatusCode != 200 || !strings.Contains(string(b), `"server":"`+tt.want+`"`) {
				t.Errorf("proto %d X-Model %q body %s: %d %s; want %s", resp.ProtoMajor, tt.xmodel, tt.body, resp.StatusCode, b, tt.want)
			}
		}
	}
	// Without the wildcard: 503 model_unavailable.
	l.SetTable(NewRuleTable(hs[:2]))
	resp, b := post(t, testClient(t), url+PathCompletions, `{"model":"gpt","prompt":"p"}`)
	if resp.StatusCode != 503 || decodeError(t, b).Error.Code != CodeModelUnavailable {
		t.Errorf("no rule: %d %s; want 503 model_unavailable", resp.StatusCode, b)
	}
}
