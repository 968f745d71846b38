package main

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/fleet"
)

// The tenant and class series (docs/metrics.md) and the class order at the
// admission gate, through the real llbd: a P/D rule with a cap of one
// request per prefill endpoint and a parking queue, in front of a prefill
// worker whose long prompts take about half a second each. Tenant team-a
// sends four standard requests at once (one runs, three park); while they
// wait, a sheddable request of team-b is refused at once and a critical
// one of team-c takes the headroom above the cap ahead of them.
func TestE2E_TenantAndClassMetricsAndClassOrder(t *testing.T) {
	tmpl := workerCfg("", 0, engine.KVNone, 0, 1)
	f, err := fleet.Start(fleet.Config{Prefill: 1, Decode: 1, BaseIP: "127.0.38.2", Template: &tmpl})
	if err != nil {
		t.Fatalf("fleet: %v", err)
	}
	t.Cleanup(func() { _ = f.Stop(t.Context()) })
	d := startDataPlane(t)
	port := freePort(t)
	d.post(ruleJSON(t, f, "127.0.0.1", port, map[string]any{"fc_prefill_max_inflight": 1, "fc_max_queue_depth": 8, "fc_max_queue_wait_ms": 30000}))
	d.waitActive(port)
	vip := "http://127.0.0.1:" + strconv.Itoa(port)

	prompt := strings.Repeat("tenants share the fleet fairly ", 300) // about 2000 tokens: ~0.4 s of prefill
	send := func(tenant, class string) (int, string, string) {
		// The nonce leads: no prompt shares a cached prefix with another.
		body := fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":4}`, strconv.FormatInt(time.Now().UnixNano(), 10)+tenant+prompt)
		req, _ := http.NewRequest(http.MethodPost, vip+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Gateway-Inference-Fairness-Id", tenant)
		req.Header.Set("X-Llb-Priority", class)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("%s %s: %v", tenant, class, err)
			return 0, "", ""
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("X-Llb-Route"), string(b)
	}
	metric := func(m promSeries, name string, labels ...string) float64 {
		for k, v := range m {
			if !strings.HasPrefix(k, name+"{") {
				continue
			}
			all := true
			for _, l := range labels {
				all = all && strings.Contains(k, l)
			}
			if all {
				return v
			}
		}
		return 0
	}
	scrape := func() promSeries {
		code, text := d.do(http.MethodGet, "/metrics", "")
		if code != 200 {
			t.Fatalf("metrics: %d", code)
		}
		return parseProm(text)
	}

	var wg sync.WaitGroup
	routes := make([]string, 4)
	for i := range routes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, route, body := send("team-a", "standard")
			if code != 200 {
				t.Errorf("team-a request %d: %d %s", i, code, body)
			}
			routes[i] = route
		}()
	}
	eventually(t, "team-a's requests park", func() (bool, string) {
		v := metric(scrape(), "loxilb_pd_admission_queued_total")
		return v >= 1, fmt.Sprint("queued ", v)
	})
	code, route, body := send("team-b", "sheddable")
	if code != 429 || !strings.Contains(body, "pd_overloaded") || !strings.Contains(route, "via=sheddable") || !strings.Contains(route, "class=sheddable tenant=team-b") {
		t.Errorf("sheddable while capped: %d %s %s; want 429 pd_overloaded at once (via=sheddable)", code, route, body)
	}
	code, route, body = send("team-c", "critical")
	if code != 200 || strings.Contains(route, "tier=resume") || !strings.Contains(route, "class=critical tenant=team-c") {
		t.Errorf("critical while capped: %d %s %s; want 200 in the headroom, not parked", code, route, body)
	}
	wg.Wait()
	resumed := 0
	for _, r := range routes {
		if strings.Contains(r, "tier=resume") {
			resumed++
		}
		if !strings.Contains(r, "class=standard tenant=team-a") {
			t.Errorf("team-a's route %q does not name its class and tenant", r)
		}
	}

	m := scrape()
	checks := []struct {
		name   string
		labels []string
		ok     func(float64) bool
		want   string
	}{
		{"llb_tenant_requests_total", []string{`tenant="team-a"`, `class="standard"`}, func(v float64) bool { return v == 4 }, "4"},
		{"llb_tenant_parked_total", []string{`tenant="team-a"`, `class="standard"`}, func(v float64) bool { return v >= 1 && v == float64(resumed) }, fmt.Sprint("the ", resumed, " resumed")},
		{"llb_tenant_parked_seconds_total", []string{`tenant="team-a"`, `class="standard"`}, func(v float64) bool { return v > 0.1 }, "> 0.1 s"},
		{"llb_tenant_tokens_total", []string{`tenant="team-a"`, `class="standard"`, `kind="prompt"`}, func(v float64) bool { return v > 4*1000 }, "> 4000"},
		{"llb_tenant_tokens_total", []string{`tenant="team-a"`, `class="standard"`, `kind="completion"`}, func(v float64) bool { return v == 16 }, "16"},
		{"llb_tenant_refusals_total", []string{`tenant="team-b"`, `class="sheddable"`, `code="pd_overloaded"`}, func(v float64) bool { return v == 1 }, "1"},
		{"llb_tenant_requests_total", []string{`tenant="team-c"`, `class="critical"`}, func(v float64) bool { return v == 1 }, "1"},
		{"llb_tenant_parked_total", []string{`tenant="team-c"`, `class="critical"`}, func(v float64) bool { return v == 0 }, "0"},
		{"llb_class_ttft_seconds_count", []string{`class="critical"`}, func(v float64) bool { return v == 1 }, "1"},
		{"llb_class_ttft_seconds_count", []string{`class="standard"`}, func(v float64) bool { return v == 4 }, "4"},
		{"llb_class_parked_seconds_count", []string{`class="standard"`}, func(v float64) bool { return v == float64(resumed) }, fmt.Sprint(resumed)},
	}
	for _, c := range checks {
		if v := metric(m, c.name, c.labels...); !c.ok(v) {
			t.Errorf("%s%v = %v; want %s", c.name, c.labels, v, c.want)
		}
	}
	if resumed == 0 {
		t.Errorf("no team-a request parked: routes %q", routes)
	}
}

