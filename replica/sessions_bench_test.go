package replica

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/llbproject/llb/internal/etcdtest"
	"github.com/llbproject/llb/ladder"
)

// BenchmarkSessionLookup measures one session lookup from member a, side by
// side: the owner is a itself (PID cached), the owner is b over loopback
// TCP (PID cached), and the owner is b with the PID resolved afresh every
// time (protoactor's identity lookup, then the request). It reports p50
// and p99 per lookup besides ns/op.
//
//	go test -run '^$' -bench SessionLookup -benchtime 20000x ./replica/
func BenchmarkSessionLookup(b *testing.B) {
	e := etcdtest.Start(b, etcdtest.Options{})
	ma := startTestMember(b, testConfig(b, e.Endpoints()))
	mb := startTestMember(b, testConfig(b, e.Endpoints()))
	waitUntil(b, "both members in both views", 5*time.Second, func() bool {
		return len(ma.Status().Members) == 2 && len(mb.Status().Members) == 2
	})
	spec := SessionSpec{Service: "10.0.0.1:2020/tcp", Shards: 16, TTL: time.Hour, MaxEntries: 1600}
	// A key whose shard a owns, and one whose shard b owns.
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
	for _, k := range []string{localKey, remoteKey} {
		ma.Sessions.Pin(spec, k, ladder.Pin{Prefill: 1, Decode: -1})
		waitUntil(b, "pin of "+k, 5*time.Second, func() bool {
			ans, err := ma.Sessions.Lookup(context.Background(), spec, k)
			return err == nil && ans.Found
		})
	}
	cases := []struct {
		name   string
		key    string
		forget bool
		local  bool
	}{
		{name: "owner=local/pid=cached", key: localKey, local: true},
		{name: "owner=remote/pid=cached", key: remoteKey},
		{name: "owner=remote/pid=resolved", key: remoteKey, forget: true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			lat := make([]time.Duration, 0, b.N)
			misses := 0
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if c.forget {
					ma.Sessions.topologyChanged()
				}
				t0 := time.Now()
				ans, err := ma.Sessions.lookupWithin(ctx, spec, c.key, 100*time.Millisecond)
				lat = append(lat, time.Since(t0))
				if err != nil {
					misses++ // a lookup past 100 ms: counted, reported
					continue
				}
				if !ans.Found || ans.Local != c.local {
					b.Fatalf("lookup: %+v; want found, local=%v", ans, c.local)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds())/1e3, "p99-µs")
			b.ReportMetric(float64(misses), "timeouts")
		})
	}
}
