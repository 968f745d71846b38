package actors

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/rule/ruletest"
)

// recorder is a routerPorts that records the effects the core asks for.
type recorder struct {
	scores   []string // "ep/id"
	lookups  []string
	pins     []string
	evicts   []string
	epEvicts []int
	parks    []string // "ep/id"
	wakes    []string // "held/id>slot"
	evicted  []string // "held/id decision"
	drops    []string
	drains   []int
	lost     []int
	reprobes []int
	feed     []string // breaker feed, "ep/class"
	armed    map[uint64]bool
	waits    map[uint64]time.Duration // each decision's deadline

	// Cluster mode: what the core published and taught, and the peers'
	// load it reads.
	published   []string // "inFlight:[ep inflight...]"
	transitions []string // "ep:breaker/down"
	taught      []string // "ep:prompt"
	peerLoads   []uint32
	peerExcl    ladder.EndpointSet
	peerTotal   uint64
	truth       []string // "ep:distrusted/cause demoted"
	ttft        []string // "ep:drifting"
	panics      []string // "on:slow set"
}

func newRecorder() *recorder {
	return &recorder{armed: map[uint64]bool{}, waits: map[uint64]time.Duration{}}
}

func (r *recorder) score(ep int, id uint64, _ []uint64) {
	r.scores = append(r.scores, fmt.Sprintf("%d/%d", ep, id))
}
func (r *recorder) checkRemoved(ep int, id uint64, _ []uint64, since uint64) {
	r.scores = append(r.scores, fmt.Sprintf("%d/%d removed since %d", ep, id, since))
}
func (r *recorder) lookupSession(id uint64, key string) {
	r.lookups = append(r.lookups, fmt.Sprintf("%d/%s", id, key))
}
func (r *recorder) pinSession(key string, p ladder.Pin) {
	r.pins = append(r.pins, fmt.Sprintf("%s=%d,%d", key, p.Prefill, p.Decode))
}
func (r *recorder) evictSession(key string)      { r.evicts = append(r.evicts, key) }
func (r *recorder) evictEndpointSessions(ep int) { r.epEvicts = append(r.epEvicts, ep) }
func (r *recorder) park(ep int, m *routeMsg) {
	r.parks = append(r.parks, fmt.Sprintf("%d/%d", ep, m.id))
}
func (r *recorder) wake(held int, id uint64, slot int) {
	r.wakes = append(r.wakes, fmt.Sprintf("%d/%d>%d", held, id, slot))
}
func (r *recorder) evictParked(held int, id uint64, rt Route) {
	r.evicted = append(r.evicted, fmt.Sprintf("%d/%d %s", held, id, rt.Decision.String()))
}
func (r *recorder) dropParked(ep int, id uint64) {
	r.drops = append(r.drops, fmt.Sprintf("%d/%d", ep, id))
}
func (r *recorder) drainParked(ep int)  { r.drains = append(r.drains, ep) }
func (r *recorder) endpointLost(ep int) { r.lost = append(r.lost, ep) }
func (r *recorder) reprobe(ep int)      { r.reprobes = append(r.reprobes, ep) }
func (r *recorder) breaker(ep int, c outcomeClass) {
	r.feed = append(r.feed, fmt.Sprintf("%d/%d", ep, c))
}
func (r *recorder) deadline(id uint64, d time.Duration) func() bool {
	r.armed[id] = true
	r.waits[id] = d
	return func() bool { delete(r.armed, id); return true }
}

func (r *recorder) publishPeers(inFlight uint64, eps []PeerEndpoint) {
	loads := make([]uint32, len(eps))
	for i, e := range eps {
		loads[i] = e.InFlight
	}
	r.published = append(r.published, fmt.Sprintf("%d:%v", inFlight, loads))
}
func (r *recorder) healthTransition(ep int, e PeerEndpoint) {
	r.transitions = append(r.transitions, fmt.Sprintf("%d:%s/%t", ep, e.Breaker, e.Down))
}
func (r *recorder) peerLoad(load []uint32, excluded *ladder.EndpointSet) uint64 {
	copy(load, r.peerLoads)
	*excluded = r.peerExcl
	return r.peerTotal
}
func (r *recorder) teach(prompt []byte, ep int) {
	r.taught = append(r.taught, fmt.Sprintf("%d:%s", ep, prompt))
}

func (r *recorder) truthChanged(ep int, v ladder.TruthVerdict, demoted bool) {
	r.truth = append(r.truth, fmt.Sprintf("%d:%v/%s %v", ep, v.Distrusted, v.Cause, demoted))
}

