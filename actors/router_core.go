package actors

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/llbproject/llb/ladder"
)

// routerPorts are the effects the router core asks its shell to perform:
// messages to the other actors of the service and timers. Unit tests
// implement it with a recorder; the router actor implements it with
// protoactor sends.
type routerPorts interface {
	// score asks endpoint ep's inventory for its overlap with chain.
	score(ep int, id uint64, chain []uint64)
	// checkRemoved asks endpoint ep's inventory whether its mirror removed
	// one of keys after the Removals mark since (answered as a scoreReply).
	checkRemoved(ep int, id uint64, keys []uint64, since uint64)
	// lookupSession asks the key's shard for its pin.
	lookupSession(id uint64, key string)
	pinSession(key string, pin ladder.Pin)
	evictSession(key string)
	evictEndpointSessions(ep int)
	// park hands m to endpoint ep's admission queue.
	park(ep int, m *routeMsg)
	// wake asks endpoint held to hand parked request id back for the
	// slot reserved on endpoint slot.
	wake(held int, id uint64, slot int)
	// evictParked asks endpoint held to answer parked request id with r
	// (it was displaced).
	evictParked(held int, id uint64, r Route)
	dropParked(ep int, id uint64)
	drainParked(ep int)
	// endpointLost says endpoint ep was just excluded by its probe or its
	// breaker (ServiceConfig.OnEndpointDown).
	endpointLost(ep int)
	// reprobe asks endpoint ep, down by its probe, to probe again now.
	reprobe(ep int)
	// breaker feeds an outcome class to endpoint ep's breaker.
	breaker(ep int, c outcomeClass)
	// deadline arms the fan-out deadline of decision id; the returned func
	// disarms it.
	deadline(id uint64, d time.Duration) (stop func() bool)

	// Cluster mode only (see peers.go): publish own load and health, send
	// an own health transition, read the peers' load, teach the peers'
	// tries.
	publishPeers(inFlight uint64, eps []PeerEndpoint)
	healthTransition(ep int, e PeerEndpoint)
	peerLoad(load []uint32, excluded *ladder.EndpointSet) uint64
	teach(prompt []byte, ep int)
	// truthChanged says endpoint ep's cache predictions turned wrong (or
	// right again): the shell logs it once.
	truthChanged(ep int, v ladder.TruthVerdict, demoted bool)
	// ttftChanged says endpoint ep's TTFT predictions began or stopped
	// drifting: the shell logs it once.
	ttftChanged(ep int, v ladder.TTFTVerdict)
	// panicChanged says the router began or stopped routing to endpoints
	// down by timeouts alone (slow; router_panic.go).
	panicChanged(on bool, slow ladder.EndpointSet)
}

// pending is a decision waiting for its fan-out replies.
type pending struct {
	msg      *routeMsg
	awaiting int
	session  ladder.SessionLookup
	guard    ladder.Reason
	stop     func() bool
	late     bool // the deadline fired before every reply came
}

// legBits records which legs of a ticket still hold load.
type legBits uint8

const (
	holdPrefill legBits = 1 << iota
	holdDecode
)

// ticket is an admitted request that has not finished.
type ticket struct {
	t          Ticket
	legs       legBits
	sessionKey string
	pin        bool
	// pred is the prediction for the prefill (single-pool) endpoint,
	// compared with the engine's usage when its leg reports.
	pred ticketPrediction
	// ttft is the decision's TTFT prediction for the prefill (single-pool)
	// endpoint, handed back with the leg's measured TTFT.
	ttft ladder.TTFTPrediction
	// prefill is the uncached prompt blocks charged to the prefill
	// endpoint's PrefillBlocks until the first byte (0 once discharged).
	prefill uint32
	// kv is the blocks charged to the prefill endpoint's KV usage
	// estimate (EndpointView.KVUsedBlocks) until its leg ends (0 once
	// given back).
	kv uint32
	// class and tenant place the request in the admission policy
	// (ladder.FlowQueue); charged is the prompt tokens it was charged when
	// admitted, completion the completion tokens its legs reported.
	class      ladder.Class
	tenant     string
	charged    uint32
	completion uint32
	flowed     bool // counted in flight by the FlowQueue (not a passthrough)
	// unstreamed marks a single-pool charge whose request does not stream
	// (no first byte before the whole answer); scrape is the number of
	// engine scrapes of its endpoint the router had seen when it was
	// charged (engineStats ends it at a later one that reports no queue).
	unstreamed bool
	scrape     uint32
	// adapter is the LoRA adapter the request uses, counted on adapterEP
	// (lora.go); "" for none.
	adapter   string
	adapterEP int
}

// parkRef tracks a request sitting in an endpoint's admission queue.
// waking is set once the policy chose it for a reserved slot (it has left
// the FlowQueue; its endpoint is handing it back).
type parkRef struct {
	ep        int
	cancelled bool
	waking    bool
}

