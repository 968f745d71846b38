package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/restapi"
)

// clusterViewPath is llb's cluster view (an llb extension).
const clusterViewPath = "/netlox/v1/config/ai/cluster"

func (a *app) getClusterCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cluster",
		Short: "Show the replicas of this router and the shared rule store (GET " + clusterViewPath + ")",
		Long: `Show the cluster this llbd is a replica of, as it sees it: its member id and
state (joining, member, rejoining), etcd's health, every member with the age of
its last gossip heartbeat and of its last published load, the session shards
owned, and the shared rule store's revision. A single node (no --cluster-name)
says so.`,
		Example: `  llbctl get cluster
  llbctl get cluster -o json`,
		Args: usageArgs(cobra.NoArgs, "llbctl get cluster"),
		RunE: func(*cobra.Command, []string) error { return a.showCluster() },
	}
}

// showCluster prints GET /config/ai/cluster.
func (a *app) showCluster() error {
	body, err := a.get("get cluster", clusterViewPath, nil, errorOpts{
		noRoute: "this llbd does not serve " + clusterViewPath + ": it is older than llbctl",
	})
	if err != nil {
		return err
	}
	if a.opts.output == outputJSON {
		return writeJSON(a.stdout, body)
	}
	var v restapi.ClusterView
	if err := decode("get cluster", body, &v); err != nil {
		return err
	}
	if !v.Enabled {
		_, err := fmt.Fprintln(a.stdout, "single node: not part of a cluster (llbd runs without --cluster-name)")
		return err
	}
	etcd := "ok"
	if v.Etcd != nil && !v.Etcd.OK {
		etcd = "FAILING: " + sanitize(v.Etcd.Error)
	}
	lines := []string{
		fmt.Sprintf("cluster %s, this replica %s (%s), %s since %s",
			sanitize(v.Cluster), sanitize(v.Advertise), orDash(sanitize(v.MemberID)), sanitize(v.State), v.Since.UTC().Format(time.RFC3339)),
		fmt.Sprintf("etcd: %s; rejoins: %d%s", etcd, v.Rejoins, reasonSuffix(v.LastRejoinReason)),
	}
	if rs := v.RuleStore; rs != nil {
		state := "ok"
		if !rs.OK {
			state = "FAILING: " + sanitize(rs.Error)
		}
		synced := ""
		if !rs.Synced {
			synced = ", not read yet"
		}
		lines = append(lines, fmt.Sprintf("rule store: %s at revision %d%s (%s)", sanitize(rs.Where), rs.Revision, synced, state))
	}
	if s := v.Sessions; s != nil {
		lines = append(lines, fmt.Sprintf("session lookups: %d (%d hits, %d timeouts; %d answered here, %d by peers); shards owned here: %d",
			s.Lookups, s.Hits, s.Timeouts, s.Local, s.Remote, len(v.OwnedShards)))
	}
	if _, err := fmt.Fprintln(a.stdout, strings.Join(lines, "\n")); err != nil {
		return err
	}
	t := newTable("MEMBER", "ADDRESS", "SELF", "GOSSIP AGE", "LOAD AGE", "SHARDS")
	for _, m := range v.Members {
		self := ""
		if m.Self {
			self = "*"
		}
		t.add(sanitize(m.ID), sanitize(m.Address), self, ageCell(m.GossipAgeMs), ageCell(m.LoadAgeMs), strconv.Itoa(m.OwnedShards))
	}
	return t.render(a.stdout)
}

func reasonSuffix(r string) string {
	if r == "" {
		return ""
	}
	return " (last: " + sanitize(r) + ")"
}

// ageCell renders an age in milliseconds; -1 is "-".
func ageCell(ms float64) string {
	if ms < 0 {
		return "-"
	}
	return (time.Duration(ms * float64(time.Millisecond))).Round(time.Millisecond).String()
}