func (r *recorder) ttftChanged(ep int, v ladder.TTFTVerdict) {
	r.ttft = append(r.ttft, fmt.Sprintf("%d:%v", ep, v.Drifting))
}

func (r *recorder) panicChanged(on bool, slow ladder.EndpointSet) {
	r.panics = append(r.panics, fmt.Sprintf("%v:%b", on, slow))
}

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// pdConfig is a P/D rule: prefill endpoints 0..p-1 (with KV feeds, Tier
// 1.5 without a warm-up), decode endpoints p..p+d-1; breakers open on
// transport failures only (LLB_PD_ORIGIN_ERR_THRESHOLD=0).
func pdConfig(p, d int, env ladder.Env) *ServiceConfig {
	var eps []ruletest.Endpoint
	for i := 0; i < p; i++ {
		eps = append(eps, ruletest.Endpoint{Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(8100+i)), Role: 1})
	}
	for i := 0; i < d; i++ {
		eps = append(eps, ruletest.Endpoint{Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(8200+i)), Role: 2})
	}
	noOriginErr := 0
	r := ruletest.Rule(ruletest.Options{PD: true, Extra: `"kvExactMode":1,"kvBlockSize":16`,
		Defaults: rule.Defaults{OriginErrThreshold: &noOriginErr}}, eps...)
	r.Spec.KVWarmup = 0
	c := NewServiceConfig(r, env)
	return &c
}

func poolConfig(n int, sel ladder.SelectorKind) *ServiceConfig {
	var eps []ruletest.Endpoint
	for i := 0; i < n; i++ {
		eps = append(eps, ruletest.Endpoint{Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(8000+i))})
	}
	r := ruletest.Rule(ruletest.Options{Extra: fmt.Sprintf(`"sel":%d`, sel)}, eps...)
	c := NewServiceConfig(r, ladder.DefaultEnv())
	return &c
}

func newTestCore(t *testing.T, cfg *ServiceConfig) (*routerCore, *recorder) {
	t.Helper()
	lad, err := ladder.NewRouter(cfg.Rule.Spec, cfg.specs(), cfg.Env, cfg.Router)
	if err != nil {
		t.Fatalf("NewRouter: %v", err)
	}
	rec := newRecorder()
	return newRouterCore(cfg, lad, rec, nil, nil), rec
}

func newMsg(id uint64, rr *RouteRequest) *routeMsg {
	return &routeMsg{id: id, rr: rr, reply: make(chan routeReply, 2)}
}

// final returns the message's final reply, skipping a parked notice.
func final(t *testing.T, m *routeMsg) routeReply {
	t.Helper()
	for {
		select {
		case r := <-m.reply:
			if r.parked {
				continue
			}
			return r
		default:
			t.Fatalf("request %d: no final reply", m.id)
			return routeReply{}
		}
	}
}

func noReply(t *testing.T, m *routeMsg) {
	t.Helper()
	select {
	case r := <-m.reply:
		if !r.parked {
			t.Fatalf("request %d: unexpected final reply %+v", m.id, r)
		}
	default:
	}
}

func TestRouterCore_SinglePoolAdmitsAndReleases(t *testing.T) {
	c, _ := newTestCore(t, poolConfig(3, ladder.SelRR))
	m := newMsg(1, &RouteRequest{})
	c.route(t0, m)
	r := final(t, m)
	if r.err != nil || !r.route.Decision.Available() {
		t.Fatalf("got %+v; want an admitted route", r)
	}
	ep := r.route.Ticket.Prefill
	if got := c.views[ep].ActiveConns; got != 1 {
		t.Fatalf("active on %d = %d; want 1", ep, got)
	}
	c.report(t0, Outcome{Ticket: r.route.Ticket, Leg: LegSingle, Status: 200})
	c.report(t0, Outcome{Ticket: r.route.Ticket, Leg: LegSingle, Status: 200}) // twice: no-op
	if got := c.views[ep].ActiveConns; got != 0 {
		t.Fatalf("active after report = %d; want 0", got)
	}
	c.finish(r.route.Ticket, Result{OK: true})
	if len(c.tickets) != 0 || c.views[ep].ActiveConns != 0 {
		t.Fatalf("tickets %d active %d after finish; want 0, 0", len(c.tickets), c.views[ep].ActiveConns)
	}
}

