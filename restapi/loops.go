package restapi

import (
	"net"
	"net/netip"

	"github.com/llbproject/llb/catalog"
	"github.com/llbproject/llb/rule"
)

// Loop refusal: an endpoint that is an address llb itself listens on — the
// rule's own VIP:port, another mode:4 rule's, the REST API's — would send
// every request (and every health probe) back into llb, which forwards it
// again until the file descriptors run out. Such a rule is refused at
// validation (400); the data plane also detects loops at run time with a
// hop header, for loops this check cannot see (another host, a NAT).

// listenerSet is every address llb accepts connections on, with its owner.
type listenerSet struct {
	exact map[netip.AddrPort]string // ip:port → owner
	any   map[uint16]string         // port of a listener on the unspecified address → owner
	local func(netip.Addr) bool     // this host's own addresses
}

func newListenerSet(local func(netip.Addr) bool) *listenerSet {
	return &listenerSet{exact: map[netip.AddrPort]string{}, any: map[uint16]string{}, local: local}
}

func (l *listenerSet) add(a netip.AddrPort, owner string) {
	a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
	if a.Addr().IsUnspecified() {
		if _, ok := l.any[a.Port()]; !ok {
			l.any[a.Port()] = owner
		}
		return
	}
	if _, ok := l.exact[a]; !ok {
		l.exact[a] = owner
	}
}

// owner returns who listens where a connection to ep lands, if anyone. A
// connection to the unspecified address lands on this host's loopback:
// 0.0.0.0 on 127.0.0.1, and :: on ::1 or 127.0.0.1 (Go dials it as either).
func (l *listenerSet) owner(ep netip.AddrPort) (string, bool) {
	ep = netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port())
	if o, ok := l.exact[ep]; ok {
		return o, true
	}
	if ep.Addr().IsUnspecified() {
		los := []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1})}
		if ep.Addr().Is6() {
			los = append(los, netip.IPv6Loopback())
		}
		for _, lo := range los {
			if o, ok := l.exact[netip.AddrPortFrom(lo, ep.Port())]; ok {
				return o, true
			}
		}
	}
	if o, ok := l.any[ep.Port()]; ok && (ep.Addr().IsUnspecified() || ep.Addr().IsLoopback() || l.local(ep.Addr())) {
		return o, true
	}
	return "", false
}

// listens reports whether llb's data plane binds r's VIP:port.
func listens(r *rule.Rule) bool {
	sa := r.Entry.ServiceArguments
	return sa.Mode == rule.ModeFullProxy && sa.Protocol == rule.ProtoTCP
}

// checkLoops refuses changed rules with an endpoint that is an address llb
// listens on, and a change whose new VIP:port is an endpoint of a stored
// rule (400, naming the field and the owner).
func (s *Server) checkLoops(next *catalog.Rules, changes []catalog.Change) error {
	ls := newListenerSet(s.cfg.LocalAddr)
	for _, a := range s.cfg.SelfAddrs {
		ls.add(a, "llbd's own listener "+a.String())
	}
	changed := map[rule.RuleKey]bool{}
	for _, ch := range changes {
		if ch.New != nil {
			changed[ch.Key] = true
		}
	}
	for _, rec := range next.All() {
		if listens(&rec.Rule) {
			ls.add(netip.AddrPortFrom(rec.Rule.Key.VIP, rec.Rule.Key.Port), "the listener of rule "+rec.Rule.Key.String())
		}
	}
	var ps []rule.Problem
	for _, rec := range next.All() {
		r := &rec.Rule
		for i, ep := range r.Effective.Endpoints {
			owner, loops := ls.owner(ep.Addr)
			if !loops {
				continue
			}
			if changed[r.Key] {
				ps = append(ps, rule.SemanticProblem(rule.EPField(i, "endpointIP"),
					"malformed-lbep error: endpoint %s reaches %s: every request and probe would loop through llb", ep.Addr, owner))
				continue
			}
			// A stored rule's endpoint that a changed rule now listens on.
			ps = append(ps, rule.SemanticProblem(rule.SAField("externalIP"),
				"malformed-service error: %s is an endpoint of rule %s: its requests would loop through this rule", ep.Addr, r.Key))
		}
	}
	return rule.ProblemsErr(ps)
}

// HostAddrs returns this host's interface addresses, for Config.LocalAddr.
func HostAddrs() func(netip.Addr) bool {
	set := map[netip.Addr]bool{}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil {
				set[p.Addr().Unmap()] = true
			}
		}
	}
	return func(a netip.Addr) bool { return set[a.Unmap()] }
}
