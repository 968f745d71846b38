package lifecycle

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/internal/etcdconn"
	"github.com/llbproject/llb/internal/etcdtest"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/replica"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/rule/ruletest"
)

// BenchmarkDecisionRoundTrip measures one decision as the gateway sees it
// (Route: fan-out of Score to 8 prefill inventories with a 128-block chain
// and the Tier-0 session lookup, ladder.Decide, the reply; then Finish),
// side by side: a single node (the session shard is a local actor), and
// cluster mode with the session shard's owner on this replica and on
// another replica (two members in this process, loopback TCP, a real etcd).
// It reports p50 and p99 in µs, and the lookups that missed the decision
// deadline.
//
//	go test -run '^$' -bench DecisionRoundTrip -benchtime 20000x ./lifecycle/
func BenchmarkDecisionRoundTrip(b *testing.B) {
	e := etcdtest.Start(b, etcdtest.Options{})
	ma := startMember(b, e.Endpoints())
	mb := startMember(b, e.Endpoints())
	deadline := time.Now().Add(10 * time.Second)
	for len(ma.Status().Members) != 2 || len(mb.Status().Members) != 2 {
		if time.Now().After(deadline) {
			b.Fatal("members do not see each other")
		}
		time.Sleep(10 * time.Millisecond)
	}
	c := benchRule(8)
	spec := newClusterPort(ma, c).spec
	var localKey, remoteKey string
	for i := 0; localKey == "" || remoteKey == ""; i++ {
		k := fmt.Sprintf("conv-%d", i)
		switch ma.Owner(spec.Identity(k)) {
		case ma.Address():
			localKey = k
		case mb.Address():
			remoteKey = k
		}
	}
	cases := []struct {
		name    string
		cluster bool
		key     string
	}{
		{"single-node", false, localKey},
		{"cluster/owner=local", true, localKey},
		{"cluster/owner=remote", true, remoteKey},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			sys := actors.NewSystem(zerolog.Nop(), nil)
			defer sys.Shutdown()
			th, _ := inventory.NewTokenHasher(16)
			cfg := actors.NewServiceConfig(c, ladder.DefaultEnv())
			cfg.KV.Keys = th
			cfg.DecisionTimeout = 50 * time.Millisecond
			if tc.cluster {
				cfg.Peers = newClusterPort(ma, c)
			}
			svc, err := sys.Start(cfg, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer svc.Stop(context.Background())
			chain := make([]uint64, 128)
			for i := range chain {
				chain[i] = uint64(i)*7919 + 1
			}
			route := func(rr *actors.RouteRequest) (actors.Route, error) {
				rr.Req.SessionKey = tc.key
				rr.Req.KV.PromptBlocks = 128
				rr.Req.KV.Guard = 0
				rr.Req.Session = ladder.SessionLookup{}
				return svc.Route(context.Background(), rr)
			}
			rr := &actors.RouteRequest{Chain: chain}
			// Pin the session (and warm the owner's PID) before measuring.
			for i := 0; i < 50; i++ {
				rt, err := route(rr)
				if err != nil {
					b.Fatal(err)
				}
				svc.Finish(rt.Ticket, actors.Result{OK: true})
				time.Sleep(time.Millisecond)
			}
			h := hdrhistogram.New(1, int64(time.Second/time.Microsecond), 3)
			tier0 := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				rt, err := route(rr)
				h.RecordValue(int64(time.Since(start) / time.Microsecond))
				if err != nil || !rt.Decision.Available() {
					b.Fatalf("route: %v %s", err, rt.Decision.String())
				}
				if rt.Decision.Tier == ladder.Tier0 {
					tier0++
				}
				svc.Finish(rt.Ticket, actors.Result{OK: true})
			}
			b.StopTimer()
			b.ReportMetric(float64(h.ValueAtQuantile(50)), "p50-µs")
			b.ReportMetric(float64(h.ValueAtQuantile(99)), "p99-µs")
			b.ReportMetric(float64(tier0)/float64(b.N), "tier0-share")
		})
	}
}

// benchRule is a P/D rule on 10.0.0.1:2020 with n prefill endpoints (each
// with a KV feed, so each has an inventory actor) and one decode endpoint.
func benchRule(n int) *rule.Compiled {
	var eps []ruletest.Endpoint
	for i := 0; i < n; i++ {
		eps = append(eps, ruletest.Endpoint{Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(8100+i)), Role: 1})
	}
	eps = append(eps, ruletest.Endpoint{Addr: netip.MustParseAddrPort("127.0.0.1:8200"), Role: 2})
	return ruletest.Rule(ruletest.Options{VIP: netip.MustParseAddr("10.0.0.1"), PD: true,
		Extra: `"kvExactMode":1,"kvBlockSize":16`}, eps...)
}

func startMember(b *testing.B, eps []string) *replica.Member {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	m, err := replica.Start(replica.Config{ClusterName: "bench", Advertise: addr,
		Etcd: etcdconn.Config{Endpoints: eps}, Log: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(m.Stop)
	if err := m.WaitMember(10 * time.Second); err != nil {
		b.Fatal(err)
	}
	return m
}
