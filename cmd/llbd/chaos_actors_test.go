package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// Actor chaos: the actors of a running P/D + KV rule are crashed at random
// through the debug listener while clients keep the rule busy. Supervision
// must restart every one, no request may hang, and the rule must come out
// of it whole.

// actorRange is how many actors of a kind a 2+2 P/D rule with KV has.
var actorRange = []struct {
	kind string
	n    int
}{
	{"router", 1},
	{"endpoint", 4},
	{"breaker", 4},
	{"inventory", 2}, // the prefill endpoints' mirrors (indexes 0 and 1)
	{"session", 16},
}

// crashBudget keeps the chaos under the supervisor's restart budget
// (actors.DefaultRestartBudget, 20 restarts in 10 s per actor): beyond it a
// crash-looping actor is stopped on purpose, which is a different test.
const crashBudget = 10

// crashLoop crashes a random actor every 50–100 ms until d passes and
// returns how many crashes of each kind it injected.
func crashLoop(t *testing.T, f *pdFleet, d time.Duration) map[string]int {
	t.Helper()
	done := map[string]int{}
	recent := map[string][]time.Time{}
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		k := actorRange[rand.IntN(len(actorRange))]
		idx := rand.IntN(k.n)
		id := fmt.Sprintf("%s-%d", k.kind, idx)
		var kept []time.Time
		for _, at := range recent[id] {
			if time.Since(at) < 10*time.Second {
				kept = append(kept, at)
			}
		}
		recent[id] = kept
		if len(kept) >= crashBudget {
			continue
		}
		if !f.crash(k.kind, idx) {
			t.Fatalf("the debug listener found no %s actor %d", k.kind, idx)
		}
		recent[id] = append(recent[id], time.Now())
		done[k.kind]++
		time.Sleep(time.Duration(50+rand.IntN(51)) * time.Millisecond)
	}
	return done
}

