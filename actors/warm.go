package actors

import (
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

// Warm is the state a replaced service hands to its successor (same rule
// key): the per-endpoint mirrors and the Tier-0 session table. A nil *Warm
// is valid and means "start cold".
//
// What is reused: a mirror when the endpoint keeps its index, address and
// feed and the rule keeps its chain hasher (the same inventory.ChainHasher
// value; the runtime reuses it while the hash settings are unchanged); the
// session table when its sizing and TTL are unchanged, minus every pin that
// names an endpoint index whose address changed or disappeared; and the
// external controller's instructions for endpoints that keep their index
// and address. Everything else is released by Start.
type Warm struct {
	keys     inventory.ChainHasher
	addrs    []string
	feeds    [][]rule.Feed
	mirrors  [][]*inventory.Mirror
	sessions *ladder.SessionTable
	sessCfg  ladder.SessionConfig
	ctrl     []ctrlState
}

// takeCtrl returns the controller record for cfg's endpoints: the warm
// instruction of every endpoint that keeps its index and address.
func (w *Warm) takeCtrl(cfg *ServiceConfig) []ctrlState {
	out := make([]ctrlState, len(cfg.Rule.Endpoints))
	if w == nil {
		return out
	}
	for i := range out {
		if i < len(w.ctrl) && i < len(w.addrs) && w.addrs[i] == endpointAddr(&cfg.Rule.Endpoints[i]) {
			out[i] = w.ctrl[i]
		}
	}
	return out
}

func endpointAddr(ep *rule.CompiledEndpoint) string { return ep.Addr.String() }

// takeMirror returns the warm mirror for endpoint i's feed fc, or nil.
func (w *Warm) takeMirror(i int, ep *rule.CompiledEndpoint, fc rule.Feed, keys inventory.ChainHasher) *inventory.Mirror {
	if w == nil || keys == nil || w.keys != keys || i >= len(w.addrs) || w.addrs[i] != endpointAddr(ep) {
		return nil
	}
	for r, old := range w.feeds[i] {
		if old == fc && r < len(w.mirrors[i]) && w.mirrors[i][r] != nil {
			m := w.mirrors[i][r]
			w.mirrors[i][r] = nil
			return m
		}
	}
	return nil
}

// takeSessions returns the warm session table adjusted to cfg's endpoints,
// or a new table.
func (w *Warm) takeSessions(cfg *ServiceConfig) *ladder.SessionTable {
	if w == nil || w.sessions == nil || w.sessCfg != cfg.sessionConfig() {
		return ladder.NewSessionTable(cfg.sessionConfig())
	}
	t := w.sessions
	w.sessions = nil
	for i, addr := range w.addrs {
		if i < len(cfg.Rule.Endpoints) && endpointAddr(&cfg.Rule.Endpoints[i]) == addr {
			continue
		}
		for s := 0; s < t.NumShards(); s++ {
			t.Shard(s).EvictEndpoint(i)
		}
	}
	return t
}

// release closes every mirror nobody took.
func (w *Warm) release() {
	if w == nil {
		return
	}
	for _, ms := range w.mirrors {
		for i, m := range ms {
			if m != nil {
				m.Close()
				ms[i] = nil
			}
		}
	}
}
