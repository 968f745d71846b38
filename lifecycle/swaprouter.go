package lifecycle

import (
	"context"
	"sync"

	"github.com/llbproject/llb/actors"
)

// swapRouter is the actors.Router a rule's handler holds: the rule's
// current service. During a replace, routing waits until the successor is
// up; a retired router forwards to its successor when the endpoint lists
// are index-compatible, and answers ErrStopped otherwise (its handler's
// endpoint indexes would not match the successor's decisions). Only Route
// passes through it: a ticket reports to the service that issued it.
type swapRouter struct {
	mu   sync.RWMutex
	svc  *actors.Service
	held chan struct{} // closed once svc is set (nil: set from the start)
	next *swapRouter   // successor when retired and compatible
	gone bool          // retired and incompatible
}

func (s *swapRouter) set(svc *actors.Service) {
	s.mu.Lock()
	s.svc = svc
	s.mu.Unlock()
	if s.held != nil {
		close(s.held)
	}
}

func (s *swapRouter) retire(next *swapRouter, compatible bool) {
	s.mu.Lock()
	if compatible {
		s.next = next
	} else {
		s.gone = true
	}
	s.mu.Unlock()
}

func (s *swapRouter) current(ctx context.Context) (*actors.Service, error) {
	for {
		s.mu.RLock()
		svc, next, gone, held := s.svc, s.next, s.gone, s.held
		s.mu.RUnlock()
		switch {
		case next != nil:
			s = next
			continue
		case gone:
			return nil, actors.ErrStopped
		}
		if held != nil {
			select {
			case <-held:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			s.mu.RLock()
			svc = s.svc
			s.mu.RUnlock()
		}
		if svc == nil {
			return nil, actors.ErrStopped
		}
		return svc, nil
	}
}

// Route implements actors.Router.
func (s *swapRouter) Route(ctx context.Context, rr *actors.RouteRequest) (actors.Route, error) {
	svc, err := s.current(ctx)
	if err != nil {
		return actors.Route{}, err
	}
	return svc.Route(ctx, rr)
}