// routerCore is one service's routing state and the logic that drives the
// ladder: live endpoint views, in-flight accounting, pending fan-outs,
// tickets and parked requests. It never blocks and never touches the
// runtime directly; effects go through ports and time comes in as now.
//
// Ownership: the service's router actor. A restarted router actor builds a
// fresh core (state restarts, as when LoxiLB re-adds a rule) and asks its
// children to push their state again.
type routerCore struct {
	cfg   *ServiceConfig
	lad   *ladder.Router
	ports routerPorts
	m     *svcMetrics

	views []ladder.EndpointView
	snap  ladder.Snapshot
	// reprobed is when each endpoint was last asked to probe again
	// (reprobeDown).
	reprobed [ladder.MaxEndpoints]time.Time

	scoreSet    ladder.EndpointSet // endpoints with an inventory
	maxInflight uint32             // per-endpoint admission cap (0 = off)
	breakers    bool

	pending map[uint64]*pending
	tickets map[uint64]*ticket
	// spare holds finished tickets for reuse (newTicket): one allocation
	// fewer per request.
	spare []*ticket
	// scrapes counts each endpoint's engine scrapes the router has seen;
	// unstreamed counts the tickets charged to it with ticket.unstreamed
	// (scheduledPrefills).
	scrapes    [ladder.MaxEndpoints]uint32
	unstreamed [ladder.MaxEndpoints]uint32
	parked     map[uint64]parkRef
	// flow orders the parked requests (which leaves next) and keeps the
	// tenants' fairness counters; parkable are the endpoints a parked
	// request may be resumed on (the prefill endpoints of a P/D rule).
	flow     *ladder.FlowQueue
	parkable ladder.EndpointSet
	reserved [ladder.MaxEndpoints]uint32 // slots held for requests being woken
	halfOpen ladder.EndpointSet
	trial    [ladder.MaxEndpoints]uint64 // ticket in flight on a half-open endpoint
	// slow is the endpoints whose probe holds them down by timeouts alone;
	// panicking: the last decision that found somewhere to go was a panic
	// one (router_panic.go).
	slow      ladder.EndpointSet
	panicking bool
	// ctrl is the external controller's instructions, per endpoint. The
	// slice belongs to the Service and outlives router incarnations (and is
	// handed to a replacing service): an instruction is not soft state.
	ctrl []ctrlState
	free []*pending
	// truth keeps each endpoint's prediction record (soft state: a new
	// router incarnation starts trusting every endpoint again).
	truth []ladder.TruthTracker
	// checks are wrong predictions waiting for the mirror's confirmation,
	// by score id (truthCheckIDBit set).
	checks   map[uint64]*truthCheck
	checkSeq uint64
	// removals is each endpoint's latest Removals mark from its inventory
	// (it only grows: a replaced mirror counting from 0 again makes the
	// over-checks stricter until it passes the mark, never laxer).
	removals []uint64

	// peer is the peers' load and health (cluster mode; see peers.go).
	peer peerState

	// served is the service's served-model table (Service.SetServedModels;
	// nil in unit tests: no model restriction). Read per decision.
	served *atomic.Pointer[ladder.ServedModels]
	// lora is each endpoint's LoRA adapter state (lora.go); nil until a
	// gauge was scraped.
	lora []loraEP

	stats coreStats
}

// coreStats are the router's own counters (read through Status).
type coreStats struct {
	decisions   uint64
	lateReplies uint64 // fan-out replies after their deadline
	missed      uint64 // fan-out replies that never came in time
	staleTicket uint64 // reports for unknown or finished tickets
	cancelled   uint64
}

// newRouterCore builds a core; ctrl is the service's controller record (nil
// makes a fresh one), whose instructions are folded into the new views.
func newRouterCore(cfg *ServiceConfig, lad *ladder.Router, ports routerPorts, m *svcMetrics, ctrl []ctrlState) *routerCore {
	n := len(cfg.Rule.Endpoints)
	if ctrl == nil {
		ctrl = make([]ctrlState, n)
	}
	c := &routerCore{
		cfg:      cfg,
		lad:      lad,
		ports:    ports,
		m:        m,
		views:    make([]ladder.EndpointView, n),
		ctrl:     ctrl,
		breakers: cfg.Rule.Breaker.Enabled,
		pending:  make(map[uint64]*pending),
		tickets:  make(map[uint64]*ticket),
		parked:   make(map[uint64]parkRef),
		flow:     ladder.NewFlowQueue(),
		truth:    make([]ladder.TruthTracker, n),
		removals: make([]uint64, n),
		checks:   make(map[uint64]*truthCheck),
	}
	c.snap.Endpoints = c.views
	c.peer.on = cfg.Peers != nil
	for ep := range c.ctrl {
		if cs := &c.ctrl[ep]; !cs.updated.IsZero() {
			c.views[ep].Ctrl = cs.set.State
			c.views[ep].CtrlWeight = cs.set.Weight
		}
	}
	c.maxInflight = lad.MaxInflightPerEP()
	for i := range cfg.Rule.Endpoints {
		if len(cfg.Rule.Endpoints[i].Feeds) > 0 {
			c.scoreSet = c.scoreSet.With(i)
		}
		if !cfg.Rule.Spec.PDDisagg || cfg.Rule.Endpoints[i].Role() == ladder.RolePrefill {
			c.parkable = c.parkable.With(i)
		}
	}
	return c
}

