package gateway

import (
	"context"
	"errors"
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
// stream's idle bound ends them).
//
// Safe for concurrent use. EndpointDown never blocks (the router actor
// calls it).
type EndpointWatch struct {
	mu   sync.Mutex
	legs [ladder.MaxEndpoints]map[*watchedLeg]struct{} // guarded by mu
}

// NewEndpointWatch returns an empty watch.
func NewEndpointWatch() *EndpointWatch { return &EndpointWatch{} }

// errEndpointDown is the cause of a leg cancelled by EndpointDown.
var errEndpointDown = errors.New("gateway: endpoint taken out of service before it answered")

// watchedLeg is one leg under watch.
type watchedLeg struct {
	cancel context.CancelCauseFunc
	// state: 0 waiting for the first byte, 1 committed to the client,
	// 2 cancelled because the endpoint went down.
	state atomic.Uint32
}

// commit marks the leg's response as going to the client; false when the
// endpoint watch cancelled it first. A nil leg always commits.
func (l *watchedLeg) commit() bool {
	return l == nil || l.state.CompareAndSwap(0, 1) || l.state.Load() == 1
}

// add watches a leg to endpoint ep; remove it when the leg ends.
func (w *EndpointWatch) add(ep int, cancel context.CancelCauseFunc) *watchedLeg {
	if w == nil || ep < 0 || ep >= ladder.MaxEndpoints {
		return nil
	}
	l := &watchedLeg{cancel: cancel}
	w.mu.Lock()
	if w.legs[ep] == nil {
		w.legs[ep] = make(map[*watchedLeg]struct{})
	}
	w.legs[ep][l] = struct{}{}
	w.mu.Unlock()
	return l
}

func (w *EndpointWatch) remove(ep int, l *watchedLeg) {
	if w == nil || l == nil {
		return
	}
	w.mu.Lock()
	delete(w.legs[ep], l)
	w.mu.Unlock()
}

// EndpointDown cancels every leg to ep that has not answered the client
// yet. Wire it to actors.ServiceConfig.OnEndpointDown.
func (w *EndpointWatch) EndpointDown(ep int) {
	if w == nil || ep < 0 || ep >= ladder.MaxEndpoints {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for l := range w.legs[ep] {
		if l.state.CompareAndSwap(0, 2) {
			l.cancel(errEndpointDown)
		}
	}
}
