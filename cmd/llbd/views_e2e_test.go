package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/restapi"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/fleet"
)

// End-to-end tests of the data plane's REST views — the KV inventory, the
// external controller and the per-endpoint status — and of llbctl's commands
// over them: the real llbd and llbctl binaries in front of simulated vLLM
// workers (real HTTP, real ZMQ KV events).

// freePort returns a loopback TCP port that was free a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// getJSON GETs path and decodes a 200 answer into v.
func (d *daemon) getJSON(path string, v any) {
	d.t.Helper()
	code, body := d.do(http.MethodGet, path, "")
	if code != http.StatusOK {
		d.t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		d.t.Fatalf("GET %s: %v: %s", path, err, body)
	}
}

func inventoryPath(service string, ep int, extra ...string) string {
	q := url.Values{"service_id": {service}, "ep_idx": {strconv.Itoa(ep)}}
	for i := 0; i+1 < len(extra); i += 2 {
		q.Set(extra[i], extra[i+1])
	}
	return "/netlox/v1/config/ai/kv/inventory?" + q.Encode()
}

// eventually polls cond every 25 ms until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened; last state: %s", what, state)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// buildCtl builds the llbctl binary into a temp dir.
func buildCtl(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "llbctl")
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	if out, err := exec.Command(goTool, "build", "-o", bin, "../llbctl").CombinedOutput(); err != nil {
		t.Fatalf("go build llbctl: %v\n%s", err, out)
	}
	return bin
}