// pinLookupIDBit marks the session lookup of a request's RouteRequest.Pin
// (decision ids never set it; truthCheckIDBit is bit 63).
const pinLookupIDBit = 1 << 62

// route starts a decision: it fans out the session lookups and the
// inventory scores, or decides at once when there is nothing to ask.
func (c *routerCore) route(now time.Time, m *routeMsg) {
	rr := m.rr
	if _, ok := c.modelSet(rr.Model); !ok {
		c.notServed(m)
		return
	}
	if rr.Passthrough && rr.Pin == "" {
		c.passthrough(now, m)
		return
	}
	p := c.newPending(m)
	if rr.Pin != "" {
		c.ports.lookupSession(m.id|pinLookupIDBit, rr.Pin)
		p.awaiting++
	} else if c.cfg.Rule.Spec.PDDisagg && rr.Req.SessionKey != "" {
		c.ports.lookupSession(m.id, rr.Req.SessionKey)
		p.awaiting++
	}
	if !rr.Passthrough && c.cfg.Rule.Spec.KVExactMode != ladder.KVOff && len(rr.Chain) > 0 && rr.Req.KV.Guard == ladder.ReasonNone {
		excl := c.excluded(m)
		for i := range c.views {
			if !c.scoreSet.Has(i) || c.unusable(i, excl) {
				continue
			}
			c.ports.score(i, m.id, rr.Chain)
			m.scored = m.scored.With(i)
			p.awaiting++
		}
	}
	if p.awaiting == 0 {
		c.finalize(now, p)
		return
	}
	c.pending[m.id] = p
	p.stop = c.ports.deadline(m.id, c.cfg.lookupTimeout(rr.Pin != ""))
}

// modelSet returns the endpoints that serve model (all of them when the
// service has no table or the request names no model) and whether any
// does.
func (c *routerCore) modelSet(model string) (ladder.EndpointSet, bool) {
	t := c.servedModels()
	set, ok := t.Eligible(model, len(c.views))
	if l := c.loadable(model); l != 0 {
		set, ok = set|ladder.EndpointSet(l), true
	}
	return set, ok
}

// servedModels is the service's table (nil: none).
func (c *routerCore) servedModels() *ladder.ServedModels {
	if c.served == nil {
		return nil
	}
	return c.served.Load()
}

// notServed answers a request whose model no endpoint serves.
func (c *routerCore) notServed(m *routeMsg) {
	c.stats.decisions++
	d := ladder.Decision{Prefill: -1, Decode: -1, ParkOn: -1, Unavailable: ladder.ReasonModelNotServed}
	m.reply <- routeReply{route: Route{Decision: d}}
}

// excluded is the mask of endpoints the request may not use: the retry's
// avoid set, the endpoints that do not serve its model, and, when the
// session table pins the stored response it names, every other endpoint
// (on a P/D rule, every other endpoint of the pinned one's role).
func (c *routerCore) excluded(m *routeMsg) uint32 {
	mask := m.rr.Avoid
	if set, _ := c.modelSet(m.rr.Model); set != ladder.EndpointSet(allBits(len(c.views))) {
		mask |= ^uint32(set) &^ c.loadable(m.rr.Model)
	}
	mask |= c.loraMask(m, mask)
	if m.pin.Found && m.pin.Pin.Prefill >= 0 && m.pin.Pin.Prefill < len(c.views) {
		eps := c.cfg.Rule.Endpoints
		role := eps[m.pin.Pin.Prefill].Role()
		for i := range eps {
			if i != m.pin.Pin.Prefill && (!c.cfg.Rule.Spec.PDDisagg || eps[i].Role() == role) {
				mask |= 1 << uint(i)
			}
		}
	}
	return mask
}

// allBits is the mask of endpoints 0..n-1.
func allBits(n int) uint64 {
	if n >= 64 {
		return ^uint64(0)
	}
	return 1<<uint(n) - 1
}

// pinResponse pins key to the endpoint that answers ticket t (its decode
// endpoint on a P/D pair), so requests naming the stored response go there.
func (c *routerCore) pinResponse(t Ticket, key string) {
	tk := c.tickets[t.ID]
	if tk == nil {
		c.stats.staleTicket++
		return
	}
	ep := tk.t.Prefill
	if tk.t.Decode >= 0 {
		ep = tk.t.Decode
	}
	c.ports.pinSession(key, ladder.Pin{Prefill: ep, Decode: -1})
}

