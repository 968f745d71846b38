package gateway

import (
	"sync"
	"sync/atomic"

	"github.com/llbproject/llb/ladder"
)

// EndpointWatch connects the router's "endpoint excluded" signal (a probe
// that failed, a breaker that opened) to the legs still waiting for that
// endpoint's first byte: they are cancelled and, since the client has
// nothing yet, sent again elsewhere. A frozen worker (SIGSTOP, a hung GPU)
// accepts connections and never answers; without this, a request routed
// to it before its probe failed would wait for the max stream duration.
// Legs whose response already reached the client are left alone (the
// stream's idle bound ends them), except a stream that migration follows
// (migrate.go): it is cut too, and goes on on another endpoint.
//
// A watched leg is a node in a per-endpoint list embedded in its exchange
// (no allocation, no map); a leg leaves the list when it commits to the
// client or fails. Safe for concurrent use. EndpointDown never blocks for
// long (the router actor calls it).
//
// It also keeps each endpoint's signs of life (liveness.go): the legs note
// the response bytes they read, and the endpoint's probe and dials read
// them.
type EndpointWatch struct {
	mu   [ladder.MaxEndpoints]sync.Mutex
	legs [ladder.MaxEndpoints]*watchedLeg // list heads, guarded by mu[ep]
	life [ladder.MaxEndpoints]lifeSigns
}

// NewEndpointWatch returns an empty watch.
func NewEndpointWatch() *EndpointWatch { return &EndpointWatch{} }

// Watched-leg states.
const (
	legWaiting   = iota // no byte went to the client yet
	legCommitted        // the response is going to the client
	legCancelled        // EndpointDown cancelled it first
	legStreaming        // a migratable stream is going to the client
)

// watchedLeg is an exchange's entry in the watch (one leg at a time).
type watchedLeg struct {
	prev, next *watchedLeg // guarded by the watch's mu[ep]
	x          *exchange
	ep         int
	state      atomic.Uint32
	listed     bool // in a list (owned by the exchange's goroutine)
}

// add watches x's leg to endpoint ep; remove it when the leg commits or
// ends.
func (w *EndpointWatch) add(n *watchedLeg, x *exchange, ep int) {
	if w == nil || ep < 0 || ep >= ladder.MaxEndpoints {
		return
	}
	n.x, n.ep = x, ep
	n.state.Store(legWaiting)
	w.mu[ep].Lock()
	n.prev, n.next = nil, w.legs[ep]
	if n.next != nil {
		n.next.prev = n
	}
	w.legs[ep] = n
	w.mu[ep].Unlock()
	n.listed = true
}

// remove takes n out of the watch (a no-op when it is not in it).
func (w *EndpointWatch) remove(n *watchedLeg) {
	if w == nil || !n.listed {
		return
	}
	ep := n.ep
	w.mu[ep].Lock()
	if n.prev != nil {
		n.prev.next = n.next
	} else {
		w.legs[ep] = n.next
	}
	if n.next != nil {
		n.next.prev = n.prev
	}
	n.prev, n.next = nil, nil
	w.mu[ep].Unlock()
	n.listed = false
}

// commit marks the leg's response as going to the client; false when the
// endpoint watch cancelled it first.
func (n *watchedLeg) commit() bool {
	return n.state.CompareAndSwap(legWaiting, legCommitted) || n.state.Load() == legCommitted
}

// stream marks the leg as a migratable stream going to the client; false
// when the endpoint watch cancelled it first.
func (n *watchedLeg) stream() bool {
	return n.state.CompareAndSwap(legWaiting, legStreaming) || n.state.Load() == legStreaming
}

// EndpointDown cancels every leg to ep that has not answered the client
// yet, and every migratable stream from it. Wire it to
// actors.ServiceConfig.OnEndpointDown.
func (w *EndpointWatch) EndpointDown(ep int) {
	if w == nil || ep < 0 || ep >= ladder.MaxEndpoints {
		return
	}
	w.mu[ep].Lock()
	defer w.mu[ep].Unlock()
	for n := w.legs[ep]; n != nil; n = n.next {
		if n.state.CompareAndSwap(legWaiting, legCancelled) || n.state.Load() == legStreaming {
			n.x.abortLeg(causeDown)
		}
	}
}
