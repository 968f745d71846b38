package attack

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/worker"
)

// The data-plane family: raw bytes against a single-pool rule's VIP, in
// front of two healthy simulated workers. Oracle per case: the answer (a
// 4xx or a documented code, or a clean close) within the case's bound;
// never a 200 for an incomplete or invalid request; never a 5xx (the
// workers are healthy); one answer, then a close, for a request that could
// smuggle another. After the family: llbd alive, its fds and goroutines
// back near the baseline, its RSS peak bounded, no error in its log.

// Data-plane bounds llbd promises (gateway/listener.go, gateway/config.go).
const (
	dpHeaderTimeout = 10 * time.Second // DefaultReadHeaderTimeout
	dpBodyTimeout   = 60 * time.Second // DefaultBodyReadTimeout
	dpBodyLimit     = 16 << 20         // DefaultBodyLimit
	dpSlack         = 3 * time.Second  // scheduling slack on a loaded 2-core machine
	dpFastBound     = 10 * time.Second // a fast case's answer
	// SlowCasesBudget is the data-plane budget below which the slow-client
	// cases (which last the 60 s body-read bound) are left out.
	SlowCasesBudget = 70 * time.Second
	// dpRSSBound bounds llbd's RSS growth over its baseline during the
	// family (16 MiB bodies, four at a time).
	dpRSSBound = 768 << 20
)

// dpCase is one data-plane attack: what to send and what is right.
type dpCase struct {
	kind string
	plan rawPlan
	exp  dpExpect
	// h2Path, when set, makes the case one h2c request with this :path
	// (sent by Go's HTTP/2 client, not plan); see h2TargetCase.
	h2Path string
}

// dpExpect is a case's oracle.
type dpExpect struct {
	// want200 marks a complete, valid request: it must be answered 200
	// with a complete body.
	want200 bool
	// ok200 allows a 200 (the input is odd but still a valid request).
	ok200 bool
	// allow lists non-4xx statuses that are a clean refusal here (505 for
	// an HTTP version net/http does not speak, 501 for an unknown transfer
	// coding, 508 for a looped request).
	allow []int
	// maxResponses bounds the responses on the connection (0: 1): a second
	// one served a request smuggled behind the first.
	maxResponses int
	// mustClose: the connection must be closed after the answer (the plan
	// reads until it is).
	mustClose bool
	// bound is when the answer (or the close) must have come (0:
	// dpFastBound).
	bound time.Duration
	// anyBody skips the check that a 200's body is whole JSON or a whole
	// stream (a HEAD, net/http's own OPTIONS *).
	anyBody bool
	// untilClose: a 200 must come without a length or chunks, its body
	// ended by the close (a stream to an HTTP/1.0 client, as vLLM sends
	// it; llb used to hold such a stream whole and send it with a length).
	untilClose bool
}

// dpFamily is one run of the data-plane family.
type dpFamily struct {
	cfg *Config
	net loopNet
	d   *daemon
	vip string // VIP:port
	t   *Tally
}

// runDataPlane runs the family within budget.
func runDataPlane(ctx context.Context, cfg *Config, n loopNet, budget time.Duration) (*Tally, error) {
	t := newTally(FamilyDataPlane)
	tmpl := worker.DefaultConfig()
	tmpl.KVEvents = false
	tmpl.Engine.Latency.TimeScale = 0.01
	tmpl.Dialect = cfg.dialect()
	fl, err := fleet.Start(fleet.Config{Single: 2, BaseIP: n.ip(hostDPWorker), HTTPPort: 8000, Template: &tmpl})
	if err != nil {
		return t, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = fl.Stop(sctx)
	}()
	d, err := startDaemon(ctx, cfg.LLBD, cfg.WorkDir, FamilyDataPlane, dpLLBDEnv(), nil)
	if err != nil {
		return t, err
	}
	defer d.Kill()
	f := &dpFamily{cfg: cfg, net: n, d: d, vip: n.ip(hostDPVIP) + ":2020", t: t}
	rule, _ := json.Marshal(map[string]any{
		"serviceArguments": cfg.engineRule(map[string]any{"externalIP": n.ip(hostDPVIP), "port": 2020, "protocol": "tcp", "mode": 4, "sel": 0, "name": "atk-dataplane"}),
		"endpoints":        fl.Endpoints(),
	})
	if err := d.PostRule(ctx, rule); err != nil {
		return t, err
	}
	if err := d.WaitActive(ctx, n.ip(hostDPVIP), 2020); err != nil {
		return t, err
	}
	base, err := f.baseline(ctx)
	if err != nil {
		return t, err
	}
	t.note("baseline after warm-up: %v", base)
	t.note("bounds: headers %v, body %v, body limit %d MiB (+%v slack)", dpHeaderTimeout, dpBodyTimeout, dpBodyLimit>>20, dpSlack)

	t.note("process bounds: --body-buffer-bytes %d MiB, --max-conns %d, --client-send-timeout %v", dpBodyBudget>>20, dpMaxConns, dpSendTimeout)
	peak := watchRSS(ctx, d)

	limits := !shortRun(budget) && !cfg.Replay
	slow := f.slowCases(ctx, budget)
	f.fastCases(ctx, budget, limits)
	if limits {
		f.bodyBudgetCase(ctx, base)
		f.connFloodCase(ctx)
		f.nonReaderCase(ctx)
	}
	for _, r := range slow() {
		t.add(r.i, r.c.kind, r.o, func() string { return reproRaw(r.c) })
	}
	f.checkEnd(ctx, base, peak())
	return t, ctx.Err()
}

