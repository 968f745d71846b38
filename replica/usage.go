package replica

import (
	"github.com/llbproject/llb/replica/replicapb"
)

// BucketUsage is what this replica took from one shared limit bucket (an
// API key's or a tenant's rate or tokens, tenant.Usage) since it started.
type BucketUsage struct {
	Bucket string
	Total  uint64
}

// SendUsage sends this replica's bucket totals to every peer at once; it
// returns how many peers it was sent to. The caller sends them every
// gossip interval: totals are cumulative, so a lost message costs only
// delay.
func (m *Member) SendUsage(us []BucketUsage) int {
	inc := m.current()
	if inc == nil || len(us) == 0 {
		return 0
	}
	b := make([]*replicapb.BucketUsage, len(us))
	for i, u := range us {
		b[i] = &replicapb.BucketUsage{Bucket: u.Bucket, Total: u.Total}
	}
	return inc.sendPeers(&replicapb.PeerMessage{From: inc.id, Body: &replicapb.PeerMessage_Usage{Usage: &replicapb.TenantUsage{Buckets: b}}})
}

// Replicas is how many replicas the current membership has (this one
// included; 1 while it is not a member).
func (m *Member) Replicas() int {
	inc := m.current()
	if inc == nil {
		return 1
	}
	return max(len(inc.memberList()), 1)
}

// receivedUsage hands a peer's bucket totals to Config.OnUsage.
func (m *Member) receivedUsage(from string, u *replicapb.TenantUsage) {
	f := m.cfg.OnUsage
	if f == nil || u == nil {
		return
	}
	us := make([]BucketUsage, len(u.Buckets))
	for i, b := range u.Buckets {
		us[i] = BucketUsage{Bucket: b.Bucket, Total: b.Total}
	}
	f(from, us)
}
