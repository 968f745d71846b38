package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/worker"
)

// The chaos harness: the real llbd binary (with its loopback debug
// listener) in front of simulated vLLM workers that each run as their own
// process, so a test can SIGKILL one mid-request and start it again. The
// worker process is this test binary re-executed with LLB_CHAOS_WORKER
// set (see init). Every test draws its own 127.x.y.0/24 so concurrent test
// binaries on the machine never share an address.
//
// The short version of each scenario runs in go test; LLB_CHAOS_LONG=1
// (make chaos) runs the soaks.

// envChaosLong selects the long soaks.
const envChaosLong = "LLB_CHAOS_LONG"

// envChaosWorker carries a procSpec (JSON) to a re-executed worker process.
const envChaosWorker = "LLB_CHAOS_WORKER"

func init() {
	if spec := os.Getenv(envChaosWorker); spec != "" {
		os.Exit(chaosWorkerMain(spec))
	}
}

// chaosLong reports whether the long soaks run (make chaos).
func chaosLong() bool { return os.Getenv(envChaosLong) == "1" }

// soak picks the short or the long value.
func soak[T any](short, long T) T {
	if chaosLong() {
		return long
	}
	return short
}

// ---- addresses -------------------------------------------------------------

// chaosNet is one test's private loopback /24: 127.a.b.0.
type chaosNet struct{ a, b int }

func newChaosNet() chaosNet { return chaosNet{a: 100 + rand.IntN(100), b: rand.IntN(256)} }

// ip returns host h of the net (the VIP is host 1, workers 10 and up).
func (n chaosNet) ip(h int) string { return fmt.Sprintf("127.%d.%d.%d", n.a, n.b, h) }

// Ports every worker uses on its own address.
const (
	chaosHTTPPort = 8000
	chaosKVPort   = 5557
	chaosNIXLPort = 5600
	chaosVIPPort  = 2020
)

// ---- worker processes ------------------------------------------------------

// procSpec describes one worker process.
type procSpec struct {
	Name string `json:"name"`
	IP   string `json:"ip"`
	// Role is "prefill" or "decode".
	Role string `json:"role"`
	// KVEvents turns the ZMQ publisher on (on chaosKVPort).
	KVEvents bool `json:"kv_events"`
	// TimeScale scales the latency model.
	TimeScale float64 `json:"time_scale"`
	// LatencyMS is a fault latency added to every generation request.
	LatencyMS float64 `json:"latency_ms"`
}

// chaosWorkerMain runs one simulated worker until SIGTERM/SIGINT (graceful)
// or SIGKILL (not graceful at all, which is the point).
func chaosWorkerMain(raw string) int {
	var s procSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintln(os.Stderr, "chaos worker spec:", err)
		return 2
	}
	c := worker.DefaultConfig()
	c.Name, c.IP, c.HTTPPort, c.NIXLPort = s.Name, s.IP, chaosHTTPPort, chaosNIXLPort
	c.KVEvents, c.KVPort = s.KVEvents, chaosKVPort
	c.Engine.Role = engine.RoleDecode
	if s.Role == "prefill" {
		c.Engine.Role = engine.RolePrefill
	}
	c.Engine.Latency.TimeScale = s.TimeScale
	c.Faults.Latency = time.Duration(s.LatencyMS * float64(time.Millisecond))
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	w, err := worker.Start(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos worker:", err)
		return 1
	}
	fmt.Println("ready", w.Addr())
	select {
	case <-sig:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
		return 0
	case <-w.Done():
		return 1
	}
}

// procWorker is a worker process the test can kill and start again on the
// same addresses.
type procWorker struct {
	t    *testing.T
	spec procSpec

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *lockedBuffer
}

// startProcWorker starts a worker process and waits until it serves.
func startProcWorker(t *testing.T, spec procSpec) *procWorker {
	t.Helper()
	p := &procWorker{t: t, spec: spec}
	p.start()
	t.Cleanup(p.stop)
	return p
}

// start (re)starts the process and waits for its "ready" line.
func (p *procWorker) start() {
	p.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		p.t.Fatal(err)
	}
	raw, _ := json.Marshal(p.spec)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envChaosWorker+"="+string(raw))
	// A worker never outlives the test binary, even when the test dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		p.t.Fatal(err)
	}
	errBuf := &lockedBuffer{}
	cmd.Stderr = errBuf
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start worker %s: %v", p.spec.Name, err)
	}
	exited := make(chan struct{})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready ") {
				ready <- sc.Text()
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	select {
	case <-ready:
	case <-exited:
		p.t.Fatalf("worker %s exited before serving: %s", p.spec.Name, errBuf.String())
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		p.t.Fatalf("worker %s not ready within 15s: %s", p.spec.Name, errBuf.String())
	}
	p.mu.Lock()
	p.cmd, p.exited, p.stderr = cmd, exited, errBuf
	p.mu.Unlock()
}