func TestRouterCore_FanOutScoresPrefillAndLooksUpSession(t *testing.T) {
	c, rec := newTestCore(t, pdConfig(3, 2, ladder.DefaultEnv()))
	rr := &RouteRequest{Chain: []uint64{1, 2, 3, 4}}
	rr.Req.SessionKey = "alice"
	rr.Req.KV.PromptBlocks = 4
	m := newMsg(7, rr)
	c.route(t0, m)
	if got, want := fmt.Sprint(rec.scores), "[0/7 1/7 2/7]"; got != want {
		t.Fatalf("scores %s; want %s (prefill only)", got, want)
	}
	if got, want := fmt.Sprint(rec.lookups), "[7/alice]"; got != want {
		t.Fatalf("lookups %s; want %s", got, want)
	}
	if !rec.armed[7] {
		t.Fatal("fan-out deadline not armed")
	}
	noReply(t, m)
	c.sessionReply(t0, sessionReply{id: 7})
	c.scoreReply(t0, scoreReply{id: 7, ep: 0, overlap: 1, blocks: 100})
	c.scoreReply(t0, scoreReply{id: 7, ep: 1, overlap: 4, blocks: 100})
	noReply(t, m)
	c.scoreReply(t0, scoreReply{id: 7, ep: 2, overlap: 0, blocks: 100})
	r := final(t, m)
	d := r.route.Decision
	if d.Tier != ladder.Tier15 || d.Prefill != 1 {
		t.Fatalf("decision %s; want tier 1.5 on prefill 1 (best overlap)", d.String())
	}
	if rec.armed[7] {
		t.Fatal("deadline still armed after the last reply")
	}
	if d.Decode < 3 {
		t.Fatalf("decode %d; want a decode endpoint (3 or 4)", d.Decode)
	}
	c.finish(r.route.Ticket, Result{OK: true})
	if got, want := fmt.Sprint(rec.pins), fmt.Sprintf("[alice=1,%d]", d.Decode); got != want {
		t.Fatalf("pins %s; want %s", got, want)
	}
	for i, v := range c.views {
		if v.ActiveConns != 0 {
			t.Fatalf("endpoint %d still holds %d conns", i, v.ActiveConns)
		}
	}
}

func TestRouterCore_DeadlineDecidesWithMissingReplies(t *testing.T) {
	c, _ := newTestCore(t, pdConfig(2, 1, ladder.DefaultEnv()))
	rr := &RouteRequest{Chain: []uint64{1, 2}}
	rr.Req.KV.PromptBlocks = 2
	m := newMsg(3, rr)
	c.route(t0, m)
	c.scoreReply(t0, scoreReply{id: 3, ep: 1, overlap: 2, blocks: 50})
	noReply(t, m)
	c.deadlineFired(t0, 3)
	r := final(t, m)
	if !r.route.Decision.Available() || r.route.Decision.Prefill != 1 {
		t.Fatalf("decision %s; want prefill 1 with the one reply that came", r.route.Decision.String())
	}
	if c.stats.missed != 1 {
		t.Fatalf("missed %d; want 1", c.stats.missed)
	}
	if !r.route.Decision.Flags.Has(ladder.FlagFanoutLate) {
		t.Fatalf("decision %s; want the fanout_late flag", r.route.Decision.String())
	}
	c.scoreReply(t0, scoreReply{id: 3, ep: 0, overlap: 2}) // late
	if c.stats.lateReplies != 1 {
		t.Fatalf("late %d; want 1", c.stats.lateReplies)
	}
	// Every reply in time: no flag.
	m = newMsg(4, rr)
	c.route(t0, m)
	c.scoreReply(t0, scoreReply{id: 4, ep: 0, overlap: 2, blocks: 50})
	c.scoreReply(t0, scoreReply{id: 4, ep: 1, overlap: 2, blocks: 50})
	if r := final(t, m); r.route.Decision.Flags.Has(ladder.FlagFanoutLate) {
		t.Fatalf("decision %s with every reply; want no fanout_late flag", r.route.Decision.String())
	}
}

func TestRouterCore_AvoidedEndpointIsNeitherScoredNorPicked(t *testing.T) {
	c, rec := newTestCore(t, pdConfig(2, 1, ladder.DefaultEnv()))
	rr := &RouteRequest{Chain: []uint64{1, 2}, Avoid: 1 << 0}
	rr.Req.KV.PromptBlocks = 2
	m := newMsg(1, rr)
	c.route(t0, m)
	if got, want := fmt.Sprint(rec.scores), "[1/1]"; got != want {
		t.Fatalf("scores %s; want %s", got, want)
	}
	c.scoreReply(t0, scoreReply{id: 1, ep: 1, overlap: 0, blocks: 10})
	r := final(t, m)
	if r.route.Decision.Prefill != 1 {
		t.Fatalf("prefill %d; want 1 (0 is avoided)", r.route.Decision.Prefill)
	}
	if c.views[0].Down {
		t.Fatal("avoid leaked into the endpoint's view")
	}
}

