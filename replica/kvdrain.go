package replica

import (
	"github.com/llbproject/llb/replica/replicapb"
)

// KVDrain is one body a replica drained from a TensorRT-LLM endpoint's POST
// /kv_cache_events. The drain is destructive, so in a cluster one replica —
// the owner of the endpoint's drain identity (DrainIdentity) — drains it and
// relays every body to its peers, whose mirrors apply it as their own.
type KVDrain struct {
	// Service is the rule key.
	Service string
	// Addr is the endpoint's ip:port.
	Addr string
	// Body is the JSON array the engine answered.
	Body []byte
}

// DrainIdentity names an endpoint's drain for ownership: the replica that
// owns it (Owner) drains the endpoint.
func DrainIdentity(service, addr string) string { return "kvdrain/" + service + "/" + addr }

// DrainsHere reports whether this replica drains the endpoint: it owns the
// drain identity, or the cluster cannot tell (no member yet: draining
// everywhere is safer than nowhere, the gaps show the overlap).
func (m *Member) DrainsHere(service, addr string) bool {
	owner := m.Owner(DrainIdentity(service, addr))
	return owner == "" || owner == m.cfg.Advertise
}

// RelayKVDrain sends a drained body to every peer; it returns how many
// were sent to.
func (m *Member) RelayKVDrain(d KVDrain) int {
	inc := m.current()
	if inc == nil {
		return 0
	}
	msg := &replicapb.PeerMessage{From: inc.id, Body: &replicapb.PeerMessage_KvDrain{KvDrain: &replicapb.KVDrain{
		Service: d.Service, Addr: d.Addr, Body: d.Body}}}
	return inc.sendPeers(msg)
}
