package replica

import (
	"slices"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
)

// Status is the cluster view of GET /netlox/v1/config/ai/cluster and
// `llbctl get cluster`.
type Status struct {
	Cluster   string `json:"cluster"`
	Advertise string `json:"advertise"`
	// MemberID is the current member id ("" while not a member).
	MemberID string `json:"memberId"`
	// State is joining, member, rejoining or stopped; Since when it began.
	State State     `json:"state"`
	Since time.Time `json:"since"`
	// Incarnation counts memberships since start; Rejoins how many broke,
	// LastRejoinReason why the last one did.
	Incarnation      int64  `json:"incarnation"`
	Rejoins          int64  `json:"rejoins"`
	LastRejoinReason string `json:"lastRejoinReason,omitempty"`
	// Etcd is the membership's view of etcd.
	Etcd EtcdStatus `json:"etcd"`
	// Members are the current members (this one included).
	Members []MemberStatus `json:"members"`
	// OwnedShards are the session-shard identities active here.
	OwnedShards []string      `json:"ownedShards"`
	Sessions    SessionStats  `json:"sessions"`
	Teach       TeachStats    `json:"teach"`
	LoadPublish int64         `json:"loadPublished"`
	TopologyAge time.Duration `json:"topologyAgeNs"`
}

// EtcdStatus is etcd as the membership sees it.
type EtcdStatus struct {
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
	Since time.Time `json:"since,omitzero"`
}

// MemberStatus is one member.
type MemberStatus struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Self    bool   `json:"self"`
	// GossipAge is the time since this replica last heard the member's
	// gossip heartbeat (-1: never).
	GossipAge time.Duration `json:"gossipAgeNs"`
	// LoadAge is the age of the member's last load values (-1: none).
	LoadAge time.Duration `json:"loadAgeNs"`
	// OwnedShards counts the session shards the member owns among the
	// shards of the tables in use here and those active here (rendezvous
	// over the current members; see Member.Owner).
	OwnedShards int `json:"ownedShards"`
}

// Status returns the current view. It asks the local gossip actor for
// heartbeat ages (a local round trip), nothing remote.
func (m *Member) Status() Status {
	m.mu.Lock()
	st := Status{
		Cluster: m.cfg.ClusterName, Advertise: m.cfg.Advertise, State: m.state, Since: m.since,
		Incarnation: m.incarnations, Rejoins: m.rejoins, LastRejoinReason: m.lastReason,
		Etcd: EtcdStatus{OK: m.etcdErr == nil, Since: m.etcdSince},
	}
	if m.etcdErr != nil {
		st.Etcd.Error = m.etcdErr.Error()
	}
	m.mu.Unlock()
	st.Sessions = m.Sessions.Stats()
	st.Teach = m.Teacher.Stats()
	st.LoadPublish = m.Load.published.Load()
	st.Members = []MemberStatus{}
	st.OwnedShards = []string{}
	inc := m.current()
	if inc == nil {
		return st
	}
	st.MemberID = inc.id
	inc.activations.Range(func(k, _ any) bool {
		st.OwnedShards = append(st.OwnedShards, k.(string))
		return true
	})
	slices.Sort(st.OwnedShards)
	now := time.Now()
	hb := map[string]int64{}
	if s, err := inc.cluster.Gossip.GetState(cluster.HeartbeatKey); err == nil {
		for id, kv := range s {
			hb[id] = kv.LocalTimestampUnixMilliseconds
		}
	}
	loads := map[string]*PeerLoad{}
	for _, p := range m.Load.Peers() {
		loads[p.Member] = p
	}
	t := inc.topo.Load()
	if t != nil {
		st.TopologyAge = now.Sub(t.at)
	}
	// Shards by owner: those active here and every shard of the tables in
	// use (prefetched), placed by rendezvous over the current members.
	owned := map[string]int{}
	for _, id := range m.Sessions.knownShards(st.OwnedShards) {
		owned[t.ownerAddress(id)]++
	}
	for _, mb := range inc.memberList() {
		ms := MemberStatus{ID: mb.Id, Address: mb.Address(), Self: mb.Id == inc.id, GossipAge: -1, LoadAge: -1,
			OwnedShards: owned[mb.Address()]}
		if ts, ok := hb[mb.Id]; ok && ts > 0 {
			ms.GossipAge = now.Sub(time.UnixMilli(ts))
		}
		if p, ok := loads[mb.Id]; ok {
			ms.LoadAge = p.Age(now)
		}
		st.Members = append(st.Members, ms)
	}
	return st
}

// Owner returns the address of identity's owner in the current topology
// ("" when not a member).
func (m *Member) Owner(identity string) string {
	inc := m.current()
	if inc == nil {
		return ""
	}
	return inc.topo.Load().ownerAddress(identity)
}

// Address returns this replica's cluster address.
func (m *Member) Address() string { return m.cfg.Advertise }

// LocalShards returns the session shards active here whose identity starts
// with prefix (all when empty).
func (m *Member) LocalShards(prefix string) map[string]string {
	out := map[string]string{}
	if inc := m.current(); inc != nil {
		inc.activations.Range(func(k, v any) bool {
			if strings.HasPrefix(k.(string), prefix) {
				out[k.(string)] = v.(string)
			}
			return true
		})
	}
	return out
}
