package actors

import (
	"fmt"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
)

// nopPeers turns cluster mode on in a core under test; the core's effects
// go to its recorder, not here.
type nopPeers struct{}

func (nopPeers) LookupSession(string, time.Time, func(ladder.SessionLookup, error)) {}
func (nopPeers) PinSession(string, ladder.Pin)                                      {}
func (nopPeers) EvictSession(string)                                                {}
func (nopPeers) EvictEndpointSessions(int)                                          {}
func (nopPeers) Publish(uint64, []PeerEndpoint)                                     {}
func (nopPeers) Transition(int, PeerEndpoint)                                       {}
func (nopPeers) PeerLoad([]uint32, *ladder.EndpointSet) uint64                      { return 0 }
func (nopPeers) Teach([]byte, int)                                                  {}

// clusterCore is a P/D core (3 prefill, 2 decode) in cluster mode.
func clusterCore(t *testing.T, edit func(*ServiceConfig)) (*routerCore, *recorder) {
	t.Helper()
	cfg := pdConfig(3, 2, ladder.DefaultEnv())
	cfg.Peers = nopPeers{}
	if edit != nil {
		edit(cfg)
	}
	return newTestCore(t, cfg)
}

// routeOne routes a request without chain or session and returns the
// final reply.
func routeOne(t *testing.T, c *routerCore, id uint64, prompt string) routeReply {
	t.Helper()
	rr := &RouteRequest{}
	rr.Req.Prompt = []byte(prompt)
	m := newMsg(id, rr)
	c.route(t0, m)
	return final(t, m)
}

func TestPeers_TheirLoadSteersTier2(t *testing.T) {
	tests := []struct {
		name  string
		give  []uint32 // peers' in-flight per endpoint
		want  int      // prefill chosen
		alone int      // what the core picks without peers' load
	}{
		{name: "peers busy on 0 and 2", give: []uint32{5, 0, 5, 0, 0}, want: 1},
		{name: "peers busy on 0 and 1", give: []uint32{5, 5, 0, 0, 0}, want: 2},
		{name: "peers idle", give: []uint32{0, 0, 0, 0, 0}, want: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, rec := clusterCore(t, nil)
			rec.peerLoads = tt.give
			c.refreshPeers()
			r := routeOne(t, c, 1, "")
			if got := r.route.Decision.Prefill; got != tt.want {
				t.Fatalf("prefill %d (%s); want %d", got, r.route.Decision.String(), tt.want)
			}
			// The fold is undone after the decision: own counts only.
			for i, v := range c.views {
				own := uint32(0)
				if i == tt.want || i == r.route.Decision.Decode {
					own = 1
				}
				if v.ActiveConns != own {
					t.Fatalf("views[%d].ActiveConns = %d after the decision; want %d (own)", i, v.ActiveConns, own)
				}
			}
		})
	}
}

func TestPeers_TheirLoadCountsTowardTheAdmissionCap(t *testing.T) {
	c, rec := clusterCore(t, func(cfg *ServiceConfig) { cfg.Rule.Spec.Admission.MaxInflightPerEP = 2 })
	rec.peerLoads = []uint32{2, 2, 2, 0, 0}
	c.refreshPeers()
	r := routeOne(t, c, 1, "")
	if r.route.Decision.Admission == ladder.Admit {
		t.Fatalf("decision %s; want the request held back (every prefill at its cap with the peers' load)", r.route.Decision.String())
	}
	rec.peerLoads = []uint32{2, 1, 2, 0, 0}
	c.refreshPeers()
	r = routeOne(t, c, 2, "")
	if d := r.route.Decision; d.Admission != ladder.Admit || d.Prefill != 1 {
		t.Fatalf("decision %s; want admitted on prefill 1 (the only one under its cap)", d.String())
	}
}

func TestPeers_TheirTotalCountsTowardTheGlobalValve(t *testing.T) {
	c, rec := clusterCore(t, func(cfg *ServiceConfig) { cfg.Rule.Spec.Admission.MaxTotalInflight = 3 })
	rec.peerLoads, rec.peerTotal = []uint32{1, 1, 1, 0, 0}, 3
	c.refreshPeers()
	if d := routeOne(t, c, 1, "").route.Decision; d.Admission != ladder.Refuse {
		t.Fatalf("decision %s; want refused by the global valve (peers hold 3 of 3)", d.String())
	}
	rec.peerTotal = 2
	c.refreshPeers()
	if d := routeOne(t, c, 2, "").route.Decision; d.Admission != ladder.Admit {
		t.Fatalf("decision %s; want admitted (2 of 3 held)", d.String())
	}
}

