package restapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/llbproject/llb/rule"
)

const ctrlEndpointPath = controllerPath + "/endpoint"

// getCtrl returns GET /config/ai/controller decoded.
func (ts *testServer) getCtrl(query string) ControllerView {
	ts.t.Helper()
	r := ts.do(http.MethodGet, controllerPath+query, "")
	if r.status != http.StatusOK {
		ts.t.Fatalf("GET controller: %d %s", r.status, r.body)
	}
	var v ControllerView
	if err := json.Unmarshal([]byte(r.body), &v); err != nil {
		ts.t.Fatalf("GET controller: %v: %s", err, r.body)
	}
	return v
}

func TestController_UpdateIsAppliedAndShown(t *testing.T) {
	ts, _ := viewServer(t)
	r := ts.do(http.MethodPost, ctrlEndpointPath, `{"service":"`+pdKey+`","ep_idx":1,"state":"DRAINING","weight":40,"epoch":7}`)
	if r.status != 200 || r.body != `{"result":"Success"}`+"\n" {
		t.Fatalf("POST: got %d %s; want 200 Success", r.status, r.body)
	}
	body := ts.do(http.MethodGet, controllerPath, "").body
	want := `{"services":[{"service":"tcp:127.0.0.1:2020@127.0.0.1","id":"id-1","detail":"fake","endpoints":[` +
		`{"ep_idx":0,"endpoint":"127.0.0.1:8100","role":"prefill","state":"NONE","weight":100,"effective_weight":100,"epoch":0,"stale":false},` +
		`{"ep_idx":1,"endpoint":"127.0.0.1:8200","role":"decode","state":"DRAINING","weight":40,"effective_weight":40,"epoch":7,"updated":"2026-03-01T12:01:00Z","stale":false}]},` +
		`{"service":"tcp:127.0.0.1:2021@127.0.0.1","id":"id-2","detail":"fake","endpoints":[` +
		`{"ep_idx":0,"endpoint":"127.0.0.1:8000","role":"none","state":"NONE","weight":100,"effective_weight":100,"epoch":0,"stale":false},` +
		`{"ep_idx":1,"endpoint":"127.0.0.1:8000","role":"none","state":"NONE","weight":100,"effective_weight":100,"epoch":0,"stale":false}]}]}` + "\n"
	if body != want {
		t.Errorf("GET controller:\n got %s\nwant %s", body, want)
	}
	// The status view carries the same controller object per endpoint.
	st := ts.do(http.MethodGet, lbPath+"/externalipaddress/127.0.0.1/port/2020/protocol/tcp/status", "").body
	if !strings.Contains(st, `"ep_idx":1,"role":"decode","state":"active","probe":"up","inFlight":0,"parked":0,"controller":{"state":"DRAINING","weight":40`) {
		t.Errorf("status %s; want endpoint 1 with its controller state", st)
	}
}

func TestController_PartialUpdatesCompleteFromTheCurrentInstruction(t *testing.T) {
	tests := []struct {
		name  string
		first string // applied before the update under test ("" = none)
		give  string
		want  ControllerUpdate
	}{
		{"weight_only_on_a_fresh_endpoint_means_active", "", `"weight":30`, ControllerUpdate{State: CtrlActive, Weight: 30, Epoch: 0}},
		{"state_only_on_a_fresh_endpoint_is_neutral_weight", "", `"state":"DISABLED"`, ControllerUpdate{State: CtrlDisabled, Weight: 100, Epoch: 0}},
		{"state_only_keeps_the_weight", `"state":"ACTIVE","weight":25,"epoch":4`, `"state":"DRAINING"`, ControllerUpdate{State: CtrlDraining, Weight: 25, Epoch: 4}},
		{"weight_only_keeps_the_state", `"state":"DRAINING","weight":25,"epoch":4`, `"weight":60`, ControllerUpdate{State: CtrlDraining, Weight: 60, Epoch: 4}},
		{"epoch_given_wins", `"state":"ACTIVE","weight":25,"epoch":4`, `"weight":60,"epoch":9`, ControllerUpdate{State: CtrlActive, Weight: 60, Epoch: 9}},
		{"after_release_state_and_weight_restart_epoch_stays", `"state":"NONE","epoch":4`, `"weight":70`, ControllerUpdate{State: CtrlActive, Weight: 70, Epoch: 4}},
		{"release", `"state":"DISABLED","weight":5,"epoch":2`, `"state":"NONE"`, ControllerUpdate{State: CtrlNone, Weight: 5, Epoch: 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts, rt := viewServer(t)
			post := func(fields string) {
				t.Helper()
				r := ts.do(http.MethodPost, ctrlEndpointPath, `{"service":"id-1","ep_idx":0,`+fields+`}`)
				if r.status != 200 {
					t.Fatalf("POST %s: %d %s", fields, r.status, r.body)
				}
			}
			if tt.first != "" {
				post(tt.first)
			}
			post(tt.give)
			_, sets := rt.calls()
			if got := sets[len(sets)-1]; got != tt.want {
				t.Errorf("applied %+v; want %+v", got, tt.want)
			}
		})
	}
}