// cappedPD is a P/D rule with a cap of one request per prefill endpoint
// and no headroom above it, in front of one prefill worker whose ~4000-token
// prompts take about 0.8 s each, and one decode worker.
type cappedPD struct {
	t   *testing.T
	f   *fleet.Fleet
	d   *daemon
	vip string
}

// answer is one request's outcome.
type answer struct {
	code        int
	route, body string
	at          time.Time
}

func startCappedPD(t *testing.T, baseIP string, depth int) *cappedPD {
	t.Helper()
	tmpl := workerCfg("", 0, engine.KVNone, 0, 1)
	f, err := fleet.Start(fleet.Config{Prefill: 1, Decode: 1, BaseIP: baseIP, Template: &tmpl})
	if err != nil {
		t.Fatalf("fleet: %v", err)
	}
	t.Cleanup(func() { _ = f.Stop(t.Context()) })
	d := startDataPlane(t, "LLB_FC_CRITICAL_HEADROOM_PCT=0")
	port := freePort(t)
	d.post(ruleJSON(t, f, "127.0.0.1", port, map[string]any{"fc_prefill_max_inflight": 1, "fc_max_queue_depth": depth, "fc_max_queue_wait_ms": 30000}))
	d.waitActive(port)
	return &cappedPD{t: t, f: f, d: d, vip: "http://127.0.0.1:" + strconv.Itoa(port)}
}

