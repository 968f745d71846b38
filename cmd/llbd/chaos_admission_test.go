package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// Admission under a burst of ten times capacity in park mode: every request
// completes or gets its 504 (parked past the deadline) or 429 (queues
// full), none is lost or answered twice, and the workers see exactly the
// requests that were admitted.

// Admission knobs of the test (LLB_PD_* environment).
const (
	admitPerEP   = 2 // LLB_PD_MAX_INFLIGHT_PER_EP
	admitDepth   = 4 // LLB_PD_QUEUE_DEPTH_PER_EP
	admitParkSec = 1 // LLB_PD_MAX_PARK_SEC
	// admitLatency is the prefill workers' injected latency: a prefill slot
	// is held at least this long, so the first parked wave resumes before
	// the park deadline and the second cannot.
	admitLatency = 600 * time.Millisecond
)

// legCounts sums the workers' leg counters: prefill legs that returned
// kv_transfer_params, requests submitted to prefill engines, and decode
// legs served from pulled KV.
func legCounts(f *pdFleet) (prefillLegs, prefillSubmitted, decodeLegs uint64) {
	for _, w := range f.prefill {
		e := w.debug().Engine
		prefillLegs += e.RemoteDecodeLegs
		prefillSubmitted += e.Submitted
	}
	for _, w := range f.decode {
		decodeLegs += w.debug().Engine.RemotePrefillLegs
	}
	return
}

// burst fires n requests at once and tallies them; every 429 must carry
// Retry-After.
func burst(t *testing.T, f *pdFleet, n int, round int) *tally {
	t.Helper()
	tl := newTally()
	c := loadClient(n)
	defer c.CloseIdleConnections()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	noRetryAfter := 0
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			outcome, detail, h := ask(c, f.vip, fmt.Sprintf("Burst %d request %d: say something short.", round, i), 4, i%2 == 0, 25*time.Second)
			if strings.HasPrefix(outcome, "http_429") && h.Get("Retry-After") == "" {
				mu.Lock()
				noRetryAfter++
				mu.Unlock()
			}
			tl.add(outcome, detail, h)
		}()
	}
	close(start)
	wg.Wait()
	if noRetryAfter > 0 {
		t.Errorf("%d answers 429 without Retry-After", noRetryAfter)
	}
	return tl
}

