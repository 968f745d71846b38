// Package proxybench measures llbd's data plane against HAProxy and against
// no proxy at all, side by side on loopback in one run (make bench-proxy):
//
//   - throughput: wrk -t1 -c32 and -c256 with a small POST /v1/completions against
//     nginx answering a fixed ~210-byte completion, directly, through
//     HAProxy 2.6 (roundrobin, http-reuse always) and through llbd (a
//     single-pool RR rule created over REST; optionally a second llbd with
//     its per-request access log on) and through llbd's data plane alone
//     (its gateway in this process, with a router that answers at once), in
//     interleaved rounds; req/s, p50, p99, CPU per request and the ratios to
//     HAProxy, from the medians;
//   - added latency: llbd minus direct at a fixed moderate rate, open loop
//     (a request is sent at its scheduled time whether or not earlier ones
//     returned, and its latency counts from that time);
//   - streaming: the added delay per chunk of a streamed 256-token SSE
//     response (each event carries the backend's send time).
//
// The processes run on one machine and share its cores with the load
// generator: the figures are for comparing paths within one run, not
// absolute capacities.
package proxybench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// ErrConfig reports an invalid configuration; ErrTool a tool that is
// missing or failed (nginx, haproxy, wrk, llbd).
var (
	ErrConfig = errors.New("proxybench: invalid configuration")
	ErrTool   = errors.New("proxybench: tool failed")
)

// Config says what to run. Zero fields take the defaults in brackets.
type Config struct {
	// LLBD is the llbd binary (required).
	LLBD string
	// Dir holds configs, logs and state; "" makes a temporary directory
	// that is removed afterwards.
	Dir string
	// Duration is each wrk run [10s]; Warmup precedes each path's first
	// run [2s]; Rounds is how many interleaved rounds run [3].
	Duration, Warmup time.Duration
	Rounds           int
	// Connections are wrk's -c, one throughput table each [32, 256];
	// Threads is wrk's -t [1].
	Connections []int
	Threads     int
	// Rate is the open-loop request rate of the added-latency test
	// [2000/s]; RateDuration how long each path runs per round [5s], in
	// two interleaved rounds.
	Rate         int
	RateDuration time.Duration
	// Streams is how many SSE streams each path serves [10], of Tokens
	// events [256] sent TokenGap apart [4ms].
	Streams, Tokens int
	TokenGap        time.Duration
	// AccessLog also measures an llbd running at --log-level info, which
	// writes one access-log line per request.
	AccessLog bool
	// Before, when set, is a second llbd binary (the build before a
	// change) measured in the same interleaved rounds as path
	// "llbd-before", so two builds compare against one HAProxy.
	Before string
	// Paths, when set, limits the throughput rounds to these paths (of
	// direct, haproxy, llbd, llbd-before, dataplane, fasthttp, llbd+log);
	// haproxy is always kept, the ratios are to it.
	Paths []string
	// ProfileDir, when set, receives CPU profiles taken during each
	// path's first throughput run: llbd's (llbd.pprof, and
	// llbd-before.pprof with Before) and this process's while it serves
	// the data plane alone and the bare fasthttp proxy (dataplane.pprof,
	// fasthttp.pprof).
	ProfileDir string
	// BasePort is the first of nine ports used on 127.0.0.21–27 [18000].
	BasePort int
	// Progress receives one line per step (nil: none).
	Progress io.Writer
}

func (c *Config) defaults() {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Duration, 10*time.Second)
	def(&c.Warmup, 2*time.Second)
	def(&c.RateDuration, 5*time.Second)
	def(&c.TokenGap, 4*time.Millisecond)
	defInt(&c.Rounds, 3)
	if len(c.Connections) == 0 {
		c.Connections = []int{32, 256}
	}
	defInt(&c.Threads, 1)
	defInt(&c.Rate, 2000)
	defInt(&c.Streams, 10)
	defInt(&c.Tokens, 256)
	defInt(&c.BasePort, 18000)
	if c.Progress == nil {
		c.Progress = io.Discard
	}
}

