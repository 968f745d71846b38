package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/restapi"
)

// The chaos fleet: worker processes for a P/D rule, the llbd in front of
// them, and what a test reads back from llbd (status, metrics, debug).

// pdFleet is a P/D fleet of worker processes and the llbd in front of it
// (or, with fleetSpec.single, a single pool).
type pdFleet struct {
	t       *testing.T
	net     chaosNet
	prefill []*procWorker
	decode  []*procWorker
	single  []*procWorker // role-less workers of a single-pool rule
	d       *daemon
	debug   string // the debug listener's address
	vip     string // http://VIP:port
	key     string // the rule key
}

// fleetSpec sizes a pdFleet.
type fleetSpec struct {
	prefill, decode int
	// single, instead of prefill and decode, runs that many role-less
	// workers behind a single-pool rule (sel 0).
	single    int
	timeScale float64
	// prefillLatencyMS is a fault latency on every prefill worker.
	prefillLatencyMS float64
	// env is the daemon's extra environment (K=V).
	env []string
	// drain is --drain-timeout ("" keeps the default).
	drain string
	// rule adds serviceArguments (a nil value removes one).
	rule map[string]any
	// prefillSpec, when set, adjusts every prefill worker's spec.
	prefillSpec func(*procSpec)
	// dialect is the fleet's engine ("" is vllm): the workers speak it and
	// the rule's kvEngineType names it; on P/D its key set too (SGLang's
	// page hash and bootstrap port, TensorRT-LLM's drain: no ZMQ port).
	dialect string
}

// startPDFleet starts the workers, the daemon and the rule, and waits until
// every endpoint is active.
func startPDFleet(t *testing.T, fs fleetSpec) *pdFleet {
	t.Helper()
	f := &pdFleet{t: t, net: newChaosNet()}
	host := 10
	for i := 0; i < fs.single; i++ {
		f.single = append(f.single, startProcWorker(t, procSpec{
			Name: fmt.Sprintf("worker-%d", i), IP: f.net.ip(host), Role: "none", TimeScale: fs.timeScale, Dialect: fs.dialect,
		}))
		host++
	}
	for i := 0; i < fs.prefill; i++ {
		spec := procSpec{
			Name: fmt.Sprintf("prefill-%d", i), IP: f.net.ip(host), Role: "prefill", KVEvents: true,
			TimeScale: fs.timeScale, LatencyMS: fs.prefillLatencyMS, Dialect: fs.dialect,
		}
		if fs.prefillSpec != nil {
			fs.prefillSpec(&spec)
		}
		f.prefill = append(f.prefill, startProcWorker(t, spec))
		host++
	}
	for i := 0; i < fs.decode; i++ {
		f.decode = append(f.decode, startProcWorker(t, procSpec{
			Name: fmt.Sprintf("decode-%d", i), IP: f.net.ip(host), Role: "decode", TimeScale: fs.timeScale, Dialect: fs.dialect,
		}))
		host++
	}
	f.startDaemon(fs)
	return f
}

// startDaemon starts an llbd in front of the fleet (replacing f.d), posts
// the rule and waits until every endpoint is active.
func (f *pdFleet) startDaemon(fs fleetSpec) {
	t := f.t
	t.Helper()
	args := []string{"--listen", "127.0.0.1:0", "--state-dir", t.TempDir(), "--log-format", "json",
		"--log-level", "info", "--debug-listen", "127.0.0.1:0"}
	if fs.drain != "" {
		args = append(args, "--drain-timeout", fs.drain)
	}
	f.d = startDaemonEnv(t, buildDaemon(t), fs.env, args...)
	f.debug = f.d.log.waitMsg(t, "debug listener on", 10*time.Second)["addr"].(string)
	vip := f.net.ip(1)
	f.vip = fmt.Sprintf("http://%s:%d", vip, chaosVIPPort)
	f.key = fmt.Sprintf("tcp:%s:%d", vip, chaosVIPPort)
	sa := map[string]any{
		"externalIP": vip, "port": chaosVIPPort, "protocol": "tcp", "sel": 0, "mode": 4,
		"pd_disagg_mode": true, "kvExactMode": 1, "kvZmqPort": chaosKVPort,
		"kvHashAlgo": "sha256_cbor", "kvBlockSize": 16, "kvNoneHashSeed": "0",
		// Probes every second, down after two failures.
		"probeTimeout": 1, "probeRetries": 2,
		// Every request ends within 20 s whatever happens upstream.
		"max_stream_duration_sec": 20,
	}
	if fs.single > 0 {
		for _, k := range []string{"pd_disagg_mode", "kvExactMode", "kvZmqPort", "kvHashAlgo", "kvBlockSize", "kvNoneHashSeed"} {
			delete(sa, k)
		}
	}
	if fs.dialect != "" {
		sa["kvEngineType"] = fs.dialect
	}
	if fs.single == 0 {
		switch fs.dialect {
		case "sglang":
			sa["kvHashAlgo"], sa["pdBootstrapPort"] = "sha256_sglang", chaosBootstrapPort
			delete(sa, "kvNoneHashSeed")
		case "trtllm":
			// llbd drains the context workers' POST /kv_cache_events.
			for _, k := range []string{"kvZmqPort", "kvHashAlgo", "kvNoneHashSeed"} {
				delete(sa, k)
			}
		}
	}
	for k, v := range fs.rule {
		if v == nil {
			delete(sa, k)
			continue
		}
		sa[k] = v
	}
	var eps []map[string]any
	for _, p := range f.single {
		eps = append(eps, map[string]any{"endpointIP": p.spec.IP, "targetPort": chaosHTTPPort, "weight": 1})
	}
	for _, p := range f.prefill {
		eps = append(eps, map[string]any{"endpointIP": p.spec.IP, "targetPort": chaosHTTPPort, "weight": 1, "ep_role": 1, "nixl_port": chaosNIXLPort})
	}
	for _, p := range f.decode {
		eps = append(eps, map[string]any{"endpointIP": p.spec.IP, "targetPort": chaosHTTPPort, "weight": 1, "ep_role": 2, "nixl_port": chaosNIXLPort})
	}
	body, err := json.Marshal(map[string]any{"serviceArguments": sa, "endpoints": eps})
	if err != nil {
		t.Fatal(err)
	}
	f.d.post(string(body))
	f.waitEndpoints("every endpoint active", 15*time.Second, func(eps []endpointState) bool {
		for _, e := range eps {
			if e.State != "active" {
				return false
			}
		}
		return len(eps) == len(f.single)+len(f.prefill)+len(f.decode)
	})
}

