package actors

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/llbproject/llb/ladder"
)

// withServed gives c a served-model table.
func withServed(c *routerCore, lists [][]ladder.ModelCard) {
	var p atomic.Pointer[ladder.ServedModels]
	p.Store(ladder.NewServedModels(lists))
	c.served = &p
}

func cards(ids ...string) []ladder.ModelCard {
	out := make([]ladder.ModelCard, len(ids))
	for i, id := range ids {
		out[i] = ladder.ModelCard{ID: id}
	}
	return out
}

func TestRouterCore_DecidesAmongTheEndpointsServingTheModel(t *testing.T) {
	tests := []struct {
		name  string
		lists [][]ladder.ModelCard
		model string
		want  string // the endpoints the decisions land on, or "404"
	}{
		{"one model per endpoint", [][]ladder.ModelCard{cards("a"), cards("b"), cards("c")}, "b", "[1 1 1 1]"},
		{"an alias on two", [][]ladder.ModelCard{cards("a", "alias"), cards("b"), cards("a", "alias")}, "alias", "[0 2 0 2]"},
		{"unknown lists serve everything", [][]ladder.ModelCard{cards("a"), nil, cards("c")}, "b", "[1 1 1 1]"},
		{"no model restricts nothing", [][]ladder.ModelCard{cards("a"), cards("b"), cards("c")}, "", "[0 1 2 0]"},
		{"served nowhere", [][]ladder.ModelCard{cards("a"), cards("b"), cards("c")}, "z", "404"},
		{"case-sensitive", [][]ladder.ModelCard{cards("a"), cards("b"), cards("c")}, "B", "404"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := newTestCore(t, poolConfig(3, ladder.SelRR))
			withServed(c, tt.lists)
			var got []int
			for i := range 4 {
				m := newMsg(uint64(i+1), &RouteRequest{Model: tt.model})
				c.route(t0, m)
				r := final(t, m)
				if !r.route.Decision.Available() {
					if r.route.Decision.Unavailable != ladder.ReasonModelNotServed || tt.want != "404" {
						t.Fatalf("decision %s; want %s", r.route.Decision.String(), tt.want)
					}
					return
				}
				got = append(got, r.route.Ticket.Prefill)
				c.finish(r.route.Ticket, Result{OK: true})
			}
			if fmt.Sprint(got) != tt.want {
				t.Errorf("picks %v; want %s", got, tt.want)
			}
		})
	}
}

func TestRouterCore_AStoredResponsePinsItsRequestsToItsEndpoint(t *testing.T) {
	c, rec := newTestCore(t, poolConfig(3, ladder.SelRR))
	m := newMsg(1, &RouteRequest{})
	c.route(t0, m)
	r := final(t, m)
	key := ResponseKey("resp_1")
	c.pinResponse(r.route.Ticket, key)
	c.finish(r.route.Ticket, Result{OK: true})
	if got, want := fmt.Sprint(rec.pins), fmt.Sprintf("[%s=%d,-1]", key, r.route.Ticket.Prefill); got != want {
		t.Fatalf("pins %s; want %s", got, want)
	}
	holder := r.route.Ticket.Prefill
	// Continuations look the key up and go to the holder only, whatever
	// the selector says, until it is down.
	for i := range 3 {
		id := uint64(10 + i)
		cont := newMsg(id, &RouteRequest{Pin: key, Passthrough: i == 2})
		c.route(t0, cont)
		noReply(t, cont)
		if rec.waits[id] != PinLookupTimeout {
			t.Fatalf("continuation %d waits %v for its pin; want %v (a miss is a 404, not a cache miss)", i, rec.waits[id], PinLookupTimeout)
		}
		c.sessionReply(t0, sessionReply{id: id | pinLookupIDBit, lookup: ladder.SessionLookup{Found: true, Pin: ladder.Pin{Prefill: holder, Decode: -1}}})
		r := final(t, cont)
		if r.route.Ticket.Prefill != holder {
			t.Fatalf("continuation %d on %d; want the holder %d", i, r.route.Ticket.Prefill, holder)
		}
		c.finish(r.route.Ticket, Result{OK: true})
	}
	c.probe(probeState{ep: holder, up: false})
	down := newMsg(20, &RouteRequest{Pin: key})
	c.route(t0, down)
	c.sessionReply(t0, sessionReply{id: 20 | pinLookupIDBit, lookup: ladder.SessionLookup{Found: true, Pin: ladder.Pin{Prefill: holder, Decode: -1}}})
	if r := final(t, down); r.route.Decision.Available() {
		t.Errorf("holder down: %s; want unavailable (another worker does not have the response)", r.route.Decision.String())
	}
	// A key the table does not hold routes as usual.
	miss := newMsg(21, &RouteRequest{Pin: ResponseKey("resp_unknown")})
	c.route(t0, miss)
	c.sessionReply(t0, sessionReply{id: 21 | pinLookupIDBit})
	if r := final(t, miss); !r.route.Decision.Available() {
		t.Errorf("unknown response: %s; want an ordinary decision", r.route.Decision.String())
	}
}
