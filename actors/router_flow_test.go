package actors

import (
	"fmt"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
)

// The router core feeds the admission policy (ladder.FlowQueue): these
// tests check that it parks, wakes, charges and displaces as the policy
// says; the policy's own choices are ladder's golden tests.

func classed(class ladder.Class, tenant string, tokens uint32) *RouteRequest {
	rr := &RouteRequest{Tenant: tenant, PromptTokens: tokens}
	rr.Req.Class = class
	return rr
}

// fill admits n requests so every prefill endpoint of a cap-1 rule is
// busy; it returns their replies.
func fill(t *testing.T, c *routerCore, ids ...uint64) []routeReply {
	t.Helper()
	var out []routeReply
	for _, id := range ids {
		m := newMsg(id, &RouteRequest{})
		c.route(t0, m)
		r := final(t, m)
		if !r.route.Decision.Available() {
			t.Fatalf("request %d: %s; want admitted", id, r.route.Decision.String())
		}
		out = append(out, r)
	}
	return out
}

// noHeadroom is admissionEnv without the critical class's headroom.
func noHeadroom(capPerEP, depth uint32, park time.Duration) ladder.Env {
	env := admissionEnv(capPerEP, depth, park)
	env.CriticalHeadroomPct = 0
	return env
}

func TestRouterFlow_HigherClassLeavesFirst(t *testing.T) {
	c, rec := newTestCore(t, pdConfig(1, 1, noHeadroom(1, 8, 0)))
	busy := fill(t, c, 1)
	c.route(t0, newMsg(2, classed(ladder.ClassStandard, "", 10)))
	c.route(t0, newMsg(3, classed(ladder.ClassCritical, "", 10)))
	c.finish(busy[0].route.Ticket, Result{OK: true})
	if got, want := fmt.Sprint(rec.wakes), "[0/3>0]"; got != want {
		t.Fatalf("wakes %s; want %s (the critical request, parked later, goes first)", got, want)
	}
}

func TestRouterFlow_SheddableRefusedInsteadOfParked(t *testing.T) {
	c, rec := newTestCore(t, pdConfig(1, 1, admissionEnv(1, 8, 0)))
	fill(t, c, 1)
	m := newMsg(2, classed(ladder.ClassSheddable, "batch", 10))
	c.route(t0, m)
	r := final(t, m)
	if r.route.Decision.Admission != ladder.Shed || r.route.Decision.Trace.Reason(ladder.TierAdmission) != ladder.ReasonSheddable {
		t.Fatalf("sheddable: %s; want shed via sheddable", r.route.Decision.String())
	}
	if len(rec.parks) != 0 {
		t.Fatalf("parks %v; want none", rec.parks)
	}
}

func TestRouterFlow_SlotOnAnyPrefillEndpointTakesTheNextParked(t *testing.T) {
	c, rec := newTestCore(t, pdConfig(2, 1, admissionEnv(1, 8, 0)))
	busy := fill(t, c, 1, 2)
	c.route(t0, newMsg(3, &RouteRequest{}))
	if got := fmt.Sprint(rec.parks); got != "[0/3]" {
		t.Fatalf("parks %s; want [0/3]", got)
	}
	// Endpoint 1 frees first: the request held on endpoint 0 takes it.
	on1 := busy[0].route.Ticket
	if on1.Prefill != 1 {
		on1 = busy[1].route.Ticket
	}
	c.finish(on1, Result{OK: true})
	if got, want := fmt.Sprint(rec.wakes), "[0/3>1]"; got != want {
		t.Fatalf("wakes %s; want %s", got, want)
	}
	// A decode endpoint's slot wakes nobody: parked requests wait for a
	// prefill slot.
	if c.flow.Len() != 0 {
		t.Fatalf("flow still holds %d", c.flow.Len())
	}
}

func TestRouterFlow_TenantWithLessServiceGoesFirst(t *testing.T) {
	c, rec := newTestCore(t, pdConfig(1, 1, noHeadroom(1, 8, 0)))
	busy := fill(t, c, 1)
	// The flooding tenant parks three long requests, then the other one.
	first := newMsg(10, classed(ladder.ClassStandard, "flood", 4000))
	c.route(t0, first)
	c.route(t0, newMsg(11, classed(ladder.ClassStandard, "flood", 4000)))
	c.route(t0, newMsg(12, classed(ladder.ClassStandard, "flood", 4000)))
	c.route(t0, newMsg(20, classed(ladder.ClassStandard, "calm", 100)))
	// First slot: the heads tie at the lifted counter; the older goes.
	c.finish(busy[0].route.Ticket, Result{OK: true})
	c.resume(t0, resumeMsg{ep: 0, held: 0, req: first})
	// The flood tenant was charged 4000: the calm tenant goes next.
	tk := c.tickets[10]
	c.finish(tk.t, Result{OK: true})
	if got, want := fmt.Sprint(rec.wakes), "[0/10>0 0/20>0]"; got != want {
		t.Fatalf("wakes %s; want %s", got, want)
	}
	if a, b := c.flow.Counter(ladder.ClassStandard, "flood"), c.flow.Counter(ladder.ClassStandard, "calm"); a != 4000 || b != 0 {
		t.Fatalf("counters flood=%d calm=%d; want 4000 and 0", a, b)
	}
}