// passthrough admits a non-inference request on the least-loaded available
// endpoint of any role (ties: lowest index).
func (c *routerCore) passthrough(now time.Time, m *routeMsg) {
	best := -1
	excl := c.excluded(m)
	for i := range c.views {
		v := &c.views[i]
		if c.unusable(i, excl) || v.Draining || v.Ctrl == ladder.CtrlDraining {
			continue
		}
		if best < 0 || v.ActiveConns+c.peer.load[i] < c.views[best].ActiveConns+c.peer.load[best] {
			best = i
		}
	}
	d := ladder.Decision{Prefill: best, Decode: -1, ParkOn: -1}
	panicked := false
	if best < 0 {
		best = c.leastLoaded(c.panicSet(uint64(excl) | uint64(c.peer.excl)))
		d.Prefill, panicked = best, best >= 0
		if panicked {
			d.Flags |= ladder.FlagPanic
		}
	}
	if best >= 0 || (c.panicking && c.slowDown() == 0) {
		c.notePanic(panicked)
	}
	if best < 0 {
		d.Unavailable = ladder.ReasonNoHealthyBackend
		if c.cfg.Rule.Spec.PDDisagg {
			d.Unavailable = ladder.ReasonPDPoolUnavailable
		}
		c.reprobeDown(now, d)
		m.reply <- routeReply{route: Route{Decision: d}}
		return
	}
	c.stats.decisions++
	t := Ticket{ID: m.id, Prefill: best, Decode: -1}
	c.views[best].ActiveConns++
	tk := c.newTicket()
	tk.t, tk.legs = t, holdPrefill
	c.tickets[m.id] = tk
	m.reply <- routeReply{route: Route{Decision: d, Ticket: t}}
}

// unusable reports an endpoint that no tier may pick for this request, so
// scoring it would be wasted work.
func (c *routerCore) unusable(i int, avoid uint32) bool {
	v := &c.views[i]
	return v.Down || v.BreakerOpen || v.Ctrl == ladder.CtrlDisabled || avoid&(1<<uint(i)) != 0 || c.peer.excl.Has(i)
}

func (c *routerCore) scoreReply(now time.Time, r scoreReply) {
	if r.ep >= 0 && r.ep < len(c.removals) && r.removals > c.removals[r.ep] {
		c.removals[r.ep] = r.removals
	}
	if r.id&truthCheckIDBit != 0 && c.truthConfirmed(now, r.id, r) {
		return
	}
	p := c.pending[r.id]
	if p == nil || !p.msg.scored.Has(r.ep) {
		c.stats.lateReplies++
		return
	}
	p.msg.overlaps[r.ep] = r.overlap
	p.msg.offloaded[r.ep] = r.offloaded
	c.views[r.ep].InventoryBlocks = r.blocks
	if r.guard != ladder.ReasonNone {
		p.guard = r.guard
	}
	c.replied(now, p)
}

func (c *routerCore) sessionReply(now time.Time, r sessionReply) {
	p := c.pending[r.id&^pinLookupIDBit]
	if p == nil {
		c.stats.lateReplies++
		return
	}
	if r.id&pinLookupIDBit != 0 {
		p.msg.pin = r.lookup
	} else {
		p.session = r.lookup
	}
	c.replied(now, p)
}

func (c *routerCore) replied(now time.Time, p *pending) {
	p.awaiting--
	if p.awaiting > 0 {
		return
	}
	delete(c.pending, p.msg.id)
	if p.stop != nil {
		p.stop()
	}
	c.finalize(now, p)
}

// deadlineFired decides with whatever replies arrived; the missing ones
// count as misses (overlap 0, no session).
func (c *routerCore) deadlineFired(now time.Time, id uint64) {
	if id&truthCheckIDBit != 0 && c.truthTimer(now, id) {
		return
	}
	p := c.pending[id]
	if p == nil {
		return
	}
	delete(c.pending, id)
	c.stats.missed += uint64(p.awaiting)
	c.m.fanoutMissed(p.awaiting)
	p.late = true
	c.finalize(now, p)
}

// finalize runs the ladder for a request whose inputs are complete.
func (c *routerCore) finalize(now time.Time, p *pending) {
	m := p.msg
	req := &m.rr.Req
	req.Session = p.session
	if p.guard != ladder.ReasonNone && req.KV.Guard == ladder.ReasonNone {
		req.KV.Guard = p.guard
	}
	late := p.late
	c.recycle(p)
	if m.rr.Passthrough {
		c.passthrough(now, m)
		return
	}
	d := c.decide(now, m, func(req *ladder.Request) (ladder.Decision, error) {
		return c.lad.Decide(now, req, &c.snap)
	})
	if late {
		d.Flags |= ladder.FlagFanoutLate
	}
	c.act(now, m, d)
}

// decide runs fn with the request's overlaps, its avoid set, the half-open
// trial exclusions and, in cluster mode, the peers' load and exclusions
// folded into the views, and restores them.
func (c *routerCore) decide(now time.Time, m *routeMsg, fn func(*ladder.Request) (ladder.Decision, error)) ladder.Decision {
	var wasDown uint64
	touched := uint64(c.excluded(m)) | uint64(c.peer.excl)
	for i := range c.views {
		c.views[i].Overlap, c.views[i].OverlapOffloaded = 0, 0
		if m.scored.Has(i) {
			c.views[i].Overlap, c.views[i].OverlapOffloaded = m.overlaps[i], m.offloaded[i]
		}
		if c.halfOpen.Has(i) && c.trial[i] != 0 {
			touched |= 1 << uint(i)
		}
	}
	for i := range c.views {
		if touched&(1<<uint(i)) != 0 {
			if c.views[i].Down {
				wasDown |= 1 << uint(i)
			}
			c.views[i].Down = true
		}
	}
	c.snap.TotalInflight = uint64(len(c.tickets)+len(c.parked)) + c.peer.total
	c.snap.ParkedByClass = c.flow.Counts()
	m.rr.Req.UnderShare = c.flow.UnderShare(m.rr.Req.Class, m.rr.Tenant, c.lad.Slots())
	m.rr.Req.OutranksParked = c.flow.Outranks(m.rr.Req.Class, m.rr.Tenant, uint64(m.rr.PromptTokens))
	if c.peer.on {
		for i := range c.views {
			c.views[i].ActiveConns += c.peer.load[i]
		}
	}
	d, err := fn(&m.rr.Req)
	if err == nil {
		var panicked bool
		d, panicked = c.decidePanic(d, c.panicSet(touched), &m.rr.Req, fn)
		if panicked || d.Available() {
			c.notePanic(panicked)
		} else if c.panicking && c.slowDown() == 0 {
			c.notePanic(false)
		}
	}
	d.LoRA = m.lora
	if c.peer.on {
		for i := range c.views {
			c.views[i].ActiveConns -= c.peer.load[i]
		}
	}
	for i := range c.views {
		if touched&(1<<uint(i)) != 0 {
			c.views[i].Down = wasDown&(1<<uint(i)) != 0
		}
	}
	c.stats.decisions++
	if err != nil {
		c.m.internalError()
	}
	return d
}

