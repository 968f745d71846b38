package actors

import (
	"github.com/llbproject/llb/ladder"
)

// Panic routing, as Envoy's panic threshold: when no endpoint a request
// may use is up and some of them are down by timeouts alone — their
// probes only timed out, no refusal, no reset, no wrong status, so they
// are slow rather than dead (probeCore.slow) — the decision is made among
// those anyway (flag panic) instead of answering 503 no_healthy_backend.
// A saturated engine answers its /health late but still serves its
// streams; HAProxy without health checks serves it, and so does llb.
// Endpoints that refused, broke a connection or answered wrongly stay
// excluded, as do breakers that are open and endpoints the controller
// disabled; a request whose dial to a panic endpoint is refused fails over
// (or fails) at once, as any other.
//
// The router logs entering panic (the first panic decision) and leaving it
// (the first decision that finds an endpoint up, or no slow endpoint left
// to panic to), and counts panic decisions (llb_panic_routing_total).

// panicReason reports an unavailable decision panic routing may replace.
func panicReason(r ladder.Reason) bool {
	return r == ladder.ReasonNoHealthyBackend || r == ladder.ReasonPDPoolUnavailable
}

// panicSet is the endpoints a panic decision may use: down by timeouts
// alone, outside mask (the request's exclusions), breaker not open, not
// disabled by the controller.
func (c *routerCore) panicSet(mask uint64) ladder.EndpointSet {
	var set ladder.EndpointSet
	for i := range c.views {
		v := &c.views[i]
		if !c.slow.Has(i) || !v.Down || v.BreakerOpen || v.Ctrl == ladder.CtrlDisabled || mask&(1<<uint(i)) != 0 {
			continue
		}
		set = set.With(i)
	}
	return set
}

// decidePanic runs fn again with the endpoints of set taken for up, when
// d found none available; it returns fn's decision flagged panic when that
// one is not unavailable too, and d otherwise.
func (c *routerCore) decidePanic(d ladder.Decision, set ladder.EndpointSet, req *ladder.Request, fn func(*ladder.Request) (ladder.Decision, error)) (ladder.Decision, bool) {
	if set == 0 || d.Available() || d.Admission != ladder.Admit || !panicReason(d.Unavailable) {
		return d, false
	}
	c.setDown(set, false)
	pd, err := fn(req)
	c.setDown(set, true)
	if err != nil || (pd.Admission == ladder.Admit && !pd.Available()) {
		return d, false
	}
	pd.Flags |= ladder.FlagPanic
	return pd, true
}

// setDown sets the Down view of every endpoint of set.
func (c *routerCore) setDown(set ladder.EndpointSet, down bool) {
	for i := range c.views {
		if set.Has(i) {
			c.views[i].Down = down
		}
	}
}

// leastLoaded is the endpoint of set with the fewest active connections
// (ties: lowest index); -1 for an empty set.
func (c *routerCore) leastLoaded(set ladder.EndpointSet) int {
	best := -1
	for i := range c.views {
		if !set.Has(i) {
			continue
		}
		if best < 0 || c.views[i].ActiveConns+c.peer.load[i] < c.views[best].ActiveConns+c.peer.load[best] {
			best = i
		}
	}
	return best
}

// notePanic records whether the last decision that found somewhere to go
// was a panic one; the router logs the changes and counts panic decisions.
func (c *routerCore) notePanic(on bool) {
	if on {
		c.m.panicRouted()
	}
	if on == c.panicking {
		return
	}
	c.panicking = on
	c.ports.panicChanged(on, c.slowDown())
}

// slowDown is the endpoints down by timeouts alone.
func (c *routerCore) slowDown() ladder.EndpointSet {
	var set ladder.EndpointSet
	for i := range c.views {
		if c.slow.Has(i) && c.views[i].Down {
			set = set.With(i)
		}
	}
	return set
}

// othersUp reports whether an endpoint other than ep could take requests
// (not down, breaker not open, not disabled).
func (c *routerCore) othersUp(ep int) bool {
	for i := range c.views {
		v := &c.views[i]
		if i != ep && !v.Down && !v.BreakerOpen && v.Ctrl != ladder.CtrlDisabled && !c.peer.excl.Has(i) {
			return true
		}
	}
	return false
}
