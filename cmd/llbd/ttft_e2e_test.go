package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/restapi"
)

// TTFT prediction on the simulated fleet (issue 30): the real llbd in front
// of simulated vLLM worker processes. llb predicts every request's time to
// first token on the prefill endpoint it picked, measures it (a P/D
// prefill leg's answer is its first token), learns each endpoint's model
// from it and checks the prediction. A worker that becomes ten times
// slower behind llb's back drifts, is named in one warning and agrees
// again once its model has relearned.

// ttftStates is the prefill endpoints' TTFT records.
func ttftStates(f *pdFleet) []*restapi.TTFTPrediction {
	eps := f.status()[:len(f.prefill)]
	out := make([]*restapi.TTFTPrediction, len(eps))
	for i, e := range eps {
		out[i] = e.TTFTPrediction
	}
	return out
}

func ttftString(ps []*restapi.TTFTPrediction) string {
	var b strings.Builder
	for i, p := range ps {
		if p == nil {
			fmt.Fprintf(&b, "[%d none]", i)
			continue
		}
		fmt.Fprintf(&b, "[%d %s %d/%d wrong bias %+.0f%% overhead %.1f ms uncached %.1f ms/1k blocks]", i, p.State, p.Wrong, p.Compared, p.BiasPct, p.OverheadMs, p.UncachedMsPer1kBlocks)
	}
	return b.String()
}

// setLatency sets (ms > 0) or clears a worker's injected latency.
func setLatency(t *testing.T, w *procWorker, ms float64) {
	t.Helper()
	body := fmt.Sprintf(`{"latency_ms":%g}`, ms)
	res, err := http.Post("http://"+w.addr()+"/_sim/faults", "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatalf("faults: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("faults: %d", res.StatusCode)
	}
}

func TestTTFTPrediction_LearnsTheFleetAndDetectsAWorkerThatSlowsDown(t *testing.T) {
	// Time scale 1: a prefill takes tens of milliseconds, well above the
	// loaded machine's scheduling noise.
	f := truthFleet(t, fleetSpec{timeScale: 1})
	l := newTruthLoad(t, f, 12, "ttft")
	const first = 80
	for i := 0; i < first; i++ {
		l.send(i % len(l.docs))
	}
	ps := ttftStates(f)
	var compared uint64
	for i, p := range ps {
		if p == nil || p.Compared == 0 || p.State != restapi.TTFTPredictionOK {
			t.Fatalf("endpoint %d after %d requests: %s; want trained and agreeing", i, l.sent, ttftString(ps))
		}
		compared += p.Compared
	}
	// Every request's prefill leg was compared (the warm-up's included).
	m := f.metrics()
	count := m.sum("llb_ttft_prediction_error_ratio_count")
	if count != float64(compared) || compared < first {
		t.Fatalf("histogram count %v, status %d compared; want equal and at least %d", count, compared, first)
	}
	within := func(r string) float64 {
		return m.sum("llb_ttft_prediction_error_ratio_bucket", `le="`+r+`"`) - m.sum("llb_ttft_prediction_error_ratio_bucket", `le="-`+r+`"`)
	}
	w20, w50 := within("0.2")/count, within("0.5")/count
	if w50 < 0.5 {
		t.Fatalf("only %.0f%% of predictions within 50%% of the measured TTFT: %s", w50*100, ttftString(ps))
	}
	t.Logf("healthy fleet: %d compared, %.0f%% within 20%%, %.0f%% within 50%%: %s", compared, w20*100, w50*100, ttftString(ps))

	// Worker 0 holds every request 300 ms more: its predictions drift.
	setLatency(t, f.prefill[0], 300)
	start, began := l.sent, time.Now()
	for {
		l.send(l.sent % len(l.docs))
		if ps = ttftStates(f); ps[0].State == restapi.TTFTPredictionDrifting {
			break
		}
		if l.sent-start > 200 {
			t.Fatalf("no drift after %d requests: %s", l.sent-start, ttftString(ps))
		}
	}
	t.Logf("slowed worker: drifting after %d requests, %s: %s", l.sent-start, time.Since(began).Round(100*time.Millisecond), ttftString(ps))
	if !f.d.log.has("ttft predictions keep missing") {
		t.Fatalf("no warning logged:\n%s", grepLog(f.d.log, "ttft"))
	}
	if ps[1].State == restapi.TTFTPredictionDrifting {
		t.Fatalf("the healthy worker drifts too: %s", ttftString(ps))
	}
	// Its model starts again and learns the slower worker: the
	// predictions agree again.
	start, began = l.sent, time.Now()
	for ps[0].State == restapi.TTFTPredictionDrifting {
		l.send(l.sent % len(l.docs))
		ps = ttftStates(f)
		if l.sent-start > 200 {
			t.Fatalf("still drifting after %d requests: %s", l.sent-start, ttftString(ps))
		}
	}
	t.Logf("relearned after %d requests, %s: %s", l.sent-start, time.Since(began).Round(100*time.Millisecond), ttftString(ps))
	if !f.d.log.has("ttft predictions agree with the engine again") {
		t.Fatalf("no recovery logged:\n%s", grepLog(f.d.log, "ttft"))
	}
}

