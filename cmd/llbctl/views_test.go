package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llbproject/llb/restapi"
	"github.com/llbproject/llb/rule"
)

// llbctl's KV inventory and controller commands against the real restapi
// server, with a data plane stand-in that implements the optional view
// interfaces (llbd's own, with live workers, is exercised by
// cmd/llbd/views_e2e_test.go, which runs the llbctl binary too).

// viewsRuntime is a data plane stand-in: a fixed inventory page, and
// controller state kept per endpoint with the epoch rule.
type viewsRuntime struct {
	mu    sync.Mutex
	addrs map[rule.RuleKey][]netip.AddrPort
	ctrl  map[rule.RuleKey][]restapi.ControllerStatus
	page  restapi.InventoryPage
	busy  bool
}

func newViewsRuntime() *viewsRuntime {
	return &viewsRuntime{addrs: map[rule.RuleKey][]netip.AddrPort{}, ctrl: map[rule.RuleKey][]restapi.ControllerStatus{}}
}

func (v *viewsRuntime) Apply(_ context.Context, r rule.Rule) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.addrs[r.Key], v.ctrl[r.Key] = nil, nil
	for _, ep := range r.Effective.Endpoints {
		v.addrs[r.Key] = append(v.addrs[r.Key], ep.Addr)
		v.ctrl[r.Key] = append(v.ctrl[r.Key], restapi.ControllerStatus{State: restapi.CtrlNone, Weight: 100, EffectiveWeight: 100})
	}
	return nil
}

func (v *viewsRuntime) Remove(_ context.Context, k rule.RuleKey) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.addrs, k)
	delete(v.ctrl, k)
	return nil
}

func (v *viewsRuntime) Status(k rule.RuleKey) (restapi.RuleStatus, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	addrs, ok := v.addrs[k]
	if !ok {
		return restapi.RuleStatus{}, false
	}
	var st restapi.RuleStatus
	for i, a := range addrs {
		c := v.ctrl[k][i]
		st.Endpoints = append(st.Endpoints, restapi.EndpointStatus{Addr: a, Active: c.State != restapi.CtrlDisabled, Controller: &c})
	}
	return st, true
}

func (v *viewsRuntime) Inventory(rule.RuleKey, int, int, int) (restapi.InventoryPage, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.busy {
		return restapi.InventoryPage{}, restapi.ErrDataPlaneBusy
	}
	return v.page, nil
}

func (v *viewsRuntime) SetController(k rule.RuleKey, ep int, u restapi.ControllerUpdate) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	cur := &v.ctrl[k][ep]
	if cur.State != restapi.CtrlNone && u.Epoch < cur.Epoch {
		return fmt.Errorf("%w: %d < %d", restapi.ErrStaleEpoch, u.Epoch, cur.Epoch)
	}
	*cur = restapi.ControllerStatus{State: u.State, Weight: u.Weight, EffectiveWeight: u.Weight, Epoch: u.Epoch,
		Updated: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	return nil
}

func (v *viewsRuntime) Controller(k rule.RuleKey, ep int) (restapi.ControllerStatus, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.ctrl[k][ep], nil
}

const pdRuleKey = "tcp:127.0.0.1:2020@127.0.0.1"