// act carries out a decision.
func (c *routerCore) act(now time.Time, m *routeMsg, d ladder.Decision) {
	if d.EvictSession && m.rr.Req.SessionKey != "" {
		c.ports.evictSession(m.rr.Req.SessionKey)
	}
	switch d.Admission {
	case ladder.Admit:
		if !d.Available() {
			c.reprobeDown(now, d)
			m.reply <- routeReply{route: Route{Decision: d}}
			return
		}
		c.admit(now, m, d)
	case ladder.Park:
		if d.Displace && !c.displace(m, &d) {
			d.Admission = ladder.Shed
			c.m.shed(d.Admission)
			m.reply <- routeReply{route: Route{Decision: d}}
			return
		}
		if m.deadline.IsZero() {
			m.deadline = d.ParkDeadline
		}
		if m.parkedAt.IsZero() {
			m.parkedAt = now
			m.reply <- routeReply{parked: true, parkDeadline: m.deadline}
		}
		c.parked[m.id] = parkRef{ep: d.ParkOn}
		c.flow.Park(ladder.FlowEntry{ID: m.id, Class: m.rr.Req.Class, Tenant: m.rr.Tenant,
			Allowed: c.parkable &^ ladder.EndpointSet(c.excluded(m))})
		c.views[d.ParkOn].Parked++
		c.m.parked()
		c.ports.park(d.ParkOn, m)
	default: // Shed, Refuse
		c.m.shed(d.Admission)
		m.reply <- routeReply{route: Route{Decision: d}}
	}
}

// reprobeDown asks every endpoint its probe holds down to probe again now,
// at most once per probe attempt timeout, when decision d found no
// endpoint available: an endpoint that went down because a loaded engine
// answered late is back as soon as it answers, not a probe period later
// (the endpoint actor probes at once only when its last probe timed out).
func (c *routerCore) reprobeDown(now time.Time, d ladder.Decision) {
	if d.Unavailable != ladder.ReasonNoHealthyBackend && d.Unavailable != ladder.ReasonPDPoolUnavailable {
		return
	}
	gap := c.cfg.Rule.Probe.AttemptTimeout
	for i := range c.views {
		if c.views[i].Down && i < len(c.reprobed) && now.Sub(c.reprobed[i]) >= gap {
			c.reprobed[i] = now
			c.ports.reprobe(i)
		}
	}
}

// displace makes room for m, which found every queue full, by shedding
// the parked request the policy names (429): one of a lower class, or of
// m's class whose tenant has received more service; m parks on that
// request's endpoint (d.ParkOn). False when there is none.
func (c *routerCore) displace(m *routeMsg, d *ladder.Decision) bool {
	v, ok := c.flow.Victim(m.rr.Req.Class, m.rr.Tenant, uint64(m.rr.PromptTokens))
	if !ok {
		return false
	}
	ref := c.parked[v.ID]
	c.ports.evictParked(ref.ep, v.ID, Route{Decision: ladder.DisplacedDecision()})
	c.unpark(v.ID)
	c.m.shed(ladder.Shed)
	d.ParkOn = ref.ep
	return true
}