func admissionEnv(capPerEP, depth uint32, park time.Duration) ladder.Env {
	env := ladder.DefaultEnv()
	env.MaxInflightPerEP = capPerEP
	env.QueueDepthPerEP = depth
	env.MaxPark = park
	return env
}

func TestRouterCore_ParkedRequestResumesIntoReservedSlot(t *testing.T) {
	c, rec := newTestCore(t, pdConfig(1, 1, admissionEnv(1, 4, 0)))
	first := newMsg(1, &RouteRequest{})
	c.route(t0, first)
	r1 := final(t, first)
	if !r1.route.Decision.Available() {
		t.Fatalf("first: %s; want admitted", r1.route.Decision.String())
	}
	second := newMsg(2, &RouteRequest{})
	c.route(t0, second)
	if got, want := fmt.Sprint(rec.parks), "[0/2]"; got != want {
		t.Fatalf("parks %s; want %s", got, want)
	}
	if n := <-second.reply; !n.parked {
		t.Fatalf("second: %+v; want a parked notice", n)
	}
	if c.views[0].Parked != 1 {
		t.Fatalf("parked count %d; want 1", c.views[0].Parked)
	}
	// The first request ends: its slot is reserved for the parked one.
	c.finish(r1.route.Ticket, Result{OK: true})
	if got, want := fmt.Sprint(rec.wakes), "[0/2>0]"; got != want {
		t.Fatalf("wakes %s; want %s", got, want)
	}
	// A newcomer cannot take the reserved slot.
	third := newMsg(3, &RouteRequest{})
	c.route(t0, third)
	if got, want := fmt.Sprint(rec.parks), "[0/2 0/3]"; got != want {
		t.Fatalf("parks %s; want %s (reserved slot respected)", got, want)
	}
	c.resume(t0.Add(time.Second), resumeMsg{ep: 0, held: 0, req: second})
	r2 := final(t, second)
	if !r2.route.Decision.Available() || r2.route.Decision.Tier != ladder.TierResume {
		t.Fatalf("second: %s; want resumed", r2.route.Decision.String())
	}
	if r2.route.Parked != time.Second {
		t.Fatalf("parked for %v; want 1s", r2.route.Parked)
	}
	if got := c.views[0].ActiveConns; got != 1 {
		t.Fatalf("prefill active %d; want exactly the cap (1)", got)
	}
}

func TestRouterCore_CancelledParkedRequestFreesItsPlace(t *testing.T) {
	c, rec := newTestCore(t, pdConfig(1, 1, admissionEnv(1, 4, 0)))
	first := newMsg(1, &RouteRequest{})
	c.route(t0, first)
	r1 := final(t, first)
	second := newMsg(2, &RouteRequest{})
	c.route(t0, second)
	c.cancel(2)
	if got, want := fmt.Sprint(rec.drops), "[0/2]"; got != want {
		t.Fatalf("drops %s; want %s", got, want)
	}
	c.unparked(t0, unparkedMsg{ep: 0, id: 2})
	if c.views[0].Parked != 0 || len(c.parked) != 0 {
		t.Fatalf("parked %d/%d; want 0", c.views[0].Parked, len(c.parked))
	}
	c.finish(r1.route.Ticket, Result{})
	if len(rec.wakes) != 0 {
		t.Fatalf("wakes %v; want none (nobody parked)", rec.wakes)
	}
	if c.views[0].ActiveConns != 0 {
		t.Fatalf("active %d; want 0", c.views[0].ActiveConns)
	}
}

func TestRouterCore_ShedWhenQueuesAreOff(t *testing.T) {
	c, _ := newTestCore(t, pdConfig(1, 1, admissionEnv(1, 0, 0)))
	first := newMsg(1, &RouteRequest{})
	c.route(t0, first)
	final(t, first)
	second := newMsg(2, &RouteRequest{})
	c.route(t0, second)
	r := final(t, second)
	if r.route.Decision.Admission != ladder.Shed {
		t.Fatalf("second: %s; want shed", r.route.Decision.String())
	}
}