func TestController_RefusesBadBodiesNamingTheField(t *testing.T) {
	tests := []struct {
		name       string
		give       string
		wantStatus int
		wantCode   int
		wantFields []string
		wantResult string
	}{
		{"empty_body", ``, 400, 400, nil, "request body is empty"},
		{"not_json", `{"service":`, 400, 400, nil, "malformed JSON"},
		{"not_an_object", `[1]`, 400, 400, nil, "body must be a JSON object"},
		{"trailing_data", `{"service":"id-1","ep_idx":0,"weight":1} {}`, 400, 400, nil, "unexpected data after the top-level object"},
		{"missing_service_and_ep_idx", `{"weight":1}`, 422, rule.CodeRequired, []string{"service", "ep_idx"}, "service in body is required; ep_idx in body is required"},
		{"empty_service", `{"service":" ","ep_idx":0,"weight":1}`, 422, rule.CodeRequired, []string{"service"}, "service in body is required: the rule key"},
		{"service_not_a_string", `{"service":3,"ep_idx":0,"weight":1}`, 422, rule.CodeInvalidType, []string{"service"}, "service in body must be of type string, got number 3"},
		{"ep_idx_fraction", `{"service":"id-1","ep_idx":0.5,"weight":1}`, 422, rule.CodeInvalidType, []string{"ep_idx"}, "ep_idx in body must be an integer within int64, got 0.5"},
		{"ep_idx_negative", `{"service":"id-1","ep_idx":-1,"weight":1}`, 422, rule.CodeMin, []string{"ep_idx"}, "ep_idx in body should be greater than or equal to 0, got -1"},
		{"state_unknown", `{"service":"id-1","ep_idx":0,"state":"PAUSED"}`, 422, rule.CodeEnum, []string{"state"}, `state in body should be one of [ACTIVE DRAINING DISABLED NONE], got "PAUSED"`},
		{"state_lower_case", `{"service":"id-1","ep_idx":0,"state":"active"}`, 422, rule.CodeEnum, []string{"state"}, `got "active"`},
		{"state_null", `{"service":"id-1","ep_idx":0,"state":null}`, 422, rule.CodeInvalidType, []string{"state"}, "state in body must be of type string, got null"},
		{"weight_too_big", `{"service":"id-1","ep_idx":0,"weight":101}`, 422, rule.CodeMax, []string{"weight"}, "weight in body should be less than or equal to 100, got 101"},
		{"weight_negative", `{"service":"id-1","ep_idx":0,"weight":-1}`, 422, rule.CodeMin, []string{"weight"}, "weight in body should be greater than or equal to 0, got -1"},
		{"weight_string", `{"service":"id-1","ep_idx":0,"weight":"50"}`, 422, rule.CodeInvalidType, []string{"weight"}, `weight in body must be of type integer, got string "50"`},
		{"epoch_negative", `{"service":"id-1","ep_idx":0,"weight":1,"epoch":-3}`, 422, rule.CodeMin, []string{"epoch"}, "epoch in body should be greater than or equal to 0, got -3"},
		{"epoch_beyond_uint64", `{"service":"id-1","ep_idx":0,"weight":1,"epoch":18446744073709551616}`, 422, rule.CodeMax, []string{"epoch"}, "epoch in body should be less than or equal to 18446744073709551615"},
		{"every_problem_at_once", `{"service":1,"state":"x","weight":900}`, 422, rule.CodeInvalidType, []string{"service", "ep_idx", "state", "weight"}, "service in body must be of type string"},
		{"unknown_key", `{"service":"id-1","ep_idx":0,"wieght":50}`, 400, 400, []string{"wieght", "state"}, "wieght: unknown key; the body takes service, ep_idx, state, weight, epoch"},
		{"same_key_twice_by_case", `{"service":"id-1","ep_idx":0,"weight":1,"Weight":2}`, 400, 400, []string{"weight"}, "weight: given twice"},
		{"nothing_to_set", `{"service":"id-1","ep_idx":0,"epoch":3}`, 400, 400, []string{"state"}, "state: the update sets nothing: give state, weight or both"},
		{"unknown_rule", `{"service":"tcp:127.0.0.9:80","ep_idx":0,"weight":1}`, 404, 404, nil, `no-rule error: no rule has key or id "tcp:127.0.0.9:80"`},
		{"unknown_endpoint", `{"service":"id-1","ep_idx":2,"weight":1}`, 404, 404, nil, "ep-host-notfound error: rule tcp:127.0.0.1:2020@127.0.0.1 has 2 endpoints (ep_idx 0–1), not ep_idx 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts, rt := viewServer(t)
			r := ts.do(http.MethodPost, ctrlEndpointPath, tt.give)
			if r.status != tt.wantStatus {
				t.Fatalf("got %d %s; want %d", r.status, r.body, tt.wantStatus)
			}
			b := r.errBody(t)
			if b.Code != tt.wantCode || !strings.Contains(b.Result, tt.wantResult) {
				t.Errorf("error %+v; want code %d and result containing %q", b, tt.wantCode, tt.wantResult)
			}
			if tt.wantFields != nil && !slices.Equal(b.Fields, tt.wantFields) {
				t.Errorf("fields %v; want %v", b.Fields, tt.wantFields)
			}
			if _, sets := rt.calls(); len(sets) != 0 {
				t.Errorf("the runtime applied %+v; want nothing", sets)
			}
		})
	}
}

