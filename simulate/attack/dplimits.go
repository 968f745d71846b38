package attack

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/llbproject/llb/simulate/worker"
)

// The data plane's process-wide bounds under attack. llbd runs the family
// with a small body budget (--body-buffer-bytes dpBodyBudget) and
// connection limit (--max-conns dpMaxConns), see dpLLBDEnv, both roomy
// enough for the generated cases (four at a time, bodies up to the 16 MiB
// limit; 200 idle connections and the slow clients). Two cases then
// exceed them on purpose, each alone:
//
//   - body_budget: dpBudgetClients clients send a body near the limit at
//     once — the head and a first part, the rest dpBudgetHold later. The
//     bodies that fit are served (200); the others are answered 503
//     body_buffer_full with Retry-After and a close before the rest of
//     their body was sent. llbd's RSS stays within dpBudgetRSSBound of
//     its level before the case, and is back near the family's baseline
//     within dpRSSBackWithin after it.
//   - conn_flood: dpFloodConns connections opened at once, then a request
//     on each (for a path llbd answers itself, 404): those over the limit
//     are answered 503 too_many_connections and closed, the others served.

// Bounds llbd runs the data-plane family with, and what the cases check.
const (
	// dpBodyBudget fits eight bodies at the limit. The generated cases run
	// four at a time, and a chunked body reserves the whole limit until it
	// is read; with their answers' last moments overlapping the next
	// cases' heads, and the slow bodies, five limits were seen reserved at
	// once (with a budget of five, a few generated cases got 503).
	dpBodyBudget = 8 * dpBodyLimit
	// dpMaxConns leaves room for the 200 idle connections, the slow
	// clients and four generated cases.
	dpMaxConns = 300
	// dpBudgetClients send a body near the limit at once.
	dpBudgetClients = 16
	// dpBudgetFirst is the part of a body sent with its head;
	// dpBudgetHold the pause before the rest.
	dpBudgetFirst = 64 << 10
	dpBudgetHold  = 2 * time.Second
	// dpBudgetRSSBound bounds llbd's RSS growth during body_budget: the
	// budget's bodies, as much again of the garbage collector's headroom
	// (GOGC=100 lets the heap grow to twice what is live before it
	// collects), and 64 MiB of slack.
	dpBudgetRSSBound = 2*dpBodyBudget + 64<<20
	// dpRSSBackSlack and dpRSSBackWithin: the RSS must be back within this
	// of the family's baseline this soon after body_budget (llbd returns a
	// burst's memory once its bodies are done, at most every 10 s).
	dpRSSBackSlack  = 64 << 20
	dpRSSBackWithin = 20 * time.Second
	// dpFloodConns connections are opened at once by conn_flood.
	dpFloodConns = dpMaxConns + 40
	// dpLimitsSpan is about how long the bound cases take (these two and
	// non_reader, dpsend.go).
	dpLimitsSpan = 45 * time.Second
)

// dpLLBDEnv is the environment the data-plane family's llbd runs with
// (--body-buffer-bytes, --max-conns and --client-send-timeout, as
// variables: an llbd built before them ignores them and runs, so the
// family measures it side by side).
func dpLLBDEnv() []string {
	return []string{"LLB_BODY_BUFFER_BYTES=" + strconv.Itoa(dpBodyBudget), "LLB_MAX_CONNS=" + strconv.Itoa(dpMaxConns),
		"LLB_CLIENT_SEND_TIMEOUT=" + dpSendTimeout.String()}
}

// budgetBody is a valid completion of n bytes whose bulk is a field the
// worker ignores (it answers 200 at once, whatever the size): an unknown
// one, or for TensorRT-LLM, which refuses unknown fields, stop_token_ids
// (a field it declares) of zeros.
func budgetBody(i, n int, d worker.Dialect) []byte {
	if d == worker.DialectTRTLLM {
		b := fmt.Appendf(nil, `{"model":"sim-model","prompt":"budget %d","max_tokens":1,"stop_token_ids":[0`, i)
		b = append(b, bytes.Repeat([]byte(",0"), (n-len(b)-2)/2)...)
		b = append(b, bytes.Repeat([]byte(" "), n-len(b)-2)...)
		return append(b, `]}`...)
	}
	b := fmt.Appendf(nil, `{"model":"sim-model","prompt":"budget %d","max_tokens":1,"padding":"`, i)
	b = append(b, bytes.Repeat([]byte("x"), n-len(b)-2)...)
	return append(b, `"}`...)
}