func TestE2E_KVInventoryShowsBlocksRanksAndCapacity(t *testing.T) {
	rt := newViewsRuntime()
	seq := uint64(77)
	rt.page = restapi.InventoryPage{
		HashAlgo: "sha256_cbor", Keys: []uint64{0xfedcba9876543210, 42}, Total: 5, CapacityBlocks: 31250,
		Ranks: []restapi.InventoryRank{
			{Rank: 0, Mirror: restapi.MirrorStats{Blocks: 3, OffloadBlocks: 4, Evictions: 1, Resyncs: 2, Contract: restapi.ContractStatus{State: restapi.ContractOK},
				Ignored: []restapi.KVIgnored{{Reason: "medium", Events: 32, Blocks: 32, Cause: `medium "STORAGE" is not a tier llb mirrors`}}},
				Feed: &restapi.FeedStats{Connected: true, LastSeq: &seq, EventsPerSec: 12.5, Gaps: 1, Reconnects: 3}},
			{Rank: 1, Mirror: restapi.MirrorStats{Blocks: 2, Contract: restapi.ContractStatus{State: restapi.ContractTripped, Reason: "block_size",
				Detail: "engine block_size 32 differs from kvBlockSize 16"}}},
		},
		Prediction: &restapi.KVPrediction{Match: 3, Over: 0, Under: 6, LastPredicted: new(uint32(0)), LastActual: new(uint32(96)),
			State: restapi.PredictionMismatch, Demoted: true, Cause: "hash_seed", Detail: "llb and the engine hash blocks differently"},
	}
	hs, _ := startServer(t, func(c *restapi.Config) { c.Runtime = rt })
	mustRun(t, hs.URL, localPDFlags...)

	out := mustRun(t, hs.URL, "get", "kv", "inventory", "--service", pdRuleKey, "--ep", "0", "--limit", "2")
	for _, want := range []string{
		"service_id=" + pdRuleKey + " ep_idx=0 hash_algo=sha256_cbor total=5 shown=2\n",
		"endpoint=127.0.0.1:8100 role=prefill rule_id=",
		"kv_capacity=31250 blocks\n",
		"predictions=3/0/6 mismatch:hash_seed demoted (match/over/under) last predicted=0 cached=96\n",
		"predictions disagree with the engine: llb and the engine hash blocks differently\n",
		"| 0    | yes       | 3      | 4          | 1         | 2       | ok                   | medium=32 | 77       | 12.5     | 1    | 3          |",
		"| 1    | no feed   | 2      | 0          | 0         | 0       | tripped (block_size) | -         | -        | -        | -    | -          |",
		"rank 1 contract: engine block_size 32 differs from kvBlockSize 16",
		`rank 0 ignored medium: medium "STORAGE" is not a tier llb mirrors`,
		"| 0         | 18364758544493064720 | fedcba9876543210 |",
		"more: --offset 2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output:\n%s\nwant %q", out, want)
		}
	}
	// -o json is llbd's document, extras included.
	var v restapi.InventoryView
	if err := json.Unmarshal([]byte(mustRun(t, hs.URL, "-o", "json", "get", "kv", "inventory", "--service", pdRuleKey, "--ep", "0")), &v); err != nil {
		t.Fatal(err)
	}
	if v.ServiceID != pdRuleKey || v.LLB.Capacity.Blocks != 31250 || len(v.LLB.Ranks) != 2 {
		t.Errorf("-o json: %+v; want llbd's view with its extras", v)
	}
}

