package proxybench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/llbproject/llb/simulate/harness"
)

// The streams benchmark (make bench-streams): the data plane under
// LLM-shaped load. A backend (sseback.go, a process of its own) streams
// vLLM-shaped chat completions, Events events per stream at Rate events
// per second, each stamped with its send time; the client (sseclient.go)
// holds N streams at once, one connection each, through each path in
// turn: direct to the backend, HAProxy 2.6 (http-reuse always, option
// http-no-delay; optionally the backend health-checked as llbd checks it) and llbd
// (a single-pool rule with its defaults: GET /health probed every 5 s,
// 500 ms connect timeout), interleaved, Rounds rounds per count. Each run
// ramps its streams up over one stream's length, measures a window of
// steady state, and lets its streams finish.
//
// Per run: events delivered per second, the delay of each event (client
// read minus backend stamp) p50/p99/p99.9, the first event's delay from
// the request's send, each process's CPU per event (/proc), the proxy's
// RSS per stream (peak minus before), and every answer other than 200 by
// status, broken streams and failed dials.

// StreamsConfig configures the streams benchmark. Zero fields take the
// defaults in brackets.
type StreamsConfig struct {
	// LLBD is the llbd binary (required).
	LLBD string
	// Before is a second llbd binary (e.g. the previous release) measured
	// as path "llbd-before" in the same rounds ("": none).
	Before string
	// Self is the binary that serves the backend when started with
	// EnvSSEBackend ["": this process's executable].
	Self string
	// Dir holds configs and logs; "" makes a temporary directory.
	Dir string
	// Counts are the numbers of concurrent streams [200, 1000, 4000, 9000].
	Counts []int
	// Rounds per count [3]; the paths run interleaved in each round.
	Rounds int
	// Events per stream [256] at Rate events per second [30].
	Events int
	Rate   float64
	// Window is the measured steady state of each run [10s]; Ramp spreads
	// the streams' starts before it [one stream's length].
	Window, Ramp time.Duration
	// Settle is the pause between runs [3s].
	Settle time.Duration
	// IdleCheck is how long llbd idles after the last run before its RSS
	// is read again [20s; negative: not checked].
	IdleCheck time.Duration
	// Paths to measure, in each round's order [direct, haproxy, llbd and,
	// with Before, llbd-before].
	Paths []string
	// MaxConns is HAProxy's maxconn and llbd's --max-conns [derived from
	// the open-file limit: (limit − 600) / 2, at most 9700].
	MaxConns int
	// HAProxyCheck health-checks HAProxy's server as llbd probes its
	// endpoint by default (GET /health every 5 s, 2 s timeout, down after
	// 2 failures). Off by default: the HAProxy baseline runs without a check.
	HAProxyCheck bool
	// LLBDArgs are more llbd flags (both binaries).
	LLBDArgs []string
	// BasePort is the first of four ports on 127.0.0.31–34 [18100].
	BasePort int
	// Progress receives one line per step (nil: none).
	Progress io.Writer
}

