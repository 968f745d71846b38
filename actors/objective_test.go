package actors

import (
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
)

// routeObjective routes a scored request of blocks blocks carrying a TTFT
// objective (0: none), with the endpoints' overlaps in order.
func routeObjective(t *testing.T, c *routerCore, id uint64, blocks uint32, objective time.Duration, overlaps ...uint32) Route {
	t.Helper()
	chain := make([]uint64, blocks)
	for i := range chain {
		chain[i] = uint64(i + 1)
	}
	rr := &RouteRequest{Chain: chain}
	rr.Req.KV.PromptBlocks, rr.Req.KV.PromptTokens = blocks, blocks*16+1
	rr.Req.TTFTObjective = objective
	m := newMsg(id, rr)
	c.route(t0, m)
	for ep, o := range overlaps {
		c.scoreReply(t0, scoreReply{id: id, ep: ep, overlap: o, blocks: 100})
	}
	r := final(t, m)
	if r.err != nil || !r.route.Decision.Available() {
		t.Fatalf("request %d: %+v; want admitted", id, r)
	}
	return r.route
}

// The router core hands the ladder the request's objective with the
// engines' scraped capacities: a pick predicted to miss the objective
// moves to an endpoint predicted to meet it that runs the request at once,
// skipping one whose cache holds too few blocks for it; without an
// objective the law's pick stands.
func TestRouterCore_AnObjectiveMovesOnlyToAnEngineThatRunsItAtOnce(t *testing.T) {
	c, _ := newTestCore(t, pdConfig(3, 1, ladder.DefaultEnv()))
	for ep := range 3 {
		c.engineStats(engineStats{ep: ep, stats: EngineStats{KVCapacityBlocks: 1000, KVUsageKnown: true}})
	}
	// ep0's engine computes a block in 10 ms, ep1's and ep2's in 1 ms;
	// each request is sent where its prompt is cached, so all three learn.
	perBlock := [3]time.Duration{10 * time.Millisecond, time.Millisecond, time.Millisecond}
	now := t0
	for i := range 3 * ladder.TTFTTrained {
		now = now.Add(time.Second)
		blocks := uint32(8 + i%5*10)
		hot := make([]uint32, 3)
		hot[i%3] = blocks / 2
		r := routeObjective(t, c, uint64(i+1), blocks, 0, hot...)
		ep := r.Decision.Prefill
		serveTTFT(c, now, r, 5*time.Millisecond+time.Duration(r.Decision.TTFT.Input.Uncached)*perBlock[ep])
	}
	for ep := range 3 {
		if st := c.ttftStatus(ep); !st.Trained || st.Drifting {
			t.Fatalf("endpoint %d: %+v; want a trained, agreeing model", ep, st)
		}
	}
	// ep0 holds 40 of the 48 blocks (about 85 ms there), ep1 and ep2 none
	// (about 53 ms): the law picks ep0, which misses a 60 ms objective.
	const objective = 60 * time.Millisecond
	r := routeObjective(t, c, 100, 48, 0, 40, 0, 0)
	if r.Decision.Prefill != 0 {
		t.Fatalf("no objective: prefill %d; want the law's ep0", r.Decision.Prefill)
	}
	serveTTFT(c, now, r, 85*time.Millisecond)
	r = routeObjective(t, c, 101, 48, objective, 40, 0, 0)
	if r.Decision.Prefill != 1 || !r.Decision.Flags.Has(ladder.FlagObjective) {
		t.Fatalf("prefill %d flags %v (predicted %v); want ep1, flag objective", r.Decision.Prefill, r.Decision.Flags, r.Decision.TTFT)
	}
	serveTTFT(c, now, r, 53*time.Millisecond)

	// ep1's engine reports a cache of 40 blocks at its scrape: the prompt
	// does not fit beside anything, ep2 takes it.
	c.engineStats(engineStats{ep: 1, stats: EngineStats{KVCapacityBlocks: 40, KVUsageKnown: true}})
	r = routeObjective(t, c, 102, 48, objective, 40, 0, 0)
	if r.Decision.Prefill != 2 || !r.Decision.Flags.Has(ladder.FlagObjective) {
		t.Fatalf("ep1 full: prefill %d flags %v; want ep2, flag objective", r.Decision.Prefill, r.Decision.Flags)
	}
	serveTTFT(c, now, r, 53*time.Millisecond)

	// ep2's too: nobody predicted to meet it runs it at once, the pick
	// stands.
	c.engineStats(engineStats{ep: 2, stats: EngineStats{KVCapacityBlocks: 40, KVUsageKnown: true}})
	r = routeObjective(t, c, 103, 48, objective, 40, 0, 0)
	if r.Decision.Prefill != 0 || !r.Decision.Flags.Has(ladder.FlagObjectiveMiss) {
		t.Fatalf("ep1 and ep2 full: prefill %d flags %v; want ep0, flag objective_miss", r.Decision.Prefill, r.Decision.Flags)
	}
}
