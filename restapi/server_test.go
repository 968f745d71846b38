package restapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/rule"
)

func TestGetAll_EmptyIsAnEmptyList(t *testing.T) {
	ts := started(t)
	if r := ts.do(http.MethodGet, lbPath+"/all", ""); r.status != 200 || r.body != `{"lbAttr":[]}`+"\n" {
		t.Errorf("got %d %s; want 200 {\"lbAttr\":[]}", r.status, r.body)
	}
}

func TestGetAll_ShapeFollowsLoxiLB(t *testing.T) {
	ts := started(t)
	ts.mustPost(l4Fixture)
	body := ts.do(http.MethodGet, lbPath+"/all", "").body
	var raw struct {
		LbAttr []map[string]any `json:"lbAttr"`
	}
	if err := json.Unmarshal([]byte(body), &raw); err != nil {
		t.Fatal(err)
	}
	rule := raw.LbAttr[0]
	sa := rule["serviceArguments"].(map[string]any)
	for _, absent := range []string{"sel", "mode", "bgp", "monitor", "portMax", "backend_protocol", "snat"} {
		if _, ok := sa[absent]; ok {
			t.Errorf("serviceArguments.%s present; want zero scalars omitted as LoxiLB does", absent)
		}
	}
	for _, present := range []string{"externalIP", "port", "protocol", "id", "adminStateUp", "path_match_mode"} {
		if _, ok := sa[present]; !ok {
			t.Errorf("serviceArguments.%s absent; want it present", present)
		}
	}
	for _, null := range []string{"secondaryIPs", "secondaryVIPs", "allowedSources"} {
		if v, ok := rule[null]; !ok || v != nil {
			t.Errorf("%s: got %v (present %t); want null, as LoxiLB writes empty lists", null, v, ok)
		}
	}
	ep := rule["endpoints"].([]any)[0].(map[string]any)
	if ep["state"] != "inactive" || ep["counter"] != "0:0" || ep["backup"] != false {
		t.Errorf("endpoint: got %v; want state inactive, counter 0:0, backup false", ep)
	}
}

func TestGetAll_FiltersByProjectID(t *testing.T) {
	ts := started(t)
	ts.mustPost(single(t).Set("serviceArguments.projectId", "a").JSON(t))
	ts.mustPost(single(t).Set("serviceArguments.port", 3001).Set("serviceArguments.projectId", "b").JSON(t))
	r := ts.do(http.MethodGet, lbPath+"/all?projectId=b", "")
	var v AllView
	_ = json.Unmarshal([]byte(r.body), &v)
	if len(v.LbAttr) != 1 || v.LbAttr[0].ServiceArguments.ProjectID != "b" {
		t.Errorf("got %s; want only project b", r.body)
	}
}

func TestGetByKey(t *testing.T) {
	ts := started(t)
	ts.mustPost(pdExample)
	ts.mustPost(single(t).Set("serviceArguments.externalIP", "2001:db8::1").
		Set("endpoints.0.endpointIP", "2001:db8::a").Set("endpoints.1.endpointIP", "2001:db8::b").JSON(t))
	tests := []struct {
		name, path string
		wantStatus int
		wantBody   string // substring; "" means an empty body
	}{
		{"hit ignores host", "/externalipaddress/127.0.0.1/port/2020/protocol/tcp", 200, `"port":2020`},
		{"bracketed ipv6", "/externalipaddress/[2001:db8::1]/port/3000/protocol/tcp", 200, `"externalIP":"2001:db8::1"`},
		{"escaped bracketed ipv6", "/externalipaddress/%5B2001:DB8::1%5D/port/3000/protocol/tcp", 200, `"externalIP":"2001:db8::1"`},
		{"miss is 404 with an empty body", "/externalipaddress/127.0.0.1/port/2099/protocol/tcp", 404, ""},
		{"other protocol misses", "/externalipaddress/127.0.0.1/port/2020/protocol/udp", 404, ""},
		{"malformed ip is 400", "/externalipaddress/not-ip/port/2020/protocol/tcp", 400, "externalipaddress"},
		{"malformed port is 400", "/externalipaddress/127.0.0.1/port/x/protocol/tcp", 400, `port \"x\" is not an integer`},
		{"unknown protocol is 400", "/externalipaddress/127.0.0.1/port/2020/protocol/quic", 400, "protocol"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.do(http.MethodGet, lbPath+tt.path, "")
			if r.status != tt.wantStatus {
				t.Fatalf("status: got %d; want %d; body %s", r.status, tt.wantStatus, r.body)
			}
			if tt.wantBody == "" && r.body != "" || !strings.Contains(r.body, tt.wantBody) {
				t.Errorf("body: got %q; want %q", r.body, tt.wantBody)
			}
		})
	}
}

