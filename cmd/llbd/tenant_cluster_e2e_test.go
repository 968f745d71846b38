package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestE2E_ClusterHoldsAKeysRateAcrossThreeReplicas floods a key limited
// to 20 requests a second through three llbd replicas on one real etcd,
// each sent 3× the limit: the replicas together admit the limit. The
// key is created on one replica and enforced by all (etcd replicates it);
// their buckets are shared by consumption reports every 100 ms
// (tenant.Gate, lifecycle/tenants.go).
func TestE2E_ClusterHoldsAKeysRateAcrossThreeReplicas(t *testing.T) {
	r := startRig(t, rigConfig{replicas: 3, etcdMembers: 1, single: 2, scale: 0.01})
	a := r.replicas[0]
	rule := ruleJSON(t, r.fleet, r.vip, r.port, map[string]any{"sse_mode": true})
	if code, body := a.do(http.MethodPost, "/netlox/v1/config/loadbalancer", rule); code != 200 {
		t.Fatalf("POST rule: %d %s", code, body)
	}
	call := func(p *replicaProc, key string) int {
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://%s:%d/v1/completions", p.ip, r.port),
			strings.NewReader(`{"model":"sim-model","prompt":"hi","max_tokens":1}`))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("X-Api-Key", key)
		}
		res, err := dataClient.Do(req)
		if err != nil {
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, p := range r.replicas {
		waitUntil(t, fmt.Sprintf("replica %d serves the rule", p.idx), 5*time.Second, func() bool { return call(p, "") == 200 })
	}
	const rate, burst = 20, 20
	code, body := r.replicas[1].do(http.MethodPost, "/netlox/v1/config/ai/apikey",
		fmt.Sprintf(`{"tenant_id":"flood","name":"shared","rate_limit_rps":%d,"burst_size":%d}`, rate, burst))
	if code != 201 {
		t.Fatalf("create key: %d %s", code, body)
	}
	var ck struct {
		RawKey string `json:"raw_key"`
	}
	_ = json.Unmarshal([]byte(body), &ck)
	for _, p := range r.replicas {
		waitUntil(t, fmt.Sprintf("replica %d enforces the key", p.idx), 5*time.Second, func() bool { return call(p, "") == 401 })
	}
	// Wait for the burst to be back (the probes above took none) and for
	// every replica to count three members.
	time.Sleep(1500 * time.Millisecond)

	// Each replica gets 3× the limit: 4 clients at 15 requests a second.
	const T, warm = 20 * time.Second, 5 * time.Second
	var ok, steady, refused, other atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for _, p := range r.replicas {
		for c := 0; c < 4; c++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(time.Second / 15)
				defer tick.Stop()
				for range tick.C {
					at := time.Since(start)
					if at >= T {
						return
					}
					switch call(p, ck.RawKey) {
					case 200:
						ok.Add(1)
						if at >= warm {
							steady.Add(1)
						}
					case 429:
						refused.Add(1)
					default:
						other.Add(1)
					}
				}
			}()
		}
	}
	wg.Wait()
	ideal := float64(rate)*T.Seconds() + burst
	errPct := 100 * (float64(ok.Load()) - ideal) / ideal
	wantSteady := float64(rate) * (T - warm).Seconds()
	steadyPct := 100 * (float64(steady.Load()) - wantSteady) / wantSteady
	t.Logf("3 replicas, key at %d rps (burst %d), offered ~%d rps for %v: admitted %d (ideal %.0f, %+.1f %%), %d refused 429, %d other; after %v: %d admitted (%+.1f %% off %.0f)",
		rate, burst, 3*4*15, T, ok.Load(), ideal, errPct, refused.Load(), other.Load(), warm, steady.Load(), steadyPct, wantSteady)
	if errPct > 10 || errPct < -10 || steadyPct > 10 || steadyPct < -10 {
		t.Errorf("admitted %d over %v (%+.1f %%), %d after warm-up (%+.1f %%); want both within 10 %% of the limit", ok.Load(), T, errPct, steady.Load(), steadyPct)
	}
	if other.Load() > 0 {
		t.Errorf("%d answers were neither 200 nor 429", other.Load())
	}
}