func TestChaos_ActorCrashesUnderLoadNeverHangAndTheRuleRecovers(t *testing.T) {
	f := startPDFleet(t, fleetSpec{
		prefill: 2, decode: 2, timeScale: 0.2,
		env: []string{"LLB_PD_PREFILL_TIMEOUT_SEC=5", "LOXILB_KV_COLDSTART_SEED_N=0",
			// Admission in park mode: 8 clients over 2 prefill endpoints
			// capped at 2 keep requests parked in the endpoint actors'
			// queues while those actors (and the router) are crashed.
			"LLB_PD_MAX_INFLIGHT_PER_EP=2", "LLB_PD_QUEUE_DEPTH_PER_EP=8", "LLB_PD_MAX_PARK_SEC=10"},
		rule: map[string]any{"kvWarmupSec": 1},
	})
	load := loadSpec{clients: 8, maxTokens: 16, stream: true, sessions: true, hungAfter: 25 * time.Second}
	stop := make(chan struct{})
	result := make(chan *tally, 1)
	go func() { result <- runLoad(f.vip, load, stop) }()
	crashes := crashLoop(t, f, soak(4*time.Second, 90*time.Second))
	close(stop)
	tl := <-result
	injected := 0
	for _, n := range crashes {
		injected += n
	}
	t.Logf("actor chaos: %d crashes %v; requests %s", injected, crashes, tl)

	// Every client got a complete 2xx: a restarted router re-decides what
	// it had in flight, a restarted endpoint actor hands its queue back,
	// the others hold no request. None hung, none was cut, none failed.
	tl.check(t, outOK)
	// The inventory actors' restarts keep their mirrors: Tier 1.5 keeps
	// routing the shared prefixes through the chaos (without it every
	// cached prefix is lost to Tier 1.5 after the first restart).
	if tl.tier("1.5")*5 < tl.get(outOK) {
		t.Errorf("Tier 1.5 routed %d of %d successful requests; want at least 20%% (%s)", tl.tier("1.5"), tl.get(outOK), tl)
	}
	for _, k := range actorRange {
		if crashes[k.kind] == 0 {
			t.Errorf("no %s actor was crashed (%v)", k.kind, crashes)
		}
	}

	// Every crash was one supervised restart; no actor was given up on.
	var m promSeries
	deadline := time.Now().Add(5 * time.Second)
	for {
		m = f.metrics()
		if int(m.sum("llb_actor_restarts_total")) == injected || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := int(m.sum("llb_actor_restarts_total")); got != injected {
		t.Errorf("llb_actor_restarts_total %d; want %d (one per injected crash)", got, injected)
	}
	if lost := m.sum("llb_actors_lost_total"); lost != 0 {
		t.Errorf("llb_actors_lost_total %v; want 0", lost)
	}
	if parked := m.sum("loxilb_pd_admission_queued_total"); parked == 0 {
		t.Errorf("no request was parked: the admission queues were not exercised under the chaos")
	}

	// The router's view and the actors' own state agree: every endpoint is
	// up with a closed breaker, and with the load gone no slot or queue
	// place leaked.
	f.waitEndpoints("every endpoint active, probe up, breaker closed, idle", 5*time.Second, func(eps []endpointState) bool {
		for _, e := range eps {
			if e.State != "active" || e.Breaker != "closed" || e.Probe != "up" || e.InFlight != 0 || e.Parked != 0 {
				return false
			}
		}
		return len(eps) == 4
	})
	m = f.metrics()
	for i := 0; i < 4; i++ {
		ep := fmt.Sprintf(`ep_idx="%d"`, i)
		if v := m.sum("llb_breaker_state", ep); v != 0 {
			t.Errorf("endpoint %d: llb_breaker_state %v; want 0 (closed)", i, v)
		}
		if v := m.sum("llb_endpoint_up", ep); v != 1 {
			t.Errorf("endpoint %d: llb_endpoint_up %v; want 1", i, v)
		}
	}

	// The rule still serves, and Tier 1.5 learns a new prefix again.
	after := newTally()
	c := loadClient(1)
	fresh := strings.Repeat("A prefix no request used before the chaos ended. ", 12)
	tier15 := false
	for i := 0; i < 40 && !(tier15 && i >= 20); i++ {
		outcome, detail, h := ask(c, f.vip, fmt.Sprintf("%s Item %d.", fresh, i), 4, false, 25*time.Second)
		after.add(outcome, detail, h)
		if outcome == outOK && strings.HasPrefix(h.Get("X-Llb-Route"), "tier=1.5") {
			tier15 = true
		}
	}
	t.Logf("after the chaos: %s", after)
	after.check(t, outOK)
	if !tier15 {
		t.Errorf("no request with a fresh shared prefix was routed by Tier 1.5 after the chaos (%s)", after)
	}
}

func TestChaos_RouterCrashLoopBeyondItsRestartBudgetDegradesThenRecovers(t *testing.T) {
	if !chaosLong() {
		t.Skip("soak only (make chaos); actors.TestService_ActorPastItsRestartBudgetIsRespawnedNotLostForGood covers it in go test")
	}
	f := startPDFleet(t, fleetSpec{prefill: 2, decode: 2, timeScale: 0.2, env: []string{"LLB_PD_PREFILL_TIMEOUT_SEC=5"}})
	load := loadSpec{clients: 8, maxTokens: 16, stream: true, hungAfter: 25 * time.Second}
	stop := make(chan struct{})
	result := make(chan *tally, 1)
	live := newTally()
	go func() { result <- runLoadInto(f.vip, load, stop, live) }()
	waitUntil(t, "load flowing", 10*time.Second, func() bool { return live.get(outOK) >= 50 })
	// A crash loop: the supervisor's budget (20 restarts in 10 s) is spent,
	// it stops the router, and respawns it a second later.
	start := time.Now()
	for i := 0; i < 30; i++ {
		if !f.crash("router", 0) {
			t.Fatal("no router actor")
		}
	}
	waitUntil(t, "router given up on", 5*time.Second, func() bool { return f.metrics().sum("llb_actors_lost_total") >= 1 })
	okBefore := live.get(outOK)
	waitUntil(t, "serving again after the respawn", 10*time.Second, func() bool { return live.get(outOK) >= okBefore+50 })
	recovered := time.Since(start)
	close(stop)
	tl := <-result
	t.Logf("router crash loop: served again %v after it began; requests %s", recovered.Round(time.Millisecond), tl)
	// While the router was down, requests got the router timeout's 503 —
	// never a hang — and then it served again by itself.
	tl.check(t, outOK, "http_503_service_unavailable")
	if recovered > actorsRespawnBound {
		t.Errorf("served again %v after the crash loop; want within %v", recovered, actorsRespawnBound)
	}
}

// actorsRespawnBound: the respawn delay (1 s), a route timeout (2 s) for
// requests sent to the dead router meanwhile, and slack.
const actorsRespawnBound = 5 * time.Second
