package actors

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
)

// routeScored routes one request of a 2-prefill P/D core whose prompt has
// blocks blocks (tokens = blocks·16 + 1), with the given overlaps, and
// returns its admitted route.
func routeScored(t *testing.T, c *routerCore, id uint64, blocks uint32, overlaps ...uint32) Route {
	t.Helper()
	return routeObjective(t, c, id, blocks, 0, overlaps...)
}

// serve reports the route's legs with the engine's cached tokens on the
// prefill leg and finishes the ticket; an under-prediction's confirmation
// is answered with what the mirror holds then (mirrorNow blocks; none: no
// answer in time), and a mirror that does not hold the blocks is not
// waited for. Requests are served one second apart (serveClock), so
// errors that persist outlast ladder.TruthMinBad.
func serve(c *routerCore, r Route, cached uint32, mirrorNow ...uint32) {
	serveClock = serveClock.Add(time.Second)
	now := serveClock
	c.report(now, Outcome{Ticket: r.Ticket, Leg: LegPrefill, Status: 200, Usage: Usage{Reported: true, CachedTokens: cached}})
	c.report(now, Outcome{Ticket: r.Ticket, Leg: LegDecode, Status: 200, Usage: Usage{Reported: true, CachedTokens: 9999}})
	c.finish(r.Ticket, Result{OK: true})
	for len(c.checks) > 0 {
		id, tc := anyCheck(c)
		switch {
		case tc.asking && len(mirrorNow) == 0:
			c.deadlineFired(tc.until, id) // no answer in time: unconfirmed
		case tc.asking:
			c.scoreReply(now, scoreReply{id: id, ep: tc.ep, overlap: mirrorNow[0]})
		default:
			c.deadlineFired(tc.until, id) // the wait is over
		}
	}
}

// anyCheck is one of the confirmations in flight.
func anyCheck(c *routerCore) (uint64, *truthCheck) {
	for id, tc := range c.checks {
		return id, tc
	}
	return 0, nil
}

// TestRouterCore_AnUnderIsAskedAgainUntilTheMirrorCatchesUp plays a loaded
// host: the engine's answer reaches the router before the events of the
// blocks it reused reach the mirror. The mirror is asked again after 5,
// 10, 20 ms…, and the events that arrive within the wait make the under
// late; a mirror that never gets them leaves it unconfirmed at the end of
// the wait, and a look that gets no answer by then ends it too.
func TestRouterCore_AnUnderIsAskedAgainUntilTheMirrorCatchesUp(t *testing.T) {
	c, rec := newTestCore(t, pdConfig(1, 1, ladder.DefaultEnv()))
	look := func(now time.Time, overlap uint32) {
		t.Helper()
		id, tc := anyCheck(c)
		if tc == nil || !tc.asking || rec.waits[id] != tc.until.Sub(now) {
			t.Fatalf("check %+v, deadline %v; want a look out until the end of the wait", tc, rec.waits[id])
		}
		c.scoreReply(now, scoreReply{id: id, ep: tc.ep, overlap: overlap})
	}
	pause := func(now time.Time, want time.Duration) time.Time {
		t.Helper()
		id, tc := anyCheck(c)
		if tc == nil || tc.asking || rec.waits[id] != want {
			t.Fatalf("check %+v, pause %v; want a pause of %v", tc, rec.waits[id], want)
		}
		now = now.Add(want)
		c.deadlineFired(now, id)
		return now
	}
	// Events late by 12 ms: the third look finds the blocks.
	r := routeScored(t, c, 1, 8, 0)
	c.report(t0, Outcome{Ticket: r.Ticket, Leg: LegPrefill, Status: 200, Usage: Usage{Reported: true, CachedTokens: 96}})
	scores := len(rec.scores)
	look(t0, 0)
	now := pause(t0, 5*time.Millisecond)
	look(now, 0)
	now = pause(now, 10*time.Millisecond)
	look(now, 6)
	if st := c.predictionStatus(0); st.Under != 1 || st.Late != 1 || len(c.checks) != 0 || len(rec.scores) != scores+2 {
		t.Fatalf("status %+v, checks %d, looks %d; want one late under after three looks", st, len(c.checks), len(rec.scores)-scores+1)
	}
	// Events that never come: looks until 250 ms are over, then unconfirmed.
	r = routeScored(t, c, 2, 8, 0)
	c.report(t0, Outcome{Ticket: r.Ticket, Leg: LegPrefill, Status: 200, Usage: Usage{Reported: true, CachedTokens: 96}})
	now = t0
	for _, p := range []time.Duration{5, 10, 20, 40, 80} {
		look(now, 0)
		now = pause(now, p*time.Millisecond)
	}
	look(now, 0)
	now = pause(now, 95*time.Millisecond) // what is left of the wait
	if st := c.predictionStatus(0); st.Under != 2 || st.Late != 1 || len(c.checks) != 0 {
		t.Fatalf("status %+v, checks %d; want the second under unconfirmed once the wait is over", st, len(c.checks))
	}
	// A look nobody answers ends at its deadline, the end of the wait.
	r = routeScored(t, c, 3, 8, 0)
	c.report(now, Outcome{Ticket: r.Ticket, Leg: LegPrefill, Status: 200, Usage: Usage{Reported: true, CachedTokens: 96}})
	id, tc := anyCheck(c)
	c.deadlineFired(tc.until, id)
	c.scoreReply(tc.until, scoreReply{id: id, ep: 0, overlap: 6}) // too late: ignored
	if st := c.predictionStatus(0); st.Under != 3 || st.Late != 1 || len(c.checks) != 0 {
		t.Fatalf("status %+v, checks %d; want the third under unconfirmed", st, len(c.checks))
	}
}

