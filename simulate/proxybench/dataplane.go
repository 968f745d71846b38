package proxybench

import (
	"context"
	"fmt"
	"net/netip"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/gateway"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule/ruletest"
)

// The "data plane alone" path: llbd's gateway in this process, in front of
// the same nginx, with a router that answers at once (no actor round
// trip). Against the llbd row it shows what the data plane costs and what
// the routing runtime (actors) adds.

// instantRouter sends every request to endpoint 0 and ignores what its
// tickets report.
type instantRouter struct{ next atomic.Uint64 }

// Route implements actors.Router.
func (r *instantRouter) Route(context.Context, *actors.RouteRequest) (actors.Route, error) {
	d := ladder.Decision{Prefill: 0, Decode: -1, Tier: ladder.TierSelector, ParkOn: -1}
	return actors.Route{Decision: d, Ticket: actors.NewTicket(r, r.next.Add(1), 0, -1)}, nil
}

// FirstByte implements actors.Ledger.
func (*instantRouter) FirstByte(actors.Ticket) {}

// Pin implements actors.Ledger.
func (*instantRouter) Pin(actors.Ticket, string) {}

// Report implements actors.Ledger.
func (*instantRouter) Report(actors.Outcome) {}

// Conclude implements actors.Ledger.
func (*instantRouter) Conclude(actors.Outcome, actors.Result) {}

// Finish implements actors.Ledger.
func (*instantRouter) Finish(actors.Ticket, actors.Result) {}

// startDataPlane serves a single-pool rule on vip to endpoint backend.
func startDataPlane(vip, backend string) (*gateway.Listener, error) {
	va, err := netip.ParseAddrPort(vip)
	if err != nil {
		return nil, err
	}
	ba, err := netip.ParseAddrPort(backend)
	if err != nil {
		return nil, err
	}
	c := ruletest.Rule(ruletest.Options{VIP: va.Addr(), Port: va.Port()}, ruletest.Endpoint{Addr: ba})
	h, err := gateway.NewHandler(c, gateway.Options{}, gateway.Deps{Router: &instantRouter{}})
	if err != nil {
		return nil, fmt.Errorf("data plane: %w: %w", ErrTool, err)
	}
	l := gateway.NewListener(h)
	if err := l.Start(); err != nil {
		return nil, fmt.Errorf("data plane: %w: %w", ErrTool, err)
	}
	return l, nil
}

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