func (c *StreamsConfig) defaults() {
	if len(c.Counts) == 0 {
		c.Counts = []int{200, 1000, 4000, 9000}
	}
	if c.Rounds <= 0 {
		c.Rounds = 3
	}
	if c.Events <= 0 {
		c.Events = 256
	}
	if c.Rate <= 0 {
		c.Rate = 30
	}
	if c.Window <= 0 {
		c.Window = 10 * time.Second
	}
	if c.Ramp <= 0 {
		c.Ramp = c.streamLen()
	}
	if c.Settle <= 0 {
		c.Settle = 3 * time.Second
	}
	if c.IdleCheck == 0 {
		c.IdleCheck = 20 * time.Second
	}
	if len(c.Paths) == 0 {
		c.Paths = []string{"direct", "haproxy", "llbd"}
		if c.Before != "" {
			c.Paths = append(c.Paths, "llbd-before")
		}
	}
	if c.BasePort <= 0 {
		c.BasePort = 18100
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// streamLen is how long one stream takes at the configured pace.
func (c *StreamsConfig) streamLen() time.Duration {
	return time.Duration(float64(c.Events-1) / c.Rate * float64(time.Second))
}

// gap is the time between two events of a stream.
func (c *StreamsConfig) gap() time.Duration {
	return time.Duration(float64(time.Second) / c.Rate)
}

// Validate reports what is wrong.
func (c *StreamsConfig) Validate() error {
	var errs []error
	if c.LLBD == "" && slices.Contains(c.Paths, "llbd") {
		errs = append(errs, fmt.Errorf("the llbd binary is required: %w", ErrConfig))
	}
	if slices.Contains(c.Paths, "llbd-before") && c.Before == "" {
		errs = append(errs, fmt.Errorf("path llbd-before needs --before: %w", ErrConfig))
	}
	for _, p := range c.Paths {
		if !slices.Contains([]string{"direct", "haproxy", "llbd", "llbd-before"}, p) {
			errs = append(errs, fmt.Errorf("path %q: want direct, haproxy, llbd or llbd-before: %w", p, ErrConfig))
		}
	}
	for _, n := range c.Counts {
		if n <= 0 {
			errs = append(errs, fmt.Errorf("stream count %d: %w", n, ErrConfig))
		}
	}
	if c.BasePort > 65535-4 {
		errs = append(errs, fmt.Errorf("base port %d is out of range: %w", c.BasePort, ErrConfig))
	}
	return errors.Join(errs...)
}

func (c *StreamsConfig) progress(format string, args ...any) {
	fmt.Fprintf(c.Progress, "streams: "+format+"\n", args...)
}

// StreamsResult is a whole run of the streams benchmark.
type StreamsResult struct {
	Config StreamsConfig
	// Runs are every run, in the order they ran.
	Runs []StreamRun
	// Summary has one row per count and path: medians of the rounds.
	Summary []StreamSummary
	// Idle is llbd's memory before the first run, at its peak, and after
	// IdleCheck of idling at the end (per llbd path).
	Idle []IdleMemory
	// Load1 is the range of the one-minute load average seen at the end
	// of the runs.
	Load1Min, Load1Max float64
	// FileLimit is the open-file limit every process ran with.
	FileLimit uint64
}

// IdleMemory is a proxy's RSS over the whole benchmark.
type IdleMemory struct {
	Path string
	// RSS before the first run, the highest seen during a run, and after
	// IdleFor of idling once the last run ended (bytes).
	Start, Peak, AfterIdle int64
	IdleFor                time.Duration
	// HeapInuse and Goroutines after the idle, from llbd's /metrics (-1:
	// unknown).
	HeapInuse, Goroutines int64
}

// StreamRun is one run: N streams through one path.
type StreamRun struct {
	Path    string
	Streams int
	Round   int
	// EventsPerSec is the events the client received in the window per
	// second.
	EventsPerSec float64
	// Delay is each event's client read minus its backend stamp; First is
	// the first event's arrival minus the request's send.
	Delay, First Quantiles
	// CPU per event received in the window, per process ("" when not
	// measured): the proxy, the backend and the client.
	ProxyCPU, BackendCPU, ClientCPU time.Duration
	// RSS of the proxy before the run and at its peak during it (bytes).
	RSSBefore, RSSPeak int64
	// Outcomes: streams read whole, answers other than 200 by status,
	// streams that broke or missed events, dials that failed.
	StreamsOK int64
	Statuses  map[int]int64
	// Codes counts the same answers by "status code" (the error body's
	// code); Samples holds the first of each (X-Llb-Route and body).
	Codes      map[string]int64
	Samples    map[string]string
	Broken     int64
	ConnErrors int64
	// Load1 is the one-minute load average at the end of the run.
	Load1 float64
}

// NonOK is every failed request of the run: non-200 answers, broken
// streams and failed dials.
func (r *StreamRun) NonOK() int64 {
	n := r.Broken + r.ConnErrors
	for _, v := range r.Statuses {
		n += v
	}
	return n
}

// RSSPerStream is the proxy's RSS growth per stream (bytes).
func (r *StreamRun) RSSPerStream() float64 {
	if r.Streams == 0 || r.RSSPeak == 0 {
		return 0
	}
	return float64(r.RSSPeak-r.RSSBefore) / float64(r.Streams)
}

// Quantiles of a delay sample.
type Quantiles struct {
	P50, P99, P999 time.Duration
	N              int64
}

// StreamSummary is one count and path over the rounds (medians).
type StreamSummary struct {
	Path                            string
	Streams                         int
	EventsPerSec                    float64
	Delay, First                    Quantiles
	Added                           Quantiles // Delay minus direct's, per round, median
	ProxyCPU, BackendCPU, ClientCPU time.Duration
	RSSPerStream                    float64
	Statuses                        map[int]int64 // summed over the rounds
	Codes                           map[string]int64
	Samples                         map[string]string // the first of each code
	Broken, ConnErrors              int64             // summed
}

// NonOK sums the failures over the rounds.
func (s *StreamSummary) NonOK() int64 {
	n := s.Broken + s.ConnErrors
	for _, v := range s.Statuses {
		n += v
	}
	return n
}

// streamsEnv is the running processes.
type streamsEnv struct {
	cfg     *StreamsConfig
	dir     string
	backend *backendProc
	haproxy *exec.Cmd
	llbd    map[string]*harness.Daemon // by path
	addrs   map[string]string          // by path
	logs    []*os.File
	runs    int // runs so far
}

// RunStreams runs the streams benchmark.
func RunStreams(ctx context.Context, cfg StreamsConfig) (*StreamsResult, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if slices.Contains(cfg.Paths, "haproxy") {
		if _, err := lookTool("haproxy"); err != nil {
			return nil, fmt.Errorf("haproxy is not installed (make bench-streams installs it with apt-get): %w", ErrTool)
		}
	}
	limit := raiseFileLimit()
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = 9700
		if limit > 0 && limit < 20000 {
			cfg.MaxConns = max(int(limit)-600, 200) / 2
		}
	}
	if top := slices.Max(cfg.Counts); top > cfg.MaxConns {
		cfg.progress("warning: %d streams over maxconn %d (open-file limit %d): the proxies will refuse some", top, cfg.MaxConns, limit)
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "llb-streams-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	e, err := startStreamsEnv(ctx, &cfg, dir)
	if err != nil {
		return nil, err
	}
	defer e.stop()
	res := &StreamsResult{Config: cfg, FileLimit: limit, Load1Min: -1}
	start := map[string]int64{}
	peak := map[string]int64{}
	for p := range e.llbd {
		start[p] = procRSS(e.pid(p))
	}
	for _, n := range cfg.Counts {
		for round := 1; round <= cfg.Rounds; round++ {
			for _, p := range cfg.Paths {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
				run := e.run(ctx, p, n, round)
				res.Runs = append(res.Runs, run)
				if _, ok := e.llbd[p]; ok {
					peak[p] = max(peak[p], run.RSSPeak)
				}
				if res.Load1Min < 0 || run.Load1 < res.Load1Min {
					res.Load1Min = run.Load1
				}
				res.Load1Max = max(res.Load1Max, run.Load1)
				for k, v := range run.Samples {
					cfg.progress("  first %s: %s", k, v)
				}
				cfg.progress("%5d streams round %d %-11s %8.0f events/s  delay p50 %-9v p99 %-9v p999 %-9v first p50 %-9v  cpu/event %v (backend %v, client %v)  rss/stream %.1f KiB  ok %d non-200 %v broken %d dial errors %d  load %.1f",
					n, round, p, run.EventsPerSec, run.Delay.P50, run.Delay.P99, run.Delay.P999, run.First.P50, run.ProxyCPU, run.BackendCPU, run.ClientCPU,
					run.RSSPerStream()/1024, run.StreamsOK, run.Codes, run.Broken, run.ConnErrors, run.Load1)
			}
		}
	}
	res.Summary = summarize(res.Runs, cfg.Counts, cfg.Paths)
	if cfg.IdleCheck > 0 {
		for _, p := range cfg.Paths {
			if _, ok := e.llbd[p]; ok {
				res.Idle = append(res.Idle, IdleMemory{Path: p, Start: start[p], Peak: peak[p]})
			}
		}
		if len(res.Idle) > 0 {
			cfg.progress("idling %v, then reading llbd's memory", cfg.IdleCheck)
			if !sleepUntil(ctx, time.Now().Add(cfg.IdleCheck)) {
				return nil, ctx.Err()
			}
			for i := range res.Idle {
				m := &res.Idle[i]
				m.AfterIdle, m.IdleFor = procRSS(e.pid(m.Path)), cfg.IdleCheck
				e.readDaemonMetrics(ctx, m)
			}
		}
	}
	return res, nil
}

// startStreamsEnv starts the backend and the proxies the paths need.
func startStreamsEnv(ctx context.Context, cfg *StreamsConfig, dir string) (e *streamsEnv, err error) {
	e = &streamsEnv{cfg: cfg, dir: dir, llbd: map[string]*harness.Daemon{}, addrs: map[string]string{}}
	defer func() {
		if err != nil {
			e.stop()
		}
	}()
	at := func(ip string, off int) string { return net.JoinHostPort(ip, strconv.Itoa(cfg.BasePort+off)) }
	backend := at("127.0.0.31", 0)
	e.addrs["direct"] = backend
	e.addrs["haproxy"] = at("127.0.0.32", 1)
	e.addrs["llbd"] = at("127.0.0.33", 2)
	e.addrs["llbd-before"] = at("127.0.0.34", 3)
	for _, p := range append([]string{"direct"}, cfg.Paths...) {
		ln, lerr := net.Listen("tcp", e.addrs[p])
		if lerr != nil {
			return e, fmt.Errorf("address %s is busy (choose another --base-port): %w", e.addrs[p], ErrConfig)
		}
		_ = ln.Close()
	}
	cfg.progress("starting the backend on %s (%d events per stream, %v apart)", backend, cfg.Events, cfg.gap())
	if e.backend, err = startBackendProc(cfg.Self, backendSpec{Addr: backend, Events: cfg.Events, Gap: cfg.gap()}, filepath.Join(dir, "backend.log")); err != nil {
		return e, err
	}
	if slices.Contains(cfg.Paths, "haproxy") {
		cfg.progress("starting haproxy on %s (maxconn %d)", e.addrs["haproxy"], cfg.MaxConns)
		if e.haproxy, err = e.startHAProxy(backend); err != nil {
			return e, err
		}
		if err = waitHTTP(ctx, "http://"+e.addrs["haproxy"]+"/v1/completions", requestBody); err != nil {
			return e, err
		}
	}
	for _, p := range []string{"llbd", "llbd-before"} {
		if !slices.Contains(cfg.Paths, p) {
			continue
		}
		bin := cfg.LLBD
		if p == "llbd-before" {
			bin = cfg.Before
		}
		cfg.progress("starting %s (%s) with a rule on %s", p, bin, e.addrs[p])
		state := filepath.Join(dir, p+"-state")
		if err = os.MkdirAll(state, 0o755); err != nil {
			return e, err
		}
		args := append([]string{"--max-conns", strconv.Itoa(cfg.MaxConns)}, cfg.LLBDArgs...)
		d, derr := harness.StartDaemon(ctx, harness.DaemonConfig{Bin: bin, StateDir: state, LogPath: filepath.Join(dir, p+".log"), Args: args})
		if derr != nil {
			return e, fmt.Errorf("%w: %w", ErrTool, derr)
		}
		e.llbd[p] = d
		if err = e.rule(ctx, d, e.addrs[p], backend); err != nil {
			return e, err
		}
	}
	return e, nil
}

// rule creates llbd's single-pool rule with the defaults a user gets: no
// probe or timeout setting (GET /health every 5 s, 2 s per probe, 500 ms
// to connect).
func (e *streamsEnv) rule(ctx context.Context, d *harness.Daemon, vip, endpoint string) error {
	vh, vp, _ := net.SplitHostPort(vip)
	eh, ep, _ := net.SplitHostPort(endpoint)
	body := fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":%s,"protocol":"tcp","sel":0,"mode":4},`+
		`"endpoints":[{"endpointIP":%q,"targetPort":%s,"weight":1}]}`, vh, vp, eh, ep)
	if err := d.PostRule(ctx, []byte(body)); err != nil {
		return fmt.Errorf("%w: %w", ErrTool, err)
	}
	return waitHTTP(ctx, "http://"+vip+"/v1/completions", requestBody)
}

// startHAProxy runs HAProxy 2.6 in front of the backend: keep-alive both
// ways with connections reused across clients (http-reuse always), no
// Nagle delay on streamed answers (option http-no-delay) and, with
// HAProxyCheck, the health check llbd runs by default.
func (e *streamsEnv) startHAProxy(backend string) (*exec.Cmd, error) {
	check := ""
	if e.cfg.HAProxyCheck {
		check = " check inter 5s fall 2 rise 1"
	}
	conf := fmt.Sprintf(`global
  maxconn %[1]d
defaults
  mode http
  timeout connect 5s
  timeout client 120s
  timeout server 120s
  timeout check 2s
  option http-keep-alive
  option http-no-delay
  http-reuse always
frontend fe
  bind %[2]s
  maxconn %[1]d
  default_backend be
backend be
  balance roundrobin
  option httpchk GET /health
  server s1 %[3]s%[4]s
`, e.cfg.MaxConns, e.addrs["haproxy"], backend, check)
	path := filepath.Join(e.dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	bin, err := lookTool("haproxy")
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(e.dir, "haproxy.log"))
	if err != nil {
		return nil, err
	}
	e.logs = append(e.logs, logf)
	cmd := exec.Command(bin, "-f", path, "-db")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	harness.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start haproxy: %w: %w", ErrTool, err)
	}
	return cmd, nil
}

