package actors

import (
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
)

// serveTTFT reports the route's prefill leg with a measured TTFT (and its
// decode leg) at now and finishes the ticket.
func serveTTFT(c *routerCore, now time.Time, r Route, ttft time.Duration) {
	c.report(now, Outcome{Ticket: r.Ticket, Leg: LegPrefill, Status: 200, TTFT: ttft})
	c.report(now, Outcome{Ticket: r.Ticket, Leg: LegDecode, Status: 200, TTFT: time.Hour})
	c.finish(r.Ticket, Result{OK: true})
}

func TestRouterCore_TTFTIsPredictedLearnedAndChecked(t *testing.T) {
	c, rec := newTestCore(t, pdConfig(2, 1, ladder.DefaultEnv()))
	now := t0
	// An engine that answers in 5 ms plus 1 ms per uncached block: after
	// enough requests the prefill endpoint's predictions agree.
	var last Route
	for i := range 3 * ladder.TTFTTrained {
		now = now.Add(time.Second)
		blocks := uint32(8 + i%5*20)
		r := routeScored(t, c, uint64(i+1), blocks, 0, 0)
		if !r.Decision.TTFT.OK || r.Decision.TTFT.Input.Uncached != blocks {
			t.Fatalf("request %d: prediction %+v; want one for %d uncached blocks", i, r.Decision.TTFT, blocks)
		}
		serveTTFT(c, now, r, 5*time.Millisecond+time.Duration(blocks)*time.Millisecond)
		last = r
	}
	ep := last.Decision.Prefill
	st := c.ttftStatus(ep)
	if st.Compared == 0 || !st.Trained || st.Drifting {
		t.Fatalf("status %+v; want a trained, agreeing model", st)
	}
	r := routeScored(t, c, 1000, 48, 0, 0)
	if got, want := r.Decision.TTFT.Predicted, 53*time.Millisecond; got < want*9/10 || got > want*11/10 || !r.Decision.TTFT.Trusted {
		t.Fatalf("prediction %+v; want about %v, trusted", r.Decision.TTFT, want)
	}
	serveTTFT(c, now, r, 53*time.Millisecond)

	// The engine becomes ten times slower: the predictions drift, which is
	// logged once, and they are trusted again once the model has learned.
	for i := range 200 {
		now = now.Add(time.Second)
		r := routeScored(t, c, uint64(2000+i), 48, 0, 0)
		serveTTFT(c, now, r, 530*time.Millisecond)
	}
	if len(rec.ttft) == 0 || rec.ttft[0] != "0:true" && rec.ttft[0] != "1:true" {
		t.Fatalf("transitions %v; want a drift first", rec.ttft)
	}
	for ep := range 2 {
		if st := c.ttftStatus(ep); st.Drifting {
			t.Fatalf("endpoint %d still drifting after the model relearned: %+v (transitions %v)", ep, st, rec.ttft)
		}
	}
	// A decode leg, an unmeasured leg and a failed leg are not compared.
	before := c.ttftStatus(0).Compared + c.ttftStatus(1).Compared
	r = routeScored(t, c, 9000, 48, 0, 0)
	c.report(now, Outcome{Ticket: r.Ticket, Leg: LegPrefill, Status: 500, TTFT: time.Second})
	c.finish(r.Ticket, Result{})
	r = routeScored(t, c, 9001, 48, 0, 0)
	c.report(now, Outcome{Ticket: r.Ticket, Leg: LegPrefill, Status: 200})
	c.finish(r.Ticket, Result{OK: true})
	if after := c.ttftStatus(0).Compared + c.ttftStatus(1).Compared; after != before {
		t.Fatalf("compared %d → %d; a failed or unmeasured leg must not count", before, after)
	}
}
