package lifecycle

import (
	"time"

	"github.com/llbproject/llb/replica"
	"github.com/llbproject/llb/tenant"
)

// Cluster mode: the replicas share the API keys' and tenants' limit
// buckets (tenant.Gate). Every usageInterval each replica sends its
// buckets' totals to every peer and sets the gate's replica count from the
// membership; a peer's report debits what it took since its previous one.
// The age of what a replica knows of its peers' consumption is one
// interval plus the delivery; tenant.Gate states the bound this gives.

// usageInterval is how often a replica reports its bucket totals.
const usageInterval = 100 * time.Millisecond

// shareUsage links the gate to the member until stop closes.
func shareUsage(m *replica.Member, g *tenant.Gate, stop <-chan struct{}) {
	t := time.NewTicker(usageInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		g.SetReplicas(m.Replicas())
		us := g.Usage()
		if len(us) == 0 {
			continue
		}
		out := make([]replica.BucketUsage, len(us))
		for i, u := range us {
			out[i] = replica.BucketUsage{Bucket: u.Bucket, Total: u.Total}
		}
		m.SendUsage(out)
	}
}

// peerUsage applies a peer's bucket totals (replica.Config.OnUsage).
func peerUsage(g *tenant.Gate) func(string, []replica.BucketUsage) {
	return func(from string, us []replica.BucketUsage) {
		in := make([]tenant.Usage, len(us))
		for i, u := range us {
			in[i] = tenant.Usage{Bucket: u.Bucket, Total: u.Total}
		}
		g.ApplyPeers(from, in, time.Now())
	}
}
