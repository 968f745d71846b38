package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/llbproject/llb/restapi"
	"github.com/llbproject/llb/rule"
)

// The seed examples with 127.0.0.1 for every address, as flags.
var (
	localPDFlags = []string{"create", "lb", "127.0.0.1", "--tcp=2020", "--host=127.0.0.1", "--name=pd",
		"--pd", "--pd-cache-aware", "--kv-exact-mode=1", "--kv-zmq-port=5557", "--kv-hash-algo=sha256_cbor",
		"--kv-block-size=16", "--endpoints=127.0.0.1:8100:1:prefill:5600,127.0.0.1:8200:1:decode:5600"}
	localCHWBLFlags = []string{"create", "lb", "127.0.0.1", "--tcp=2021:8000", "--select=chwbl", "--host=127.0.0.1",
		"--name=chat", "--endpoints=127.0.0.1:1,127.0.0.1:1"}
)

func TestE2E_CreateListShowDelete(t *testing.T) {
	hs, _ := startServer(t)
	if out := mustRun(t, hs.URL, localPDFlags...); out != "Success\n" {
		t.Fatalf("create P/D: stdout %q; want Success", out)
	}
	mustRun(t, hs.URL, localCHWBLFlags...)

	// The table lists both rules, one row per endpoint.
	table := mustRun(t, hs.URL, "get", "lb")
	for _, want := range []string{
		"| 127.0.0.1 | 2020 | tcp   | pd   | 127.0.0.1 | rr    | fullproxy | pd,trie,kv1 | 127.0.0.1:8100 | prefill | 1      | inactive | 0:0     |",
		"|           |      |       |      |           |       |           |             | 127.0.0.1:8200 | decode  | 1      | inactive | 0:0     |",
		"| 127.0.0.1 | 2021 | tcp   | chat | 127.0.0.1 | chwbl | fullproxy | -           | 127.0.0.1:8000 | none    | 1      | inactive | 0:0     |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("get lb:\n%s\nwant the row\n%s", table, want)
		}
	}

	// JSON is llbd's own answer, and each rule is what the flags said.
	var all restapi.AllView
	if err := json.Unmarshal([]byte(mustRun(t, hs.URL, "get", "lb", "-o", "json")), &all); err != nil {
		t.Fatalf("get lb -o json: %v", err)
	}
	if len(all.LbAttr) != 2 {
		t.Fatalf("get lb -o json: %d rules; want 2", len(all.LbAttr))
	}
	pd := all.LbAttr[0].ServiceArguments
	if !pd.PDDisaggMode || !pd.PDCacheAwareMode || pd.KVExactMode != 1 || pd.KVZmqPort != 5557 || pd.Mode != 4 {
		t.Errorf("stored P/D rule %+v; want pd, trie, kvExactMode 1, kvZmqPort 5557, mode 4", pd)
	}
	if got := all.LbAttr[0].Endpoints[1].EpRole; got != rule.RoleDecode {
		t.Errorf("second P/D endpoint role %d; want decode", got)
	}

	// --name filters the list.
	if out := mustRun(t, hs.URL, "get", "lb", "--name", "chat"); strings.Contains(out, "prefill") || !strings.Contains(out, "chwbl") {
		t.Errorf("get lb --name chat:\n%s\nwant only the chwbl rule", out)
	}

	// One rule: its key, arguments and endpoints.
	one := mustRun(t, hs.URL, "get", "lb", "127.0.0.1", "2020", "tcp")
	for _, want := range []string{"rule key: tcp:127.0.0.1:2020@127.0.0.1\nengine: vllm\n", "| kvHashAlgo ", "sha256_cbor", "| 1   | 127.0.0.1:8200 | decode  | 1      | 5600 | inactive |"} {
		if !strings.Contains(one, want) {
			t.Errorf("get lb <key>:\n%s\nwant %q", one, want)
		}
	}
	status := mustRun(t, hs.URL, "get", "lb", "127.0.0.1", "2020", "tcp", "--status")
	for _, want := range []string{"| up    | OFFLINE |", "no data plane attached", "| 127.0.0.1:8100 | inactive | -       | 0         | -         | no data plane |"} {
		if !strings.Contains(status, want) {
			t.Errorf("get lb --status:\n%s\nwant %q", status, want)
		}
	}
	if stats := mustRun(t, hs.URL, "get", "lb", "127.0.0.1", "2020", "tcp", "--stats"); !strings.Contains(stats, "| 0                  | 0                 | 0        | 0         |") {
		t.Errorf("get lb --stats:\n%s\nwant four zero counters", stats)
	}

	// Delete by key (with the host the rule was created with), by name, all.
	if out := mustRun(t, hs.URL, "delete", "lb", "127.0.0.1", "--tcp=2020", "--host=127.0.0.1"); out != "Success\n" {
		t.Errorf("delete by key: %q; want Success", out)
	}
	if out := mustRun(t, hs.URL, "get", "lb"); strings.Contains(out, "2020") {
		t.Errorf("after delete, get lb still lists port 2020:\n%s", out)
	}
	mustRun(t, hs.URL, "delete", "lb", "--name", "chat")
	mustRun(t, hs.URL, localPDFlags...)
	mustRun(t, hs.URL, "delete", "lb", "--all")
	if out := mustRun(t, hs.URL, "get", "lb", "-o", "json"); compactJSON(t, out) != `{"lbAttr":[]}` {
		t.Errorf("after delete --all: %s; want no rules", out)
	}
}