func TestRouterCore_BreakerOpenExcludesAndHalfOpenAllowsOneTrial(t *testing.T) {
	c, rec := newTestCore(t, poolConfig(2, ladder.SelRR))
	c.breakers = true
	m := newMsg(1, &RouteRequest{})
	c.route(t0, m)
	r := final(t, m)
	ep := r.route.Ticket.Prefill
	c.report(t0, Outcome{Ticket: r.route.Ticket, Leg: LegSingle, Failure: FailConnect})
	if got, want := fmt.Sprint(rec.feed), fmt.Sprintf("[%d/%d]", ep, classTransport); got != want {
		t.Fatalf("breaker feed %s; want %s", got, want)
	}
	c.finish(r.route.Ticket, Result{})

	c.breakerState(breakerState{ep: 0, state: BreakerOpen})
	c.breakerState(breakerState{ep: 0, state: BreakerOpen}) // a repeat is no new loss
	if got := fmt.Sprint(rec.lost); got != "[0]" {
		t.Fatalf("endpoints reported lost %s; want [0] (once)", got)
	}
	for id := uint64(10); id < 14; id++ {
		m := newMsg(id, &RouteRequest{})
		c.route(t0, m)
		r := final(t, m)
		if r.route.Decision.Prefill != 1 {
			t.Fatalf("request %d went to %d; want 1 (0 is open)", id, r.route.Decision.Prefill)
		}
		c.finish(r.route.Ticket, Result{OK: true})
	}
	c.breakerState(breakerState{ep: 0, state: BreakerHalfOpen})
	// Load endpoint 1 so least-conn would prefer 0, then check that only one
	// trial at a time reaches 0.
	var onZero int
	var tickets []Ticket
	for id := uint64(20); id < 26; id++ {
		m := newMsg(id, &RouteRequest{})
		c.route(t0, m)
		r := final(t, m)
		if r.route.Decision.Prefill == 0 {
			onZero++
		}
		tickets = append(tickets, r.route.Ticket)
	}
	if onZero != 1 {
		t.Fatalf("%d requests reached the half-open endpoint; want exactly 1 trial", onZero)
	}
	for _, tk := range tickets {
		c.finish(tk, Result{OK: true})
	}
}

func TestRouterCore_ProbeDownEvictsSessionsAndDrainsQueue(t *testing.T) {
	c, rec := newTestCore(t, pdConfig(2, 1, admissionEnv(1, 4, 0)))
	a := newMsg(1, &RouteRequest{})
	c.route(t0, a)
	final(t, a)
	b := newMsg(2, &RouteRequest{})
	c.route(t0, b)
	final(t, b)
	p := newMsg(3, &RouteRequest{})
	c.route(t0, p)
	if len(rec.parks) != 1 {
		t.Fatalf("parks %v; want one", rec.parks)
	}
	parkedOn := c.parked[3].ep
	c.probe(probeState{ep: parkedOn, up: false})
	if got, want := fmt.Sprint(rec.epEvicts), fmt.Sprintf("[%d]", parkedOn); got != want {
		t.Fatalf("session evictions %s; want %s", got, want)
	}
	if got, want := fmt.Sprint(rec.drains), fmt.Sprintf("[%d]", parkedOn); got != want {
		t.Fatalf("drains %s; want %s", got, want)
	}
	if got, want := fmt.Sprint(rec.lost), fmt.Sprintf("[%d]", parkedOn); got != want {
		t.Fatalf("endpoints reported lost %s; want %s", got, want)
	}
	// The endpoint actor hands the request back; the ladder decides again.
	c.unparked(t0, unparkedMsg{ep: parkedOn, id: 3, requeue: p})
	if c.views[parkedOn].Parked != 0 {
		t.Fatalf("parked on %d = %d; want 0", parkedOn, c.views[parkedOn].Parked)
	}
}

func TestRouterCore_CancelAfterAdmissionReleasesTheTicket(t *testing.T) {
	c, _ := newTestCore(t, poolConfig(2, ladder.SelRR))
	m := newMsg(1, &RouteRequest{})
	c.route(t0, m)
	r := final(t, m)
	c.cancel(1)
	if len(c.tickets) != 0 || c.views[r.route.Ticket.Prefill].ActiveConns != 0 {
		t.Fatal("a cancelled admitted request still holds its slot")
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		give Outcome
		want outcomeClass
	}{
		{Outcome{Status: 200}, classSuccess},
		{Outcome{Status: 404}, classClientError},
		{Outcome{Status: 429}, classBackpressure},
		{Outcome{Status: 503}, classBackpressure},
		{Outcome{Status: 500}, classOrigin5xx},
		{Outcome{Status: 502}, classOrigin5xx},
		{Outcome{Failure: FailConnect}, classTransport},
		{Outcome{Failure: FailReset}, classTransport},
		{Outcome{Failure: FailTimeout}, classTransport},
		{Outcome{Failure: FailClientGone}, classNeutral},
	}
	for _, tt := range tests {
		if got := classify(tt.give); got != tt.want {
			t.Errorf("classify(%+v) = %d; want %d", tt.give, got, tt.want)
		}
	}
}