// ctl runs llbctl against d and returns its exit code, stdout and stderr.
func (d *daemon) ctl(bin string, args ...string) (int, string, string) {
	d.t.Helper()
	cmd := exec.Command(bin, append([]string{"--server", "http://" + d.addr}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		d.t.Fatalf("llbctl: %v", err)
	}
	return code, out.String(), errb.String()
}

func TestE2E_ViewsShowTheLiveInventoryControllerAndEndpointState(t *testing.T) {
	ctlBin := buildCtl(t)
	tmpl := workerCfg("", 0, engine.KVNone, 0, 0.01)
	tmpl.KVEvents = true
	f, err := fleet.Start(fleet.Config{Prefill: 2, Decode: 1, BaseIP: "127.0.0.41", Template: &tmpl})
	if err != nil {
		t.Fatalf("fleet: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.Stop(ctx)
	})
	d := startDataPlane(t, "LOXILB_KV_COLDSTART_SEED_N=0")
	port := freePort(t)
	d.post(ruleJSON(t, f, "127.0.0.1", port, map[string]any{"kvExactMode": 1, "kvWarmupSec": 1, "name": "views"}))
	d.waitActive(port)
	key := fmt.Sprintf("tcp:127.0.0.1:%d", port)
	statusPath := fmt.Sprintf("/netlox/v1/config/loadbalancer/externalipaddress/127.0.0.1/port/%d/protocol/tcp/status", port)
	vip := fmt.Sprintf("http://127.0.0.1:%d", port)
	workers := f.Workers()

	// The prefill engines' events are mirrored only once llb's feeds are
	// connected (a PUB drops what it sends before that).
	for ep := 0; ep < 2; ep++ {
		eventually(t, fmt.Sprintf("endpoint %d's KV feed connected", ep), func() (bool, string) {
			var v restapi.InventoryView
			d.getJSON(inventoryPath(key, ep), &v)
			return len(v.LLB.Ranks) > 0 && v.LLB.Ranks[0].Feed != nil && v.LLB.Ranks[0].Feed.Connected, fmt.Sprintf("%+v", v.LLB.Ranks)
		})
	}

	// One long prompt lands on a prefill endpoint, whose engine caches its
	// blocks and publishes them over ZMQ.
	long := strings.Repeat("a shared preamble about inventories and controllers ", 30)
	prompt := func(i int) string {
		return fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":2}`, long+strconv.Itoa(i))
	}
	res, body := complete(t, vip, prompt(0))
	if res.StatusCode != 200 {
		t.Fatalf("first request: %d %s", res.StatusCode, body)
	}
	_, owner, _ := routeOf(t, res.Header)
	if owner != 0 && owner != 1 {
		t.Fatalf("prefill endpoint %d; want 0 or 1", owner)
	}
	ownerStats := workers[owner].Stats()

	t.Run("inventory mirrors the owner's cache", func(t *testing.T) {
		var v restapi.InventoryView
		eventually(t, "inventory equals the engine's cached blocks and the capacity is known", func() (bool, string) {
			d.getJSON(inventoryPath(key, owner), &v)
			want := workers[owner].Stats().CachedBlocks
			return v.Total > 0 && v.Total == want && v.LLB.Capacity.Known, fmt.Sprintf("total %d, engine %d, capacity %+v", v.Total, want, v.LLB.Capacity)
		})
		if v.ServiceID != key || v.EpIdx != owner || v.HashAlgo != f.Rule().KVHashAlgo {
			t.Errorf("head %q %d %q; want %q %d %q", v.ServiceID, v.EpIdx, v.HashAlgo, key, owner, f.Rule().KVHashAlgo)
		}
		if v.LLB.Capacity.Blocks != int64(ownerStats.NumBlocks) {
			t.Errorf("capacity %d; want the engine's num_gpu_blocks %d", v.LLB.Capacity.Blocks, ownerStats.NumBlocks)
		}
		if v.LLB.Endpoint != workers[owner].Addr() || v.LLB.Role != "prefill" {
			t.Errorf("endpoint %s %s; want %s prefill", v.LLB.Endpoint, v.LLB.Role, workers[owner].Addr())
		}
		if len(v.LLB.Ranks) != 1 || v.LLB.Ranks[0].Feed == nil || !v.LLB.Ranks[0].Feed.Connected ||
			v.LLB.Ranks[0].Feed.LastSeq == nil || v.LLB.Ranks[0].Mirror.Contract.State != restapi.ContractOK ||
			v.LLB.Ranks[0].Mirror.EngineBlocks != v.Total {
			t.Errorf("ranks %+v; want one connected feed with a last seq and an ok contract holding every block", v.LLB.Ranks)
		}

		// Pages are disjoint, numbered, and together are the whole listing.
		var all restapi.InventoryView
		d.getJSON(inventoryPath(key, owner, "limit", "10000"), &all)
		if len(all.Blocks) != all.Total || all.LLB.NextOffset != nil {
			t.Fatalf("full listing: %d blocks of %d, next %v", len(all.Blocks), all.Total, all.LLB.NextOffset)
		}
		seen := make(map[uint64]bool, len(all.Blocks))
		for i, b := range all.Blocks {
			if b.BlockIdx != i || seen[b.HashUint64] {
				t.Fatalf("block %d: %+v (duplicate %t); want block_idx %d and distinct hashes", i, b, seen[b.HashUint64], i)
			}
			seen[b.HashUint64] = true
		}
		var p1, p2 restapi.InventoryView
		d.getJSON(inventoryPath(key, owner, "limit", "3"), &p1)
		d.getJSON(inventoryPath(key, owner, "limit", "3", "offset", "3"), &p2)
		if len(p1.Blocks) != 3 || p1.LLB.NextOffset == nil || *p1.LLB.NextOffset != 3 || len(p2.Blocks) == 0 || p2.Blocks[0].BlockIdx != 3 {
			t.Fatalf("pages %+v / %+v; want 3 blocks, next_offset 3, then blocks from index 3", p1.Blocks, p2.Blocks)
		}
		for _, b := range append(p1.Blocks, p2.Blocks...) {
			if all.Blocks[b.BlockIdx] != b {
				t.Errorf("paged block %+v; the full listing has %+v there", b, all.Blocks[b.BlockIdx])
			}
		}

		// The rule id names the same rule.
		var id string
		for _, r := range d.rules() {
			if sa := r["serviceArguments"].(map[string]any); sa["name"] == "views" {
				id, _ = sa["id"].(string)
			}
		}
		var byID restapi.InventoryView
		d.getJSON(inventoryPath(id, owner), &byID)
		if id == "" || byID.ServiceID != key || byID.Total != v.Total {
			t.Errorf("by id %q: %s %d; want %s %d", id, byID.ServiceID, byID.Total, key, v.Total)
		}
	})

	t.Run("inventory refusals say why", func(t *testing.T) {
		tests := []struct {
			path       string
			wantStatus int
			want       string
		}{
			{inventoryPath(key, 2), 404, "endpoint 2 is a decode endpoint (ep_role 2)"},
			{inventoryPath(key, 7), 404, "has 3 endpoints (ep_idx 0–2), not ep_idx 7"},
			{inventoryPath("tcp:127.0.0.1:1", 0), 404, `no-rule error: no rule has key or id "tcp:127.0.0.1:1"`},
			{inventoryPath(key, 0, "limit", "0"), 400, "limit: 0 is outside 1–10000"},
			{"/netlox/v1/config/ai/kv/inventory?ep_idx=0", 400, "service_id: query parameter is required"},
		}
		for _, tt := range tests {
			code, body := d.do(http.MethodGet, tt.path, "")
			var eb restapi.ErrorBody
			if err := json.Unmarshal([]byte(body), &eb); err != nil || code != tt.wantStatus || eb.Code != tt.wantStatus || !strings.Contains(eb.Result, tt.want) {
				t.Errorf("GET %s: %d %s; want %d with %q", tt.path, code, body, tt.wantStatus, tt.want)
			}
		}
	})

	t.Run("status shows the richer endpoint state", func(t *testing.T) {
		var st restapi.StatusView
		var raw struct {
			Endpoints []map[string]any `json:"endpoints"`
		}
		eventually(t, "status reports the owner's capacity and inventory", func() (bool, string) {
			d.getJSON(statusPath, &st)
			_, b := d.do(http.MethodGet, statusPath, "")
			_ = json.Unmarshal([]byte(b), &raw)
			if len(st.Endpoints) != 3 {
				return false, b
			}
			e := st.Endpoints[owner]
			return e.KVCapacityBlocks > 0 && e.InventoryBlocks != nil && *e.InventoryBlocks > 0, b
		})
		for i, e := range st.Endpoints {
			wantRole := "prefill"
			if i == 2 {
				wantRole = "decode"
			}
			if e.EpIdx != i || e.Role != wantRole || e.State != "active" || e.Probe != restapi.ProbeUp || e.Breaker != "closed" ||
				e.Controller == nil || e.Controller.State != restapi.CtrlNone || e.Controller.EffectiveWeight != 100 {
				t.Errorf("endpoint %d: %+v (controller %+v); want ep_idx %d, %s, active, probe up, breaker closed, controller NONE at 100",
					i, e, e.Controller, i, wantRole)
			}
			if _, ok := raw.Endpoints[i]["inFlight"]; !ok {
				t.Errorf("endpoint %d: inFlight absent; want it always sent", i)
			}
		}
		if e := st.Endpoints[owner]; e.KVCapacityBlocks != int64(ownerStats.NumBlocks) {
			t.Errorf("owner capacity %d; want %d", e.KVCapacityBlocks, ownerStats.NumBlocks)
		}
		if st.Endpoints[2].InventoryBlocks != nil {
			t.Errorf("decode endpoint inventoryBlocks %d; want absent", *st.Endpoints[2].InventoryBlocks)
		}
	})

	ctrlPost := func(body string) (int, string) {
		t.Helper()
		return d.do(http.MethodPost, "/netlox/v1/config/ai/controller/endpoint", body)
	}
	ctrlOf := func(ep int) restapi.ControllerEndpointView {
		t.Helper()
		var v restapi.ControllerView
		d.getJSON("/netlox/v1/config/ai/controller?service="+url.QueryEscape(key), &v)
		if len(v.Services) != 1 || len(v.Services[0].Endpoints) != 3 {
			t.Fatalf("controller view %+v; want one service with 3 endpoints", v)
		}
		return v.Services[0].Endpoints[ep]
	}
	other := 1 - owner

	t.Run("controller DISABLED takes the owner out of routing", func(t *testing.T) {
		if code, body := ctrlPost(fmt.Sprintf(`{"service":%q,"ep_idx":%d,"state":"DISABLED","weight":100,"epoch":5}`, key, owner)); code != 200 {
			t.Fatalf("POST DISABLED: %d %s", code, body)
		}
		c := ctrlOf(owner)
		if c.ControllerStatus == nil || c.State != restapi.CtrlDisabled || c.Epoch != 5 || c.Updated.IsZero() || c.Stale {
			t.Fatalf("controller view %+v; want DISABLED epoch 5, fresh", c.ControllerStatus)
		}
		var st restapi.StatusView
		d.getJSON(statusPath, &st)
		if e := st.Endpoints[owner]; e.State != "inactive" || e.Detail != "disabled by controller" || e.Controller.State != restapi.CtrlDisabled {
			t.Errorf("status of the disabled owner: %+v; want inactive, disabled by controller", e)
		}
		for i := 1; i <= 4; i++ {
			res, body := complete(t, vip, prompt(i))
			if res.StatusCode != 200 {
				t.Fatalf("request %d: %d %s", i, res.StatusCode, body)
			}
			if _, p, _ := routeOf(t, res.Header); p != other {
				t.Fatalf("request %d went to prefill %d (%s); want %d while %d is DISABLED", i, p, res.Header.Get("X-Llb-Route"), other, owner)
			}
		}
	})

	t.Run("controller epochs, partial updates and refusals", func(t *testing.T) {
		tests := []struct {
			name       string
			body       string
			wantStatus int
			want       string // substring of the answer
		}{
			{"stale epoch", fmt.Sprintf(`{"service":%q,"ep_idx":%d,"state":"ACTIVE","weight":10,"epoch":4}`, key, owner), 409, "controller epoch is stale"},
			{"weight only keeps state and epoch", fmt.Sprintf(`{"service":%q,"ep_idx":%d,"weight":60}`, key, owner), 200, "Success"},
			{"bad weight", fmt.Sprintf(`{"service":%q,"ep_idx":%d,"weight":101}`, key, owner), 422, "weight in body should be less than or equal to 100"},
			{"unknown endpoint", fmt.Sprintf(`{"service":%q,"ep_idx":9,"weight":50}`, key), 404, "not ep_idx 9"},
			{"unknown rule", `{"service":"nope","ep_idx":0,"weight":50}`, 404, "no-rule error"},
		}
		for _, tt := range tests {
			code, body := ctrlPost(tt.body)
			if code != tt.wantStatus || !strings.Contains(body, tt.want) {
				t.Errorf("%s: %d %s; want %d with %q", tt.name, code, body, tt.wantStatus, tt.want)
			}
		}
		if c := ctrlOf(owner); c.ControllerStatus == nil || c.State != restapi.CtrlDisabled || c.Weight != 60 || c.Epoch != 5 {
			t.Errorf("after the weight-only update: %+v; want DISABLED, weight 60, epoch 5", c.ControllerStatus)
		}
	})

	t.Run("llbctl over the real routes", func(t *testing.T) {
		code, out, errOut := d.ctl(ctlBin, "get", "endpoints", "127.0.0.1", strconv.Itoa(port), "tcp")
		if code != 0 || !strings.Contains(out, "DISABLED w=60 e=5") || !strings.Contains(out, "disabled by controller") || !strings.Contains(out, "| decode ") {
			t.Errorf("get endpoints: exit %d\n%s%s\nwant the disabled owner and the decode endpoint", code, out, errOut)
		}
		code, out, errOut = d.ctl(ctlBin, "set", "controller", "--service", key, "--ep", strconv.Itoa(owner), "--state", "ACTIVE", "--epoch", "6")
		if code != 0 || out != "Success\n" {
			t.Errorf("set controller: exit %d %q %s", code, out, errOut)
		}
		code, out, errOut = d.ctl(ctlBin, "get", "controller", "--service", key)
		if code != 0 || !strings.Contains(out, fmt.Sprintf("| %d   | %s | prefill | ACTIVE | 60     | 60        | 6     |", owner, workers[owner].Addr())) {
			t.Errorf("get controller: exit %d\n%s%s\nwant the owner ACTIVE, weight 60, epoch 6", code, out, errOut)
		}
		code, _, errOut = d.ctl(ctlBin, "set", "controller", "--service", key, "--ep", strconv.Itoa(owner), "--weight", "5", "--epoch", "2")
		if code != 1 || !strings.Contains(errOut, "llbd answered 409") || !strings.Contains(errOut, "controller epoch is stale") {
			t.Errorf("stale set controller: exit %d %s; want 1 and the 409 echoed", code, errOut)
		}
		code, out, errOut = d.ctl(ctlBin, "get", "kv", "inventory", "--service", key, "--ep", strconv.Itoa(owner), "--limit", "2")
		if code != 0 || !strings.Contains(out, "service_id="+key) || !strings.Contains(out, "role=prefill") ||
			!strings.Contains(out, "| 0    | yes       |") || !strings.Contains(out, "more: --offset 2") {
			t.Errorf("get kv inventory: exit %d\n%s%s\nwant the header, a connected rank and a next page", code, out, errOut)
		}
		code, _, errOut = d.ctl(ctlBin, "get", "kv", "inventory", "--service", key, "--ep", "2")
		if code != 1 || !strings.Contains(errOut, "decode endpoint") {
			t.Errorf("get kv inventory of the decode endpoint: exit %d %s; want 1 and why", code, errOut)
		}
	})

	t.Run("release returns the owner to the ladder", func(t *testing.T) {
		if code, body := ctrlPost(fmt.Sprintf(`{"service":%q,"ep_idx":%d,"state":"NONE"}`, key, owner)); code != 200 {
			t.Fatalf("POST NONE: %d %s", code, body)
		}
		if c := ctrlOf(owner); c.ControllerStatus == nil || c.State != restapi.CtrlNone || c.EffectiveWeight != 100 || !c.Updated.IsZero() || c.Epoch != 6 {
			t.Errorf("after release: %+v; want NONE at 100, never updated, epoch 6 kept", c.ControllerStatus)
		}
		// Epochs only move forward, a release included (a NONE once wiped
		// the epoch, and an older instruction was applied after it).
		for _, step := range []struct {
			body string
			want int
		}{
			{`"state":"ACTIVE","weight":50,"epoch":10`, 200},
			{`"state":"ACTIVE","weight":50,"epoch":5`, 409},
			{`"state":"NONE","epoch":20`, 200},
			{`"state":"DISABLED","weight":100,"epoch":15`, 409},
		} {
			if code, body := ctrlPost(fmt.Sprintf(`{"service":%q,"ep_idx":%d,%s}`, key, owner, step.body)); code != step.want {
				t.Errorf("POST %s: %d %s; want %d", step.body, code, body, step.want)
			}
		}
		if c := ctrlOf(owner); c.ControllerStatus == nil || c.State != restapi.CtrlNone || c.Epoch != 20 {
			t.Errorf("after the stale DISABLED: %+v; want NONE with epoch 20", c.ControllerStatus)
		}
		eventually(t, "the owner routes the shared prefix by tier 1.5 again", func() (bool, string) {
			res, body := complete(t, vip, prompt(99))
			if res.StatusCode != 200 {
				return false, body
			}
			tier, p, _ := routeOf(t, res.Header)
			return p == owner && tier == "1.5", res.Header.Get("X-Llb-Route")
		})
	})
}