func TestRouterFlow_CompletionTokensChargedAtFinish(t *testing.T) {
	c, _ := newTestCore(t, pdConfig(1, 1, admissionEnv(4, 8, 0)))
	m := newMsg(1, classed(ladder.ClassCritical, "t", 100))
	c.route(t0, m)
	r := final(t, m)
	r.route.Ticket.ledger = nil
	c.report(t0, Outcome{Ticket: r.route.Ticket, Leg: LegPrefill, Status: 200, Usage: Usage{PromptTokens: 120}})
	c.report(t0, Outcome{Ticket: r.route.Ticket, Leg: LegDecode, Status: 200, Usage: Usage{PromptTokens: 120, CompletionTokens: 30}})
	c.finish(r.route.Ticket, Result{OK: true})
	if got := c.flow.Counter(ladder.ClassCritical, "t"); got != 150 {
		t.Fatalf("counter %d; want 150 (120 prompt as the engine counted them + 30 completion)", got)
	}
}

func TestRouterFlow_FullQueuesDisplaceALowerClass(t *testing.T) {
	c, rec := newTestCore(t, pdConfig(1, 1, noHeadroom(1, 1, time.Minute)))
	fill(t, c, 1)
	victim := newMsg(2, classed(ladder.ClassStandard, "", 10))
	c.route(t0, victim)
	// The queue (depth 1) is full; a standard request is shed ...
	m3 := newMsg(3, classed(ladder.ClassStandard, "", 10))
	c.route(t0, m3)
	if r := final(t, m3); r.route.Decision.Admission != ladder.Shed {
		t.Fatalf("standard with full queues: %s; want shed", r.route.Decision.String())
	}
	// ... a critical one takes the parked standard request's place.
	m4 := newMsg(4, classed(ladder.ClassCritical, "", 10))
	c.route(t0, m4)
	noReply(t, m4)
	if got, want := fmt.Sprint(rec.evicted), "[0/2 tier=none prefill=-1 decode=-1 via=displaced admission=shed]"; got != want {
		t.Fatalf("evicted %s; want %s", got, want)
	}
	if got, want := fmt.Sprint(rec.parks), "[0/2 0/4]"; got != want {
		t.Fatalf("parks %s; want %s", got, want)
	}
	if _, ok := c.parked[2]; ok || c.views[0].Parked != 1 || c.flow.Len() != 1 {
		t.Fatalf("parked map %v, count %d, flow %d; want only request 4", c.parked, c.views[0].Parked, c.flow.Len())
	}
}

func TestRouterFlow_CriticalHeadroomAboveTheCap(t *testing.T) {
	// Cap 4, headroom 25 %: a critical request may take a fifth slot.
	c, rec := newTestCore(t, pdConfig(1, 1, admissionEnv(4, 8, 0)))
	busy := fill(t, c, 1, 2, 3, 4)
	std := newMsg(5, classed(ladder.ClassStandard, "", 10))
	c.route(t0, std)
	crit := newMsg(6, classed(ladder.ClassCritical, "", 10))
	c.route(t0, crit)
	if r := final(t, crit); !r.route.Decision.Available() {
		t.Fatalf("critical at the cap: %s; want admitted in the headroom", r.route.Decision.String())
	}
	if got := fmt.Sprint(rec.parks); got != "[0/5]" {
		t.Fatalf("parks %s; want only the standard request", got)
	}
	// A slot frees: 5 in flight is still over the standard cap of 4.
	c.finish(busy[0].route.Ticket, Result{OK: true})
	if len(rec.wakes) != 0 {
		t.Fatalf("wakes %v; want none while over the standard cap", rec.wakes)
	}
	c.finish(busy[1].route.Ticket, Result{OK: true})
	if got := fmt.Sprint(rec.wakes); got != "[0/5>0]" {
		t.Fatalf("wakes %s; want the standard request once under its cap", got)
	}
}

func TestRouterFlow_UnderShareTenantUsesTheHeadroom(t *testing.T) {
	// Cap 4 on one endpoint, headroom 1: the flooding tenant holds every
	// slot; the other tenant is under its share (2 of 4) and takes the
	// headroom slot; the flooding tenant parks.
	c, rec := newTestCore(t, pdConfig(1, 1, admissionEnv(4, 8, 0)))
	for id := uint64(1); id <= 4; id++ {
		m := newMsg(id, classed(ladder.ClassStandard, "flood", 100))
		c.route(t0, m)
		if r := final(t, m); !r.route.Decision.Available() {
			t.Fatalf("flood %d: %s", id, r.route.Decision.String())
		}
	}
	c.route(t0, newMsg(5, classed(ladder.ClassStandard, "flood", 100)))
	calm := newMsg(6, classed(ladder.ClassStandard, "calm", 100))
	c.route(t0, calm)
	if r := final(t, calm); !r.route.Decision.Available() {
		t.Fatalf("calm tenant: %s; want admitted in the headroom", r.route.Decision.String())
	}
	if got := fmt.Sprint(rec.parks); got != "[0/5]" {
		t.Fatalf("parks %s; want the flooding tenant's fifth request only", got)
	}
}
