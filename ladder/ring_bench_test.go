package ladder

import (
	"fmt"
	"testing"
	"time"
)

func BenchmarkCHWBLPick(b *testing.B) {
	now := time.Unix(0, 0)
	for _, n := range []int{8, 32} {
		for _, weighted := range []bool{false, true} {
			sel, name := SelCHWBL, "chwbl"
			if weighted {
				sel, name = SelWeightedCHWBL, "wchwbl"
			}
			b.Run(fmt.Sprintf("%s/endpoints=%d", name, n), func(b *testing.B) {
				eps := make([]EndpointSpec, n)
				for i := range eps {
					eps[i] = EndpointSpec{Addr: fmt.Sprintf("10.3.0.%d:8000", i), Weight: uint8(1 + i%4)}
				}
				r, err := NewRouter(ServiceSpec{Selector: sel}, eps, DefaultEnv(), RouterConfig{})
				if err != nil {
					b.Fatal(err)
				}
				views := make([]EndpointView, n)
				for i := range views {
					views[i].ActiveConns = uint32(i % 5)
				}
				snap := &Snapshot{Endpoints: views}
				req := &Request{HasPrefixHash: true}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					req.PrefixHash = uint64(i) * 0x9e3779b97f4a7c15
					r.Decide(now, req, snap)
				}
			})
		}
	}
}