func TestPeers_TheirExclusionExcludesHere(t *testing.T) {
	c, rec := clusterCore(t, nil)
	rec.peerLoads = make([]uint32, 5)
	rec.peerExcl = ladder.EndpointSet(0).With(0).With(1)
	c.refreshPeers()
	if got, want := fmt.Sprint(rec.lost), "[0 1]"; got != want {
		t.Fatalf("endpoints lost %s; want %s (legs waiting on them are cancelled)", got, want)
	}
	for id := uint64(1); id <= 4; id++ {
		if d := routeOne(t, c, id, "").route.Decision; d.Prefill != 2 {
			t.Fatalf("request %d: prefill %d; want 2 (0 and 1 are excluded by a peer)", id, d.Prefill)
		}
	}
	st := c.status()
	if st.Endpoints[0].Available() || !st.Endpoints[0].PeerExcluded || !st.Endpoints[2].Available() {
		t.Fatalf("status %+v; want 0 unavailable (peer-excluded), 2 available", st.Endpoints)
	}
	// Still excluded on the next refresh: not lost again.
	c.refreshPeers()
	if got, want := fmt.Sprint(rec.lost), "[0 1]"; got != want {
		t.Fatalf("endpoints lost %s after a second refresh; want %s", got, want)
	}
	// The peer recovers.
	rec.peerExcl = 0
	c.refreshPeers()
	chosen := map[int]bool{}
	for id := uint64(10); id < 16; id++ {
		r := routeOne(t, c, id, "")
		chosen[r.route.Decision.Prefill] = true
		c.finish(r.route.Ticket, Result{OK: true})
	}
	if !chosen[0] {
		t.Fatalf("prefills chosen %v after the peer recovered; want 0 among them", chosen)
	}
}

func TestPeers_PublishesOwnLoadAndTransitions(t *testing.T) {
	c, rec := clusterCore(t, nil)
	r := routeOne(t, c, 1, "")
	c.publishPeers()
	d := r.route.Decision
	want := make([]uint32, 5)
	want[d.Prefill], want[d.Decode] = 1, 1
	if got, w := fmt.Sprint(rec.published), fmt.Sprintf("[1:%v]", want); got != w {
		t.Fatalf("published %s; want %s", got, w)
	}
	c.probe(probeState{ep: 2, up: false})
	c.probe(probeState{ep: 2, up: false}) // no change: not sent again
	c.breakerState(breakerState{ep: 1, state: BreakerOpen})
	c.breakerState(breakerState{ep: 1, state: BreakerOpen}) // resync: no change
	c.breakerState(breakerState{ep: 1, state: BreakerHalfOpen})
	if got, w := fmt.Sprint(rec.transitions), "[2:closed/true 1:open/false 1:half_open/false]"; got != w {
		t.Fatalf("transitions %s; want %s", got, w)
	}
}

func TestPeers_TierOneTeachesAndLearns(t *testing.T) {
	c, rec := clusterCore(t, func(cfg *ServiceConfig) { cfg.Rule.Spec.CacheAware = true })
	r := routeOne(t, c, 1, "system prompt A, then the question")
	if got, want := fmt.Sprint(rec.taught), fmt.Sprintf("[%d:system prompt A, then the question]", r.route.Decision.Prefill); got != want {
		t.Fatalf("taught %s; want %s", got, want)
	}
	c.finish(r.route.Ticket, Result{OK: true})
	// A peer routed another prompt to prefill 2: this replica's trie sends
	// the same prompt there, by Tier 1, without teaching it on.
	prompt := "a long shared system prompt that a peer routed to endpoint two"
	c.learnFromPeers([]Lesson{{Prompt: []byte(prompt), Endpoint: 2}})
	before := len(rec.taught)
	r = routeOne(t, c, 2, prompt)
	if d := r.route.Decision; d.Tier != ladder.Tier1 || d.Prefill != 2 {
		t.Fatalf("decision %s; want Tier 1 on prefill 2 (the peer's lesson)", d.String())
	}
	if len(rec.taught) != before+1 {
		t.Fatalf("taught %v; want exactly this replica's own admission taught", rec.taught)
	}
}

func TestPeers_SingleNodePublishesNothing(t *testing.T) {
	c, rec := newTestCore(t, pdConfig(3, 2, ladder.DefaultEnv()))
	rec.peerLoads = []uint32{9, 9, 9, 9, 9}
	c.refreshPeers()
	c.publishPeers()
	r := routeOne(t, c, 1, "x")
	c.probe(probeState{ep: 0, up: false})
	if len(rec.published)+len(rec.transitions)+len(rec.taught) != 0 || r.route.Decision.Prefill != 0 {
		t.Fatalf("published %v transitions %v taught %v prefill %d; want nothing shared and prefill 0",
			rec.published, rec.transitions, rec.taught, r.route.Decision.Prefill)
	}
}