func TestGetByID(t *testing.T) {
	ts := started(t)
	ts.mustPost(single(t).Set("serviceArguments.id", "octavia-1").JSON(t))
	if r := ts.do(http.MethodGet, lbPath+"/id/octavia-1", ""); r.status != 200 || !strings.Contains(r.body, `"id":"octavia-1"`) {
		t.Errorf("hit: got %d %s", r.status, r.body)
	}
	if r := ts.do(http.MethodGet, lbPath+"/id/none", ""); r.status != 404 || r.body != "" {
		t.Errorf("miss: got %d %q; want 404 with an empty body", r.status, r.body)
	}
}

func TestDelete(t *testing.T) {
	tests := []struct {
		name       string
		create     func(t testing.TB) entry
		path       string
		wantStatus int
		wantResult string
	}{
		{"by key", single, "/externalipaddress/127.0.0.1/port/3000/protocol/tcp", 200, "Success"},
		{"by key with bracketed ipv6", func(t testing.TB) entry {
			return single(t).Set("serviceArguments.externalIP", "::1").Set("endpoints.0.endpointIP", "::1").Set("endpoints.1.endpointIP", "::2")
		}, "/externalipaddress/[::1]/port/3000/protocol/tcp", 200, "Success"},
		{"host rule by hosturl", pd, "/hosturl/127.0.0.1/externalipaddress/127.0.0.1/port/2020/protocol/tcp", 200, "Success"},
		{"hosturl any means no host", single, "/hosturl/any/externalipaddress/127.0.0.1/port/3000/protocol/tcp", 200, "Success"},
		{"host rule without hosturl misses with a hint", pd, "/externalipaddress/127.0.0.1/port/2020/protocol/tcp", 404,
			"no-rule error: no rule tcp:127.0.0.1:2020 (rule tcp:127.0.0.1:2020@127.0.0.1 exists: its host, block, portmax, path or model differ"},
		{"port range", func(t testing.TB) entry { return single(t).Set("serviceArguments.portMax", 3010) },
			"/externalipaddress/127.0.0.1/port/3000/portmax/3010/protocol/tcp", 200, "Success"},
		{"port range with hosturl", func(t testing.TB) entry {
			return single(t).Set("serviceArguments.portMax", 3010).Set("serviceArguments.host", "api.example")
		}, "/hosturl/api.example/externalipaddress/127.0.0.1/port/3000/portmax/3010/protocol/tcp", 200, "Success"},
		{"block is part of the key", func(t testing.TB) entry { return single(t).Set("serviceArguments.block", 7) },
			"/externalipaddress/127.0.0.1/port/3000/protocol/tcp?block=7", 200, "Success"},
		{"missing rule", single, "/externalipaddress/127.0.0.1/port/3999/protocol/tcp", 404, "no-rule error"},
		{"malformed block", single, "/externalipaddress/127.0.0.1/port/3000/protocol/tcp?block=-1", 400, "block"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rt := &recordingRuntime{NoDataPlane: NewNoDataPlane()}
			ts := started(t, func(c *Config) { c.Runtime = rt })
			ts.mustPost(tt.create(t).JSON(t))
			r := ts.do(http.MethodDelete, lbPath+tt.path, "")
			if r.status != tt.wantStatus || !strings.Contains(r.body, tt.wantResult) {
				t.Fatalf("got %d %s; want %d containing %q", r.status, r.body, tt.wantStatus, tt.wantResult)
			}
			wantRules := map[bool]int{true: 0, false: 1}[tt.wantStatus == 200]
			if n := len(ts.all()); n != wantRules {
				t.Errorf("rules left: got %d; want %d", n, wantRules)
			}
			if tt.wantStatus == 200 && len(rt.removedKeys()) != 1 {
				t.Errorf("runtime removals: got %v; want one", rt.removedKeys())
			}
		})
	}
}