func TestController_KeysMatchCaseInsensitively(t *testing.T) {
	ts, rt := viewServer(t)
	if r := ts.do(http.MethodPost, ctrlEndpointPath, `{"Service":"id-1","EP_IDX":1,"State":"ACTIVE","WEIGHT":10,"Epoch":3}`); r.status != 200 {
		t.Fatalf("got %d %s; want 200", r.status, r.body)
	}
	if _, sets := rt.calls(); len(sets) != 1 || sets[0] != (ControllerUpdate{State: CtrlActive, Weight: 10, Epoch: 3}) {
		t.Errorf("applied %+v; want ACTIVE 10 epoch 3", sets)
	}
}

func TestController_RuntimeRefusalsKeepTheirClass(t *testing.T) {
	tests := []struct {
		name       string
		setErr     error
		first      string
		give       string
		wantStatus int
		wantResult string
	}{
		{"stale_epoch", nil, `"state":"ACTIVE","weight":50,"epoch":7`, `"weight":10,"epoch":6`, 409,
			"rule tcp:127.0.0.1:2020@127.0.0.1 endpoint 0: controller epoch is stale: 6 < 7"},
		{"not_running", ErrNotRunning, "", `"state":"ACTIVE","weight":50,"epoch":1`, 404, "rule-not-running error"},
		{"busy", ErrDataPlaneBusy, "", `"state":"ACTIVE","weight":50,"epoch":1`, 503, "data plane busy"},
		{"unclassified_fault", errors.New("router exploded"), "", `"state":"ACTIVE","weight":50,"epoch":1`, 500, "router exploded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts, rt := viewServer(t)
			if tt.first != "" {
				if r := ts.do(http.MethodPost, ctrlEndpointPath, `{"service":"id-1","ep_idx":0,`+tt.first+`}`); r.status != 200 {
					t.Fatalf("first POST: %d %s", r.status, r.body)
				}
			}
			rt.setErr = tt.setErr
			r := ts.do(http.MethodPost, ctrlEndpointPath, `{"service":"id-1","ep_idx":0,`+tt.give+`}`)
			if b := r.errBody(t); r.status != tt.wantStatus || b.Code != tt.wantStatus || !strings.Contains(b.Result, tt.wantResult) {
				t.Errorf("got %d %+v; want %d with result containing %q", r.status, b, tt.wantStatus, tt.wantResult)
			}
		})
	}
}

