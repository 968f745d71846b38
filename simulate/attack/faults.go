package attack

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/llbproject/llb/simulate/worker"
)

// The faults family: a P/D rule over six worker processes (three prefill
// workers publishing KV events, three decode workers; speaking the run's
// engine: vLLM's NIXL legs, SGLang's bootstrap rooms, TensorRT-LLM's
// context and generation legs) under steady load,
// while a seeded schedule SIGKILLs a worker (and starts it again: a
// restarted engine, its KV publisher from sequence 0) or SIGSTOPs one (and
// SIGCONTs it). Oracle per request: it ends within faultReqBound with 200
// and a whole body, a documented error code, or a response cut after its
// first byte — never a hang, a fake end, an undocumented code. Per fault:
// the worker is probed up again after it came back; a restarted prefill's
// KV feed reconnects and mirrors blocks again. After the family: llbd
// alive, resources back near the baseline, no error in its log.

// Fault bounds: llbd runs with these (seconds), so a frozen worker is left
// within them.
const (
	faultPrefillTimeoutSec = 4
	faultDecodeTimeoutSec  = 3
	faultIdleTimeoutSec    = 3
	// faultReqBound bounds a request: a prefill deadline and its one
	// retry, the decode bound and its retry, and slack.
	faultReqBound = 20 * time.Second
	// faultBackWithin bounds how long a worker that came back may take to
	// be probed up again (probe period 1 s).
	faultBackWithin = 15 * time.Second
)

// documentedCodes are the data-plane errors llb documents for failing
// workers (docs/troubleshooting.md).
var documentedCodes = map[string]bool{
	"http_502_backend_unreachable": true, "http_502_pd_decode_backend_died": true,
	"http_503_no_healthy_backend": true, "http_503_pd_pool_unavailable": true, "http_503_service_unavailable": true,
	"http_504_pd_prefill_timeout": true, "http_504_pd_decode_timeout": true, "http_504_pd_idle_timeout": true,
}

// faultFamily is one run of the faults family.
type faultFamily struct {
	cfg     *Config
	d       *daemon
	t       *Tally
	workers []*workerProc
	vip     string
	service string
	reqs    atomic.Int64
	mu      sync.Mutex // guards t while the load runs
}

// runFaults runs the family within budget.
func runFaults(ctx context.Context, cfg *Config, n loopNet, budget time.Duration) (*Tally, error) {
	t := newTally(FamilyFaults)
	f := &faultFamily{cfg: cfg, t: t, vip: n.ip(hostFaultVIP) + ":2020", service: "tcp:" + n.ip(hostFaultVIP) + ":2020"}
	defer func() {
		for _, w := range f.workers {
			w.stop()
		}
	}()
	var eps []map[string]any
	for i, role := range []string{"prefill", "prefill", "prefill", "decode", "decode", "decode"} {
		spec := workerSpec{Name: fmt.Sprintf("%s-%d", role, i), IP: n.ip(hostFaultWorker + i), Role: role, KVEvents: role == "prefill", TimeScale: 0.5,
			Dialect: cfg.dialect()}
		w, err := startWorkerProc(spec)
		if err != nil {
			return t, err
		}
		f.workers = append(f.workers, w)
		epRole := 1
		if role == "decode" {
			epRole = 2
		}
		eps = append(eps, map[string]any{"endpointIP": spec.IP, "targetPort": procHTTPPort, "weight": 1, "ep_role": epRole, "nixl_port": procNIXLPort})
	}
	env := []string{fmt.Sprintf("LLB_PD_PREFILL_TIMEOUT_SEC=%d", faultPrefillTimeoutSec),
		fmt.Sprintf("LLB_PD_DECODE_TIMEOUT_SEC=%d", faultDecodeTimeoutSec), fmt.Sprintf("LLB_PD_IDLE_TIMEOUT_SEC=%d", faultIdleTimeoutSec)}
	d, err := startDaemon(ctx, cfg.LLBD, cfg.WorkDir, FamilyFaults, env, nil)
	if err != nil {
		return t, err
	}
	defer d.Kill()
	f.d = d
	sa := cfg.engineRule(map[string]any{"externalIP": n.ip(hostFaultVIP), "port": 2020, "protocol": "tcp", "mode": 4, "sel": 0, "name": "atk-faults",
		"pd_disagg_mode": true, "kvExactMode": 1, "kvZmqPort": procKVPort, "kvBlockSize": 16, "kvHashAlgo": "sha256_cbor", "kvNoneHashSeed": "0",
		"kvWarmupSec": 0, "probeTimeout": 1, "probeRetries": 1, "cb_enable": true})
	if cfg.dialect() == worker.DialectSGLang {
		sa["pdBootstrapPort"] = procBootstrapPort // both legs at once: the prefill's room
	}
	rule, _ := json.Marshal(map[string]any{"serviceArguments": sa, "endpoints": eps})
	if err := d.PostRule(ctx, rule); err != nil {
		return t, err
	}
	if err := d.WaitActive(ctx, n.ip(hostFaultVIP), 2020); err != nil {
		return t, err
	}
	t.note("llbd with LLB_PD_PREFILL_TIMEOUT_SEC=%d LLB_PD_DECODE_TIMEOUT_SEC=%d LLB_PD_IDLE_TIMEOUT_SEC=%d; probe every 1 s; request bound %v",
		faultPrefillTimeoutSec, faultDecodeTimeoutSec, faultIdleTimeoutSec, faultReqBound)

	// Warm up, then take the baseline at rest.
	f.load(ctx, min(3*time.Second, budget/4), false)
	time.Sleep(time.Second)
	base, err := d.usage(ctx)
	if err != nil {
		return t, err
	}
	t.note("baseline after warm-up: %v", base)

	stop := make(chan struct{})
	loadDone := make(chan struct{})
	go func() { defer close(loadDone); f.loadUntil(ctx, stop, true) }()
	f.schedule(ctx, attackSpan(budget, 15*time.Second))
	close(stop)
	<-loadDone
	f.checkEnd(ctx, base)
	return t, ctx.Err()
}