// worker returns endpoint i's worker (prefill first, then decode; or the
// single pool's).
func (f *pdFleet) worker(i int) *procWorker {
	if len(f.single) > 0 {
		return f.single[i]
	}
	if i < len(f.prefill) {
		return f.prefill[i]
	}
	return f.decode[i-len(f.prefill)]
}

// crash asks the debug listener to crash one actor; it reports whether the
// actor existed.
func (f *pdFleet) crash(kind string, idx int) bool {
	f.t.Helper()
	body := fmt.Sprintf(`{"rule":%q,"kind":%q,"idx":%d}`, f.key, kind, idx)
	res, err := http.Post("http://"+f.debug+debugPathCrash, "application/json", strings.NewReader(body))
	if err != nil {
		f.t.Fatalf("crash %s %d: %v", kind, idx, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	switch res.StatusCode {
	case http.StatusOK:
		return true
	case http.StatusNotFound:
		return false
	}
	f.t.Fatalf("crash %s %d: %d %s", kind, idx, res.StatusCode, b)
	return false
}

// endpointState is one endpoint of the rule's REST status.
type endpointState struct {
	EpIdx    int    `json:"ep_idx"`
	State    string `json:"state"`
	Detail   string `json:"detail"`
	Probe    string `json:"probe"`
	Breaker  string `json:"breaker"`
	InFlight int    `json:"inFlight"`
	Parked   int    `json:"parked"`
	// The cache-truth extras (issue 14).
	InventoryBlocks *int                  `json:"inventoryBlocks"`
	OffloadBlocks   int                   `json:"offloadBlocks"`
	KVIgnored       []restapi.KVIgnored   `json:"kvIgnored"`
	KVPrediction    *restapi.KVPrediction `json:"kvPrediction"`
	// The TTFT prediction record (issue 30).
	TTFTPrediction *restapi.TTFTPrediction `json:"ttftPrediction"`
}

// status reads the rule's endpoint states (the router's live view).
func (f *pdFleet) status() []endpointState {
	f.t.Helper()
	host, port, _ := strings.Cut(strings.TrimPrefix(f.vip, "http://"), ":")
	code, body := f.d.do(http.MethodGet, fmt.Sprintf("/netlox/v1/config/loadbalancer/externalipaddress/%s/port/%s/protocol/tcp/status", host, port), "")
	if code != http.StatusOK {
		f.t.Fatalf("status: %d %s", code, body)
	}
	var v struct {
		Endpoints []endpointState `json:"endpoints"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		f.t.Fatalf("status: %v: %s", err, body)
	}
	return v.Endpoints
}

// waitEndpoints waits until ok holds for the rule's endpoint states and
// returns how long that took.
func (f *pdFleet) waitEndpoints(what string, within time.Duration, ok func([]endpointState) bool) time.Duration {
	f.t.Helper()
	start := time.Now()
	var last []endpointState
	for time.Since(start) < within {
		if last = f.status(); ok(last) {
			return time.Since(start)
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.t.Fatalf("%s: not within %s; endpoints %+v", what, within, last)
	return 0
}

// metrics scrapes llbd's /metrics into series → value.
func (f *pdFleet) metrics() promSeries {
	f.t.Helper()
	code, body := f.d.do(http.MethodGet, "/metrics", "")
	if code != http.StatusOK {
		f.t.Fatalf("metrics: %d", code)
	}
	return parseProm(body)
}

// promSeries maps a Prometheus series ("name{labels}") to its value.
type promSeries map[string]float64

func parseProm(text string) promSeries {
	out := promSeries{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// sum adds every series of metric name whose labels contain each of want
// (e.g. `ep_idx="0"`).
func (m promSeries) sum(name string, want ...string) float64 {
	var s float64
	for k, v := range m {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		all := true
		for _, w := range want {
			all = all && strings.Contains(k, w)
		}
		if all {
			s += v
		}
	}
	return s
}

// awaitExit waits for the daemon to exit by itself and returns its exit
// status.
func (d *daemon) awaitExit(within time.Duration) int {
	d.t.Helper()
	select {
	case err := <-d.done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			d.t.Fatal(err)
		}
		return 0
	case <-time.After(within):
		d.t.Fatalf("llbd did not exit within %s; log:\n%s", within, d.log.text())
		return -1
	}
}