func (e *streamsEnv) stop() {
	for _, d := range e.llbd {
		_ = d.Stop(10 * time.Second)
	}
	if e.haproxy != nil && e.haproxy.Process != nil {
		_ = syscall.Kill(-e.haproxy.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = e.haproxy.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-e.haproxy.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	if e.backend != nil {
		e.backend.stop()
	}
	for _, f := range e.logs {
		_ = f.Close()
	}
}

// pid is the proxy process of a path (the backend's for direct).
func (e *streamsEnv) pid(path string) int {
	switch path {
	case "direct":
		return e.backend.pid()
	case "haproxy":
		return e.haproxy.Process.Pid
	}
	return e.llbd[path].PID()
}

// run runs n streams through path once.
func (e *streamsEnv) run(ctx context.Context, path string, n, round int) StreamRun {
	cfg := e.cfg
	r := StreamRun{Path: path, Streams: n, Round: round}
	proxy, backend := e.pid(path), e.backend.pid()
	if path == "direct" {
		proxy = 0
	}
	if proxy != 0 {
		r.RSSBefore = procRSS(proxy)
	}
	l := newStreamLoad(e.addrs[path], n, cfg.Events, cfg.Ramp, cfg.Window, cfg.streamLen())
	// A source address of its own per run: the last runs' connections in
	// TIME_WAIT never take the ports this one needs.
	e.runs++
	l.local = &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+e.runs%250))}
	type cpus struct{ proxy, backend, client time.Duration }
	read := func() cpus {
		c := cpus{backend: harness.ProcCPU(backend), client: selfCPU()}
		if proxy != 0 {
			c.proxy = harness.ProcCPU(proxy)
		}
		return c
	}
	var at0, at1 cpus
	sampled := make(chan struct{})
	go func() { // CPU at the window's edges
		defer close(sampled)
		if sleepUntil(ctx, l.winStart) {
			at0 = read()
		}
		if sleepUntil(ctx, l.winEnd) {
			at1 = read()
		}
	}()
	done := make(chan struct{})
	peaked := make(chan struct{})
	go func() { // the proxy's RSS peak
		defer close(peaked)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if proxy != 0 {
					r.RSSPeak = max(r.RSSPeak, procRSS(proxy))
				}
			}
		}
	}()
	l.run(ctx)
	close(done)
	<-sampled
	<-peaked
	win := l.winEnd.Sub(l.winStart)
	events := l.eventsInWin.Load()
	if win > 0 {
		r.EventsPerSec = float64(events) / win.Seconds()
	}
	if events > 0 {
		r.ProxyCPU = (at1.proxy - at0.proxy) / time.Duration(events)
		r.BackendCPU = (at1.backend - at0.backend) / time.Duration(events)
		r.ClientCPU = (at1.client - at0.client) / time.Duration(events)
	}
	delay, first := l.merged()
	r.Delay, r.First = quantilesOf(delay), quantilesOf(first)
	r.StreamsOK, r.Broken, r.ConnErrors = l.streamsOK.Load(), l.broken.Load(), l.connErrors.Load()
	l.mu.Lock()
	r.Statuses, r.Codes, r.Samples = l.statuses, l.codes, l.samples
	l.mu.Unlock()
	r.Load1 = load1()
	sleepUntil(ctx, time.Now().Add(cfg.Settle))
	return r
}