// baseline warms the rule up (connections to both workers) and reads the
// resources llbd holds at rest.
func (f *dpFamily) baseline(ctx context.Context) (usage, error) {
	for i := range 8 {
		c := validCase(rand.New(rand.NewPCG(uint64(i), 0)), f.vip)
		if o := f.judge(c, exchange(ctx, f.vip, c.plan)); o.Verdict != Accepted {
			return usage{}, fmt.Errorf("warm-up request %d: %s", i, o.Why)
		}
	}
	time.Sleep(500 * time.Millisecond) // let the warm-up connections go idle
	return f.d.usage(ctx)
}

// fastCases runs the generated cases, four at a time, until the budget
// (less what the closing checks need, and the bound cases when limits)
// is spent.
func (f *dpFamily) fastCases(ctx context.Context, budget time.Duration, limits bool) {
	tail := 15 * time.Second
	if limits {
		tail += dpLimitsSpan
	}
	deadline := time.Now().Add(attackSpan(budget, tail))
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	workers := 4
	if f.cfg.Replay {
		workers = 1
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if f.cfg.Replay {
					if i > 0 {
						return
					}
					i = f.cfg.Case
				} else if time.Now().After(deadline) {
					return
				}
				c := dpGenerate(caseRand(f.cfg.Seed, FamilyDataPlane, i), f.vip)
				o := f.run(ctx, c)
				mu.Lock()
				f.t.add(i, c.kind, o, func() string { return reproRaw(c) })
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}

// run runs a generated case and judges it.
func (f *dpFamily) run(ctx context.Context, c dpCase) Outcome {
	if c.h2Path != "" {
		return f.h2Target(ctx, c)
	}
	return f.judge(c, exchange(ctx, f.vip, c.plan))
}

// reproRaw shows what a case sent.
func reproRaw(c dpCase) string {
	if c.h2Path != "" {
		return fmt.Sprintf("h2c with prior knowledge (Go's HTTP/2 client): GET with :path %q", c.h2Path)
	}
	var b strings.Builder
	for i, s := range c.plan.steps {
		if i == 8 {
			fmt.Fprintf(&b, "… %d more writes of the same kind\n", len(c.plan.steps)-8)
			break
		}
		if s.pause > 0 {
			fmt.Fprintf(&b, "after %v: ", s.pause)
		}
		fmt.Fprintf(&b, "write %s\n", quote(s.data, 1200))
	}
	if c.plan.halfClose {
		b.WriteString("then shut the write side\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// judge applies a case's oracle to what happened.
func (f *dpFamily) judge(c dpCase, res rawResult) Outcome {
	e := c.exp
	bound := e.bound
	if bound == 0 {
		bound = dpFastBound
	}
	maxResp := max(e.maxResponses, 1)
	var final []rawResponse // without 1xx
	for _, r := range res.responses {
		if r.status >= 200 {
			final = append(final, r)
		}
	}
	switch {
	case res.dialErr != nil:
		return defect("cannot connect: %v", res.dialErr)
	case len(final) > maxResp:
		return defect("%d responses %v on one connection (at most %d): a request smuggled behind the first was served", len(final), res.codes(), maxResp)
	case len(final) == 0 && res.timedOut:
		return defect("no answer and the connection still open after %v (bound %v)", res.ended.Round(time.Millisecond), bound)
	case len(final) == 0 && e.want200:
		return defect("no answer to a valid request: connection %s after %v", res.end(), res.ended.Round(time.Millisecond))
	case len(final) == 0:
		if res.ended > bound+dpSlack {
			return defect("closed only after %v (bound %v)", res.ended.Round(time.Millisecond), bound)
		}
		return refused()
	}
	r := final[0]
	if r.at > bound+dpSlack {
		return defect("answered %d after %v (bound %v)", r.status, r.at.Round(time.Millisecond), bound)
	}
	if e.mustClose && !res.closed && !res.reset {
		return defect("answered %d, then the connection was %s instead of closed", r.status, res.end())
	}
	switch {
	case r.status == http.StatusOK:
		if !e.want200 && !e.ok200 {
			return defect("200 for an invalid or incomplete request (body %s)", short(r.body))
		}
		if e.untilClose && r.framed {
			return defect("a stream to an HTTP/1.0 client came with a length (%s): it was held whole before its first byte went out", r.header.Get("Content-Length"))
		}
		if why := incomplete(r); why != "" && !e.anyBody {
			return defect("200 with %s", why)
		}
		return accepted()
	case e.want200:
		return defect("%d %s for a valid request", r.status, short(r.body))
	case r.status >= 400 && r.status < 500, containsInt(e.allow, r.status):
		return refused()
	}
	return defect("%d %s", r.status, short(r.body))
}

// incomplete says what is wrong with a 200's body ("" when it is whole):
// a stream must end with [DONE], a JSON answer must parse.
func incomplete(r rawResponse) string {
	if r.cut {
		return "a body cut short"
	}
	if strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		if !strings.Contains(string(r.body), "data: [DONE]") {
			return "a stream that ended without data: [DONE]: " + quote(r.body, 200)
		}
		return ""
	}
	if !json.Valid(r.body) {
		return "a body that is not JSON: " + quote(r.body, 200)
	}
	return ""
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// watchRSS samples llbd's RSS every 200 ms until ctx ends or the returned
// func is called, which gives the peak in kB.
func watchRSS(ctx context.Context, d *daemon) func() int64 {
	return sampleRSSCtx(ctx, d.PID(), 200*time.Millisecond)
}

// sampleRSS samples pid's RSS every period until the returned func is
// called, which gives the peak in kB.
func sampleRSS(pid int, period time.Duration) func() int64 {
	return sampleRSSCtx(context.Background(), pid, period)
}

func sampleRSSCtx(ctx context.Context, pid int, period time.Duration) func() int64 {
	ctx, cancel := context.WithCancel(ctx)
	var peak atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			if rss, err := procRSS(pid); err == nil && rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() int64 {
		cancel()
		<-done
		return peak.Load()
	}
}

// checkEnd is the family's closing oracle.
func (f *dpFamily) checkEnd(ctx context.Context, base usage, peakKB int64) {
	err := f.d.alive(ctx)
	f.t.check("alive", err == nil, fmt.Sprint(err), "")
	if err != nil {
		return
	}
	f.t.note("RSS peak %d MiB (baseline %d MiB)", peakKB>>10, base.rssKB>>10)
	f.t.check("rss_peak", (peakKB-base.rssKB)<<10 <= dpRSSBound,
		fmt.Sprintf("RSS peaked at %d MiB, %d MiB over the baseline (bound %d MiB)", peakKB>>10, (peakKB-base.rssKB)>>10, dpRSSBound>>20), "")
	u, ok := f.d.settle(ctx, base, 16, 40, 20*time.Second)
	f.t.note("after the attacks: %v (baseline %v)", u, base)
	f.t.check("resources_back", ok, fmt.Sprintf("20 s after the last attack: %v; baseline %v (slack 16 fds, 40 goroutines)", u, base), "")
	// Still serving.
	c := validCase(rand.New(rand.NewPCG(99, 0)), f.vip)
	o := f.judge(c, exchange(ctx, f.vip, c.plan))
	f.t.check("still_serving", o.Verdict == Accepted, "a valid request after the attacks: "+o.Why, reproRaw(c))
	f.d.checkLog(f.t)
}