var serveClock = t0

func TestRouterCore_RouteCarriesThePredictionOfThePickedEndpoint(t *testing.T) {
	c, _ := newTestCore(t, pdConfig(2, 1, ladder.DefaultEnv()))
	r := routeScored(t, c, 1, 8, 2, 5)
	if r.Decision.Prefill != 1 || !r.Prediction.OK || r.Prediction.CachedTokens != 5*16 {
		t.Fatalf("route %s prediction %+v; want prefill 1 predicted 80 tokens", r.Decision.String(), r.Prediction)
	}
	serve(c, r, 80)
	st := c.predictionStatus(1)
	if st.Match != 1 || st.Over+st.Under != 0 || st.LastPredicted != 80 || st.LastActual != 80 || !st.HaveLast {
		t.Fatalf("status %+v; want one match 80/80 (the decode leg's usage is not compared)", st)
	}
	// Without a chain there is nothing to predict or compare.
	m := newMsg(2, &RouteRequest{})
	c.route(t0, m)
	r2 := final(t, m).route
	if r2.Prediction.OK {
		t.Fatalf("prediction %+v without a chain; want none", r2.Prediction)
	}
	serve(c, r2, 64)
	if st := c.predictionStatus(r2.Ticket.Prefill); st.Match+st.Over+st.Under != boolToU64(r2.Ticket.Prefill == 1) {
		t.Fatalf("status %+v; the unpredicted request must not count", st)
	}
}