func TestDelete_ByNameAndAll(t *testing.T) {
	ts := started(t)
	ts.mustPost(single(t).Set("serviceArguments.name", "a").JSON(t))
	ts.mustPost(single(t).Set("serviceArguments.port", 3001).Set("serviceArguments.name", "a").JSON(t))
	ts.mustPost(single(t).Set("serviceArguments.port", 3002).Set("serviceArguments.name", "b").JSON(t))
	if r := ts.do(http.MethodDelete, lbPath+"/name/nobody", ""); r.status != 200 || len(ts.all()) != 3 {
		t.Fatalf("delete by unknown name: got %d, %d rules; want 200 and nothing deleted", r.status, len(ts.all()))
	}
	if r := ts.do(http.MethodDelete, lbPath+"/name/a", ""); r.status != 200 || len(ts.all()) != 1 {
		t.Fatalf("delete by name: got %d, %d rules; want 200 and 1 left", r.status, len(ts.all()))
	}
	if r := ts.do(http.MethodDelete, lbPath+"/all", ""); r.status != 200 || len(ts.all()) != 0 {
		t.Fatalf("delete all: got %d, %d rules; want 200 and none left", r.status, len(ts.all()))
	}
}

// fakeRuntime reports configurable statuses and apply errors.
type fakeRuntime struct {
	mu       sync.Mutex
	status   map[rule.RuleKey]RuleStatus
	applyErr error
	panicky  bool
}

func (f *fakeRuntime) Apply(_ context.Context, r rule.Rule) error {
	if f.panicky {
		panic("actor exploded")
	}
	return f.applyErr
}
func (f *fakeRuntime) Remove(context.Context, rule.RuleKey) error { return nil }
func (f *fakeRuntime) Status(k rule.RuleKey) (RuleStatus, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.status[k]
	return st, ok
}

func TestOperatingStatus(t *testing.T) {
	ep := func(port uint16, active bool) EndpointStatus {
		return EndpointStatus{Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), Active: active}
	}
	monitored := func(t testing.TB) entry {
		return single(t).Set("endpoints.1.endpointIP", "127.0.0.1").Set("endpoints.1.targetPort", 8001).
			Set("serviceArguments.probetype", "tcp").Set("serviceArguments.probeport", 8000)
	}
	tests := []struct {
		name     string
		give     func(t testing.TB) entry
		st       RuleStatus
		applyErr string
		want     OperatingStatus
	}{
		{"all active", monitored, RuleStatus{Endpoints: []EndpointStatus{ep(8000, true), ep(8001, true)}}, "", OperatingOnline},
		{"some active", monitored, RuleStatus{Endpoints: []EndpointStatus{ep(8000, true), ep(8001, false)}}, "", OperatingDegraded},
		{"none active", monitored, RuleStatus{Endpoints: []EndpointStatus{ep(8000, false)}}, "", OperatingOffline},
		{"no status counts as inactive", monitored, RuleStatus{}, "", OperatingOffline},
		{"monitor off", single, RuleStatus{Endpoints: []EndpointStatus{ep(8000, true)}}, "", OperatingNoMonitor},
		{"monitor off but the data plane probes", single, RuleStatus{Monitored: true, Endpoints: []EndpointStatus{ep(8000, false)}}, "", OperatingOffline},
		{"admin down wins", func(t testing.TB) entry { return monitored(t).Set("serviceArguments.adminStateUp", false) },
			RuleStatus{Endpoints: []EndpointStatus{ep(8000, true), ep(8001, true)}}, "", OperatingOffline},
		{"listen error", monitored, RuleStatus{ListenErr: "bind: address in use", Endpoints: []EndpointStatus{ep(8000, true), ep(8001, true)}}, "", OperatingError},
		{"apply error", monitored, RuleStatus{}, "boom", OperatingError},
		{"runtime override", monitored, RuleStatus{Operating: OperatingDegraded}, "", OperatingDegraded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := DecodeEntry([]byte(tt.give(t).JSON(t)))
			if err != nil {
				t.Fatal(err)
			}
			r, err := rule.NormalizeEntry(e)
			if err != nil {
				t.Fatal(err)
			}
			if got := operatingStatus(&r, tt.st, endpointStates(&r, tt.st), tt.applyErr); got != tt.want {
				t.Errorf("got %s; want %s", got, tt.want)
			}
		})
	}
}

