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
		body := fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":4}`, prompt+tenant+strconv.FormatInt(time.Now().UnixNano(), 10))
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

// TestE2E_AFloodCannotKeepAFairTenantOutOfFullQueues: with a cap of one and
// a parking queue of two, tenant team-a fills the slot and the queue; a
// fourth team-a request is shed (queues full), but team-b's request takes
// the place of team-a's youngest parked one (429 via=displaced) and is
// served. (With one team-a request parked, VTC's lift would put team-b
// level with team-a and behind it in the queue: nothing to displace.)
func TestE2E_AFloodCannotKeepAFairTenantOutOfFullQueues(t *testing.T) {
	tmpl := workerCfg("", 0, engine.KVNone, 0, 1)
	f, err := fleet.Start(fleet.Config{Prefill: 1, Decode: 1, BaseIP: "127.0.38.10", Template: &tmpl})
	if err != nil {
		t.Fatalf("fleet: %v", err)
	}
	t.Cleanup(func() { _ = f.Stop(t.Context()) })
	// No headroom: the first team-a request holds the only slot.
	d := startDataPlane(t, "LLB_FC_CRITICAL_HEADROOM_PCT=0")
	port := freePort(t)
	d.post(ruleJSON(t, f, "127.0.0.1", port, map[string]any{"fc_prefill_max_inflight": 1, "fc_max_queue_depth": 2, "fc_max_queue_wait_ms": 30000}))
	d.waitActive(port)
	vip := "http://127.0.0.1:" + strconv.Itoa(port)
	prompt := strings.Repeat("one tenant floods the queue ", 500) // ~4000 tokens: ~0.8 s of prefill
	send := func(tenant string) (int, string, string) {
		body := fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":2}`, prompt+tenant+strconv.FormatInt(time.Now().UnixNano(), 10))
		req, _ := http.NewRequest(http.MethodPost, vip+"/v1/completions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Gateway-Inference-Fairness-Id", tenant)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("%s: %v", tenant, err)
			return 0, "", ""
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, res.Header.Get("X-Llb-Route"), string(b)
	}
	queued := func() float64 {
		_, text := d.do(http.MethodGet, "/metrics", "")
		for k, v := range parseProm(text) {
			if strings.HasPrefix(k, "loxilb_pd_admission_queued_total{") {
				return v
			}
		}
		return 0
	}
	type answer struct {
		code        int
		route, body string
	}
	first, older, younger := make(chan answer, 1), make(chan answer, 1), make(chan answer, 1)
	go func() { c, r, b := send("team-a"); first <- answer{c, r, b} }()
	time.Sleep(150 * time.Millisecond) // the first is admitted before the others arrive
	go func() { c, r, b := send("team-a"); older <- answer{c, r, b} }()
	eventually(t, "team-a's second request parks", func() (bool, string) {
		v := queued()
		return v >= 1, fmt.Sprint("queued ", v)
	})
	go func() { c, r, b := send("team-a"); younger <- answer{c, r, b} }()
	eventually(t, "team-a's third request parks", func() (bool, string) {
		v := queued()
		return v >= 2, fmt.Sprint("queued ", v)
	})
	if code, route, body := send("team-a"); code != 429 || !strings.Contains(route, "via=queues_full") {
		t.Errorf("team-a's fourth: %d %s %s; want 429 queues_full (its own tenant is never displaced)", code, route, body)
	}
	code, route, body := send("team-b")
	if code != 200 || !strings.Contains(route, "tier=resume") || !strings.Contains(route, "tenant=team-b") {
		t.Errorf("team-b: %d %s %s; want 200 after parking in team-a's place", code, route, body)
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
