package actors

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

// timeoutErr is a probe failure that only timed out.
type timeoutErr struct{}

func (timeoutErr) Error() string { return "probe timed out" }
func (timeoutErr) Timeout() bool { return true }

// An endpoint is slow while every failure since its last success timed
// out; a refusal in the streak makes it dead until it passes again. A sign
// of life brings back a slow endpoint only, and ends a timeout streak of
// an endpoint still up.
func TestProbeCore_SlowIsDownByTimeoutsAlone(t *testing.T) {
	refused := errors.New("connection refused")
	cfg := rule.Probe{Period: time.Second, Retries: 2, MaxBackoff: 10 * time.Second}
	tests := []struct {
		name     string
		results  []error
		wantUp   bool
		wantSlow bool
		life     bool // a sign of life after the results
		lifeUp   bool // up after it
	}{
		{"timeouts", []error{timeoutErr{}, timeoutErr{}}, false, true, true, true},
		{"one timeout stays up", []error{timeoutErr{}}, true, false, true, true},
		{"refused first", []error{refused}, false, false, true, false},
		{"timeout then refused", []error{timeoutErr{}, refused}, false, false, true, false},
		{"refused then timeouts", []error{nil, refused, timeoutErr{}, timeoutErr{}}, false, false, true, false},
		{"timeouts after a pass", []error{refused, nil, timeoutErr{}, timeoutErr{}}, false, true, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProbeCore(cfg)
			for _, err := range tt.results {
				p.observe(err)
			}
			if p.up != tt.wantUp || p.slow() != tt.wantSlow {
				t.Fatalf("up %v slow %v; want %v %v", p.up, p.slow(), tt.wantUp, tt.wantSlow)
			}
			if !tt.life {
				return
			}
			p.lifeSign()
			if p.up != tt.lifeUp {
				t.Fatalf("after a sign of life: up %v; want %v", p.up, tt.lifeUp)
			}
		})
	}
	p := newProbeCore(cfg)
	p.observe(timeoutErr{})
	p.lifeSign()
	if p.observe(timeoutErr{}); !p.up {
		t.Fatal("a sign of life between two timeouts did not end the streak")
	}
}

// With no endpoint up, a request goes to an endpoint down by timeouts
// alone (flag panic; the rule's law picks among them, a pass-through takes
// the least loaded), never to one that refused; the router
// logs entering and leaving panic once each and keeps the legs of a slow
// endpoint that nothing could replace.
func TestRouterCore_PanicRoutesToSlowEndpointsOnly(t *testing.T) {
	c, rec := newTestCore(t, poolConfig(3, ladder.SelRR))
	send := func(id uint64, rr *RouteRequest) ladder.Decision {
		t.Helper()
		m := newMsg(id, rr)
		c.route(t0, m)
		return final(t, m).route.Decision
	}
	c.probe(probeState{ep: 0, up: false})             // refused: dead
	c.probe(probeState{ep: 1, up: false, slow: true}) // slow; endpoint 2 is up
	if fmt.Sprint(rec.lost) != "[0 1]" {
		t.Fatalf("lost %v; want [0 1] (a slow endpoint's legs move while another is up)", rec.lost)
	}
	if d := send(1, &RouteRequest{}); d.Prefill != 2 || d.Flags.Has(ladder.FlagPanic) {
		t.Fatalf("one up: %s; want endpoint 2 without panic", d.String())
	}
	c.probe(probeState{ep: 2, up: false, slow: true})
	if fmt.Sprint(rec.lost) != "[0 1]" {
		t.Fatalf("lost %v; the last slow endpoint's legs were cancelled", rec.lost)
	}
	c.views[1].ActiveConns = 5
	for id := uint64(10); id < 14; id++ {
		if d := send(id, &RouteRequest{}); !d.Available() || d.Prefill == 0 || !d.Flags.Has(ladder.FlagPanic) {
			t.Fatalf("request %d: %s; want a slow endpoint (the rule's law picks), flag panic", id, d.String())
		}
	}
	if d := send(15, &RouteRequest{Passthrough: true}); !d.Available() || d.Prefill != 2 || !d.Flags.Has(ladder.FlagPanic) {
		t.Fatalf("pass-through: %s; want endpoint 2 (the least loaded slow one), flag panic", d.String())
	}
	if d := send(20, &RouteRequest{Avoid: 1 << 2}); d.Prefill != 1 || !d.Flags.Has(ladder.FlagPanic) {
		t.Fatalf("a retry avoiding 2: %s; want endpoint 1, flag panic", d.String())
	}
	if d := send(21, &RouteRequest{Avoid: 1<<1 | 1<<2}); d.Available() || d.Unavailable != ladder.ReasonNoHealthyBackend {
		t.Fatalf("a retry avoiding both slow endpoints: %s; want no_healthy_backend", d.String())
	}
	if fmt.Sprint(rec.panics) != "[true:110]" {
		t.Fatalf("panic log %v; want one entry naming endpoints 1 and 2", rec.panics)
	}
	c.probe(probeState{ep: 1, up: false}) // refused now: dead
	c.probe(probeState{ep: 2, up: false})
	if d := send(30, &RouteRequest{}); d.Available() || d.Unavailable != ladder.ReasonNoHealthyBackend {
		t.Fatalf("all dead: %s; want no_healthy_backend", d.String())
	}
	if fmt.Sprint(rec.panics) != "[true:110 false:0]" {
		t.Fatalf("panic log %v; want leaving once no slow endpoint is left", rec.panics)
	}
}