func TestRouterCore_PassthroughBypassesAdmissionAndPicksLeastLoaded(t *testing.T) {
	c, rec := newTestCore(t, pdConfig(1, 1, admissionEnv(1, 4, 0)))
	first := newMsg(1, &RouteRequest{})
	c.route(t0, first)
	r1 := final(t, first)
	if !r1.route.Decision.Available() {
		t.Fatal("first request not admitted")
	}
	// Every prefill endpoint is at its cap: an inference request would park,
	// a health check goes through to the least-loaded endpoint.
	hc := newMsg(2, &RouteRequest{Passthrough: true})
	c.route(t0, hc)
	r := final(t, hc)
	// Both endpoints carry the first request (prefill and decode legs): a
	// tie, so the lowest index serves it — at its cap, yet not parked.
	if !r.route.Decision.Available() || r.route.Decision.Prefill != 0 || r.route.Decision.Tier != ladder.TierNone {
		t.Fatalf("passthrough: %s; want endpoint 0, no tier", r.route.Decision.String())
	}
	if len(rec.parks) != 0 || len(rec.scores) != 0 || len(rec.lookups) != 0 {
		t.Fatalf("passthrough parked/scored/looked up: %v %v %v", rec.parks, rec.scores, rec.lookups)
	}
	c.finish(r.route.Ticket, Result{OK: true})
	if c.views[0].ActiveConns != 1 || len(rec.pins) != 0 {
		t.Fatalf("after finish: active %d pins %v; want 1 (the first request), none", c.views[0].ActiveConns, rec.pins)
	}
	c.probe(probeState{ep: 0, up: false})
	c.probe(probeState{ep: 1, up: false})
	none := newMsg(3, &RouteRequest{Passthrough: true})
	c.route(t0, none)
	if r := final(t, none); r.route.Decision.Available() || r.route.Decision.Unavailable != ladder.ReasonPDPoolUnavailable {
		t.Fatalf("all down: %s; want pd_pool_unavailable", r.route.Decision.String())
	}
}

// A request that does not stream has no first byte before its whole
// answer, so its prefill charge ends instead at the first engine scrape
// that began after it was sent and reports nothing waiting; a streamed
// one's waits for its first byte whatever the scrapes say.
func TestRouterCore_AnUnstreamedChargeEndsAtAScrapeWithNoQueue(t *testing.T) {
	c, _ := newTestCore(t, poolConfig(1, ladder.SelRR))
	send := func(id uint64, streamed bool) Ticket {
		rr := &RouteRequest{Streamed: streamed}
		rr.Req.KV.PromptBlocks = 10
		m := newMsg(id, rr)
		c.route(t0, m)
		r := final(t, m)
		if r.route.Decision.Prefill != 0 {
			t.Fatalf("decision %s; want endpoint 0", r.route.Decision.String())
		}
		return r.route.Ticket
	}
	scrape := func(waiting uint32) {
		c.engineStats(engineStats{ep: 0, stats: EngineStats{KVCapacityBlocks: 1000, Waiting: waiting, KVUsageKnown: true}})
	}
	v := &c.views[0]
	whole, stream := send(1, false), send(2, true)
	if v.PrefillBlocks != 20 || c.unstreamed[0] != 1 {
		t.Fatalf("after admit: prefill %d unstreamed %d; want 20, 1", v.PrefillBlocks, c.unstreamed[0])
	}
	scrape(0) // may have begun before the requests were sent
	if v.PrefillBlocks != 20 {
		t.Fatalf("after the first scrape: prefill %d; want 20", v.PrefillBlocks)
	}
	scrape(2) // the engine queues: not scheduled yet
	if v.PrefillBlocks != 20 {
		t.Fatalf("after a scrape with a queue: prefill %d; want 20", v.PrefillBlocks)
	}
	scrape(0)
	if v.PrefillBlocks != 10 || c.unstreamed[0] != 0 {
		t.Fatalf("after a later scrape with no queue: prefill %d unstreamed %d; want 10 (the stream's), 0", v.PrefillBlocks, c.unstreamed[0])
	}
	c.firstByte(stream)
	c.finish(whole, Result{OK: true}) // its charge is already gone: no double discharge
	c.finish(stream, Result{OK: true})
	if v.PrefillBlocks != 0 || c.unstreamed[0] != 0 {
		t.Fatalf("after both: prefill %d unstreamed %d; want 0, 0", v.PrefillBlocks, c.unstreamed[0])
	}
	// Its answer ends an unstreamed charge the scrapes have not.
	c.finish(send(3, false), Result{OK: true})
	if v.PrefillBlocks != 0 || c.unstreamed[0] != 0 {
		t.Fatalf("after the answer: prefill %d unstreamed %d; want 0, 0", v.PrefillBlocks, c.unstreamed[0])
	}
}