// admit takes the request's in-flight slots and answers it.
func (c *routerCore) admit(now time.Time, m *routeMsg, d ladder.Decision) {
	t := Ticket{ID: m.id, Prefill: d.Prefill, Decode: d.Decode}
	tk := c.newTicket()
	tk.t, tk.legs, tk.sessionKey, tk.pin = t, holdPrefill, m.rr.Req.SessionKey, d.PinSession
	tk.class, tk.tenant, tk.charged, tk.flowed = m.rr.Req.Class, m.rr.Tenant, m.rr.PromptTokens, true
	c.flow.Admitted(tk.class, tk.tenant, uint64(tk.charged))
	c.views[d.Prefill].ActiveConns++
	c.chargePrefill(m, d.Prefill, tk)
	c.claimTrial(d.Prefill, m.id)
	if d.Decode >= 0 {
		c.views[d.Decode].ActiveConns++
		tk.legs |= holdDecode
		c.claimTrial(d.Decode, m.id)
	}
	tk.pred = c.predict(m, d.Prefill)
	c.loraAdmitted(tk, m.rr.Model)
	tk.ttft = d.TTFT
	c.tickets[m.id] = tk
	// Tier 1 learns what llb routed (the trie copies what it keeps), and
	// so do the peers' tries.
	c.lad.Learn(m.rr.Req.Prompt, d.Prefill)
	c.teach(m.rr.Req.Prompt, d.Prefill)
	var parked time.Duration
	if !m.parkedAt.IsZero() {
		parked = now.Sub(m.parkedAt)
	}
	route := Route{Decision: d, Ticket: t, Parked: parked}
	if tk.pred.ok {
		route.Prediction = Prediction{OK: true, CachedTokens: tk.pred.s.Predicted}
	}
	m.reply <- routeReply{route: route}
}

func (c *routerCore) claimTrial(ep int, id uint64) {
	if c.halfOpen.Has(ep) && c.trial[ep] == 0 {
		c.trial[ep] = id
	}
}

// report releases one leg and feeds its endpoint's breaker. now is used
// only when o carries the engine's cached tokens or a measured TTFT
// (reportClock).
func (c *routerCore) report(now time.Time, o Outcome) {
	tk := c.tickets[o.Ticket.ID]
	if tk == nil {
		c.stats.staleTicket++
		return
	}
	ep, bit := tk.t.Prefill, holdPrefill
	if o.Leg == LegDecode {
		ep, bit = tk.t.Decode, holdDecode
	}
	if tk.legs&bit == 0 || ep < 0 {
		return
	}
	if o.Leg != LegDecode {
		c.checkPrediction(now, ep, &tk.pred, o)
		c.checkTTFT(now, ep, &tk.ttft, o)
	}
	tk.completion = max(tk.completion, o.Usage.CompletionTokens)
	if p := o.Usage.PromptTokens; p > tk.charged {
		// The engine counted more prompt tokens than the estimate charged.
		c.flow.Charge(tk.class, tk.tenant, uint64(p-tk.charged))
		tk.charged = p
	}
	tk.legs &^= bit
	if bit == holdPrefill {
		c.firstByte(tk.t)
		c.releaseKV(tk)
	}
	c.release(ep)
	if c.trial[ep] == tk.t.ID {
		c.trial[ep] = 0
	}
	if c.breakers {
		c.ports.breaker(ep, classify(o))
	}
}

// finish ends a ticket.
func (c *routerCore) finish(t Ticket, res Result) {
	tk := c.tickets[t.ID]
	if tk == nil {
		c.stats.staleTicket++
		return
	}
	c.firstByte(tk.t)
	c.loraFinished(tk)
	delete(c.tickets, t.ID)
	if tk.flowed {
		c.flow.Done(tk.class, tk.tenant, uint64(tk.completion))
	}
	if tk.legs&holdPrefill != 0 {
		c.releaseKV(tk)
		c.release(tk.t.Prefill)
	}
	if tk.legs&holdDecode != 0 && tk.t.Decode >= 0 {
		c.release(tk.t.Decode)
	}
	for _, ep := range [2]int{tk.t.Prefill, tk.t.Decode} {
		if ep >= 0 && c.trial[ep] == t.ID {
			c.trial[ep] = 0
		}
	}
	if res.OK && tk.pin && tk.sessionKey != "" {
		c.ports.pinSession(tk.sessionKey, ladder.Pin{Prefill: tk.t.Prefill, Decode: tk.t.Decode})
	}
	c.recycleTicket(tk)
}

// maxSpareTickets bounds the finished tickets kept for reuse.
const maxSpareTickets = 1024

// newTicket returns a zero ticket, reused when one is spare.
func (c *routerCore) newTicket() *ticket {
	if n := len(c.spare); n > 0 {
		tk := c.spare[n-1]
		c.spare = c.spare[:n-1]
		return tk
	}
	return new(ticket)
}

// recycleTicket keeps a finished ticket, no longer in c.tickets, for reuse.
func (c *routerCore) recycleTicket(tk *ticket) {
	if len(c.spare) < maxSpareTickets {
		*tk = ticket{}
		c.spare = append(c.spare, tk)
	}
}

// release gives back one in-flight slot on ep and, when ep is now under
// its cap and a parked request may run there, reserves the slot for the
// one the admission policy names (ladder.FlowQueue.Next: class, then the
// tenant with the least service, then the oldest), wherever it is held.
func (c *routerCore) release(ep int) {
	v := &c.views[ep]
	if v.ActiveConns > 0 {
		v.ActiveConns--
	}
	if c.flow.Len() == 0 {
		return
	}
	e, ok := c.flow.Peek(ep)
	if !ok {
		return
	}
	if limit := c.lad.CapFor(e.Class, c.flow.UnderShare(e.Class, e.Tenant, c.lad.Slots())); limit != 0 && v.ActiveConns >= limit {
		return
	}
	c.flow.Next(ep)
	ref := c.parked[e.ID]
	ref.waking = true
	c.parked[e.ID] = ref
	v.ActiveConns++
	c.reserved[ep]++
	c.ports.wake(ref.ep, e.ID, ep)
}