func TestChaos_AdmissionBurstOfTenTimesCapacityLosesAndDuplicatesNothing(t *testing.T) {
	f := startPDFleet(t, fleetSpec{
		prefill: 2, decode: 2, timeScale: 0.2,
		prefillLatencyMS: float64(admitLatency / time.Millisecond),
		env: []string{
			fmt.Sprintf("LLB_PD_MAX_INFLIGHT_PER_EP=%d", admitPerEP),
			fmt.Sprintf("LLB_PD_QUEUE_DEPTH_PER_EP=%d", admitDepth),
			fmt.Sprintf("LLB_PD_MAX_PARK_SEC=%d", admitParkSec),
		},
	})
	const (
		capacity = 2 * admitPerEP // in flight across the two prefill endpoints
		queues   = 2 * admitDepth // parked places
		n        = 10 * capacity
	)
	total := newTally()
	rounds := soak(1, 15)
	for round := 0; round < rounds; round++ {
		m0 := f.metrics()
		legs0, sub0, dec0 := legCounts(f)
		tl := burst(t, f, n, round)
		m1 := f.metrics()
		legs1, sub1, dec1 := legCounts(f)
		ok, shed, late := tl.get(outOK), tl.get("http_429_pd_overloaded"), tl.get("http_504_pd_admission_park_timeout")
		queued := int(m1.sum("loxilb_pd_admission_queued_total") - m0.sum("loxilb_pd_admission_queued_total"))
		shedM := int(m1.sum("loxilb_pd_admission_shed_total") - m0.sum("loxilb_pd_admission_shed_total"))
		t.Logf("burst %d: %s; parked %d, shed %d; workers: %d prefill legs (%d submitted), %d decode legs",
			round, tl, queued, shedM, legs1-legs0, sub1-sub0, dec1-dec0)

		// Every request got exactly one of the three answers.
		tl.check(t, outOK, "http_429_pd_overloaded", "http_504_pd_admission_park_timeout")
		if tl.total() != n || ok+shed+late != n {
			t.Errorf("burst %d: sent %d, answered %d ok + %d 429 + %d 504; want all %d answered", round, tl.total(), ok, shed, late, n)
		}
		// The gate's own accounting: capacity admitted at once, every queue
		// place filled, the rest shed; each parked request either resumed
		// (2xx) or timed out (504).
		if queued != queues || shed != n-capacity-queues || shedM != shed {
			t.Errorf("burst %d: parked %d, shed %d (metric %d); want %d parked and %d shed", round, queued, shed, shedM, queues, n-capacity-queues)
		}
		if ok+late != capacity+queued {
			t.Errorf("burst %d: %d ok + %d timed out; want the %d admitted at once plus the %d parked", round, ok, late, capacity, queued)
		}
		// The first parked wave resumes when the first legs free their
		// slots (after admitLatency < the park deadline); the second cannot
		// before the deadline.
		if ok < capacity || late < queues-capacity {
			t.Errorf("burst %d: %d ok, %d park timeouts; want at least %d and %d", round, ok, late, capacity, queues-capacity)
		}
		// The workers saw exactly the admitted requests, once each.
		if got := int(legs1 - legs0); got != ok {
			t.Errorf("burst %d: prefill workers ran %d legs for %d successful requests", round, got, ok)
		}
		if got := int(sub1 - sub0); got != ok {
			t.Errorf("burst %d: prefill engines got %d requests for %d admitted", round, got, ok)
		}
		if got := int(dec1 - dec0); got != ok {
			t.Errorf("burst %d: decode workers ran %d legs for %d successful requests", round, got, ok)
		}
		f.waitEndpoints("idle after the burst", 5*time.Second, func(eps []endpointState) bool {
			for _, e := range eps {
				if e.InFlight != 0 || e.Parked != 0 {
					return false
				}
			}
			return true
		})
		total.merge(tl)
	}
	t.Logf("admission bursts: %s", total)

	// Clients that leave while parked take nothing with them: fill every
	// slot, park two clients that give up after 300 ms, and the rule is
	// idle again once the fillers finish — with room for the next request.
	var wg sync.WaitGroup
	fill := newTally()
	c := loadClient(capacity + 2)
	for i := 0; i < capacity; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outcome, detail, h := ask(c, f.vip, fmt.Sprintf("Filler %d.", i), 4, false, 25*time.Second)
			fill.add(outcome, detail, h)
		}()
	}
	f.waitEndpoints("every prefill slot taken", 5*time.Second, func(eps []endpointState) bool {
		return eps[0].InFlight == admitPerEP && eps[1].InFlight == admitPerEP
	})
	m0 := f.metrics()
	left := make(chan error, 2)
	for i := 0; i < 2; i++ {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.vip+"/v1/completions",
				strings.NewReader(fmt.Sprintf(`{"model":"sim-model","prompt":"Leaver %d.","max_tokens":4}`, i)))
			res, err := c.Do(req)
			if err == nil {
				res.Body.Close()
				err = fmt.Errorf("answered %d before the client left", res.StatusCode)
			} else if ctx.Err() != nil {
				err = nil
			}
			left <- err
		}()
	}
	for i := 0; i < 2; i++ {
		if err := <-left; err != nil {
			t.Errorf("parked client: %v", err)
		}
	}
	if q := f.metrics().sum("loxilb_pd_admission_queued_total") - m0.sum("loxilb_pd_admission_queued_total"); q != 2 {
		t.Errorf("%v requests parked; want the 2 leavers", q)
	}
	wg.Wait()
	fill.check(t, outOK)
	f.waitEndpoints("idle after the leavers", 5*time.Second, func(eps []endpointState) bool {
		for _, e := range eps {
			if e.InFlight != 0 || e.Parked != 0 {
				return false
			}
		}
		return true
	})
	if outcome, detail, _ := ask(c, f.vip, "After the leavers.", 4, false, 25*time.Second); outcome != outOK {
		t.Errorf("request after the leavers: %s %s", outcome, detail)
	}
}
