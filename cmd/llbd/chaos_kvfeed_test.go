package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// KV publisher restarts: a prefill worker whose cache llb mirrors is
// SIGKILLed and started again (a new engine, an empty cache, a publisher
// whose sequence starts over). llb's subscription must reconnect by itself,
// notice the restart and clear the stale mirror, and Tier 1.5 must follow
// the worker's real cache again. Then llb's own inventory actor is
// crashed: it must keep the mirror (vLLM never republishes a cached block),
// so Tier 1.5 keeps routing a prefix nobody re-sent.

// kvProbe sends prompts of one prefix to the rule, sequentially.
type kvProbe struct {
	t      *testing.T
	f      *pdFleet
	c      *http.Client
	prefix string
	n      int
	// route is the last answer's X-Llb-Route, for failure messages.
	route string
}

func newKVProbe(t *testing.T, f *pdFleet, name string) *kvProbe {
	return &kvProbe{t: t, f: f, c: loadClient(1),
		prefix: strings.Repeat(fmt.Sprintf("Shared context %s for the KV feed chaos test. ", name), 12)}
}

// send sends one prompt of the prefix and returns its tier and prefill
// endpoint; anything but a complete 2xx fails the test.
func (p *kvProbe) send() (tier string, prefill int) {
	p.t.Helper()
	p.n++
	outcome, detail, h := ask(p.c, p.f.vip, fmt.Sprintf("%s Turn %d.", p.prefix, p.n), 4, false, 25*time.Second)
	if outcome != outOK {
		p.t.Fatalf("prefix request: %s %s", outcome, detail)
	}
	p.route = h.Get("X-Llb-Route")
	tier, prefill, _ = routeOf(p.t, h)
	return tier, prefill
}

