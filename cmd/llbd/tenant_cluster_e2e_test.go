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

// TestE2E_ClusterHoldsAKeysAndATenantsRateAcrossThreeReplicas floods a key limited
// to 20 requests a second through three llbd replicas on one real etcd,
// each sent 3× the limit: the replicas together admit the limit; then a
// tenant limited to 20 requests a second over two keys, the same way. The
// key and the limit are created on one replica and enforced by all (etcd
// replicates them); their buckets are shared by consumption reports every
// 100 ms (tenant.Gate, lifecycle/tenants.go).
func TestE2E_ClusterHoldsAKeysAndATenantsRateAcrossThreeReplicas(t *testing.T) {
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
	// Phase 1: a key limited to 20 requests a second (burst 20), created
	// on another replica than the rule's.
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
	floodThroughReplicas(t, r.replicas, func(p *replicaProc) int { return call(p, ck.RawKey) }, "key", rate, burst)

	// Phase 2: a tenant limit of 20 requests a second over two unlimited
	// keys of the tenant, set on a third replica; the burst of a tenant
	// bucket is its rate.
	var keys [2]string
	for i := range keys {
		code, body := r.replicas[2].do(http.MethodPost, "/netlox/v1/config/ai/apikey",
			fmt.Sprintf(`{"tenant_id":"flood-tenant","name":"k%d"}`, i))
		if code != 201 {
			t.Fatalf("create tenant key: %d %s", code, body)
		}
		var k struct {
			RawKey string `json:"raw_key"`
		}
		_ = json.Unmarshal([]byte(body), &k)
		keys[i] = k.RawKey
	}
	if code, body := r.replicas[2].do(http.MethodPost, "/netlox/v1/config/ai/tenant/ratelimit",
		fmt.Sprintf(`{"tenant_id":"flood-tenant","rps":%d}`, rate)); code != 204 {
		t.Fatalf("tenant limit: %d %s", code, body)
	}
	for _, p := range r.replicas {
		waitUntil(t, fmt.Sprintf("replica %d knows the tenant's keys", p.idx), 5*time.Second, func() bool { return call(p, keys[1]) == 200 })
	}
	time.Sleep(1500 * time.Millisecond)
	var n atomic.Int64
	floodThroughReplicas(t, r.replicas, func(p *replicaProc) int { return call(p, keys[n.Add(1)%2]) }, "tenant", rate, rate)
}

// floodThroughReplicas sends each replica 3× the limit (4 clients at 15
// requests a second) for 20 s through call and checks that the replicas
// together admitted the limit, rate·T + burst, within 10 %, and the
// limit's rate after a 5 s warm-up within 10 %.
func floodThroughReplicas(t *testing.T, replicas []*replicaProc, call func(*replicaProc) int, what string, rate, burst int) {
	t.Helper()
	const T, warm = 20 * time.Second, 5 * time.Second
	var ok, steady, refused, other atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for _, p := range replicas {
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
					switch call(p) {
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
	ideal := float64(rate)*T.Seconds() + float64(burst)
	errPct := 100 * (float64(ok.Load()) - ideal) / ideal
	wantSteady := float64(rate) * (T - warm).Seconds()
	steadyPct := 100 * (float64(steady.Load()) - wantSteady) / wantSteady
	t.Logf("3 replicas, %s at %d rps (burst %d), offered ~%d rps for %v: admitted %d (ideal %.0f, %+.1f %%), %d refused 429, %d other; after %v: %d admitted (%+.1f %% off %.0f)",
		what, rate, burst, len(replicas)*4*15, T, ok.Load(), ideal, errPct, refused.Load(), other.Load(), warm, steady.Load(), steadyPct, wantSteady)
	if errPct > 10 || errPct < -10 || steadyPct > 10 || steadyPct < -10 {
		t.Errorf("%s: admitted %d over %v (%+.1f %%), %d after warm-up (%+.1f %%); want both within 10 %% of the limit", what, ok.Load(), T, errPct, steady.Load(), steadyPct)
	}
	if other.Load() > 0 {
		t.Errorf("%s: %d answers were neither 200 nor 429", what, other.Load())
	}
}