func TestStatusAndStats_ComeFromTheRuntime(t *testing.T) {
	rt := &fakeRuntime{status: map[rule.RuleKey]RuleStatus{}}
	ts := started(t, func(c *Config) { c.Runtime = rt })
	ts.mustPost(pdExample)
	k := rule.RuleKey{VIP: netip.MustParseAddr("127.0.0.1"), Protocol: "tcp", Port: 2020, Host: "127.0.0.1"}
	rt.mu.Lock()
	rt.status[k] = RuleStatus{
		Operating: OperatingDegraded,
		Endpoints: []EndpointStatus{
			{Addr: netip.MustParseAddrPort("127.0.0.1:8100"), Active: true, Probe: ProbeUp, Breaker: "closed", InFlight: 3, Parked: 2,
				KVCapacityBlocks: 4096, Inventory: true, InventoryBlocks: 120, Requests: 5, Bytes: 900,
				Controller: &ControllerStatus{State: CtrlActive, Weight: 50, EffectiveWeight: 75, Epoch: 9, Updated: testEpoch, Stale: true}},
		},
		Stats: RuleStats{ActiveConnections: 2, BytesIn: 10, BytesOut: 20, TotalConnections: 30},
	}
	rt.mu.Unlock()
	st := ts.do(http.MethodGet, lbPath+"/externalipaddress/127.0.0.1/port/2020/protocol/tcp/status", "").body
	want := `{"adminStateUp":true,"operatingStatus":"DEGRADED","lastUpdated":"2026-03-01T12:00:00Z","endpoints":[` +
		`{"endpointIP":"127.0.0.1","targetPort":8100,"ep_idx":0,"role":"prefill","state":"active","probe":"up","breaker":"closed",` +
		`"inFlight":3,"parked":2,"kvCapacityBlocks":4096,"inventoryBlocks":120,` +
		`"controller":{"state":"ACTIVE","weight":50,"effective_weight":75,"epoch":9,"updated":"2026-03-01T12:00:00Z","stale":true}},` +
		`{"endpointIP":"127.0.0.1","targetPort":8200,"ep_idx":1,"role":"decode","state":"inactive","detail":"no status from the data plane",` +
		`"inFlight":0,"parked":0}]}` + "\n"
	if st != want {
		t.Errorf("status:\n got %s\nwant %s", st, want)
	}
	stats := ts.do(http.MethodGet, lbPath+"/externalipaddress/127.0.0.1/port/2020/protocol/tcp/stats", "").body
	if stats != `{"activeConnections":2,"bytesIn":10,"bytesOut":20,"totalConnections":30}`+"\n" {
		t.Errorf("stats: got %s", stats)
	}
	all := ts.all()
	if all[0].Endpoints[0].State != "active" || all[0].Endpoints[0].Counter != "5:900" || all[0].Endpoints[1].State != "inactive" {
		t.Errorf("GET all endpoints: got %+v %+v", all[0].Endpoints[0], all[0].Endpoints[1])
	}
	for _, p := range []string{"/status", "/stats"} {
		if r := ts.do(http.MethodGet, lbPath+"/externalipaddress/127.0.0.1/port/2099/protocol/tcp"+p, ""); r.status != 404 || r.body != "" {
			t.Errorf("%s miss: got %d %q; want 404 with an empty body", p, r.status, r.body)
		}
	}
}