// cancel withdraws a request wherever it is.
func (c *routerCore) cancel(id uint64) {
	c.stats.cancelled++
	if p := c.pending[id]; p != nil {
		delete(c.pending, id)
		if p.stop != nil {
			p.stop()
		}
		c.recycle(p)
		return
	}
	if ref, ok := c.parked[id]; ok {
		ref.cancelled = true
		c.parked[id] = ref
		c.flow.Remove(id)
		c.ports.dropParked(ref.ep, id)
		return
	}
	if tk := c.tickets[id]; tk != nil {
		c.finish(tk.t, Result{})
	}
}

// resume handles a parked request its endpoint handed back: the slot
// reserved on r.ep by release now belongs to it.
func (c *routerCore) resume(now time.Time, r resumeMsg) {
	ep, m := r.ep, r.req
	c.unreserve(ep)
	ref, known := c.parked[m.id]
	c.unpark(m.id)
	if known && ref.cancelled {
		c.release(ep)
		return
	}
	if !known {
		// A parked request from before a router restart: decide afresh.
		c.release(ep)
		c.route(now, m)
		return
	}
	d := c.decide(now, m, func(req *ladder.Request) (ladder.Decision, error) {
		return c.lad.Resume(now, req, &c.snap, ep)
	})
	if d.Available() && d.Prefill == ep {
		// The reserved slot becomes the ticket's prefill slot.
		c.views[ep].ActiveConns--
		c.admit(now, m, d)
		return
	}
	c.release(ep)
	c.act(now, m, d)
}

// wakeEmpty handles a wake whose request had left its queue meanwhile:
// the reserved slot is freed again (and offered to the next).
func (c *routerCore) wakeEmpty(w wakeEmpty) {
	c.unpark(w.id)
	c.unreserve(w.ep)
	c.release(w.ep)
}

func (c *routerCore) unreserve(ep int) {
	if c.reserved[ep] > 0 {
		c.reserved[ep]--
	}
}

func (c *routerCore) unparked(now time.Time, u unparkedMsg) {
	c.unpark(u.id)
	if u.requeue != nil {
		c.route(now, u.requeue)
	}
}

// unpark forgets parked request id: its queue no longer holds it.
func (c *routerCore) unpark(id uint64) {
	ref, ok := c.parked[id]
	if !ok {
		return
	}
	delete(c.parked, id)
	if !ref.waking {
		c.flow.Remove(id)
	}
	if c.views[ref.ep].Parked > 0 {
		c.views[ref.ep].Parked--
	}
}

// probe applies a health transition. Down: the endpoint's sessions are
// evicted (stickiness never overrides health) and its parked requests go
// back to the ladder.
//
// An endpoint down by timeouts alone while no other is up keeps its legs:
// panic routing sends new requests there too (router_panic.go).
func (c *routerCore) probe(s probeState) {
	v := &c.views[s.ep]
	down := !s.up
	if s.slow {
		c.slow = c.slow.With(s.ep)
	} else {
		c.slow &^= 1 << uint(s.ep)
	}
	if v.Down == down {
		return
	}
	v.Down = down
	c.healthChanged(s.ep)
	if down {
		if !s.slow || c.othersUp(s.ep) {
			c.ports.endpointLost(s.ep)
		}
		c.ports.evictEndpointSessions(s.ep)
		if v.Parked > 0 {
			c.ports.drainParked(s.ep)
		}
	}
}

// breakerState applies a breaker transition. Open: excluded everywhere, the
// trie forgets the endpoint, its sessions are evicted, its parked requests
// go back to the ladder.
func (c *routerCore) breakerState(s breakerState) {
	v := &c.views[s.ep]
	c.trial[s.ep] = 0
	before := c.ownEndpoint(s.ep).Breaker
	defer func() {
		if c.ownEndpoint(s.ep).Breaker != before {
			c.healthChanged(s.ep)
		}
	}()
	switch s.state {
	case BreakerOpen:
		if !v.BreakerOpen {
			c.ports.endpointLost(s.ep)
		}
		v.BreakerOpen = true
		c.halfOpen = c.halfOpen &^ (1 << uint(s.ep))
		c.lad.RemoveEndpoint(s.ep)
		c.ports.evictEndpointSessions(s.ep)
		if v.Parked > 0 {
			c.ports.drainParked(s.ep)
		}
	case BreakerHalfOpen:
		v.BreakerOpen = false
		c.halfOpen = c.halfOpen.With(s.ep)
	default:
		v.BreakerOpen = false
		c.halfOpen = c.halfOpen &^ (1 << uint(s.ep))
	}
}

func (c *routerCore) engineStats(s engineStats) {
	v := &c.views[s.ep]
	v.KVCapacityBlocks = s.stats.KVCapacityBlocks
	v.QueuedRequests = s.stats.Waiting
	v.SwapPressure = s.stats.Swapped
	// The scrape's usage replaces llb's estimate: the blocks sent since
	// the previous scrape are in it now (or finished).
	v.KVUsedBlocks, v.KVUsageKnown = s.stats.KVUsedBlocks, s.stats.KVUsageKnown
	c.scheduledPrefills(s.ep, s.stats.Waiting)
	c.loraGauge(s.ep, s.stats.LoRA)
}

