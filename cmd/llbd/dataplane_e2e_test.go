package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/worker"
)

// End-to-end tests of the data plane: the real llbd binary in front of
// simulated vLLM workers (real HTTP, real ZMQ KV events).

// workerCfg is a simulated worker on 127.0.0.1:port whose latency model
// runs at scale × an H100's; kvPort 0 turns KV events off.
func workerCfg(name string, port int, role engine.KVRole, kvPort int, scale float64) worker.Config {
	c := worker.DefaultConfig()
	c.Name, c.HTTPPort = name, port
	c.KVEvents, c.KVPort = kvPort != 0, kvPort
	c.Engine.KVRole = role
	c.Engine.Latency.TimeScale = scale
	return c
}

// ruleJSON is a mode:4 rule on vip:port over a fleet's endpoints.
func ruleJSON(t *testing.T, f *fleet.Fleet, vip string, port int, extra map[string]any) string {
	t.Helper()
	frag := f.Rule()
	sa := map[string]any{
		"externalIP": vip, "port": port, "protocol": "tcp", "mode": 4,
		"kvBlockSize": frag.KVBlockSize, "kvHashAlgo": frag.KVHashAlgo,
	}
	if frag.KVZmqPort != 0 {
		sa["kvZmqPort"] = frag.KVZmqPort
	}
	if frag.KVNoneHashSeed != nil {
		sa["kvNoneHashSeed"] = *frag.KVNoneHashSeed
	}
	if frag.PDDisaggMode {
		sa["pd_disagg_mode"] = true
	}
	if frag.KVEngineType != "" {
		sa["kvEngineType"] = frag.KVEngineType
	}
	if frag.KVDpRankCount != 0 {
		sa["kvDpRankCount"] = frag.KVDpRankCount
	}
	if frag.PDBootstrapPort != 0 {
		sa["pdBootstrapPort"] = frag.PDBootstrapPort
	}
	for k, v := range extra {
		sa[k] = v
	}
	b, err := json.Marshal(map[string]any{"serviceArguments": sa, "endpoints": frag.Endpoints})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func startWorker(t *testing.T, cfg worker.Config) *worker.Worker {
	t.Helper()
	w, err := worker.Start(cfg)
	if err != nil {
		t.Fatalf("worker %s: %v", cfg.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	return w
}

// startDataPlane starts llbd with its data plane and the given routing env.
func startDataPlane(t *testing.T, env ...string) *daemon {
	t.Helper()
	bin := buildDaemon(t)
	args := []string{"--listen", "127.0.0.1:0", "--state-dir", t.TempDir(), "--log-format", "json", "--log-level", "debug"}
	return startDaemonEnv(t, bin, env, args...)
}

// post creates a rule and fails the test on anything but 200.
func (d *daemon) post(body string) {
	d.t.Helper()
	if code, resp := d.do(http.MethodPost, "/netlox/v1/config/loadbalancer", body); code != 200 {
		d.t.Fatalf("POST rule: %d %s", code, resp)
	}
}

// waitActive waits until every endpoint of the rule on port reports active.
func (d *daemon) waitActive(port int) {
	d.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		all := true
		found := false
		for _, r := range d.rules() {
			sa := r["serviceArguments"].(map[string]any)
			if int(sa["port"].(float64)) != port {
				continue
			}
			found = true
			for _, ep := range r["endpoints"].([]any) {
				if ep.(map[string]any)["state"] != "active" {
					all = false
				}
			}
		}
		if found && all {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	d.t.Fatalf("rule on port %d never became active; rules: %v\nlog:\n%s", port, d.rules(), d.log.text())
}

var routeRE = regexp.MustCompile(`tier=(\S+).* prefill=(-?\d+) decode=(-?\d+)`)

// routeOf parses X-Llb-Route: tier, prefill, decode.
func routeOf(t *testing.T, h http.Header) (tier string, prefill, decode int) {
	t.Helper()
	v := h.Get("X-Llb-Route")
	m := routeRE.FindStringSubmatch(v)
	if m == nil {
		t.Fatalf("X-Llb-Route %q does not parse", v)
	}
	p, _ := strconv.Atoi(m[2])
	dd, _ := strconv.Atoi(m[3])
	return m[1], p, dd
}

func complete(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	return post(t, url+"/v1/completions", body)
}

// post sends a JSON body and returns the response with its body read.
func post(t *testing.T, url, body string) (*http.Response, string) {
	t.Helper()
	res, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func TestE2E_PDExampleRoutesThroughPrefillAndDecode(t *testing.T) {
	prefill := startWorker(t, workerCfg("prefill", 8100, engine.KVProducer, 5557, 0.01))
	decode := startWorker(t, workerCfg("decode", 8200, engine.KVConsumer, 0, 0.01))
	d := startDataPlane(t)
	d.post(curlPD)
	d.waitActive(2020)

	const vip = "http://127.0.0.1:2020"
	res, body := complete(t, vip, `{"model":"sim-model","prompt":"The quick brown fox jumps over the lazy dog","max_tokens":8}`)
	if res.StatusCode != 200 {
		t.Fatalf("non-stream: %d %s\nlog:\n%s", res.StatusCode, body, d.log.text())
	}
	if _, p, dc := routeOf(t, res.Header); p != 0 || dc != 1 {
		t.Fatalf("route %q; want prefill 0 decode 1", res.Header.Get("X-Llb-Route"))
	}
	var out struct {
		Choices []struct{ Text string } `json:"choices"`
		Usage   struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil || len(out.Choices) != 1 || out.Usage.CompletionTokens != 8 {
		t.Fatalf("non-stream body %s (%v); want one choice of 8 tokens", body, err)
	}

	res, body = complete(t, vip, `{"model":"sim-model","prompt":"Stream me a story about routers","max_tokens":6,"stream":true}`)
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %q %s", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	if n := strings.Count(body, "data: {"); n != 6 || !strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]") {
		t.Fatalf("stream body has %d data events (want 6) and ends %q", n, body[max(0, len(body)-40):])
	}
	// The prefill worker returned kv_transfer_params twice and the decode
	// worker served both requests from the pulled blocks: it received them.
	ps, ds := prefill.Stats(), decode.Stats()
	if ps.RemoteDecodeLegs != 2 || ds.RemotePrefillLegs != 2 || ds.RemoteParamsIgnored != 0 {
		t.Fatalf("prefill legs %d, decode legs from pulled KV %d (ignored %d); want 2, 2, 0",
			ps.RemoteDecodeLegs, ds.RemotePrefillLegs, ds.RemoteParamsIgnored)
	}
}

func TestE2E_CHWBLExampleKeepsAPrefixOnOneEndpointUntilItsBound(t *testing.T) {
	// Slow enough (5% of real time) for concurrent requests to overlap.
	startWorker(t, workerCfg("pool", 8000, engine.KVNone, 0, 0.05))
	d := startDataPlane(t)
	d.post(curlCHWBL)
	d.waitActive(2021)
	const vip = "http://127.0.0.1:2021"
	prompt := `{"model":"sim-model","prompt":"You are a helpful assistant. Answer briefly: %d","max_tokens":4}`
	home := -1
	for i := 0; i < 6; i++ {
		res, body := complete(t, vip, fmt.Sprintf(prompt, i))
		if res.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, res.StatusCode, body)
		}
		_, ep, _ := routeOf(t, res.Header)
		if home < 0 {
			home = ep
		}
		if ep != home {
			t.Fatalf("sequential request %d went to endpoint %d; want %d (same prefix, no load)", i, ep, home)
		}
	}
	// Concurrent requests load the home endpoint past its bound: some spill.
	var mu sync.Mutex
	seen := map[int]int{}
	var wg sync.WaitGroup
	for i := 0; i < 12; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := http.Post(vip+"/v1/completions", "application/json",
				strings.NewReader(fmt.Sprintf(`{"model":"sim-model","prompt":"You are a helpful assistant. Answer briefly: %d","max_tokens":64}`, i)))
			if err != nil {
				t.Errorf("concurrent %d: %v", i, err)
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			_, ep, _ := routeOf(t, res.Header)
			mu.Lock()
			seen[ep]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(seen) != 2 || seen[home] <= seen[1-home] {
		t.Fatalf("concurrent placement %v; want most on home %d and the excess spilled to the other", seen, home)
	}
}

// A burst of one prefix on the endpoint that owns it: LoxiLB's hard law
// spills part of it (through relief), llb's headroom law holds it on the
// owner, which has KV room and only cheap cache hits queued (held).
func TestE2E_TierOneFiveFollowsTheKVEventsAndSpills(t *testing.T) {
	tests := []struct {
		name, mode string
		wantFlag   string
		wantSpills bool
	}{
		{"hard spills", "hard", " spill", true},
		{"headroom holds", "headroom", " held", false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			burstOnTheOwner(t, tt.mode, 2031+i, tt.wantFlag, tt.wantSpills)
		})
	}
}

func burstOnTheOwner(t *testing.T, mode string, port int, wantFlag string, wantSpills bool) {
	tmpl := workerCfg("", 0, engine.KVNone, 0, 0.05)
	tmpl.KVEvents = true // the fleet gives every publisher the shared kv port
	f, err := fleet.Start(fleet.Config{Prefill: 2, Decode: 1, BaseIP: "127.0.0.22", Template: &tmpl})
	if err != nil {
		t.Fatalf("fleet: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.Stop(ctx)
	})
	// Spill relief is off by default for P/D; with one endpoint holding the
	// prefix, the law can only spill through relief. The law must see the
	// owner's overlap on every request of the burst: on a loaded machine an
	// inventory reply can miss the 5 ms default deadline, count as overlap
	// 0 and send the prefix to a second worker by round robin.
	d := startDataPlane(t, "LOXILB_KV_COLDSTART_SEED_N=0", "LOXILB_KV_SPILL_RELIEF=on", "LOXILB_KV_LB_MODE="+mode, "LLB_DECISION_TIMEOUT=1s")
	d.post(ruleJSON(t, f, "127.0.0.1", port, map[string]any{"kvExactMode": 1, "kvWarmupSec": 1}))
	d.waitActive(port)
	time.Sleep(1100 * time.Millisecond) // kvWarmupSec: 1

	vip := "http://127.0.0.1:" + strconv.Itoa(port)
	long := strings.Repeat("shared system prompt about load balancing and caches ", 40)
	body := func(i int) string {
		return fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":2}`, long+strconv.Itoa(i))
	}
	owner := routesToOwnerByTierOneFive(t, d, vip, body)
	var mu sync.Mutex
	flagged, spills, onOwner := 0, 0, 0
	var routes []string
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := http.Post(vip+"/v1/completions", "application/json", strings.NewReader(body(100+i)))
			if err != nil {
				t.Errorf("burst %d: %v", i, err)
				return
			}
			sc := bufio.NewScanner(res.Body)
			for sc.Scan() {
			}
			res.Body.Close()
			route := res.Header.Get("X-Llb-Route")
			_, ep, _ := routeOf(t, res.Header)
			mu.Lock()
			routes = append(routes, route)
			if strings.Contains(route, wantFlag) {
				flagged++
			}
			if strings.Contains(route, " spill") {
				spills++
			}
			if ep == owner {
				onOwner++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if onOwner == 0 || flagged == 0 || (spills > 0) != wantSpills {
		t.Fatalf("burst under %s: %d flagged %q, %d spills, %d on the owner %d; want the flag, spills %v, and the owner serving; routes:\n%s",
			mode, flagged, wantFlag, spills, onOwner, owner, wantSpills, strings.Join(routes, "\n"))
	}
}

func TestE2E_TierOneFiveMatchesLoRABlocks(t *testing.T) {
	tmpl := workerCfg("", 0, engine.KVNone, 0, 0.02)
	tmpl.KVEvents = true
	tmpl.LoRAs = []string{"sql-lora"}
	f, err := fleet.Start(fleet.Config{Single: 2, BaseIP: "127.0.0.32", Template: &tmpl})
	if err != nil {
		t.Fatalf("fleet: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.Stop(ctx)
	})
	d := startDataPlane(t, "LOXILB_KV_COLDSTART_SEED_N=0")
	d.post(ruleJSON(t, f, "127.0.0.1", 2033, map[string]any{"kvExactMode": 3, "kvWarmupSec": 1}))
	d.waitActive(2033)
	time.Sleep(1100 * time.Millisecond) // kvWarmupSec: 1

	const vip = "http://127.0.0.1:2033"
	long := strings.Repeat("translate this question into SQL over the orders table ", 30)
	body := func(i int) string {
		return fmt.Sprintf(`{"model":"sql-lora","prompt":%q,"max_tokens":2}`, long+strconv.Itoa(i))
	}
	// The engine hashed the blocks with lora_name "sql-lora"; llb learns the
	// adapter from /v1/models and hashes the prompt the same way.
	routesToOwnerByTierOneFive(t, d, vip, body)
}

// routesToOwnerByTierOneFive sends body(0), whose worker becomes the owner
// of the prompt's blocks (or, when Tier 1.5 routed it, holds them already),
// waits until llb's mirror of the owner has taken in their KV events, then
// sends body(1) (same prefix), which Tier 1.5 must route to the owner. It
// returns the owner's endpoint index. (A follow-up sent before the events
// arrive is routed by another tier, and the worker it reaches computes the
// prefix too: the owner is no longer the only one.)
func routesToOwnerByTierOneFive(t *testing.T, d *daemon, vip string, body func(int) string) int {
	t.Helper()
	owner, _ := routesToOwnerByTierOneFiveAt(t, d, vip, "/v1/completions", body)
	return owner
}

// quietMirror is the size of llb's mirror of each endpoint of rule key
// once it stops changing: the events of requests that just ended may still
// be on their way (a ZMQ batch, a drain polled every 50 ms at most), and
// must not be taken for the blocks of the next request.
func (d *daemon) quietMirror(key string) []int {
	d.t.Helper()
	prev := d.mirroredBlocks(key)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond) // longer than a drain's idle poll
		cur := d.mirroredBlocks(key)
		if slices.Equal(cur, prev) {
			return cur
		}
		prev = cur
	}
	d.t.Fatalf("the mirror of %s never stopped changing: %v", key, prev)
	return nil
}

// routesToOwnerByTierOneFiveAt is routesToOwnerByTierOneFive for any
// OpenAI path (/v1/completions, /v1/chat/completions); it also returns the
// follow-up's X-Llb-Route.
func routesToOwnerByTierOneFiveAt(t *testing.T, d *daemon, vip, path string, body func(int) string) (int, string) {
	t.Helper()
	key := "tcp:" + strings.TrimPrefix(vip, "http://")
	before := d.quietMirror(key)
	res, b := post(t, vip+path, body(0))
	if res.StatusCode != 200 {
		t.Fatalf("first: %d %s", res.StatusCode, b)
	}
	_, owner, _ := routeOf(t, res.Header)
	if owner < 0 || owner >= len(before) {
		t.Fatalf("first went to endpoint %d of %d (%s)", owner, len(before), res.Header.Get("X-Llb-Route"))
	}
	// A first request that Tier 1.5 sent to the blocks it holds stores
	// none; any other stores the prompt's full blocks.
	hit := overlapHit(res.Header)
	eventually(t, fmt.Sprintf("llb mirrors endpoint %d's new blocks", owner), func() (bool, string) {
		n := d.inventory(key, owner).Total
		return hit || n > before[owner], fmt.Sprintf("%d blocks, %d before the first request", n, before[owner])
	})
	res, b = post(t, vip+path, body(1))
	if res.StatusCode != 200 {
		t.Fatalf("follow-up: %d %s", res.StatusCode, b)
	}
	route := res.Header.Get("X-Llb-Route")
	if tier, ep, _ := routeOf(t, res.Header); tier != "1.5" || ep != owner {
		t.Fatalf("follow-up: tier %s to %d; want Tier 1.5 to the owner %d (%s)", tier, ep, owner, route)
	}
	return owner, route
}
