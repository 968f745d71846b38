package lifecycle

import (
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/llbproject/llb/replica"
	"github.com/llbproject/llb/restapi"
)

// The cluster member as operators see it: GET /config/ai/cluster
// (restapi.ClusterViewer) and the llb_cluster_* series.

var _ restapi.ClusterViewer = (*DataPlane)(nil)

// ClusterView implements restapi.ClusterViewer.
func (d *DataPlane) ClusterView() restapi.ClusterView {
	if d.member == nil {
		return restapi.ClusterView{}
	}
	st := d.member.Status()
	v := restapi.ClusterView{
		Enabled: true, Cluster: st.Cluster, Advertise: st.Advertise, MemberID: st.MemberID,
		State: string(st.State), Since: st.Since, Incarnation: st.Incarnation, Rejoins: st.Rejoins,
		LastRejoinReason: st.LastRejoinReason,
		Etcd:             &restapi.ClusterEtcd{OK: st.Etcd.OK, Error: st.Etcd.Error, Since: st.Etcd.Since},
		Members:          make([]restapi.ClusterMember, 0, len(st.Members)),
		OwnedShards:      st.OwnedShards,
		Sessions: &restapi.ClusterSessions{Lookups: st.Sessions.Lookups, Hits: st.Sessions.Hits, Misses: st.Sessions.Misses,
			Timeouts: st.Sessions.Timeouts, Local: st.Sessions.Local, Remote: st.Sessions.Remote, Dropped: st.Sessions.Dropped},
		Teach: &restapi.ClusterTeach{Taught: st.Teach.Taught, Sent: st.Teach.Sent, Batches: st.Teach.Batches,
			Received: st.Teach.Received, DroppedTooLong: st.Teach.DroppedTooLong, DroppedBacklog: st.Teach.DroppedBacklog},
	}
	for _, mb := range st.Members {
		v.Members = append(v.Members, restapi.ClusterMember{ID: mb.ID, Address: mb.Address, Self: mb.Self,
			GossipAgeMs: ageMs(mb.GossipAge), LoadAgeMs: ageMs(mb.LoadAge), OwnedShards: mb.OwnedShards})
	}
	return v
}

// ageMs renders an age in milliseconds; a negative age (never) stays -1.
func ageMs(d time.Duration) float64 {
	if d < 0 {
		return -1
	}
	return float64(d.Microseconds()) / 1000
}

// Cluster metric names (docs/metrics.md).
const (
	mClusterUp          = "llb_cluster_up"
	mClusterMembers     = "llb_cluster_members"
	mClusterRejoins     = "llb_cluster_rejoins_total"
	mClusterEtcdUp      = "llb_cluster_etcd_up"
	mClusterShards      = "llb_cluster_owned_shards"
	mClusterLookups     = "llb_cluster_session_lookups_total"
	mClusterRemote      = "llb_cluster_session_remote_lookups_total"
	mClusterDropped     = "llb_cluster_session_dropped_total"
	mClusterTaught      = "llb_cluster_teach_sent_total"
	mClusterLearned     = "llb_cluster_teach_received_total"
	mClusterTeachDrops  = "llb_cluster_teach_dropped_total"
	mClusterPeerLoadAge = "llb_cluster_peer_load_age_seconds"
)

// clusterMetrics registers the member's series; each scrape reads one
// status snapshot (cached for half a second).
func (d *DataPlane) clusterMetrics(set *metrics.Set) {
	if set == nil || d.member == nil {
		return
	}
	var mu sync.Mutex
	var at time.Time
	var st replica.Status
	status := func() replica.Status {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) > 500*time.Millisecond {
			st, at = d.member.Status(), time.Now()
		}
		return st
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	set.NewGauge(mClusterUp, func() float64 { return b(status().State == replica.StateMember) })
	set.NewGauge(mClusterMembers, func() float64 { return float64(len(status().Members)) })
	set.NewGauge(mClusterRejoins, func() float64 { return float64(status().Rejoins) })
	set.NewGauge(mClusterEtcdUp, func() float64 { return b(status().Etcd.OK) })
	set.NewGauge(mClusterShards, func() float64 { return float64(len(status().OwnedShards)) })
	set.NewGauge(mClusterLookups+`{result="hit"}`, func() float64 { return float64(status().Sessions.Hits) })
	set.NewGauge(mClusterLookups+`{result="miss"}`, func() float64 {
		s := status().Sessions
		return float64(s.Misses - s.Timeouts)
	})
	set.NewGauge(mClusterLookups+`{result="timeout"}`, func() float64 { return float64(status().Sessions.Timeouts) })
	set.NewGauge(mClusterRemote, func() float64 { return float64(status().Sessions.Remote) })
	set.NewGauge(mClusterDropped, func() float64 { return float64(status().Sessions.Dropped) })
	set.NewGauge(mClusterTaught, func() float64 { return float64(status().Teach.Sent) })
	set.NewGauge(mClusterLearned, func() float64 { return float64(status().Teach.Received) })
	set.NewGauge(mClusterTeachDrops, func() float64 {
		t := status().Teach
		return float64(t.DroppedTooLong + t.DroppedBacklog)
	})
	set.NewGauge(mClusterPeerLoadAge, func() float64 {
		var worst time.Duration
		for _, m := range status().Members {
			if !m.Self {
				worst = max(worst, m.LoadAge)
			}
		}
		return worst.Seconds()
	})
}