func quantilesOf(h interface {
	ValueAtQuantile(float64) int64
	TotalCount() int64
}) Quantiles {
	us := func(q float64) time.Duration { return time.Duration(h.ValueAtQuantile(q)) * time.Microsecond }
	return Quantiles{P50: us(50), P99: us(99), P999: us(99.9), N: h.TotalCount()}
}

// load1 is the one-minute load average (-1 when unknown).
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return -1
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return -1
	}
	return v
}

// summarize takes the medians of the rounds per count and path; the added
// delay is each round's delay minus the direct run's of the same round.
func summarize(runs []StreamRun, counts []int, paths []string) []StreamSummary {
	var out []StreamSummary
	for _, n := range counts {
		direct := map[int]StreamRun{}
		for _, r := range runs {
			if r.Streams == n && r.Path == "direct" {
				direct[r.Round] = r
			}
		}
		for _, p := range paths {
			s := StreamSummary{Path: p, Streams: n, Statuses: map[int]int64{}, Codes: map[string]int64{}, Samples: map[string]string{}}
			var eps, rss []float64
			var d50, d99, d999, f50, f99, f999, a50, a99, a999, pc, bc, cc []time.Duration
			for _, r := range runs {
				if r.Streams != n || r.Path != p {
					continue
				}
				eps = append(eps, r.EventsPerSec)
				d50, d99, d999 = append(d50, r.Delay.P50), append(d99, r.Delay.P99), append(d999, r.Delay.P999)
				f50, f99, f999 = append(f50, r.First.P50), append(f99, r.First.P99), append(f999, r.First.P999)
				if dr, ok := direct[r.Round]; ok {
					a50 = append(a50, r.Delay.P50-dr.Delay.P50)
					a99 = append(a99, r.Delay.P99-dr.Delay.P99)
					a999 = append(a999, r.Delay.P999-dr.Delay.P999)
				}
				pc, bc, cc = append(pc, r.ProxyCPU), append(bc, r.BackendCPU), append(cc, r.ClientCPU)
				if p != "direct" {
					rss = append(rss, r.RSSPerStream())
				}
				for st, v := range r.Statuses {
					s.Statuses[st] += v
				}
				for k, v := range r.Codes {
					s.Codes[k] += v
					if _, ok := s.Samples[k]; !ok {
						s.Samples[k] = r.Samples[k]
					}
				}
				s.Broken += r.Broken
				s.ConnErrors += r.ConnErrors
			}
			s.EventsPerSec = median(eps)
			s.Delay = Quantiles{P50: median(d50), P99: median(d99), P999: median(d999)}
			s.First = Quantiles{P50: median(f50), P99: median(f99), P999: median(f999)}
			s.Added = Quantiles{P50: median(a50), P99: median(a99), P999: median(a999)}
			s.ProxyCPU, s.BackendCPU, s.ClientCPU = median(pc), median(bc), median(cc)
			s.RSSPerStream = median(rss)
			out = append(out, s)
		}
	}
	return out
}

// readDaemonMetrics reads llbd's heap in use and goroutine count from its
// /metrics.
func (e *streamsEnv) readDaemonMetrics(ctx context.Context, m *IdleMemory) {
	m.HeapInuse, m.Goroutines = -1, -1
	d := e.llbd[m.Path]
	if d == nil {
		return
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.Addr+"/metrics", nil)
	if err != nil {
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_memstats_heap_inuse_bytes":
			m.HeapInuse = int64(v)
		case "go_goroutines":
			m.Goroutines = int64(v)
		}
	}
}