// load runs the clients for d (recording outcomes when record is set).
func (f *faultFamily) load(ctx context.Context, d time.Duration, record bool) {
	stop := make(chan struct{})
	time.AfterFunc(d, func() { close(stop) })
	f.loadUntil(ctx, stop, record)
}

// faultClients is how many clients send requests back to back.
const faultClients = 6

// loadUntil runs the clients until stop closes.
func (f *faultFamily) loadUntil(ctx context.Context, stop <-chan struct{}, record bool) {
	tr := &http.Transport{MaxIdleConnsPerHost: faultClients, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for range faultClients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if ctx.Err() != nil {
					return
				}
				i := int(f.reqs.Add(1) - 1)
				out, detail, took := f.request(ctx, client, caseRand(f.cfg.Seed, FamilyFaults, i))
				if out != "ok" {
					time.Sleep(50 * time.Millisecond) // a client backs off; no spinning on an open breaker's 503s
				}
				if !record {
					continue
				}
				o := refused()
				switch {
				case out == "ok":
					o = accepted()
				case out == "stream_cut" || out == "body_cut" || documentedCodes[out]:
				default:
					o = defect("%s: %s", out, detail)
				}
				if took > faultReqBound && o.Verdict != Defective {
					o = defect("%s after %v (bound %v)", out, took.Round(time.Millisecond), faultReqBound)
				}
				f.mu.Lock()
				f.t.add(i, out, o, func() string { return "a request of the load while workers were killed and frozen: " + detail })
				f.mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// request sends one request drawn from rng and classifies its outcome.
func (f *faultFamily) request(ctx context.Context, c *http.Client, rng *rand.Rand) (out, detail string, took time.Duration) {
	stream := rng.IntN(2) == 0
	maxTokens := 16 + rng.IntN(48)
	body := fmt.Sprintf(`{"model":"sim-model","prompt":"shared preamble %d. Question %d: how do load balancers fail?","max_tokens":%d,"stream":%v}`,
		rng.IntN(4), rng.IntN(1_000_000), maxTokens, stream)
	rctx, cancel := context.WithTimeout(ctx, faultReqBound+10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodPost, "http://"+f.vip+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	out, detail = classify(c, req, stream, maxTokens)
	return out, detail + " (request " + body + ")", time.Since(start)
}

// classify sends req and names its outcome: ok, stream_cut, body_cut,
// http_<status>_<code>, or a defect (hung, closed_before_response,
// fake_done, stream_eof_without_done, bad_body).
func classify(c *http.Client, req *http.Request, stream bool, maxTokens int) (string, string) {
	ctx := req.Context()
	res, err := c.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return "hung", err.Error()
		}
		return "closed_before_response", err.Error()
	}
	defer res.Body.Close()
	if res.StatusCode/100 != 2 {
		b, err := io.ReadAll(res.Body)
		if err != nil {
			return fmt.Sprintf("http_%d_cut", res.StatusCode), err.Error()
		}
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		return fmt.Sprintf("http_%d_%s", res.StatusCode, e.Error.Code), strings.TrimSpace(string(b))
	}
	if stream {
		sc := bufio.NewScanner(res.Body)
		events, done := 0, false
		for sc.Scan() {
			switch line := sc.Text(); {
			case strings.HasPrefix(line, "data: [DONE]"):
				done = true
			case strings.HasPrefix(line, "data: {"):
				events++
			}
		}
		err := sc.Err()
		switch {
		case ctx.Err() != nil:
			return "hung", fmt.Sprintf("stream after %d events: %v", events, err)
		case done && events == maxTokens && err == nil:
			return "ok", ""
		case done:
			return "fake_done", fmt.Sprintf("[DONE] after %d of %d events (%v)", events, maxTokens, err)
		case err != nil:
			return "stream_cut", fmt.Sprintf("after %d events: %v", events, err)
		}
		return "stream_eof_without_done", fmt.Sprintf("clean end after %d events", events)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		if ctx.Err() != nil {
			return "hung", err.Error()
		}
		return "body_cut", err.Error()
	}
	var v struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Usage.CompletionTokens != maxTokens {
		return "bad_body", fmt.Sprintf("%v: %s", err, quote(b, 200))
	}
	return "ok", ""
}

// schedule runs the seeded faults until budget is spent.
func (f *faultFamily) schedule(ctx context.Context, budget time.Duration) {
	deadline := time.Now().Add(budget)
	kills, stops := 0, 0
	for i := 0; time.Now().Before(deadline) && ctx.Err() == nil; i++ {
		rng := caseRand(f.cfg.Seed, "faults-schedule", i)
		time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
		ep := rng.IntN(len(f.workers))
		w := f.workers[ep]
		if rng.IntN(2) == 0 {
			kills++
			f.killAndRestart(ctx, rng, ep, w)
		} else {
			stops++
			w.signal(syscall.SIGSTOP)
			time.Sleep(time.Duration(2000+rng.IntN(3000)) * time.Millisecond)
			w.signal(syscall.SIGCONT)
			f.waitBack(ctx, ep, "SIGSTOP then SIGCONT")
		}
	}
	f.t.note("faults: %d SIGKILL+restart, %d SIGSTOP+SIGCONT", kills, stops)
}

// killAndRestart SIGKILLs worker ep, starts it again after a pause, and
// checks it comes back (and, for a prefill, that its KV feed does).
func (f *faultFamily) killAndRestart(ctx context.Context, rng *rand.Rand, ep int, w *workerProc) {
	before, _ := f.feed(ctx, ep)
	w.kill()
	time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
	if err := w.start(); err != nil {
		f.t.check("restart", false, fmt.Sprintf("worker %s could not start again: %v", w.spec.Name, err), "")
		return
	}
	f.waitBack(ctx, ep, "SIGKILL then restart")
	if w.spec.Role != "prefill" {
		return
	}
	// A restarted engine's publisher starts from sequence 0 with an empty
	// cache: the feed reconnects, sees the restart, and mirrors anew.
	deadline := time.Now().Add(20 * time.Second)
	var after feedState
	var err error
	for time.Now().Before(deadline) {
		if after, err = f.feed(ctx, ep); err == nil && after.Connected && after.Reconnects > before.Reconnects && after.Blocks > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.t.check("kv_feed_back", err == nil && after.Connected && after.Reconnects > before.Reconnects && after.Blocks > 0,
		fmt.Sprintf("%s's KV feed 20 s after its restart: connected %v, reconnects %d (before %d), %d blocks mirrored (%v)",
			w.spec.Name, after.Connected, after.Reconnects, before.Reconnects, after.Blocks, err), "")
}

// waitBack checks that endpoint ep is probed up within faultBackWithin.
func (f *faultFamily) waitBack(ctx context.Context, ep int, what string) {
	deadline := time.Now().Add(faultBackWithin)
	var last string
	for time.Now().Before(deadline) && ctx.Err() == nil {
		var st struct {
			Endpoints []struct {
				Probe string `json:"probe"`
				State string `json:"state"`
			} `json:"endpoints"`
		}
		path := "/netlox/v1/config/loadbalancer/externalipaddress/" + strings.Split(f.vip, ":")[0] + "/port/2020/protocol/tcp/status"
		if err := f.d.getJSON(ctx, path, &st); err == nil && ep < len(st.Endpoints) {
			last = st.Endpoints[ep].Probe + "/" + st.Endpoints[ep].State
			if st.Endpoints[ep].Probe == "up" {
				f.t.check("came_back", true, "", "")
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	f.t.check("came_back", false, fmt.Sprintf("%s of %s: not probed up within %v (last %s)", what, f.workers[ep].spec.Name, faultBackWithin, last), "")
}

// feedState is one endpoint's KV feed as the inventory view shows it.
type feedState struct {
	Connected  bool
	Reconnects uint64
	Blocks     int
}

// feed reads endpoint ep's KV feed.
func (f *faultFamily) feed(ctx context.Context, ep int) (feedState, error) {
	r, err := f.d.inventoryRank(ctx, f.service, ep)
	return feedState{Connected: r.Feed.Connected, Reconnects: r.Feed.Reconnects, Blocks: r.Blocks}, err
}

// checkEnd is the family's closing oracle.
func (f *faultFamily) checkEnd(ctx context.Context, base usage) {
	err := f.d.alive(ctx)
	f.t.check("alive", err == nil, fmt.Sprint(err), "")
	if err != nil {
		return
	}
	u, ok := f.d.settle(ctx, base, 20, 60, 30*time.Second)
	f.t.note("after the faults: %v (baseline %v)", u, base)
	f.t.check("resources_back", ok, fmt.Sprintf("30 s after the last fault: %v; baseline %v (slack 20 fds, 60 goroutines)", u, base), "")
	f.d.checkLog(f.t)
}