// askObjective sends a completion with a TTFT objective header (ms) and
// a priority class; it returns the status, the error code (if llb
// answered one) and the route header.
func askObjective(t *testing.T, vip, prompt, objective, class string) (int, string, string) {
	t.Helper()
	body := fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":2}`, prompt)
	req, _ := http.NewRequest(http.MethodPost, vip+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Llb-Ttft-Objective-Ms", objective)
	if class != "" {
		req.Header.Set("X-Llb-Priority", class)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	defer res.Body.Close()
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	b := new(bytes.Buffer)
	_, _ = b.ReadFrom(res.Body)
	if res.StatusCode != http.StatusOK {
		_ = json.Unmarshal(b.Bytes(), &e)
	}
	return res.StatusCode, e.Error.Code, res.Header.Get("X-Llb-Route")
}

func TestTTFTObjective_ASheddableRequestNoEndpointCanServeInTimeIsRefusedAtOnce(t *testing.T) {
	f := truthFleet(t, fleetSpec{timeScale: 1})
	l := newTruthLoad(t, f, 8, "objective")
	for i := 0; i < 48; i++ {
		l.send(i % len(l.docs))
	}
	if ps := ttftStates(f); ps[0].State != restapi.TTFTPredictionOK || ps[1].State != restapi.TTFTPredictionOK {
		t.Fatalf("models not trained: %s", ttftString(ps))
	}
	prompt := l.docs[0] + " Question: objectives?"
	// A generous objective: served, where the law would have sent it.
	if code, errCode, route := askObjective(t, f.vip, prompt, "60000", "sheddable"); code != http.StatusOK || strings.Contains(route, "objective") {
		t.Fatalf("60 s objective: %d %s %q; want 200 without an objective flag", code, errCode, route)
	}
	// 10 µs: nobody is predicted to meet it. A sheddable request is
	// refused at once; a standard one is served by the fastest prediction.
	start := time.Now()
	code, errCode, route := askObjective(t, f.vip, prompt, "0.01", "sheddable")
	if code != http.StatusTooManyRequests || errCode != "ttft_objective_unreachable" || !strings.Contains(route, "ttft_objective admission=shed") {
		t.Fatalf("sheddable, 10 µs objective: %d %s %q; want 429 ttft_objective_unreachable", code, errCode, route)
	}
	refused := time.Since(start)
	if code, errCode, route := askObjective(t, f.vip, prompt, "0.01", ""); code != http.StatusOK || !strings.Contains(route, "objective_miss") {
		t.Fatalf("standard, 10 µs objective: %d %s %q; want 200 flagged objective_miss", code, errCode, route)
	}
	if code, errCode, _ := askObjective(t, f.vip, prompt, "soon", ""); code != http.StatusBadRequest || errCode != "invalid_field" {
		t.Fatalf("malformed objective: %d %s; want 400 invalid_field", code, errCode)
	}
	t.Logf("sheddable request refused in %s", refused.Round(time.Millisecond))
}