func TestE2E_CreateFromFile(t *testing.T) {
	tests := []struct {
		name  string
		args  func(path string) []string
		stdin string
	}{
		{"file", func(p string) []string { return []string{"create", "lb", "-f", p} }, ""},
		{"stdin", func(string) []string { return []string{"create", "lb", "-f", "-"} }, seedCHWBLBody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs, _ := startServer(t)
			path := writeTemp(t, "rule.json", seedCHWBLBody)
			r := runCLI(t, nil, tt.stdin, append([]string{"--server", hs.URL}, tt.args(path)...)...)
			if r.code != exitOK {
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
			got := mustRun(t, hs.URL, "get", "lb", "10.10.10.254", "2021", "tcp", "-o", "json")
			e := decodeEntry(t, got)
			if e.ServiceArguments.Sel != rule.SelCHWBL || len(e.Endpoints) != 2 {
				t.Errorf("stored %s; want the CHWBL seed rule", compactJSON(t, got))
			}
		})
	}
}

func TestE2E_ServerErrorsAreEchoedWithExit1(t *testing.T) {
	tests := []struct {
		name string
		give []string
		want []string
	}{
		{"identical_repost_is_a_conflict", localPDFlags,
			[]string{"create lb: llbd answered 409 Resource conflict", "lbrule-exists error"}},
		{"semantic_problem", []string{"create", "lb", "127.0.0.1", "--tcp=2030:8000", "--kv-exact-mode=1", "--endpoints=127.0.0.1:1"},
			[]string{"llbd answered 400 Malformed arguments for API call", "kv-exact zmq mode requires pd_disagg_mode=true"}},
		{"several_problems_one_per_line", []string{"create", "lb", "127.0.0.1", "--tcp=2030:8000", "--kv-exact-mode=1", "--pd-cache-threshold=200", "--endpoints=127.0.0.1:1"},
			[]string{"llbd answered 422 Unprocessable Entity:\n  - serviceArguments.pd_cache_threshold in body should be less than or equal to 100, got 200\n  - "}},
		{"invalid_json_file", []string{"create", "lb", "-f", "BADFILE"},
			[]string{"llbd answered 400", "malformed JSON"}},
		{"delete_without_the_host_key", []string{"delete", "lb", "127.0.0.1", "--tcp=2020"},
			[]string{"delete lb: llbd answered 404 Resource not found: no-rule error", "hint: give the rule's key as it was created"}},
		{"get_unknown_rule", []string{"get", "lb", "127.0.0.1", "2099", "tcp"},
			[]string{"get lb: llbd answered 404: no rule on 127.0.0.1 port 2099/tcp"}},
		{"endpoints_of_unknown_rule", []string{"get", "endpoints", "127.0.0.1", "2099", "tcp"},
			[]string{"get endpoints: llbd answered 404: no rule on 127.0.0.1 port 2099/tcp"}},
		{"status_of_unknown_rule", []string{"get", "lb", "127.0.0.1", "2099", "tcp", "--status"},
			[]string{"llbd answered 404: no rule on"}},
		{"delete_unknown_name", []string{"delete", "lb", "--name", "nope"},
			[]string{`no rule is named "nope"; nothing was deleted`}},
		{"kv_inventory_route_missing", []string{"get", "kv", "inventory", "--service", "tcp:127.0.0.1:2020@127.0.0.1", "--ep", "0"},
			[]string{"get kv inventory: llbd answered 404 Resource not found: no route GET /netlox/v1/config/ai/kv/inventory",
				"hint: this llbd does not serve the KV inventory view"}},
		{"controller_route_missing", []string{"set", "controller", "--service", "tcp:127.0.0.1:2020@127.0.0.1", "--ep", "0", "--state", "DRAINING"},
			[]string{"set controller: llbd answered 404 Resource not found: no route POST /netlox/v1/config/ai/controller/endpoint",
				"hint: this llbd does not serve the controller route"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs, _ := startServer(t)
			mustRun(t, hs.URL, localPDFlags...)
			give := append([]string(nil), tt.give...)
			for i, a := range give {
				if a == "BADFILE" {
					give[i] = writeTemp(t, "bad.json", `{"serviceArguments": {"port": 20`)
				}
			}
			r := cli(t, hs.URL, give...)
			if r.code != exitAPI {
				t.Fatalf("exit %d; want %d\nstdout: %s\nstderr: %s", r.code, exitAPI, r.stdout, r.stderr)
			}
			if !strings.HasPrefix(r.stderr, "llbctl: ") {
				t.Errorf("stderr %q; want it to start with llbctl: ", r.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q; want it to contain %q", r.stderr, w)
				}
			}
		})
	}
}