func TestController_PartialUpdateNeedsTheCurrentInstruction(t *testing.T) {
	tests := []struct {
		name       string
		ctrlErr    error
		wantStatus int
		wantResult string
	}{
		{"busy", ErrDataPlaneBusy, 503, "rule tcp:127.0.0.1:2020@127.0.0.1 endpoint 0: reading the instruction in force, which an update without state, weight and epoch is completed from: data plane busy"},
		{"not_running", fmt.Errorf("%w: mode 0 is an L4 mode", ErrNotRunning), 404, "rule-not-running error: the data plane is not running this rule: mode 0 is an L4 mode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts, rt := viewServer(t)
			rt.mu.Lock()
			rt.ctrlErr = tt.ctrlErr
			rt.mu.Unlock()
			r := ts.do(http.MethodPost, ctrlEndpointPath, `{"service":"id-1","ep_idx":0,"weight":10}`)
			if b := r.errBody(t); r.status != tt.wantStatus || !strings.Contains(b.Result, tt.wantResult) {
				t.Errorf("partial update: got %d %+v; want %d with %q", r.status, b, tt.wantStatus, tt.wantResult)
			}
			if _, sets := rt.calls(); len(sets) != 0 {
				t.Errorf("applied %+v; want nothing", sets)
			}
			// A complete update needs no current instruction.
			if r := ts.do(http.MethodPost, ctrlEndpointPath, `{"service":"id-1","ep_idx":0,"state":"ACTIVE","weight":10,"epoch":1}`); r.status != 200 {
				t.Errorf("complete update: got %d %s; want 200", r.status, r.body)
			}
		})
	}
}

func TestController_EndpointWithoutReportedStateIsExplained(t *testing.T) {
	ts, rt := viewServer(t)
	rt.mu.Lock()
	rt.hideCtrl = true
	rt.mu.Unlock()
	v := ts.getCtrl("")
	if ep := v.Services[0].Endpoints[0]; ep.ControllerStatus != nil || !strings.HasPrefix(ep.Detail, "no controller state from the data plane") {
		t.Errorf("endpoint without a reported state: %+v; want no status and a detail", ep)
	}
}

func TestController_GetNarrowsToOneService(t *testing.T) {
	ts, _ := viewServer(t)
	tests := []struct {
		query      string
		wantStatus int
		want       []string
	}{
		{"", 200, []string{pdKey, "tcp:127.0.0.1:2021@127.0.0.1"}},
		{"?service=id-2", 200, []string{"tcp:127.0.0.1:2021@127.0.0.1"}},
		{"?service=" + pdKey, 200, []string{pdKey}},
		{"?service=nope", 404, nil},
		{"?service=", 404, nil},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			r := ts.do(http.MethodGet, controllerPath+tt.query, "")
			if r.status != tt.wantStatus {
				t.Fatalf("got %d %s; want %d", r.status, r.body, tt.wantStatus)
			}
			if tt.wantStatus != 200 {
				return
			}
			var v ControllerView
			if err := json.Unmarshal([]byte(r.body), &v); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, s := range v.Services {
				got = append(got, s.Service)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("services %v; want %v", got, tt.want)
			}
		})
	}
}

func TestController_EmptyListIsAnEmptyArray(t *testing.T) {
	rt := newViewRuntime()
	ts := started(t, func(c *Config) { c.Runtime = rt })
	if body := ts.do(http.MethodGet, controllerPath, "").body; body != `{"services":[]}`+"\n" {
		t.Errorf("got %s; want {\"services\":[]}", body)
	}
}

func TestController_WritesWaitForTheRestore(t *testing.T) {
	rt := newViewRuntime()
	ts := newTestServer(t, func(c *Config) { c.Runtime = rt })
	r := ts.do(http.MethodPost, ctrlEndpointPath, `{"service":"id-1","ep_idx":0,"weight":1}`)
	if r.status != 503 || r.header.Get("Retry-After") == "" {
		t.Errorf("before restore: got %d %s; want 503 with Retry-After", r.status, r.body)
	}
}

func TestController_RoutesExistOnlyForAControllerRuntime(t *testing.T) {
	ts := started(t)
	ts.mustPost(pdExample)
	for _, tt := range []struct{ method, path string }{
		{http.MethodPost, ctrlEndpointPath},
		{http.MethodGet, controllerPath},
	} {
		r := ts.do(tt.method, tt.path, `{"service":"id-1","ep_idx":0,"weight":1}`)
		if b := r.errBody(t); r.status != 404 || !strings.HasPrefix(b.Result, "no route") {
			t.Errorf("%s %s on NoDataPlane: got %d %+v; want 404 no route", tt.method, tt.path, r.status, b)
		}
	}
}
