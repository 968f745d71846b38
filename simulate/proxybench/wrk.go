package proxybench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"
)

// WrkRun is one wrk run's figures.
type WrkRun struct {
	ReqPerSec float64
	// P50 and P99 are wrk's latency percentiles (--latency).
	P50, P99 time.Duration
	// Requests completed; Errors counts socket errors and non-2xx answers.
	Requests, Errors int64
	// CPU is the proxy's CPU time during the run (0 when not measured).
	CPU time.Duration
}

// PathResult is one path's throughput result: the median of its rounds.
type PathResult struct {
	// Name is one of pathNames: "direct", "haproxy", "llbd",
	// "llbd-before", "dataplane", "fasthttp" or "llbd+log".
	Name string
	// Connections is wrk's -c.
	Connections int
	// Median of the rounds (each figure's own median).
	ReqPerSec float64
	P50, P99  time.Duration
	// CPUPerReq is the proxy's CPU time per request (median; 0 direct).
	CPUPerReq time.Duration
	Errors    int64
	Rounds    []WrkRun
}

// target is a path under test.
type target struct {
	name string
	url  string
	cpu  func() time.Duration // nil: not measured
	// profile takes a CPU profile of the path's proxy over d into
	// ProfileDir (nil: none).
	profile func(ctx context.Context, d time.Duration) chan error
}

func (e *env) targets() []target {
	ts := []target{
		{name: "direct", url: "http://" + e.a.nginx + "/v1/completions"},
		{name: "haproxy", url: "http://" + e.a.haproxy + "/v1/completions", cpu: func() time.Duration { return pidCPU(e.haproxy) }},
		{name: "llbd", url: "http://" + e.a.llbd + "/v1/completions", cpu: e.llbd.CPU, profile: e.remoteProfile(e.debug, "llbd")},
	}
	if e.before != nil {
		ts = append(ts, target{name: "llbd-before", url: "http://" + e.a.before + "/v1/completions", cpu: e.before.CPU,
			profile: e.remoteProfile(e.debugB, "llbd-before")})
	}
	ts = append(ts,
		target{name: "dataplane", url: "http://" + e.a.dataPlane + "/v1/completions", cpu: selfCPU, profile: e.selfProfile("dataplane")},
		target{name: "fasthttp", url: "http://" + e.a.bare + "/v1/completions", cpu: selfCPU, profile: e.selfProfile("fasthttp")})
	if e.llbdLog != nil {
		ts = append(ts, target{name: "llbd+log", url: "http://" + e.a.llbdLog + "/v1/completions", cpu: e.llbdLog.CPU})
	}
	if len(e.cfg.Paths) > 0 {
		ts = slices.DeleteFunc(ts, func(t target) bool { return t.name != "haproxy" && !slices.Contains(e.cfg.Paths, t.name) })
	}
	return ts
}

// throughput runs the interleaved wrk rounds at each connection count.
func (e *env) throughput(ctx context.Context) ([]PathResult, error) {
	script := filepath.Join(e.dir, "post.lua")
	lua := fmt.Sprintf("wrk.method = \"POST\"\nwrk.body = %q\nwrk.headers[\"Content-Type\"] = \"application/json\"\n", requestBody)
	if err := os.WriteFile(script, []byte(lua), 0o644); err != nil {
		return nil, err
	}
	var all []PathResult
	for i, conns := range e.cfg.Connections {
		res, err := e.throughputAt(ctx, script, conns, i == 0)
		if err != nil {
			return nil, err
		}
		all = append(all, res...)
	}
	return all, nil
}

// throughputAt runs the interleaved rounds at conns connections; the first
// count's also warms every path and takes the profile.
func (e *env) throughputAt(ctx context.Context, script string, conns int, first bool) ([]PathResult, error) {
	ts := e.targets()
	res := make([]PathResult, len(ts))
	for i, t := range ts {
		res[i].Name, res[i].Connections = t.name, conns
		if !first {
			continue
		}
		e.cfg.progress("warming %s for %v", t.name, e.cfg.Warmup)
		if _, err := e.wrk(ctx, script, t.url, conns, e.cfg.Warmup); err != nil {
			return nil, err
		}
	}
	for r := range e.cfg.Rounds {
		for i, t := range ts {
			var before time.Duration
			if t.cpu != nil {
				before = t.cpu()
			}
			var prof chan error
			if first && r == 0 && t.profile != nil && e.cfg.ProfileDir != "" {
				prof = t.profile(ctx, e.cfg.Duration)
			}
			run, err := e.wrk(ctx, script, t.url, conns, e.cfg.Duration)
			if err != nil {
				return nil, err
			}
			if t.cpu != nil {
				run.CPU = t.cpu() - before
			}
			if prof != nil {
				if err := <-prof; err != nil {
					e.cfg.progress("profile: %v", err)
				}
			}
			e.cfg.progress("-c%d round %d %-8s %8.0f req/s  p50 %-8v p99 %-8v errors %d", conns, r+1, t.name, run.ReqPerSec, run.P50, run.P99, run.Errors)
			res[i].Rounds = append(res[i].Rounds, run)
		}
	}
	for i := range res {
		res[i].summarize()
	}
	return res, nil
}