func TestE2E_DeleteByNameIgnoreNotFound(t *testing.T) {
	hs, _ := startServer(t)
	if out := mustRun(t, hs.URL, "delete", "lb", "--name", "nope", "--ignore-not-found"); out != "no rule is named \"nope\"\n" {
		t.Errorf("stdout %q; want the not-found note", out)
	}
}

func TestE2E_JSONOutputOfWritesIsLlbdsAnswer(t *testing.T) {
	hs, _ := startServer(t)
	out := mustRun(t, hs.URL, append([]string{"-o", "json"}, localCHWBLFlags...)...)
	if compactJSON(t, out) != `{"result":"Success"}` {
		t.Errorf("create -o json: %q; want {\"result\":\"Success\"}", out)
	}
}

// statusRuntime is a data plane stand-in that reports fixed per-endpoint
// state, to show that llbctl displays what the REST API exposes.
type statusRuntime struct {
	mu    sync.Mutex
	addrs map[rule.RuleKey][]netip.AddrPort
}

func (s *statusRuntime) Apply(_ context.Context, r rule.Rule) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ep := range r.Effective.Endpoints {
		s.addrs[r.Key] = append(s.addrs[r.Key], ep.Addr)
	}
	return nil
}

func (s *statusRuntime) Remove(context.Context, rule.RuleKey) error {
	return errors.New("statusRuntime: remove is not used by these tests")
}

func (s *statusRuntime) Status(k rule.RuleKey) (restapi.RuleStatus, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	addrs, ok := s.addrs[k]
	if !ok {
		return restapi.RuleStatus{}, false
	}
	st := restapi.RuleStatus{Detail: "serving", Stats: restapi.RuleStats{ActiveConnections: 3, TotalConnections: 40, BytesIn: 1000, BytesOut: 9000}}
	for i, a := range addrs {
		es := restapi.EndpointStatus{Addr: a, Active: i == 0, Requests: 17, Bytes: 4096, Probe: restapi.ProbeUp}
		if i == 0 {
			es.Breaker, es.InFlight, es.Parked, es.Inventory, es.InventoryBlocks, es.KVCapacityBlocks = "closed", 3, 2, true, 1234, 8192
			es.Controller = &restapi.ControllerStatus{State: restapi.CtrlDraining, Weight: 40, EffectiveWeight: 70, Epoch: 7, Stale: true}
			es.OffloadBlocks = 40
			es.KVIgnored = []restapi.KVIgnored{{Reason: "medium", Events: 32, Blocks: 32, Cause: `medium "STORAGE" is not a tier llb mirrors`}}
			es.KVPrediction = &restapi.KVPrediction{Match: 12, Over: 1, State: restapi.PredictionMismatch, Demoted: true,
				Cause: "stale_mirror", Detail: "the engine reported no cached tokens"}
		} else {
			es.Breaker, es.Detail = "open", "breaker open"
			es.Controller = &restapi.ControllerStatus{State: restapi.CtrlNone, Weight: 100, EffectiveWeight: 100}
		}
		st.Endpoints = append(st.Endpoints, es)
	}
	return st, true
}