// bodyBudgetCase runs body_budget; base is the family's baseline.
func (f *dpFamily) bodyBudgetCase(ctx context.Context, base usage) {
	before, _ := f.d.usage(ctx)
	refusedBefore := f.counter(ctx, "llb_body_buffer_refused_total")
	peak := sampleRSS(f.d.PID(), 50*time.Millisecond)
	cases := make([]dpCase, dpBudgetClients)
	results := make([]rawResult, dpBudgetClients)
	var wg sync.WaitGroup
	for i := range cases {
		body := budgetBody(i, dpBodyLimit-200, f.cfg.dialect())
		head := reqOpts{body: body, headers: []string{"Connection: close"}}.build(f.vip)
		head = head[:len(head)-len(body)]
		cases[i] = dpCase{kind: "body_budget", plan: rawPlan{steps: []rawStep{
			{data: append(head, body[:dpBudgetFirst]...)},
			{pause: dpBudgetHold, data: body[dpBudgetFirst:]},
		}, wait: dpBudgetHold + dpFastBound + dpSlack}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = exchange(ctx, f.vip, cases[i].plan)
		}()
	}
	wg.Wait()
	peakKB := peak()
	served, refused := 0, 0
	for i, res := range results {
		o := judgeBudget(res)
		switch o.Verdict {
		case Accepted:
			served++
		case Refused:
			refused++
		}
		f.t.add(-1000-i, cases[i].kind, o, func() string { return reproRaw(cases[i]) })
	}
	fit := dpBodyBudget / (dpBodyLimit - 200)
	f.t.note("body_budget: %d bodies of %d MiB at once against a %d MiB budget: %d served, %d refused 503 before their body was sent",
		dpBudgetClients, dpBodyLimit>>20, dpBodyBudget>>20, served, refused)
	f.t.check("body_budget_split", served >= 1 && refused >= 1 && served <= fit,
		fmt.Sprintf("%d served, %d refused; want at least one of each and at most %d served (the budget's worth)", served, refused, fit), "")
	counted := f.counter(ctx, "llb_body_buffer_refused_total") - refusedBefore
	f.t.check("body_budget_counted", counted == float64(refused),
		fmt.Sprintf("llb_body_buffer_refused_total grew by %v for %d refusals", counted, refused), "")
	grew := (peakKB - before.rssKB) << 10
	f.t.note("body_budget: RSS %d MiB before, peak %d MiB (+%d MiB; bound +%d MiB)", before.rssKB>>10, peakKB>>10, grew>>20, dpBudgetRSSBound>>20)
	f.t.check("body_budget_rss", grew <= dpBudgetRSSBound,
		fmt.Sprintf("RSS grew by %d MiB during the case (bound %d MiB: twice the %d MiB budget and 64 MiB)", grew>>20, dpBudgetRSSBound>>20, dpBodyBudget>>20), "")
	start := time.Now()
	var now int64
	for {
		now, _ = procRSS(f.d.PID())
		if (now-base.rssKB)<<10 <= dpRSSBackSlack || time.Since(start) > dpRSSBackWithin || ctx.Err() != nil {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	f.t.note("body_budget: RSS %d MiB %v after the case (baseline %d MiB)", now>>10, time.Since(start).Round(time.Second), base.rssKB>>10)
	f.t.check("body_budget_rss_back", (now-base.rssKB)<<10 <= dpRSSBackSlack,
		fmt.Sprintf("RSS %d MiB %v after the case; want within %d MiB of the baseline %d MiB", now>>10, dpRSSBackWithin, dpRSSBackSlack>>20, base.rssKB>>10), "")
}

// judgeBudget is body_budget's oracle for one client: a whole 200, or a
// 503 body_buffer_full with Retry-After, sent before the rest of the body
// was; then a close.
func judgeBudget(res rawResult) Outcome {
	r, o, ok := closedAnswer(res)
	switch {
	case !ok:
		return o
	case r.status == http.StatusOK:
		if why := incomplete(r); why != "" {
			return defect("200 with %s", why)
		}
		return accepted()
	case r.at > dpBudgetHold:
		return defect("%d after %v: the body was sent (a refusal comes from its head)", r.status, r.at.Round(time.Millisecond))
	}
	return boundRefusal(r, "body_buffer_full", "200")
}

// closedAnswer is the first answer of an exchange that then closed, or the
// defect when there is none.
func closedAnswer(res rawResult) (rawResponse, Outcome, bool) {
	r, ok := res.first()
	switch {
	case res.dialErr != nil:
		return r, defect("cannot connect: %v", res.dialErr), false
	case !ok:
		return r, defect("no answer: connection %s after %v", res.end(), res.ended.Round(time.Millisecond)), false
	case !res.closed && !res.reset:
		return r, defect("answered %d, then the connection was %s instead of closed", r.status, res.end()), false
	}
	return r, Outcome{}, true
}

// boundRefusal is a refusal by a process bound: 503 with code and
// Retry-After (served names what else would have been right).
func boundRefusal(r rawResponse, code, served string) Outcome {
	switch {
	case r.status != http.StatusServiceUnavailable || !bytes.Contains(r.body, []byte(`"code":"`+code+`"`)):
		return defect("%d %s; want %s or 503 %s", r.status, short(r.body), served, code)
	case r.header.Get("Retry-After") == "":
		return defect("503 %s without Retry-After", code)
	}
	return refused()
}

// connFloodCase runs conn_flood.
func (f *dpFamily) connFloodCase(ctx context.Context) {
	refusedBefore := f.counter(ctx, "llb_client_connections_refused_total")
	// A path llbd answers itself (404): the flood reaches no worker.
	req := []byte(fmt.Sprintf("GET /flood HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", f.vip))
	// Every connection is opened first (the pause lets them all be
	// accepted), then each sends its request.
	plan := rawPlan{steps: []rawStep{{pause: 500 * time.Millisecond, data: req}}, wait: dpFastBound + dpSlack}
	results := make([]rawResult, dpFloodConns)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = exchange(ctx, f.vip, plan)
		}()
	}
	wg.Wait()
	c := dpCase{kind: "conn_flood", plan: plan}
	served, refused := 0, 0
	for i, res := range results {
		o := judgeFlood(res)
		switch o.Verdict {
		case Accepted:
			served++
		case Refused:
			refused++
		}
		f.t.add(-2000-i, c.kind, o, func() string {
			return fmt.Sprintf("one of %d connections opened at once:\n%s", dpFloodConns, reproRaw(c))
		})
	}
	f.t.note("conn_flood: %d connections at once against --max-conns %d: %d served, %d refused 503", dpFloodConns, dpMaxConns, served, refused)
	f.t.check("conn_flood_split", served >= 1 && refused >= dpFloodConns-dpMaxConns && served <= dpMaxConns,
		fmt.Sprintf("%d served, %d refused; want at least %d refused and at most %d served", served, refused, dpFloodConns-dpMaxConns, dpMaxConns), "")
	counted := f.counter(ctx, "llb_client_connections_refused_total") - refusedBefore
	f.t.check("conn_flood_counted", counted == float64(refused),
		fmt.Sprintf("llb_client_connections_refused_total grew by %v for %d refusals", counted, refused), "")
}

// judgeFlood is conn_flood's oracle for one connection: served (llbd's
// own 404 unknown_url for the path), or a 503 too_many_connections with
// Retry-After; then a close.
func judgeFlood(res rawResult) Outcome {
	r, o, ok := closedAnswer(res)
	switch {
	case !ok:
		return o
	case r.status == http.StatusNotFound && bytes.Contains(r.body, []byte(`"code":"unknown_url"`)):
		return accepted()
	}
	return boundRefusal(r, "too_many_connections", "404 unknown_url")
}

// counter reads one of llbd's counters (0 when it cannot).
func (f *dpFamily) counter(ctx context.Context, name string) float64 {
	m, err := f.d.metrics(ctx)
	if err != nil {
		return 0
	}
	return m.sum(name)
}