// chargePrefill counts a new request's uncached prompt blocks against
// its prefill endpoint until its first byte (PrefillBlocks), and adds them
// — with, on a single-pool endpoint, the blocks its completion will fill
// (Router.DecodeBlocks) — to the endpoint's KV-usage estimate until its
// leg ends (releaseKV). The estimate is the last scrape's usage plus those
// charges, minus the charges of the requests that ended since: the engine
// grows a running request's blocks with every decode step and frees them
// when it ends, both between two scrapes, and the law's tests of room
// (HoldWinner, the miss placement) read the estimate (docs/performance.md,
// TTFT objectives).
func (c *routerCore) chargePrefill(m *routeMsg, ep int, tk *ticket) {
	pb := c.lad.PromptBlocks(&m.rr.Req)
	o := uint32(0)
	if m.scored.Has(ep) {
		o = m.overlaps[ep]
	}
	tk.prefill = pb - min(o, pb)
	if tk.prefill > 0 && !m.rr.Streamed && tk.t.Decode < 0 {
		tk.unstreamed, tk.scrape = true, c.scrapes[ep]
		c.unstreamed[ep]++
	}
	tk.kv = tk.prefill
	if tk.t.Decode < 0 {
		tk.kv = satAdd32(tk.kv, c.lad.DecodeBlocks(&m.rr.Req))
	}
	v := &c.views[ep]
	v.PrefillBlocks = satAdd32(v.PrefillBlocks, tk.prefill)
	v.KVUsedBlocks = satAdd32(v.KVUsedBlocks, tk.kv)
}

// releaseKV gives back a ticket's charge to its prefill endpoint's KV
// usage estimate: its leg there ended, so the engine freed (or keeps as
// cache, which is free) the blocks the request held.
func (c *routerCore) releaseKV(tk *ticket) {
	if tk.kv == 0 || tk.t.Prefill < 0 {
		return
	}
	v := &c.views[tk.t.Prefill]
	v.KVUsedBlocks -= min(tk.kv, v.KVUsedBlocks)
	tk.kv = 0
}

// firstByte ends a ticket's prefill charge: its endpoint answered, so the
// prefill is over (a streamed completion's first byte is its first token).
func (c *routerCore) firstByte(t Ticket) {
	tk := c.tickets[t.ID]
	if tk == nil || tk.prefill == 0 || tk.t.Prefill < 0 {
		return
	}
	v := &c.views[tk.t.Prefill]
	v.PrefillBlocks -= min(tk.prefill, v.PrefillBlocks)
	tk.prefill = 0
	if tk.unstreamed {
		tk.unstreamed = false
		c.unstreamed[tk.t.Prefill]--
	}
}

// scheduledPrefills ends the prefill charges of the single-pool requests
// on ep that do not stream and were charged before the previous scrape of
// ep reached the router — so before this one began (a periodic scrape
// starts an interval after the previous one's result) — once this scrape
// reports that ep's engine has nothing waiting: those requests have been
// scheduled, so their prefill is under way or done. Such a request has no
// first byte until its whole answer; without this its prefill would count
// as queued through its whole generation. Runs per scrape only while such
// charges exist on ep.
func (c *routerCore) scheduledPrefills(ep int, waiting uint32) {
	seen := c.scrapes[ep]
	c.scrapes[ep]++
	if waiting > 0 || c.unstreamed[ep] == 0 {
		return
	}
	for _, tk := range c.tickets {
		if tk.unstreamed && tk.t.Prefill == ep && tk.scrape < seen {
			c.firstByte(tk.t)
		}
	}
}

func satAdd32(a, b uint32) uint32 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxUint32
}

func (c *routerCore) newPending(m *routeMsg) *pending {
	var p *pending
	if n := len(c.free); n > 0 {
		p = c.free[n-1]
		c.free = c.free[:n-1]
	} else {
		p = new(pending)
	}
	p.msg = m
	return p
}

func (c *routerCore) recycle(p *pending) {
	*p = pending{}
	if len(c.free) < 1024 {
		c.free = append(c.free, p)
	}
}

// takePending hands back every decision still waiting for its fan-out,
// its deadline disarmed and its partial inputs cleared, so the router's
// next incarnation can decide it afresh: a restart is not a stop, and a
// client must not pay for it.
func (c *routerCore) takePending() []*routeMsg {
	out := make([]*routeMsg, 0, len(c.pending))
	for id, p := range c.pending {
		if p.stop != nil {
			p.stop()
		}
		m := p.msg
		m.scored, m.overlaps, m.offloaded = 0, [ladder.MaxEndpoints]uint32{}, [ladder.MaxEndpoints]uint32{}
		m.pin = ladder.SessionLookup{}
		out = append(out, m)
		delete(c.pending, id)
	}
	return out
}

// stopAll answers every request the core still holds with ErrStopped.
func (c *routerCore) stopAll() {
	for id, p := range c.pending {
		p.msg.reply <- routeReply{err: ErrStopped}
		delete(c.pending, id)
	}
}