func TestNoDataPlane_ReportsEveryEndpointInactive(t *testing.T) {
	ts := started(t)
	ts.mustPost(pdExample)
	st := ts.do(http.MethodGet, lbPath+"/externalipaddress/127.0.0.1/port/2020/protocol/tcp/status", "").body
	if !strings.Contains(st, `"operatingStatus":"OFFLINE"`) || !strings.Contains(st, `"detail":"no data plane attached"`) ||
		strings.Count(st, `"detail":"no data plane"`) != 2 {
		t.Errorf("status: got %s; want OFFLINE and both endpoints inactive with detail \"no data plane\"", st)
	}
	if v := ts.do(http.MethodGet, basePath+"/version", "").body; !strings.Contains(v, `"dataPlane":"none"`) {
		t.Errorf("version: got %s; want dataPlane none", v)
	}
}

func TestApplyFailure_AcceptsTheRuleAndReportsError(t *testing.T) {
	tests := []struct {
		name string
		rt   *fakeRuntime
		want string
	}{
		{"error", &fakeRuntime{applyErr: errors.New("listen tcp 127.0.0.1:2020: bind: address already in use")}, `"applyError":"listen tcp 127.0.0.1:2020: bind: address already in use"`},
		{"panic", &fakeRuntime{panicky: true}, `"applyError":"restapi: runtime panicked: actor exploded"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := started(t, func(c *Config) { c.Runtime = tt.rt })
			ts.mustPost(pdExample)
			st := ts.do(http.MethodGet, lbPath+"/externalipaddress/127.0.0.1/port/2020/protocol/tcp/status", "").body
			if !strings.Contains(st, `"operatingStatus":"ERROR"`) || !strings.Contains(st, tt.want) {
				t.Errorf("status: got %s; want ERROR with %s", st, tt.want)
			}
		})
	}
}

func TestAuth(t *testing.T) {
	ts := started(t, func(c *Config) { c.Token = "s3cret" })
	tests := []struct {
		name, method, path, auth string
		wantStatus               int
	}{
		{"no header", "GET", lbPath + "/all", "", 401},
		{"wrong token", "GET", lbPath + "/all", "Bearer nope", 401},
		{"wrong scheme", "GET", lbPath + "/all", "Basic s3cret", 401},
		{"prefix of the token", "GET", lbPath + "/all", "Bearer s3cre", 401},
		{"right token", "GET", lbPath + "/all", "Bearer s3cret", 200},
		{"scheme is case-insensitive", "GET", lbPath + "/all", "bearer s3cret", 200},
		{"metrics are protected", "GET", "/metrics", "", 401},
		{"unknown routes do not leak", "GET", "/nope", "", 401},
		{"writes are protected", "POST", lbPath, "", 401},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ts.do(tt.method, tt.path, pdExample, "Authorization", tt.auth)
			if r.status != tt.wantStatus {
				t.Fatalf("got %d %s; want %d", r.status, r.body, tt.wantStatus)
			}
			if tt.wantStatus == 401 {
				b := r.errBody(t)
				if b.Code != 401 || b.Message != msgUnauthorized || r.header.Get("WWW-Authenticate") != `Bearer realm="llb"` {
					t.Errorf("401: got %+v, WWW-Authenticate %q", b, r.header.Get("WWW-Authenticate"))
				}
			}
		})
	}
	if n := len(ts.all2(t, "Bearer s3cret")); n != 0 {
		t.Errorf("unauthenticated POST created %d rules", n)
	}
}

func (ts *testServer) all2(t *testing.T, auth string) []rule.LoadbalanceEntry {
	r := ts.do(http.MethodGet, lbPath+"/all", "", "Authorization", auth)
	var v AllView
	if err := json.Unmarshal([]byte(r.body), &v); err != nil {
		t.Fatal(err)
	}
	return v.LbAttr
}

func TestLoadToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := dir + "/" + name
		if err := writeFile(p, content); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if tok, err := LoadToken(write("ok", "  s3cret\n")); err != nil || tok != "s3cret" {
		t.Errorf("trimmed token: got %q, %v", tok, err)
	}
	for name, content := range map[string]string{"empty": " \n", "two words": "a b\n"} {
		if _, err := LoadToken(write(name, content)); err == nil {
			t.Errorf("%s token file: got no error", name)
		}
	}
	if _, err := LoadToken(dir + "/missing"); err == nil {
		t.Error("missing token file: got no error")
	}
}

func TestBodyLimit_Is413(t *testing.T) {
	ts := started(t, func(c *Config) { c.BodyLimit = 512 })
	big := single(t).Set("serviceArguments.name", strings.Repeat("x", 600)).JSON(t)
	r := ts.post(big)
	if b := r.errBody(t); r.status != 413 || b.Code != 413 || !strings.Contains(b.Result, "request body too large") {
		t.Errorf("got %d %+v; want 413", r.status, b)
	}
	// A chunked body of unknown length is cut off at the limit too.
	req, _ := http.NewRequest(http.MethodPost, ts.url+lbPath, strings.NewReader(big))
	req.ContentLength = -1
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 413 {
		t.Errorf("chunked: got %d; want 413", res.StatusCode)
	}
}

func TestUnknownRouteAndMethod(t *testing.T) {
	ts := started(t)
	r := ts.do(http.MethodGet, basePath+"/config/nothing", "")
	if b := r.errBody(t); r.status != 404 || b.Message != msgNotFound {
		t.Errorf("unknown route: got %d %+v", r.status, b)
	}
	r = ts.do(http.MethodPut, lbPath+"/all", "")
	if b := r.errBody(t); r.status != 405 || b.Code != 405 {
		t.Errorf("wrong method: got %d %+v", r.status, b)
	}
}

func TestMetrics_ServedAtRootAndUnderNetlox(t *testing.T) {
	ts := started(t)
	ts.mustPost(pdExample)
	ts.post(pdExample) // 409
	for _, p := range []string{"/metrics", basePath + "/metrics"} {
		r := ts.do(http.MethodGet, p, "")
		if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
			t.Fatalf("%s: got %d %s", p, r.status, r.header.Get("Content-Type"))
		}
		for _, want := range []string{
			"llb_rules 1\n",
			`llb_rest_requests_total{method="POST",route="/netlox/v1/config/loadbalancer",code="409"} 1`,
			`llb_rule_changes_total{change="created"} 1`,
			"llb_state_writes_total 1\n",
		} {
			if !strings.Contains(r.body, want) {
				t.Errorf("%s: missing %q in\n%s", p, want, r.body)
			}
		}
	}
}

func TestNew_RefusesIncompleteConfig(t *testing.T) {
	_, err := New(Config{Logger: zerolog.Nop()})
	for _, want := range []string{"Metrics is required", "Runtime is required", "StateDir is required"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("New: got %v; want it to say %q", err, want)
		}
	}
	set := metrics.NewSet()
	cfg := Config{Metrics: set, Runtime: NewNoDataPlane(), StateDir: t.TempDir()}
	if _, err := New(cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg); err == nil {
		t.Error("a second Server on the same metrics set: got no error")
	}
}

func TestVersion(t *testing.T) {
	ts := newTestServer(t)
	if v := ts.do(http.MethodGet, basePath+"/version", "").body; !strings.Contains(v, `"version":"test"`) || !strings.Contains(v, `"writesAccepted":false`) {
		t.Errorf("before restore: got %s", v)
	}
	ts.restore()
	if v := ts.do(http.MethodGet, basePath+"/version", "").body; !strings.Contains(v, `"writesAccepted":true`) || !strings.Contains(v, `"restoredRules":0`) {
		t.Errorf("after restore: got %s", v)
	}
}