// kill SIGKILLs the process and waits until it is gone.
func (p *procWorker) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	_ = cmd.Process.Kill()
	<-exited
}

// stop ends the process gracefully (SIGTERM), killing it after 5 s.
func (p *procWorker) stop() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// addr is the worker's OpenAI API address.
func (p *procWorker) addr() string { return p.spec.IP + ":" + strconv.Itoa(chaosHTTPPort) }

// debug reads the worker's /_sim/debug.
func (p *procWorker) debug() worker.Debug {
	p.t.Helper()
	res, err := http.Get("http://" + p.addr() + "/_sim/debug")
	if err != nil {
		p.t.Fatalf("worker %s debug: %v", p.spec.Name, err)
	}
	defer res.Body.Close()
	var d worker.Debug
	if err := json.NewDecoder(res.Body).Decode(&d); err != nil {
		p.t.Fatalf("worker %s debug: %v", p.spec.Name, err)
	}
	return d
}

// lockedBuffer is a bytes.Buffer safe for a writer goroutine and readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// ---- the P/D fleet and its rule ----------------------------------------------

// pdFleet is a P/D fleet of worker processes and the llbd in front of it.
type pdFleet struct {
	t       *testing.T
	net     chaosNet
	prefill []*procWorker
	decode  []*procWorker
	d       *daemon
	debug   string // the debug listener's address
	vip     string // http://VIP:port
	key     string // the rule key
}

// fleetSpec sizes a pdFleet.
type fleetSpec struct {
	prefill, decode int
	timeScale       float64
	// prefillLatencyMS is a fault latency on every prefill worker.
	prefillLatencyMS float64
	// env is the daemon's extra environment (K=V).
	env []string
	// drain is --drain-timeout ("" keeps the default).
	drain string
	// rule adds serviceArguments.
	rule map[string]any
}

// startPDFleet starts the workers, the daemon and the rule, and waits until
// every endpoint is active.
func startPDFleet(t *testing.T, fs fleetSpec) *pdFleet {
	t.Helper()
	f := &pdFleet{t: t, net: newChaosNet()}
	host := 10
	for i := 0; i < fs.prefill; i++ {
		f.prefill = append(f.prefill, startProcWorker(t, procSpec{
			Name: fmt.Sprintf("prefill-%d", i), IP: f.net.ip(host), Role: "prefill", KVEvents: true,
			TimeScale: fs.timeScale, LatencyMS: fs.prefillLatencyMS,
		}))
		host++
	}
	for i := 0; i < fs.decode; i++ {
		f.decode = append(f.decode, startProcWorker(t, procSpec{
			Name: fmt.Sprintf("decode-%d", i), IP: f.net.ip(host), Role: "decode", TimeScale: fs.timeScale,
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
	for k, v := range fs.rule {
		sa[k] = v
	}
	var eps []map[string]any
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
		return len(eps) == len(f.prefill)+len(f.decode)
	})
}

// worker returns endpoint i's worker (prefill first, then decode).
func (f *pdFleet) worker(i int) *procWorker {
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

// ---- load --------------------------------------------------------------------

// Outcomes of one client request. Those in defects must never happen.
const (
	outOK = "ok" // 2xx, complete (a stream ended with [DONE] after every token)
	// A stream that had sent bytes and was cut: the client saw a broken
	// stream (no [DONE]), which is what must happen when its worker dies.
	outStreamCut = "stream_cut"
	// A non-streaming 2xx whose body was cut.
	outBodyCut = "body_cut"
	// The connection was refused (nothing listening: a stopped daemon).
	outRefused = "refused"
	// The connection closed or reset before any response byte.
	outClosed = "closed_before_response"
	// The client's timeout fired: neither a response nor a close came
	// within the configured bounds.
	outHung = "hung"
	// A stream that ended with [DONE] without all its tokens: a fake end.
	outFakeDone = "fake_done"
	// A stream that ended cleanly (EOF) without [DONE]: a client cannot tell
	// it from a complete one.
	outCleanEOF = "stream_eof_without_done"
	// A 2xx body that does not parse or lacks its tokens.
	outBadBody = "bad_body"
)

// defects are outcomes no chaos may cause.
var defects = []string{outHung, outFakeDone, outCleanEOF, outBadBody}

// tally counts outcomes; safe for concurrent use.
type tally struct {
	mu      sync.Mutex
	sent    int
	out     map[string]int
	detail  map[string]string // first example per outcome
	retried int               // 2xx answers after at least one re-route
	tiers   map[string]int    // routing tier of 2xx answers
	// streaming counts the streams under way (at least one event received)
	// per decode endpoint address.
	streaming map[string]int
}

func newTally() *tally {
	return &tally{out: map[string]int{}, detail: map[string]string{}, tiers: map[string]int{}, streaming: map[string]int{}}
}

// streamingOn is how many streams served by decode endpoint addr are under
// way: they received at least one event and have not ended.
func (t *tally) streamingOn(addr string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.streaming[addr]
}

// streamStarted records a stream under way on the decode endpoint its
// route header names; the returned func records its end.
func (t *tally) streamStarted(h http.Header) func() {
	addr := decodeAddrRE.FindStringSubmatch(h.Get("X-Llb-Route"))
	if t == nil || addr == nil {
		return func() {}
	}
	t.mu.Lock()
	t.streaming[addr[1]]++
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		t.streaming[addr[1]]--
		t.mu.Unlock()
	}
}

var decodeAddrRE = regexp.MustCompile(`decode_addr=(\S+)`)

func (t *tally) add(outcome, detail string, h http.Header) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent++
	t.out[outcome]++
	if _, ok := t.detail[outcome]; !ok {
		t.detail[outcome] = detail
	}
	if outcome == outOK && h != nil {
		route := h.Get("X-Llb-Route")
		if strings.Contains(route, "retries=") && !strings.Contains(route, "retries=0") {
			t.retried++
		}
		if m := routeRE.FindStringSubmatch(route); m != nil {
			t.tiers[m[1]]++
		}
	}
}

// get returns the count of one outcome.
func (t *tally) get(outcome string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.out[outcome]
}

// tier returns how many 2xx answers the given tier routed ("1.5", "2", ...).
func (t *tally) tier(name string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tiers[name]
}

// retriedOK is how many 2xx answers needed a re-route first.
func (t *tally) retriedOK() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.retried
}