func boolToU64(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// TestRouterCore_WrongPredictionsDemoteTheEndpointUntilTheyAgree plays a
// wrong hash seed on endpoint 0: llb's mirror never matches (overlap 0),
// the engine keeps reusing its cache. Every request counts, whichever tier
// picked the endpoint.
func TestRouterCore_WrongPredictionsDemoteTheEndpointUntilTheyAgree(t *testing.T) {
	for _, demote := range []bool{true, false} {
		t.Run(fmt.Sprintf("demote=%v", demote), func(t *testing.T) {
			env := ladder.DefaultEnv()
			env.PredictionDemote = demote
			c, rec := newTestCore(t, pdConfig(1, 1, env))
			id := uint64(0)
			for i := 0; i < ladder.TruthDemoteWrong+2; i++ {
				id++
				r := routeScored(t, c, id, 8, 0)
				if r.Decision.Tier == ladder.Tier15 {
					t.Fatalf("request %d decided by Tier 1.5 with no overlap", id)
				}
				serve(c, r, 96)
			}
			if want := fmt.Sprintf("[0:true/hash_seed %v]", demote); fmt.Sprint(rec.truth) != want {
				t.Fatalf("transitions %v; want %s", rec.truth, want)
			}
			st := c.predictionStatus(0)
			if !st.Distrusted || st.Demoted != demote || st.Cause != "hash_seed" || !strings.Contains(st.Detail, "PYTHONHASHSEED") || st.Under != 8 {
				t.Fatalf("status %+v", st)
			}
			// A demoted endpoint holding the prefix no longer wins Tier 1.5.
			id++
			r := routeScored(t, c, id, 8, 6)
			if demote != (r.Decision.Tier != ladder.Tier15) || demote != strings.Contains(r.Decision.String(), "prediction_mismatch") {
				t.Fatalf("decision %s with demote=%v", r.Decision.String(), demote)
			}
			serve(c, r, 96)
			// The seed is fixed: predictions agree, the endpoint is trusted again.
			for i := 0; i < ladder.TruthWindow; i++ {
				id++
				serve(c, routeScored(t, c, id, 8, 6), 96)
			}
			if got := rec.truth[len(rec.truth)-1]; got != fmt.Sprintf("0:false/none %v", demote) {
				t.Fatalf("last transition %s; want trusted again", got)
			}
			if c.views[0].KVDistrusted || c.predictionStatus(0).Distrusted {
				t.Fatal("still distrusted after a window of matches")
			}
		})
	}
}

// TestRouterCore_UnderPredictionsTheMirrorConfirmsLaterNeverDemote plays a
// busy fleet: each request follows another of its prefix before the first
// one's events arrived (llb predicts 0, the engine reuses 6 blocks), and
// the mirror holds those blocks once the engine answered.
func TestRouterCore_UnderPredictionsTheMirrorConfirmsLaterNeverDemote(t *testing.T) {
	c, rec := newTestCore(t, pdConfig(1, 1, ladder.DefaultEnv()))
	for id := uint64(1); id <= 20; id++ {
		serve(c, routeScored(t, c, id, 8, 0), 96, 6)
	}
	if st := c.predictionStatus(0); st.Distrusted || st.Under != 20 || len(rec.truth) != 0 || len(c.checks) != 0 {
		t.Fatalf("status %+v transitions %v checks %d; want 20 unders counted, no verdict", st, rec.truth, len(c.checks))
	}
	// The confirmation asked for the blocks the engine reported: 96 / 16.
	if got := rec.scores[len(rec.scores)-1]; !strings.HasPrefix(got, "0/") {
		t.Fatalf("last score %s; want a confirmation on endpoint 0", got)
	}
	// The same unders unconfirmed (the mirror never gets the blocks) demote.
	for id := uint64(21); id <= 28; id++ {
		serve(c, routeScored(t, c, id, 8, 0), 96, 0)
	}
	if st := c.predictionStatus(0); !st.Distrusted || st.Cause != "hash_seed" {
		t.Fatalf("status %+v; want distrusted for hash_seed", st)
	}
}

// TestRouterCore_AnOverIsLateWhenTheMirrorRemovesABlockAfterTheDecision
// plays an engine that evicted blocks just before the prefill: llb
// predicted 8 blocks, the engine reused 2, and the BlockRemoved of one of
// the other six reaches the mirror after llb decided. The check asks about
// removals since the decision's mark, for the blocks the engine did not
// reuse; a removal found makes the over late, none within the wait leaves
// it unconfirmed, and late overs never demote the endpoint.
func TestRouterCore_AnOverIsLateWhenTheMirrorRemovesABlockAfterTheDecision(t *testing.T) {
	c, rec := newTestCore(t, pdConfig(1, 1, ladder.DefaultEnv()))
	// The inventory's answers carry its Removals mark; the router keeps
	// the latest.
	c.scoreReply(t0, scoreReply{id: 999, ep: 0, removals: 41})
	c.scoreReply(t0, scoreReply{id: 998, ep: 0, removals: 40}) // an older answer
	answer := func(removed bool) {
		t.Helper()
		id, tc := anyCheck(c)
		if tc == nil || !tc.asking || !tc.over {
			t.Fatalf("check %+v; want an over's look out", tc)
		}
		if want := fmt.Sprintf("0/%d removed since 41", id); rec.scores[len(rec.scores)-1] != want {
			t.Fatalf("last look %q; want %q", rec.scores[len(rec.scores)-1], want)
		}
		if len(tc.chain) != 6 || tc.chain[0] != 3 || tc.chain[5] != 8 {
			t.Fatalf("asked about blocks %v; want 3..8, the ones the engine did not reuse", tc.chain)
		}
		c.scoreReply(t0, scoreReply{id: id, ep: 0, removed: removed, removals: 44})
	}
	r := routeScored(t, c, 1, 8, 8)
	c.report(t0, Outcome{Ticket: r.Ticket, Leg: LegPrefill, Status: 200, Usage: Usage{Reported: true, CachedTokens: 32}})
	answer(false)
	id, tc := anyCheck(c)
	if tc == nil || tc.asking {
		t.Fatalf("check %+v; want a pause before the next look", tc)
	}
	c.deadlineFired(t0.Add(5*time.Millisecond), id)
	answer(true)
	if st := c.predictionStatus(0); st.Over != 1 || st.Late != 1 || len(c.checks) != 0 {
		t.Fatalf("status %+v, checks %d; want one late over", st, len(c.checks))
	}
	// Late overs, however many, never demote.
	for id := uint64(2); id <= 20; id++ {
		r := routeScored(t, c, id, 8, 8)
		c.report(t0, Outcome{Ticket: r.Ticket, Leg: LegPrefill, Status: 200, Usage: Usage{Reported: true, CachedTokens: 32}})
		cid, _ := anyCheck(c)
		if !strings.HasSuffix(rec.scores[len(rec.scores)-1], "removed since 44") {
			t.Fatalf("look %q; want the mark the last answer carried", rec.scores[len(rec.scores)-1])
		}
		c.scoreReply(t0, scoreReply{id: cid, ep: 0, removed: true})
	}
	if st := c.predictionStatus(0); st.Distrusted || st.Over != 20 || st.Late != 20 || len(rec.truth) != 0 {
		t.Fatalf("status %+v transitions %v; want 20 late overs, no verdict", st, rec.truth)
	}
	// The same overs with no removal in sight (a mirror that holds blocks
	// the engine never reuses) demote.
	for id := uint64(21); id <= 28; id++ {
		serve(c, routeScored(t, c, id, 8, 8), 32)
	}
	if st := c.predictionStatus(0); !st.Distrusted || st.Over != 28 || st.Late != 20 {
		t.Fatalf("status %+v; want distrusted after unconfirmed overs", st)
	}
}