// Validate reports what is missing.
func (c *Config) Validate() error {
	var errs []error
	if c.LLBD == "" {
		errs = append(errs, fmt.Errorf("the llbd binary is required: %w", ErrConfig))
	}
	for _, p := range c.Paths {
		if !slices.Contains(pathNames, p) {
			errs = append(errs, fmt.Errorf("unknown path %q (paths: %v): %w", p, pathNames, ErrConfig))
		}
	}
	if slices.Contains(c.Paths, "llbd-before") && c.Before == "" {
		errs = append(errs, fmt.Errorf("path llbd-before needs the binary of the build before (--before): %w", ErrConfig))
	}
	if c.BasePort < 0 || c.BasePort > 65535-8 {
		errs = append(errs, fmt.Errorf("base port %d is out of range: %w", c.BasePort, ErrConfig))
	}
	return errors.Join(errs...)
}

// pathNames are the throughput paths, in the order they run.
var pathNames = []string{"direct", "haproxy", "llbd", "llbd-before", "dataplane", "fasthttp", "llbd+log"}

// Addresses of the run (loopback addresses of their own, so the ports can
// be the same for every process).
type addrs struct {
	nginx, haproxy, llbd, llbdLog, sse, llbdSSE, dataPlane, bare, before string
}

func newAddrs(base int) addrs {
	at := func(ip string, off int) string { return net.JoinHostPort(ip, strconv.Itoa(base+off)) }
	return addrs{
		nginx:   at("127.0.0.21", 0),
		haproxy: at("127.0.0.22", 1),
		llbd:    at("127.0.0.23", 2),
		llbdLog: at("127.0.0.24", 3),
		sse:     at("127.0.0.25", 4),
		llbdSSE: at("127.0.0.23", 5),
		// The data plane alone listens in this process.
		dataPlane: at("127.0.0.26", 6),
		bare:      at("127.0.0.26", 7),
		before:    at("127.0.0.27", 8),
	}
}

// Result is everything a run measured.
type Result struct {
	// Paths are the throughput results, per connection count: direct,
	// haproxy, llbd, dataplane (llbd's gateway alone, with a router that
	// answers at once), fasthttp (a bare fasthttp proxy, bare.go) and, with
	// Before, llbd-before and, with AccessLog, llbd+log (or the subset
	// Config.Paths names).
	Paths []PathResult
	// Rate is the added latency at a fixed rate.
	Rate RateResult
	// SSE is the per-chunk delay of streamed responses.
	SSE SSEResult
	// Config is the configuration the run used (defaults applied).
	Config Config
}

// Path returns the named path's result at wrk's connection count conns.
func (r *Result) Path(name string, conns int) (PathResult, bool) {
	i := slices.IndexFunc(r.Paths, func(p PathResult) bool { return p.Name == name && p.Connections == conns })
	if i < 0 {
		return PathResult{}, false
	}
	return r.Paths[i], true
}

// Run runs the benchmark: it starts nginx, HAProxy, the SSE backend and
// llbd, measures, and stops everything it started.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for _, tool := range []string{"nginx", "haproxy", "wrk"} {
		if _, err := lookTool(tool); err != nil {
			return nil, fmt.Errorf("%s is not installed (make bench-proxy installs it with apt-get): %w", tool, ErrTool)
		}
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "llb-proxybench-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	a := newAddrs(cfg.BasePort)
	for _, ad := range []string{a.nginx, a.haproxy, a.llbd, a.llbdLog, a.sse, a.llbdSSE, a.dataPlane, a.bare, a.before} {
		ln, err := net.Listen("tcp", ad)
		if err != nil {
			return nil, fmt.Errorf("address %s is busy (choose another --base-port): %w", ad, ErrConfig)
		}
		_ = ln.Close()
	}
	env, err := startEnv(ctx, &cfg, dir, a)
	if err != nil {
		return nil, err
	}
	defer env.stop()
	res := &Result{Config: cfg}
	if res.Paths, err = env.throughput(ctx); err != nil {
		return nil, err
	}
	if res.Rate, err = env.addedLatency(ctx); err != nil {
		return nil, err
	}
	if res.SSE, err = env.sse(ctx); err != nil {
		return nil, err
	}
	return res, nil
}

// lookTool finds a tool on PATH or in the sbin directories Debian installs
// nginx and haproxy to.
func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

func (c *Config) progress(format string, args ...any) {
	fmt.Fprintf(c.Progress, "proxybench: "+format+"\n", args...)
}