func TestE2E_EndpointsShowHealthBreakerLoadAndInventory(t *testing.T) {
	hs, _ := startServer(t, func(c *restapi.Config) { c.Runtime = &statusRuntime{addrs: map[rule.RuleKey][]netip.AddrPort{}} })
	mustRun(t, hs.URL, localPDFlags...)

	table := mustRun(t, hs.URL, "get", "endpoints", "127.0.0.1", "2020", "tcp")
	for _, want := range []string{
		"| 0   | 127.0.0.1:8100 | prefill | 1      | 5600 | active   | up    | closed  | 3         | 2      | 1234+40cpu | 8192        | medium=32  | 12/1/0 mismatch:stale_mirror demoted | DRAINING w=40 (eff 70) e=7 stale | 17:4096 | -            |",
		"| 1   | 127.0.0.1:8200 | decode  | 1      | 5600 | inactive | up    | open    | 0         | 0      | -          | -           | -          | -                                    | -                                | 17:4096 | breaker open |",
		`endpoint 0 kv ignored medium: medium "STORAGE" is not a tier llb mirrors` + "\n",
		"endpoint 0 kv predictions disagree with the engine (stale_mirror): the engine reported no cached tokens\n",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("get endpoints:\n%s\nwant the row\n%s", table, want)
		}
	}

	var views []endpointView
	if err := json.Unmarshal([]byte(mustRun(t, hs.URL, "get", "endpoints", "127.0.0.1", "2020", "tcp", "-o", "json")), &views); err != nil {
		t.Fatal(err)
	}
	blocks := 1234
	want := endpointView{Idx: 0, EndpointIP: "127.0.0.1", TargetPort: 8100, Role: "prefill", Weight: 1, NixlPort: 5600,
		State: "active", Probe: "up", Breaker: "closed", InFlight: 3, Parked: 2, KVCapacityBlocks: 8192, InventoryBlocks: &blocks,
		OffloadBlocks: 40, KVIgnored: []restapi.KVIgnored{{Reason: "medium", Events: 32, Blocks: 32, Cause: `medium "STORAGE" is not a tier llb mirrors`}},
		KVPrediction: &restapi.KVPrediction{Match: 12, Over: 1, State: restapi.PredictionMismatch, Demoted: true,
			Cause: "stale_mirror", Detail: "the engine reported no cached tokens"},
		Controller: &restapi.ControllerStatus{State: restapi.CtrlDraining, Weight: 40, EffectiveWeight: 70, Epoch: 7, Stale: true},
		Counter:    "17:4096"}
	if len(views) != 2 || !reflect.DeepEqual(views[0], want) {
		t.Errorf("get endpoints -o json: %+v; want first %+v", views, want)
	}
	if views[1].InventoryBlocks != nil {
		t.Errorf("decode endpoint inventoryBlocks %v; want absent (its KV events are not mirrored)", *views[1].InventoryBlocks)
	}

	if stats := mustRun(t, hs.URL, "get", "lb", "127.0.0.1", "2020", "tcp", "--stats"); !strings.Contains(stats, "| 3                  | 40                | 1000     | 9000      |") {
		t.Errorf("get lb --stats:\n%s\nwant the runtime's counters", stats)
	}
}

func TestE2E_Version(t *testing.T) {
	hs, _ := startServer(t)
	tests := []struct {
		name string
		give []string
		want string
	}{
		{"with_server", []string{"version"}, "llbctl " + buildVersion() + "\nllbd test-1.2.3 (data plane: none; writes accepted: yes)\n"},
		{"client_only", []string{"version", "--client"}, "llbctl " + buildVersion() + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustRun(t, hs.URL, tt.give...); got != tt.want {
				t.Errorf("got %q; want %q", got, tt.want)
			}
		})
	}
	var v struct {
		Client string              `json:"client"`
		Server restapi.VersionView `json:"server"`
	}
	if err := json.Unmarshal([]byte(mustRun(t, hs.URL, "version", "-o", "json")), &v); err != nil || v.Server.Version != "test-1.2.3" {
		t.Errorf("version -o json: %+v, %v; want the server's version", v, err)
	}
}

// A rule's engine shows in the table's LLM column (when not vLLM) and in
// the one-rule view.
func TestE2E_GetLBShowsTheEngine(t *testing.T) {
	hs, _ := startServer(t)
	mustRun(t, hs.URL, "create", "lb", "127.0.0.1", "--tcp=2030", "--name=trt", "--pd", "--kv-exact-mode=1",
		"--kv-engine-type=trtllm", "--kv-block-size=32", "--endpoints=127.0.0.1:8100:1:prefill,127.0.0.1:8200:1:decode")
	if table := mustRun(t, hs.URL, "get", "lb"); !strings.Contains(table, "| trtllm,pd,kv1 |") {
		t.Errorf("get lb:\n%s\nwant the LLM cell trtllm,pd,kv1", table)
	}
	if one := mustRun(t, hs.URL, "get", "lb", "127.0.0.1", "2030", "tcp"); !strings.Contains(one, "\nengine: trtllm\n") {
		t.Errorf("get lb <key>:\n%s\nwant engine: trtllm", one)
	}
}