// waitWarm sends unrelated prompts until the rule's KV warm-up is over, so
// that the probes' prefixes land on one endpoint, not sprayed by Tier 2.
func waitWarm(t *testing.T, f *pdFleet) {
	t.Helper()
	c := loadClient(1)
	for i := 0; ; i++ {
		outcome, detail, h := ask(c, f.vip, fmt.Sprintf("warm-up %d", i), 1, false, 25*time.Second)
		if outcome != outOK {
			t.Fatalf("warm-up request: %s %s", outcome, detail)
		}
		if !strings.Contains(h.Get("X-Llb-Route"), "warmup") {
			return
		}
		if i > 500 {
			t.Fatalf("still in KV warm-up after %d requests", i)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// feedConnects counts the daemon's "kv feed connected" lines for ep.
func feedConnects(d *daemon, ep int) int {
	d.log.mu.Lock()
	defer d.log.mu.Unlock()
	n := 0
	for _, l := range d.log.lines {
		if m, _ := l["message"].(string); m == "kv feed connected" && l["ep_idx"] == float64(ep) {
			n++
		}
	}
	return n
}

// owner sends until Tier 1.5 routes the prefix on its mirrored overlap (not
// a miss the law placed) and returns the endpoint.
// After a prompt placed by another tier it waits until llb's mirror of the
// endpoint that served it holds what that engine caches, so that the next
// prompt finds the prefix there: sent sooner, it would be placed again
// before llb heard of the first, and a prefix cached on both prefill
// endpoints has no single owner to follow.
func (p *kvProbe) owner(within time.Duration) int {
	p.t.Helper()
	var last string
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		tier, ep := p.send()
		h := http.Header{}
		h.Set("X-Llb-Route", p.route)
		if overlapHit(h) {
			return ep
		}
		last = tier
		if ep < 0 || ep >= len(p.f.prefill) {
			continue
		}
		w := p.f.prefill[ep]
		for !time.Now().After(deadline) {
			if int(p.f.metrics().sum("loxilb_pd_kv_blocks", fmt.Sprintf(`ep_idx="%d"`, ep))) == w.debug().Engine.CachedBlocks {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	p.t.Fatalf("prefix never routed by Tier 1.5 within %s (last tier %s)", within, last)
	return -1
}

func TestChaos_KVPublisherRestartResyncsTheMirrorAndTierOneFiveFollows(t *testing.T) {
	f := startPDFleet(t, fleetSpec{
		prefill: 2, decode: 2, timeScale: 0.2,
		env:  []string{"LOXILB_KV_COLDSTART_SEED_N=0"},
		rule: map[string]any{"kvWarmupSec": 1},
	})
	ep := func(i int) string { return fmt.Sprintf(`ep_idx="%d"`, i) }
	waitWarm(t, f)
	cycles := soak(1, 5)
	for cycle := 0; cycle < cycles; cycle++ {
		a := newKVProbe(t, f, fmt.Sprintf("A%d", cycle))
		o := a.owner(10 * time.Second)
		w := f.prefill[o]
		before := f.metrics()
		if before.sum("loxilb_pd_kv_blocks", ep(o)) == 0 {
			t.Fatalf("cycle %d: endpoint %d routed by Tier 1.5 with an empty mirror", cycle, o)
		}
		if d := w.debug(); d.Publisher.NextSeq < 2 {
			t.Fatalf("cycle %d: %s published %d batches; the restart check needs 2", cycle, w.spec.Name, d.Publisher.NextSeq)
		}

		// The publisher dies with the worker; llb's subscription notices.
		w.kill()
		waitUntil(t, "kv subscriber disconnected", 5*time.Second, func() bool {
			return f.metrics().sum("loxilb_kv_subscriber_connected", ep(o)) == 0
		})
		w.start()
		waitUntil(t, "kv subscriber reconnected by itself", 10*time.Second, func() bool {
			m := f.metrics()
			return m.sum("loxilb_kv_subscriber_connected", ep(o)) == 1 &&
				m.sum("loxilb_kv_subscriber_reconnect_total", ep(o)) > before.sum("loxilb_kv_subscriber_reconnect_total", ep(o))
		})
		f.waitEndpoints(w.spec.Name+" active", probeUpWithin, func(eps []endpointState) bool { return eps[o].State == "active" })

		// The mirror still holds what the dead engine had: stale affinity
		// sends the prefix to the restarted worker, whose first batch
		// (sequence 0) tells llb the publisher restarted. The mirror is
		// cleared and refilled from what the worker really holds now.
		if tier, got := a.send(); tier != "1.5" || got != o {
			t.Fatalf("cycle %d: after the restart the prefix went tier %s to %d; want the stale Tier-1.5 owner %d (X-Llb-Route: %s)", cycle, tier, got, o, a.route)
		}
		restarted := func() bool {
			return f.metrics().sum("llb_kv_publisher_restarts_total", ep(o)) > before.sum("llb_kv_publisher_restarts_total", ep(o))
		}
		for deadline := time.Now().Add(5 * time.Second); !restarted(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				m := f.metrics()
				t.Fatalf("cycle %d: publisher restart not detected within 5s: the restarted %s published %+v; llb's feed received %v→%v batches (%v→%v duplicates, %v→%v gaps) (X-Llb-Route: %s)",
					cycle, w.spec.Name, w.debug().Publisher,
					before.sum("llb_kv_batches_total", ep(o)), m.sum("llb_kv_batches_total", ep(o)),
					before.sum("llb_kv_seq_duplicates_total", ep(o)), m.sum("llb_kv_seq_duplicates_total", ep(o)),
					before.sum("llb_kv_seq_gaps_total", ep(o)), m.sum("llb_kv_seq_gaps_total", ep(o)), a.route)
			}
		}
		m := f.metrics()
		cached := w.debug().Engine.CachedBlocks
		if got := int(m.sum("loxilb_pd_kv_blocks", ep(o))); got != cached {
			t.Errorf("cycle %d: mirror of %s holds %d blocks after the resync; the restarted engine caches %d", cycle, w.spec.Name, got, cached)
		}
		// Tier 1.5 follows the real cache: the prefix stays on o, and a new
		// prefix is learned from scratch.
		if got := a.owner(5 * time.Second); got != o {
			t.Errorf("cycle %d: prefix moved to %d; want %d (its blocks were stored there again)", cycle, got, o)
		}
		b := newKVProbe(t, f, fmt.Sprintf("B%d", cycle))
		b.owner(10 * time.Second)
		t.Logf("cycle %d: %s SIGKILLed and restarted: reconnects %v→%v, publisher restarts %v→%v, resyncs %v→%v, mirror %d blocks = engine cache",
			cycle, w.spec.Name,
			before.sum("loxilb_kv_subscriber_reconnect_total", ep(o)), m.sum("loxilb_kv_subscriber_reconnect_total", ep(o)),
			before.sum("llb_kv_publisher_restarts_total", ep(o)), m.sum("llb_kv_publisher_restarts_total", ep(o)),
			before.sum("llb_kv_resyncs_total", ep(o)), m.sum("llb_kv_resyncs_total", ep(o)), cached)

		// llb's inventory actor dies: the mirror survives, and the prefix
		// keeps its Tier-1.5 owner although its blocks, cached long ago,
		// are never published again.
		blocks := f.metrics().sum("loxilb_pd_kv_blocks", ep(o))
		connects := feedConnects(f.d, o)
		if !f.crash("inventory", o) {
			t.Fatalf("no inventory actor %d", o)
		}
		// The successor is up once its own feed connected.
		waitUntil(t, "the restarted inventory actor's feed connected", 5*time.Second, func() bool {
			return feedConnects(f.d, o) > connects
		})
		if got := f.metrics().sum("loxilb_pd_kv_blocks", ep(o)); got != blocks {
			t.Errorf("cycle %d: mirror went from %v to %v blocks across the inventory actor's restart; want it kept", cycle, blocks, got)
		}
		if tier, got := a.send(); tier != "1.5" || got != o {
			t.Errorf("cycle %d: after the inventory actor's restart the prefix went tier %s to %d; want Tier 1.5 to %d", cycle, tier, got, o)
		}
	}
}