// summarize sets the medians from the rounds.
func (p *PathResult) summarize() {
	var rps []float64
	var p50, p99, cpu []time.Duration
	p.Errors = 0
	for _, r := range p.Rounds {
		rps = append(rps, r.ReqPerSec)
		p50 = append(p50, r.P50)
		p99 = append(p99, r.P99)
		if r.CPU > 0 && r.Requests > 0 {
			cpu = append(cpu, r.CPU/time.Duration(r.Requests))
		}
		p.Errors += r.Errors
	}
	p.ReqPerSec = median(rps)
	p.P50, p.P99, p.CPUPerReq = median(p50), median(p99), median(cpu)
}

// remoteProfile returns what fetches a CPU profile of an llbd serving
// pprof on debug, covering most of a run, into <ProfileDir>/<name>.pprof
// (nil without debug).
func (e *env) remoteProfile(debug, name string) func(context.Context, time.Duration) chan error {
	if debug == "" {
		return nil
	}
	return func(ctx context.Context, d time.Duration) chan error {
		done := make(chan error, 1)
		secs := max(int((d-time.Second)/time.Second), 1)
		go func() {
			url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", debug, secs)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				done <- err
				return
			}
			defer resp.Body.Close()
			f, err := e.profileFile(name)
			if err != nil {
				done <- err
				return
			}
			_, err = io.Copy(f, resp.Body)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			done <- err
		}()
		return done
	}
}

// selfProfile returns what takes a CPU profile of this process — the data
// plane alone or the bare proxy, while wrk loads it — into
// <ProfileDir>/<name>.pprof.
func (e *env) selfProfile(name string) func(context.Context, time.Duration) chan error {
	return func(ctx context.Context, d time.Duration) chan error {
		done := make(chan error, 1)
		f, err := e.profileFile(name)
		if err == nil {
			err = pprof.StartCPUProfile(f)
			if err != nil {
				_ = f.Close()
			}
		}
		if err != nil {
			done <- err
			return done
		}
		go func() {
			select {
			case <-time.After(max(d-time.Second, time.Second)):
			case <-ctx.Done():
			}
			pprof.StopCPUProfile()
			done <- f.Close()
		}()
		return done
	}
}

func (e *env) profileFile(name string) (*os.File, error) {
	if err := os.MkdirAll(e.cfg.ProfileDir, 0o755); err != nil {
		return nil, err
	}
	return os.Create(filepath.Join(e.cfg.ProfileDir, name+".pprof"))
}

// wrk runs wrk once and parses its report.
func (e *env) wrk(ctx context.Context, script, url string, conns int, d time.Duration) (WrkRun, error) {
	bin, err := lookTool("wrk")
	if err != nil {
		return WrkRun{}, err
	}
	secs := max(int(d/time.Second), 1)
	cmd := exec.CommandContext(ctx, bin, "-t"+strconv.Itoa(e.cfg.Threads), "-c"+strconv.Itoa(conns),
		"-d"+strconv.Itoa(secs)+"s", "--latency", "-s", script, url)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return WrkRun{}, fmt.Errorf("wrk %s: %w: %w\n%s", url, ErrTool, err, out)
	}
	run, err := parseWrk(string(out))
	if err != nil {
		return WrkRun{}, fmt.Errorf("wrk %s: %w\n%s", url, err, out)
	}
	return run, nil
}

// parseWrk reads wrk's report: "Requests/sec:", the --latency
// distribution, "N requests in", socket errors and non-2xx counts.
func parseWrk(out string) (WrkRun, error) {
	var r WrkRun
	var haveRate, have50, have99 bool
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 2 && f[0] == "Requests/sec:":
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return r, fmt.Errorf("requests/sec %q: %w", f[1], ErrTool)
			}
			r.ReqPerSec, haveRate = v, true
		case len(f) == 2 && (f[0] == "50%" || f[0] == "99%"):
			d, err := parseWrkDuration(f[1])
			if err != nil {
				return r, err
			}
			if f[0] == "50%" {
				r.P50, have50 = d, true
			} else {
				r.P99, have99 = d, true
			}
		case len(f) >= 3 && f[1] == "requests" && f[2] == "in":
			r.Requests, _ = strconv.ParseInt(f[0], 10, 64)
		case len(f) >= 2 && f[0] == "Socket" && f[1] == "errors:":
			// Socket errors: connect 0, read 0, write 0, timeout 0
			for i := 2; i+1 < len(f); i += 2 {
				n, _ := strconv.ParseInt(strings.TrimSuffix(f[i+1], ","), 10, 64)
				r.Errors += n
			}
		case len(f) == 5 && f[0] == "Non-2xx":
			n, _ := strconv.ParseInt(f[4], 10, 64)
			r.Errors += n
		}
	}
	if !haveRate || !have50 || !have99 {
		return r, fmt.Errorf("no Requests/sec or latency distribution in wrk's output: %w", ErrTool)
	}
	return r, nil
}

// parseWrkDuration reads wrk's durations: 113.00us, 1.31ms, 2.05s, 1.00m.
func parseWrkDuration(s string) (time.Duration, error) {
	units := []struct {
		suffix string
		unit   time.Duration
	}{{"us", time.Microsecond}, {"ms", time.Millisecond}, {"m", time.Minute}, {"s", time.Second}}
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				break
			}
			return time.Duration(math.Round(f * float64(u.unit))), nil
		}
	}
	return 0, fmt.Errorf("wrk duration %q: %w", s, ErrTool)
}

// median returns the median (the mean of the middle two for even counts);
// 0 for none.
func median[T ~int64 | ~float64](v []T) T {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}