// send sends one long completion of tenant in class ("" sends no class).
func (c *cappedPD) send(tenant, class string) answer {
	prompt := strings.Repeat("one tenant floods the queue ", 500)
	// The nonce leads: no prompt shares a cached prefix with another.
	body := fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":2}`, strconv.FormatInt(time.Now().UnixNano(), 10)+tenant+prompt)
	req, _ := http.NewRequest(http.MethodPost, c.vip+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Gateway-Inference-Fairness-Id", tenant)
	if class != "" {
		req.Header.Set("X-Llb-Priority", class)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Errorf("%s: %v", tenant, err)
		return answer{at: time.Now()}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return answer{code: res.StatusCode, route: res.Header.Get("X-Llb-Route"), body: string(b), at: time.Now()}
}

// sendAsync sends in the background; the answer arrives on the channel.
func (c *cappedPD) sendAsync(tenant, class string) <-chan answer {
	ch := make(chan answer, 1)
	go func() { ch <- c.send(tenant, class) }()
	return ch
}

// waitRunning waits until the prefill worker holds a request.
func (c *cappedPD) waitRunning() {
	c.t.Helper()
	eventually(c.t, "a request runs on the prefill worker", func() (bool, string) {
		st := c.f.Workers()[0].Stats()
		return st.Running+st.Waiting >= 1, fmt.Sprintf("%+v", st)
	})
}

// waitParked waits until n requests have parked since the start.
func (c *cappedPD) waitParked(n int) {
	c.t.Helper()
	eventually(c.t, fmt.Sprintf("%d requests parked", n), func() (bool, string) {
		_, text := c.d.do(http.MethodGet, "/metrics", "")
		for k, v := range parseProm(text) {
			if strings.HasPrefix(k, "loxilb_pd_admission_queued_total{") {
				return v >= float64(n), fmt.Sprint("queued ", v)
			}
		}
		return false, "no loxilb_pd_admission_queued_total"
	})
}

// TestE2E_AFloodCannotKeepAFairTenantOutOfFullQueues: with a cap of one and
// a parking queue of two, tenant team-a fills the slot and the queue; a
// fourth team-a request is shed (queues full), but team-b's request takes
// the place of team-a's youngest parked one (429 via=displaced) and is
// served. (With one team-a request parked, VTC's lift would put team-b
// level with team-a and behind it in the queue: nothing to displace.)
func TestE2E_AFloodCannotKeepAFairTenantOutOfFullQueues(t *testing.T) {
	c := startCappedPD(t, "127.0.38.10", 2)
	first := c.sendAsync("team-a", "")
	c.waitRunning()
	older := c.sendAsync("team-a", "")
	c.waitParked(1)
	younger := c.sendAsync("team-a", "")
	c.waitParked(2)
	if a := c.send("team-a", ""); a.code != 429 || !strings.Contains(a.route, "via=queues_full") {
		t.Errorf("team-a's fourth: %d %s %s; want 429 queues_full (its own tenant is never displaced)", a.code, a.route, a.body)
	}
	if a := c.send("team-b", ""); a.code != 200 || !strings.Contains(a.route, "tier=resume") || !strings.Contains(a.route, "tenant=team-b") {
		t.Errorf("team-b: %d %s %s; want 200 after parking in team-a's place", a.code, a.route, a.body)
	}
	if a := <-younger; a.code != 429 || !strings.Contains(a.route, "via=displaced") || !strings.Contains(a.body, "pd_overloaded") {
		t.Errorf("team-a's youngest parked request: %d %s %s; want 429 pd_overloaded via=displaced", a.code, a.route, a.body)
	}
	for _, a := range []answer{<-first, <-older} {
		if a.code != 200 {
			t.Errorf("team-a's first two: %d %s", a.code, a.body)
		}
	}
}

// TestE2E_ParkedRequestsLeaveByClass: with the only slot taken and two
// standard requests parked, a critical request that parks after them
// leaves the queue first.
func TestE2E_ParkedRequestsLeaveByClass(t *testing.T) {
	c := startCappedPD(t, "127.0.38.20", 8)
	first := c.sendAsync("team-a", "standard")
	c.waitRunning()
	s1 := c.sendAsync("team-a", "standard")
	c.waitParked(1)
	s2 := c.sendAsync("team-b", "standard")
	c.waitParked(2)
	crit := c.sendAsync("team-c", "critical")
	c.waitParked(3)
	got := map[string]answer{"first": <-first, "standard 1": <-s1, "standard 2": <-s2, "critical": <-crit}
	for name, a := range got {
		if a.code != 200 {
			t.Fatalf("%s: %d %s", name, a.code, a.body)
		}
		if name != "first" && !strings.Contains(a.route, "tier=resume") {
			t.Errorf("%s: route %q; want it parked and resumed", name, a.route)
		}
	}
	if cr := got["critical"].at; !cr.Before(got["standard 1"].at) || !cr.Before(got["standard 2"].at) {
		t.Errorf("the critical request was answered at %v, the standard ones at %v and %v; want it first",
			cr.Format(time.StampMilli), got["standard 1"].at.Format(time.StampMilli), got["standard 2"].at.Format(time.StampMilli))
	}
}
