package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/worker"
)

// End-to-end tests of LoRA residency through llbd: the engines' gauge
// (vllm:lora_requests_info), the router's policy, runtime adapter loading.

// startLoRAFleet starts n workers serving adapters, each batching at most
// maxLoRAs at once, with runtime loading on.
func startLoRAFleet(t *testing.T, n int, baseIP string, maxLoRAs, maxSeqs int, loras func(i int) []string) *fleet.Fleet {
	t.Helper()
	tmpl := workerCfg("", 0, engine.KVNone, 0, 0.2)
	tmpl.MaxLoRAs, tmpl.RuntimeLoRA = maxLoRAs, true
	tmpl.Engine.MaxNumSeqs = maxSeqs
	f, err := fleet.Start(fleet.Config{Single: n, BaseIP: baseIP, Template: &tmpl,
		Customize: func(i int, _ ladder.Role, c *worker.Config) { c.LoRAs = loras(i) }})
	if err != nil {
		t.Fatalf("fleet: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.Stop(ctx)
	})
	return f
}

// startStream starts a streamed completion and returns once its first
// event arrived, with the endpoint it went to and the X-Llb-Route header;
// the stream is read to its end in the background.
func startStream(t *testing.T, url, model string, tokens int) (int, string) {
	t.Helper()
	ep, route, err := tryStream(url, model, tokens)
	if err != nil {
		t.Fatal(err)
	}
	return ep, route
}

// tryStream is startStream for any goroutine: it reports errors.
func tryStream(url, model string, tokens int) (int, string, error) {
	res, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(fmt.Sprintf(`{"model":%q,"prompt":"hi there","max_tokens":%d,"stream":true}`, model, tokens)))
	if err != nil {
		return -1, "", err
	}
	if res.StatusCode != 200 {
		res.Body.Close()
		return -1, "", fmt.Errorf("stream for %s: %d", model, res.StatusCode)
	}
	br := bufio.NewReader(res.Body)
	if _, err := br.ReadString('\n'); err != nil {
		res.Body.Close()
		return -1, "", err
	}
	go func() {
		defer res.Body.Close()
		for {
			if _, err := br.ReadString('\n'); err != nil {
				return
			}
		}
	}()
	route := res.Header.Get("X-Llb-Route")
	m := routeRE.FindStringSubmatch(route)
	if m == nil {
		return -1, route, fmt.Errorf("X-Llb-Route %q does not parse", route)
	}
	ep := 0
	_, _ = fmt.Sscan(m[2], &ep)
	return ep, route, nil
}

func TestE2E_LoRARequestsGoWhereTheirAdapterIsResidentAndNewOnesWhereThereIsRoom(t *testing.T) {
	f := startLoRAFleet(t, 3, "127.0.26.52", 1, 16, func(int) []string { return []string{"a", "b", "c"} })
	d := startDataPlane(t)
	d.post(ruleJSON(t, f, "127.0.26.51", 2026, nil))
	d.waitActive(2026)
	const vip = "http://127.0.26.51:2026"
	holder, _ := startStream(t, vip, "a", 400)
	time.Sleep(700 * time.Millisecond) // two scrapes: the gauge shows a running on its holder
	for i := range 3 {
		ep, route := startStream(t, vip, "a", 200)
		if ep != holder || !strings.Contains(route, "lora=lora_resident") {
			t.Fatalf("a #%d went to %d (%s); want its holder %d, lora_resident", i, ep, route, holder)
		}
	}
	ep, route := startStream(t, vip, "b", 200)
	if ep == holder || !strings.Contains(route, "lora=lora_room") {
		t.Errorf("b went to %d (%s); want an endpoint with room (max_lora 1 is reached on %d)", ep, route, holder)
	}
}

func TestE2E_AHotAdapterSpreadsAndIsLoadedWhereItIsNeeded(t *testing.T) {
	f := startLoRAFleet(t, 2, "127.0.26.62", 2, 2, func(i int) []string {
		if i == 0 {
			return []string{"sql"}
		}
		return nil
	})
	d := startDataPlane(t, "LLB_LORA_RUNTIME_LOAD=1")
	d.post(ruleJSON(t, f, "127.0.26.61", 2026, nil))
	d.waitActive(2026)
	const vip = "http://127.0.26.61:2026"
	// Endpoint 0 serves sql; two long streams fill its batch (max-num-seqs
	// 2), the next ones queue there until its gauge shows the queue.
	for range 2 {
		if ep, route := startStream(t, vip, "sql", 400); ep != 0 {
			t.Fatalf("sql went to %d (%s) while only endpoint 0 serves it and it has room", ep, route)
		}
	}
	// More arrive, a few hundred milliseconds apart (each waits for its
	// first token in its own goroutine): once the gauge shows endpoint 0
	// queuing, the hot adapter spreads to endpoint 1, which llb has load
	// sql first.
	type pick struct {
		ep    int
		route string
		err   error
	}
	picks := make(chan pick, 8)
	for range 8 {
		go func() {
			ep, route, err := tryStream(vip, "sql", 100)
			picks <- pick{ep, route, err}
		}()
		time.Sleep(300 * time.Millisecond)
	}
	spread := ""
	for range 8 {
		p := <-picks
		if p.err != nil {
			t.Fatal(p.err)
		}
		if p.ep == 1 && (spread == "" || strings.Contains(p.route, "lora=lora_spread")) {
			spread = p.route // the first to go there spread; later ones find sql resident
		}
	}
	if !strings.Contains(spread, "lora=lora_spread") {
		t.Fatalf("no request spread to endpoint 1 (last spread route %q)", spread)
	}
	found := false
	for _, c := range f.Workers()[1].ModelCards() {
		found = found || c == "sql"
	}
	if !found {
		t.Errorf("endpoint 1 serves %v; want sql loaded there by llb", f.Workers()[1].ModelCards())
	}
}
