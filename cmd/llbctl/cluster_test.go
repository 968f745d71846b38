package main

import (
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/catalog"
	"github.com/llbproject/llb/restapi"
	"github.com/llbproject/llb/rulestore"
)

// clusterRuntime is a data plane stand-in that reports a fixed membership.
type clusterRuntime struct {
	*restapi.NoDataPlane
	view restapi.ClusterView
}

func (c clusterRuntime) ClusterView() restapi.ClusterView { return c.view }

func TestE2E_GetClusterOnASingleNode(t *testing.T) {
	hs, _ := startServer(t)
	if out := mustRun(t, hs.URL, "get", "cluster"); !strings.Contains(out, "single node: not part of a cluster") {
		t.Fatalf("get cluster: %q; want the single-node line", out)
	}
}

func TestE2E_GetClusterShowsMembersAndTheRuleStore(t *testing.T) {
	since := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rt := clusterRuntime{NoDataPlane: restapi.NewNoDataPlane(), view: restapi.ClusterView{
		Enabled: true, Cluster: "prod", Advertise: "10.0.0.1:7946", MemberID: "m-a", State: "member", Since: since,
		Incarnation: 2, Rejoins: 1, LastRejoinReason: "etcd: lease expired",
		Etcd: &restapi.ClusterEtcd{OK: true},
		Members: []restapi.ClusterMember{
			{ID: "m-a", Address: "10.0.0.1:7946", Self: true, GossipAgeMs: 12.5, LoadAgeMs: -1, OwnedShards: 6},
			{ID: "m-b", Address: "10.0.0.2:7946", GossipAgeMs: 80, LoadAgeMs: 140.2, OwnedShards: 0},
		},
		OwnedShards: []string{"tcp:10.0.0.100:2020#ab/1"},
		Sessions:    &restapi.ClusterSessions{Lookups: 10, Hits: 7, Timeouts: 1, Local: 4, Remote: 6},
	}}
	hs, _ := startServer(t, func(c *restapi.Config) {
		c.Runtime = rt
		c.Shared = &catalog.SharedConfig{Rules: rulestore.NewMemory(), Where: "etcd at http://10.0.0.9:2379"}
	})
	out := mustRun(t, hs.URL, "get", "cluster")
	for _, want := range []string{
		"cluster prod, this replica 10.0.0.1:7946 (m-a), member since 2026-12-01T12:00:00Z",
		"etcd: ok; rejoins: 1 (last: etcd: lease expired)",
		"rule store: etcd at http://10.0.0.9:2379 at revision",
		"session lookups: 10 (7 hits, 1 timeouts; 4 answered here, 6 by peers); shards owned here: 1",
		"| m-a    | 10.0.0.1:7946 | *    | 13ms       | -        | 6      |",
		"| m-b    | 10.0.0.2:7946 |      | 80ms       | 140ms    | 0      |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("get cluster:\n%s\nwant %q", out, want)
		}
	}
	if js := mustRun(t, hs.URL, "-o", "json", "get", "cluster"); !strings.Contains(js, `"memberId": "m-a"`) || !strings.Contains(js, `"ruleStore": {`) {
		t.Errorf("-o json: %s; want llbd's document", js)
	}
}
