package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestE2E_AResponsesChainStaysOnItsWorkerAcrossThreeReplicas sends a
// 10-turn previous_response_id chain round robin over three llbd replicas
// on one real etcd, in front of three workers whose Responses store is
// their own memory: each turn enters through another replica than the one
// that saw the turn before, and must still reach the worker that stored the
// chain (any other answers 404). The pin a replica takes when a response
// starts lives in the cluster's session shard, which every replica asks.
func TestE2E_AResponsesChainStaysOnItsWorkerAcrossThreeReplicas(t *testing.T) {
	r := startRig(t, rigConfig{replicas: 3, etcdMembers: 1, single: 3, scale: 0.01})
	rule := ruleJSON(t, r.fleet, r.vip, r.port, nil)
	if code, body := r.replicas[0].do(http.MethodPost, "/netlox/v1/config/loadbalancer", rule); code != 200 {
		t.Fatalf("POST rule: %d %s", code, body)
	}
	for _, p := range r.replicas {
		waitUntil(t, fmt.Sprintf("replica %d serves the rule", p.idx), 10*time.Second, func() bool {
			return p.chat(r.port, "", "hello").status == 200
		})
	}
	base := make([]int, len(r.fleet.Workers()))
	for i, w := range r.fleet.Workers() {
		base[i] = w.StoredResponses()
	}

	prev, holder := "", -1
	for turn := range 10 {
		p := r.replicas[turn%3]
		body := map[string]any{"model": "sim-model", "input": fmt.Sprintf("turn %d", turn), "max_output_tokens": 2, "stream": turn%2 == 1}
		if prev != "" {
			body["previous_response_id"] = prev
		}
		b, _ := json.Marshal(body)
		res, err := dataClient.Post(fmt.Sprintf("http://%s:%d/v1/responses", p.ip, r.port), "application/json", strings.NewReader(string(b)))
		if err != nil {
			t.Fatalf("turn %d through replica %d: %v", turn, p.idx, err)
		}
		out, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			for _, q := range r.replicas {
				_, v := q.do(http.MethodGet, "/netlox/v1/config/ai/cluster", "")
				t.Logf("replica %d: %s", q.idx, v)
			}
			t.Fatalf("turn %d through replica %d: %d %s (route %s)", turn, p.idx, res.StatusCode, out, res.Header.Get("X-Llb-Route"))
		}
		_, ep, _ := routeOf(t, res.Header)
		if holder >= 0 && ep != holder {
			t.Fatalf("turn %d through replica %d went to endpoint %d; the chain is held by %d (route %s)", turn, p.idx, ep, holder, res.Header.Get("X-Llb-Route"))
		}
		holder = ep
		i := strings.Index(string(out), `"id":"resp_`)
		if i < 0 {
			t.Fatalf("turn %d: no response id in %s", turn, out)
		}
		prev = string(out[i+6 : i+6+len("resp_")+32])
	}
	for i, w := range r.fleet.Workers() {
		n := w.StoredResponses() - base[i]
		if i == holder && n != 10 || i != holder && n != 0 {
			t.Errorf("worker %d stored %d of the chain's responses; the holder %d should store all 10", i, n, holder)
		}
	}
	// The stored response is found through every replica.
	for _, p := range r.replicas {
		res, err := dataClient.Get(fmt.Sprintf("http://%s:%d/v1/responses/%s", p.ip, r.port, prev))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if _, ep, _ := routeOf(t, res.Header); res.StatusCode != 200 || ep != holder {
			t.Errorf("GET /v1/responses/{id} through replica %d: %d on %d; want 200 from the holder %d", p.idx, res.StatusCode, ep, holder)
		}
	}
}