// merge adds o's counts to t (o must be idle).
func (t *tally) merge(o *tally) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent += o.sent
	t.retried += o.retried
	for k, v := range o.out {
		t.out[k] += v
		if _, ok := t.detail[k]; !ok {
			t.detail[k] = o.detail[k]
		}
	}
	for k, v := range o.tiers {
		t.tiers[k] += v
	}
}

// total is the number of requests sent.
func (t *tally) total() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sent
}

// String is the report line: sent, then every outcome.
func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := make([]string, 0, len(t.out))
	for k := range t.out {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "sent=%d", t.sent)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, t.out[k])
	}
	fmt.Fprintf(&b, " hung=%d retried_ok=%d tiers=%v", t.out[outHung], t.retried, t.tiers)
	return b.String()
}

// check fails the test on any defect and on any outcome outside allowed,
// and checks that every request was accounted for.
func (t *tally) check(tb testing.TB, allowed ...string) {
	tb.Helper()
	t.mu.Lock()
	defer t.mu.Unlock()
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	n := 0
	for k, v := range t.out {
		n += v
		if !ok[k] {
			tb.Errorf("%d requests ended %s (e.g. %s); allowed: %v", v, k, t.detail[k], allowed)
		}
	}
	for _, d := range defects {
		if t.out[d] != 0 && ok[d] {
			tb.Errorf("%d requests ended %s (e.g. %s)", t.out[d], d, t.detail[d])
		}
	}
	if n != t.sent {
		tb.Errorf("outcomes %d for %d requests sent", n, t.sent)
	}
}

// loadSpec shapes a client population.
type loadSpec struct {
	clients int
	// maxTokens per request; streams must deliver exactly that many events.
	maxTokens int
	// stream makes every other request stream (false: none stream).
	stream bool
	// sessions sends X-Conversation-Id on every third request (Tier 0).
	sessions bool
	// hungAfter is the client's bound: past it a request counts as hung.
	// It must exceed every configured llbd timeout a request can wait out.
	hungAfter time.Duration
}

// chaosPrefixes are shared system prompts, long enough (several 16-token
// blocks) for Tier 1.5 to score them.
var chaosPrefixes = func() []string {
	out := make([]string, 4)
	for i := range out {
		out[i] = strings.Repeat(fmt.Sprintf("System prompt %d of the chaos suite: answer briefly and plainly. ", i), 8)
	}
	return out
}()

// loadClient is an HTTP client for one load run.
func loadClient(clients int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: clients, DisableCompression: true, IdleConnTimeout: 30 * time.Second,
	}}
}

