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

// The router core hands the ladder the engines' scraped queues with the
// request's objective: a request whose prefix holder is predicted to meet
// its objective but reported waiting requests moves to the endpoint that
// runs it at once; without an objective, or once the queue is gone, the
// law's pick stands.
func TestRouterCore_AnObjectiveMovesOffAQueueingEngine(t *testing.T) {
	c, _ := newTestCore(t, pdConfig(2, 1, ladder.DefaultEnv()))
	for ep := range 2 {
		c.engineStats(engineStats{ep: ep, stats: EngineStats{KVCapacityBlocks: 1000, KVUsageKnown: true}})
	}
	// Both prefill engines answer in 5 ms plus 1 ms per uncached block;
	// each request is sent where its prompt is cached, so both learn.
	now := t0
	for i := range 2 * ladder.TTFTTrained {
		now = now.Add(time.Second)
		blocks := uint32(8 + i%5*10)
		hot := []uint32{blocks / 2, 0}
		if i%2 == 1 {
			hot = []uint32{0, blocks / 2}
		}
		r := routeObjective(t, c, uint64(i+1), blocks, 0, hot...)
		serveTTFT(c, now, r, 5*time.Millisecond+time.Duration(blocks-blocks/2)*time.Millisecond)
	}
	for ep := range 2 {
		if st := c.ttftStatus(ep); !st.Trained || st.Drifting {
			t.Fatalf("endpoint %d: %+v; want a trained, agreeing model", ep, st)
		}
	}
	const objective = 200 * time.Millisecond
	// ep0 holds 40 of the 48 blocks (about 13 ms), ep1 none (about 53 ms):
	// both meet 200 ms, and the law picks ep0.
	r := routeObjective(t, c, 100, 48, objective, 40, 0)
	if r.Decision.Prefill != 0 || r.Decision.Flags.Has(ladder.FlagObjective) {
		t.Fatalf("no queue: prefill %d flags %v; want ep0, unmoved", r.Decision.Prefill, r.Decision.Flags)
	}
	serveTTFT(c, now, r, 13*time.Millisecond)

	// ep0's engine reports waiting requests at its scrape.
	c.engineStats(engineStats{ep: 0, stats: EngineStats{KVCapacityBlocks: 1000, Waiting: 3, KVUsageKnown: true}})
	r = routeObjective(t, c, 101, 48, objective, 40, 0)
	if r.Decision.Prefill != 1 || !r.Decision.Flags.Has(ladder.FlagObjective) {
		t.Fatalf("ep0 queueing: prefill %d flags %v; want ep1, flag objective", r.Decision.Prefill, r.Decision.Flags)
	}
	serveTTFT(c, now, r, 53*time.Millisecond)
	r = routeObjective(t, c, 102, 48, 0, 40, 0)
	if r.Decision.Prefill != 0 {
		t.Fatalf("ep0 queueing, no objective: prefill %d; want the law's ep0", r.Decision.Prefill)
	}
	serveTTFT(c, now, r, 13*time.Millisecond)

	// The next scrape shows the queue gone: the prefix holder takes it.
	c.engineStats(engineStats{ep: 0, stats: EngineStats{KVCapacityBlocks: 1000, KVUsageKnown: true}})
	r = routeObjective(t, c, 103, 48, objective, 40, 0)
	if r.Decision.Prefill != 0 || r.Decision.Flags.Has(ladder.FlagObjective) {
		t.Fatalf("queue gone: prefill %d flags %v; want ep0, unmoved", r.Decision.Prefill, r.Decision.Flags)
	}
}