func TestE2E_KVInventoryRefusalsEchoLlbdsReason(t *testing.T) {
	tests := []struct {
		name string
		give []string
		busy bool
		want []string
	}{
		{"decode_endpoint", []string{"--service", pdRuleKey, "--ep", "1"}, false,
			[]string{"get kv inventory: llbd answered 404 Resource not found:", "endpoint 1 is a decode endpoint (ep_role 2)", "hint: check the rule key"}},
		{"key_without_host", []string{"--service", "tcp:127.0.0.1:2020", "--ep", "0"}, false,
			[]string{"no-rule error", "did you mean rule " + pdRuleKey}},
		{"data_plane_busy", []string{"--service", pdRuleKey, "--ep", "0"}, true,
			[]string{"llbd answered 503 Service unavailable: rule " + pdRuleKey + " endpoint 0: data plane busy", "hint: retry in 5 s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rt := newViewsRuntime()
			rt.busy = tt.busy
			hs, _ := startServer(t, func(c *restapi.Config) { c.Runtime = rt })
			mustRun(t, hs.URL, localPDFlags...)
			r := cli(t, hs.URL, append([]string{"get", "kv", "inventory"}, tt.give...)...)
			if r.code != exitAPI {
				t.Fatalf("exit %d; want %d\nstderr: %s", r.code, exitAPI, r.stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(r.stderr, w) {
					t.Errorf("stderr %q; want it to contain %q", r.stderr, w)
				}
			}
		})
	}
}

func TestE2E_SetAndGetController(t *testing.T) {
	rt := newViewsRuntime()
	hs, _ := startServer(t, func(c *restapi.Config) { c.Runtime = rt })
	mustRun(t, hs.URL, localPDFlags...)

	if out := mustRun(t, hs.URL, "set", "controller", "--service", pdRuleKey, "--ep", "1", "--state", "draining", "--weight", "40", "--epoch", "7"); out != "Success\n" {
		t.Fatalf("set controller: %q; want Success", out)
	}
	// A later weight-only update keeps the state and the epoch.
	mustRun(t, hs.URL, "set", "controller", "--service", pdRuleKey, "--ep", "1", "--weight", "60")
	table := mustRun(t, hs.URL, "get", "controller")
	for _, want := range []string{
		"| SERVICE                      | IDX | ENDPOINT       | ROLE    | STATE    | WEIGHT | EFFECTIVE | EPOCH | UPDATED              | STALE | DETAIL |",
		"| " + pdRuleKey + " | 0   | 127.0.0.1:8100 | prefill | NONE     | 100    | 100       | 0     | -                    | no    | -      |",
		"|                              | 1   | 127.0.0.1:8200 | decode  | DRAINING | 60     | 60        | 7     | 2026-03-01T12:00:00Z | no    | -      |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("get controller:\n%s\nwant the row\n%s", table, want)
		}
	}
	eps := mustRun(t, hs.URL, "get", "endpoints", "127.0.0.1", "2020", "tcp")
	if !strings.Contains(eps, "DRAINING w=60 e=7") {
		t.Errorf("get endpoints:\n%s\nwant the controller cell", eps)
	}

	// Stale epochs are refused with llbd's reason.
	r := cli(t, hs.URL, "set", "controller", "--service", pdRuleKey, "--ep", "1", "--state", "ACTIVE", "--epoch", "6")
	if r.code != exitAPI || !strings.Contains(r.stderr, "llbd answered 409 Resource conflict: stale controller epoch: rule "+pdRuleKey+" endpoint 1: controller epoch is stale: 6 < 7") {
		t.Errorf("stale update: exit %d, stderr %q; want 1 and the 409", r.code, r.stderr)
	}
	// --service narrows the view; -o json is llbd's document.
	var v restapi.ControllerView
	if err := json.Unmarshal([]byte(mustRun(t, hs.URL, "-o", "json", "get", "controller", "--service", pdRuleKey)), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Services) != 1 || v.Services[0].Endpoints[1].ControllerStatus == nil || v.Services[0].Endpoints[1].State != restapi.CtrlDraining {
		t.Errorf("get controller -o json: %+v; want the one rule with endpoint 1 DRAINING", v)
	}
	r = cli(t, hs.URL, "get", "controller", "--service", "nope")
	if r.code != exitAPI || !strings.Contains(r.stderr, `no-rule error: no rule has key or id "nope"`) {
		t.Errorf("unknown service: exit %d, stderr %q; want 1 and the 404", r.code, r.stderr)
	}
	r = cli(t, hs.URL, "get", "controller", "--service", " ")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--service is empty") {
		t.Errorf("empty --service: exit %d, stderr %q; want a usage error", r.code, r.stderr)
	}
}

func TestE2E_ControllerRoutesMissingWithoutADataPlane(t *testing.T) {
	hs, _ := startServer(t)
	r := cli(t, hs.URL, "get", "controller")
	if r.code != exitAPI || !strings.Contains(r.stderr, "no route GET /netlox/v1/config/ai/controller") ||
		!strings.Contains(r.stderr, "hint: this llbd does not serve the controller routes: it runs without a data plane") {
		t.Errorf("exit %d, stderr %q; want 1 with the no-route hint", r.code, r.stderr)
	}
}