// runLoad runs spec.clients sequential clients against base until stop is
// closed, then waits for every request in flight to end, and returns the
// tally.
func runLoad(base string, spec loadSpec, stop <-chan struct{}) *tally {
	return runLoadInto(base, spec, stop, newTally())
}

// runLoadInto is runLoad counting into t (which the caller may read while
// the load runs).
func runLoadInto(base string, spec loadSpec, stop <-chan struct{}, t *tally) *tally {
	c := loadClient(spec.clients)
	defer c.CloseIdleConnections()
	var wg sync.WaitGroup
	for i := 0; i < spec.clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				oneRequest(c, base, spec, i*1_000_000+n, t)
			}
		}()
	}
	wg.Wait()
	return t
}

// oneRequest sends request number n and records its outcome.
func oneRequest(c *http.Client, base string, spec loadSpec, n int, t *tally) {
	stream := spec.stream && n%2 == 0
	prompt := fmt.Sprintf("%s Question %d: what is %d plus %d?", chaosPrefixes[n%len(chaosPrefixes)], n, n, n+1)
	body, _ := json.Marshal(map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": spec.maxTokens, "stream": stream})
	ctx, cancel := context.WithTimeout(context.Background(), spec.hungAfter)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if spec.sessions && n%3 == 0 {
		req.Header.Set("X-Conversation-Id", "chaos-"+strconv.Itoa(n%17))
	}
	outcome, detail, h := classify(c, req, stream, spec.maxTokens, t)
	t.add(outcome, detail, h)
}

// ask sends one completion request and classifies its answer.
func ask(c *http.Client, base, prompt string, maxTokens int, stream bool, hungAfter time.Duration) (outcome, detail string, h http.Header) {
	body, _ := json.Marshal(map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": maxTokens, "stream": stream})
	ctx, cancel := context.WithTimeout(context.Background(), hungAfter)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return classify(c, req, stream, maxTokens, nil)
}

// cancelableRequest is a request with its timeout's cancel func.
type cancelableRequest struct {
	*http.Request
	cancel context.CancelFunc
}

// streamRequest builds a streaming completion request bounded like the
// load's (25 s: past it, the request hung).
func streamRequest(t *testing.T, base, prompt string, maxTokens int) cancelableRequest {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": maxTokens, "stream": true})
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return cancelableRequest{req, cancel}
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

// classify sends req and reads the whole answer; live, when not nil,
// tracks the stream while it is under way.
func classify(c *http.Client, req *http.Request, stream bool, maxTokens int, live *tally) (outcome, detail string, h http.Header) {
	ctx := req.Context()
	res, err := c.Do(req)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return outHung, err.Error(), nil
		case errorsIsRefused(err):
			return outRefused, err.Error(), nil
		}
		return outClosed, err.Error(), nil
	}
	defer res.Body.Close()
	h = res.Header
	if res.StatusCode/100 != 2 {
		b, err := io.ReadAll(res.Body)
		if err != nil {
			if ctx.Err() != nil {
				return outHung, "error body: " + err.Error(), h
			}
			return fmt.Sprintf("http_%d_cut", res.StatusCode), err.Error(), h
		}
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		return fmt.Sprintf("http_%d_%s", res.StatusCode, e.Error.Code), strings.TrimSpace(string(b)), h
	}
	if stream {
		sc := bufio.NewScanner(res.Body)
		events, done := 0, false
		ended := func() {}
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "data: [DONE]"):
				done = true
			case strings.HasPrefix(line, "data: {"):
				events++
				if events == 1 {
					ended = live.streamStarted(h)
				}
			}
		}
		ended()
		err := sc.Err()
		switch {
		case ctx.Err() != nil:
			return outHung, fmt.Sprintf("stream after %d events: %v", events, err), h
		case done && events == maxTokens && err == nil:
			return outOK, "", h
		case done:
			return outFakeDone, fmt.Sprintf("[DONE] after %d of %d events (err %v)", events, maxTokens, err), h
		case err != nil:
			return outStreamCut, fmt.Sprintf("after %d events: %v", events, err), h
		}
		return outCleanEOF, fmt.Sprintf("clean EOF after %d events", events), h
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		if ctx.Err() != nil {
			return outHung, "body: " + err.Error(), h
		}
		return outBodyCut, err.Error(), h
	}
	var v struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Usage.CompletionTokens != maxTokens {
		return outBadBody, fmt.Sprintf("%v: %.200s", err, b), h
	}
	return outOK, "", h
}

// errorsIsRefused reports a connection refused by the peer.
func errorsIsRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
