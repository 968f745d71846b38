package restapi

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/llbproject/llb/catalog"
)

// GET /netlox/v1/config/ai/cluster (an llb extension): the replica's view of
// the cluster it is part of — members, their state, owned session shards,
// gossip and load ages — and of the shared rule store. On a single node it
// answers {"enabled": false}.

// clusterPath is the cluster view's route.
const clusterPath = aiPath + "/cluster"

// ClusterViewer is an optional Runtime interface: a data plane that can run
// as one replica of a cluster reports its membership.
type ClusterViewer interface {
	// ClusterView returns the membership view; Enabled is false on a
	// single node. It must not block on the network.
	ClusterView() ClusterView
}

// ClusterView is the body of GET /config/ai/cluster.
type ClusterView struct {
	// Enabled is true in cluster mode (--cluster-name).
	Enabled bool `json:"enabled"`
	// Cluster is the cluster name; Advertise this replica's cluster
	// address; MemberID its current member id ("" while not a member).
	Cluster   string `json:"cluster,omitempty"`
	Advertise string `json:"advertise,omitempty"`
	MemberID  string `json:"memberId,omitempty"`
	// State is joining, member, rejoining or stopped; Since when it began.
	State string    `json:"state,omitempty"`
	Since time.Time `json:"since,omitzero"`
	// Incarnation counts memberships since start; Rejoins how many broke
	// (a fresh member id each time) and LastRejoinReason why the last did.
	Incarnation      int64  `json:"incarnation,omitempty"`
	Rejoins          int64  `json:"rejoins"`
	LastRejoinReason string `json:"lastRejoinReason,omitempty"`
	// Etcd is the membership's view of etcd.
	Etcd *ClusterEtcd `json:"etcd,omitempty"`
	// Members are the members this replica sees, itself included.
	Members []ClusterMember `json:"members,omitempty"`
	// OwnedShards are the session shards (grain identities) active here.
	OwnedShards []string `json:"ownedShards,omitempty"`
	// Sessions and Teach count Tier-0 lookups and Tier-1 teaching.
	Sessions *ClusterSessions `json:"sessions,omitempty"`
	Teach    *ClusterTeach    `json:"teach,omitempty"`
	// RuleStore is the shared rule store as this replica sees it.
	RuleStore *catalog.StoreView `json:"ruleStore,omitempty"`
}

// ClusterEtcd is etcd as the membership sees it.
type ClusterEtcd struct {
	OK    bool      `json:"ok"`
	Error string    `json:"error,omitempty"`
	Since time.Time `json:"since,omitzero"`
}

// ClusterMember is one member of the cluster.
type ClusterMember struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	Self    bool   `json:"self"`
	// GossipAgeMs is the time since this replica last heard the member's
	// gossip heartbeat; LoadAgeMs the age of its last published load; -1
	// when never (always -1 for this replica's own load).
	GossipAgeMs float64 `json:"gossipAgeMs"`
	LoadAgeMs   float64 `json:"loadAgeMs"`
	// OwnedShards counts the session shards of the rules running here
	// that the member owns (rendezvous hashing over the current members).
	OwnedShards int `json:"ownedShards"`
}

// ClusterSessions counts Tier-0 session traffic through the cluster.
type ClusterSessions struct {
	Lookups  int64 `json:"lookups"`
	Hits     int64 `json:"hits"`
	Misses   int64 `json:"misses"`
	Timeouts int64 `json:"timeouts"`
	// Local and Remote count lookups answered by an owner here / elsewhere.
	Local  int64 `json:"local"`
	Remote int64 `json:"remote"`
	// Dropped counts pins and evictions that could not be delivered.
	Dropped int64 `json:"dropped"`
}

// ClusterTeach counts Tier-1 teaching between replicas.
type ClusterTeach struct {
	Taught         int64 `json:"taught"`
	Sent           int64 `json:"sent"`
	Batches        int64 `json:"batches"`
	Received       int64 `json:"received"`
	DroppedTooLong int64 `json:"droppedTooLong"`
	DroppedBacklog int64 `json:"droppedBacklog"`
}

// getCluster answers GET /config/ai/cluster.
func (s *Server) getCluster(c echo.Context) error {
	var v ClusterView
	if cv, ok := s.cfg.Runtime.(ClusterViewer); ok {
		v = cv.ClusterView()
	}
	v.RuleStore = s.cat.StoreView()
	return c.JSON(http.StatusOK, v)
}