// The headroom law's load inputs: an admitted request's uncached prompt
// blocks count against its prefill endpoint's PrefillBlocks until its first
// byte (or its leg's report, or its finish), and against its KV-usage
// estimate until its leg there ends or the next scrape replaces the
// estimate. On a P/D rule the prefill endpoint holds no decode blocks.
func TestRouterCore_ChargesUncachedPrefillUntilFirstByteAndKVUntilTheLegEnds(t *testing.T) {
	tests := []struct {
		name string
		end  func(c *routerCore, tk Ticket)
		kv   uint32 // the estimate after end
	}{
		{"first byte", func(c *routerCore, tk Ticket) { c.firstByte(tk) }, 104},
		{"prefill leg report", func(c *routerCore, tk Ticket) {
			c.report(t0, Outcome{Ticket: tk, Leg: LegPrefill, Status: 200})
		}, 100},
		{"finish", func(c *routerCore, tk Ticket) { c.finish(tk, Result{}) }, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newTestCore(t, pdConfig(3, 1, ladder.DefaultEnv()))
			for ep := 0; ep < 3; ep++ {
				c.engineStats(engineStats{ep: ep, stats: EngineStats{KVCapacityBlocks: 1000, KVUsedBlocks: 100, KVUsageKnown: true}})
			}
			rr := &RouteRequest{Chain: []uint64{1, 2, 3, 4, 5, 6}}
			rr.Req.KV.PromptBlocks, rr.Req.KV.DecodeTokens = 10, 100
			m := newMsg(9, rr)
			c.route(t0, m)
			c.scoreReply(t0, scoreReply{id: 9, ep: 0, overlap: 0, blocks: 100})
			c.scoreReply(t0, scoreReply{id: 9, ep: 1, overlap: 6, blocks: 100})
			c.scoreReply(t0, scoreReply{id: 9, ep: 2, overlap: 0, blocks: 100})
			r := final(t, m)
			if r.route.Decision.Prefill != 1 {
				t.Fatalf("decision %s; want prefill 1", r.route.Decision.String())
			}
			v := &c.views[1]
			if v.PrefillBlocks != 4 || v.KVUsedBlocks != 104 {
				t.Fatalf("after admit: prefill %d kv %d; want 4 (10 − 6 cached) and 104", v.PrefillBlocks, v.KVUsedBlocks)
			}
			tt.end(c, r.route.Ticket)
			c.firstByte(r.route.Ticket) // a second discharge is a no-op
			if v.PrefillBlocks != 0 || v.KVUsedBlocks != tt.kv {
				t.Fatalf("after %s: prefill %d kv %d; want 0 and %d", tt.name, v.PrefillBlocks, v.KVUsedBlocks, tt.kv)
			}
			c.engineStats(engineStats{ep: 1, stats: EngineStats{KVCapacityBlocks: 1000, KVUsedBlocks: 90, KVUsageKnown: true}})
			if v.KVUsedBlocks != 90 || !v.KVUsageKnown {
				t.Fatalf("after the scrape: kv %d known %v; want 90, true", v.KVUsedBlocks, v.KVUsageKnown)
			}
		})
	}
}

// On a single-pool rule the KV-usage estimate also counts the blocks the
// request's completion will fill (⌈max_tokens / block size⌉) until its
// leg ends, when the whole charge is given back; a scrape in between
// replaces the estimate, and the charge given back after it is taken
// from the scrape's usage, never below 0.
func TestRouterCore_ChargesACompletionsBlocksToTheKVEstimateOfASinglePool(t *testing.T) {
	var eps []ruletest.Endpoint
	for i := 0; i < 2; i++ {
		eps = append(eps, ruletest.Endpoint{Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(8000+i))})
	}
	r := ruletest.Rule(ruletest.Options{Extra: `"kvExactMode":3,"kvBlockSize":16`}, eps...)
	r.Spec.KVWarmup = 0
	cfg := NewServiceConfig(r, ladder.DefaultEnv())
	tests := []struct {
		name         string
		decodeTokens uint32
		scrape       uint32 // the usage a scrape reports after admit; 0: no scrape
		admitted     uint32 // the estimate after admit
		ended        uint32 // after the leg ends
	}{
		{"no bound", 0, 0, 104, 100},
		{"100 tokens: 7 blocks", 100, 0, 111, 100},
		{"112 tokens: 7 blocks", 112, 0, 111, 100},
		{"scrape in between", 100, 150, 111, 139},
		{"scrape below the charge", 100, 5, 111, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newTestCore(t, &cfg)
			for ep := 0; ep < 2; ep++ {
				c.engineStats(engineStats{ep: ep, stats: EngineStats{KVCapacityBlocks: 1000, KVUsedBlocks: 100, KVUsageKnown: true}})
			}
			rr := &RouteRequest{Chain: []uint64{1, 2, 3, 4, 5, 6}, Streamed: true}
			rr.Req.KV.PromptBlocks, rr.Req.KV.DecodeTokens = 10, tt.decodeTokens
			m := newMsg(9, rr)
			c.route(t0, m)
			c.scoreReply(t0, scoreReply{id: 9, ep: 0, overlap: 0, blocks: 100})
			c.scoreReply(t0, scoreReply{id: 9, ep: 1, overlap: 6, blocks: 100})
			res := final(t, m)
			if res.route.Decision.Prefill != 1 || res.route.Decision.Decode >= 0 {
				t.Fatalf("decision %s; want endpoint 1 alone", res.route.Decision.String())
			}
			v := &c.views[1]
			if v.KVUsedBlocks != tt.admitted {
				t.Fatalf("after admit: kv %d; want %d", v.KVUsedBlocks, tt.admitted)
			}
			c.firstByte(res.route.Ticket)
			if v.KVUsedBlocks != tt.admitted {
				t.Fatalf("after the first byte: kv %d; want %d (the request still runs)", v.KVUsedBlocks, tt.admitted)
			}
			if tt.scrape > 0 {
				c.engineStats(engineStats{ep: 1, stats: EngineStats{KVCapacityBlocks: 1000, KVUsedBlocks: tt.scrape, KVUsageKnown: true}})
			}
			c.report(t0, Outcome{Ticket: res.route.Ticket, Leg: LegPrefill, Status: 200})
			c.finish(res.route.Ticket, Result{OK: true}) // given back once
			if v.KVUsedBlocks != tt.ended {
				t.Fatalf("after the leg ended: kv %d; want %d", v.KVUsedBlocks, tt.ended)
			}
		})
	}
}

// A request that finds every endpoint down asks the down ones to probe
// again now, at most once per probe attempt timeout each: an endpoint
// taken out because a loaded engine answered late is back as soon as it
// answers (the endpoint actor decides whether its last probe only timed
// out). While one is up, nothing is asked.
func TestRouterCore_NoHealthyBackendAsksTheDownEndpointsToProbeAgain(t *testing.T) {
	cfg := poolConfig(2, ladder.SelRR)
	cfg.Rule.Probe.AttemptTimeout = 2 * time.Second
	c, rec := newTestCore(t, cfg)
	send := func(id uint64, at time.Time) ladder.Decision {
		m := newMsg(id, &RouteRequest{})
		c.route(at, m)
		r := final(t, m)
		if r.route.Ticket.ID != 0 {
			c.finish(r.route.Ticket, Result{OK: true})
		}
		return r.route.Decision
	}
	c.probe(probeState{ep: 0, up: false})
	if d := send(1, t0); !d.Available() || len(rec.reprobes) != 0 {
		t.Fatalf("one endpoint up: %s, reprobes %v; want endpoint 1, none", d.String(), rec.reprobes)
	}
	c.probe(probeState{ep: 1, up: false})
	steps := []struct {
		at   time.Duration
		want []int
	}{
		{0, []int{0, 1}},
		{time.Second, []int{0, 1}}, // within the attempt timeout: not again
		{2 * time.Second, []int{0, 1, 0, 1}},
	}
	for i, s := range steps {
		if d := send(uint64(10+i), t0.Add(s.at)); d.Unavailable != ladder.ReasonNoHealthyBackend {
			t.Fatalf("step %d: %s; want no_healthy_backend", i, d.String())
		}
		if fmt.Sprint(rec.reprobes) != fmt.Sprint(s.want) {
			t.Fatalf("step %d (+%v): reprobes %v; want %v", i, s.at, rec.reprobes, s.want)
		}
	}
}
