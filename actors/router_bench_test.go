package actors

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
)

// BenchmarkRouteRoundTrip measures one decision as the gateway sees it:
// Route (message to the router, fan-out of Score to every prefill
// inventory actor with a 128-block chain, session lookup, ladder.Decide,
// reply) plus Finish. It reports p50/p99 in µs besides ns/op.
func BenchmarkRouteRoundTrip(b *testing.B) {
	for _, n := range []int{8, 32} {
		b.Run(fmt.Sprintf("prefill=%d", n), func(b *testing.B) {
			sys := NewSystem(zerologNop(), nil)
			defer sys.Shutdown()
			hub := newFeedHub()
			th, _ := inventory.NewTokenHasher(16)
			cfg := *pdConfig(min(n, 31), 1, benchEnv())
			cfg.KV.Keys, cfg.KV.StartFeed = th, hub.start
			cfg.DecisionTimeout = 50 * time.Millisecond
			svc, err := sys.Start(cfg, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer svc.Stop(context.Background())
			prompt := tokens(128*16, 1)
			chain := th.AppendBlockKeys(nil, prompt, inventory.ExtraKeys{})
			// Every endpoint holds a different share of the prompt.
			for ep := 0; ep < min(n, 31); ep++ {
				k := (ep * 128) / n
				ev := inventory.Event{Kind: inventory.EventBlockStored, TokenIDs: prompt[:k*16], BlockSize: 16}
				for i := 0; i < k; i++ {
					ev.BlockHashes = append(ev.BlockHashes, uint64(ep)<<32|uint64(i))
				}
				hub.publishB(b, ep, &inventory.Batch{Events: []inventory.Event{ev}})
			}
			h := hdrhistogram.New(1, int64(time.Second/time.Microsecond), 3)
			ctx := context.Background()
			rr := &RouteRequest{Chain: chain}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				rr.Req.SessionKey = "bench"
				rr.Req.KV.PromptBlocks = 128
				rr.Req.KV.Guard = 0
				start := time.Now()
				rt, err := svc.Route(ctx, rr)
				h.RecordValue(int64(time.Since(start) / time.Microsecond))
				if err != nil || !rt.Decision.Available() {
					b.Fatalf("route: %v %s", err, rt.Decision.String())
				}
				svc.Finish(rt.Ticket, Result{OK: true})
			}
			b.StopTimer()
			b.ReportMetric(float64(h.ValueAtQuantile(50)), "p50-µs")
			b.ReportMetric(float64(h.ValueAtQuantile(99)), "p99-µs")
			st, _ := svc.Status(time.Second)
			if st.FanoutMissed > 0 {
				b.Logf("fan-out replies missed their deadline: %d", st.FanoutMissed)
			}
		})
	}
}

func (h *feedHub) publishB(b *testing.B, ep int, batch *inventory.Batch) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		h.mu.Lock()
		sink := h.sinks[ep]
		h.mu.Unlock()
		if sink != nil {
			sink(inventory.Update{Kind: inventory.UpdateBatch, Batch: batch})
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("feed %d never started", ep)
		}
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkShortRequest measures what the router costs a short request on
// a single-pool round-robin rule (llbsim proxybench's shape): Route, then
// Conclude, from conc request goroutines at once. Besides ns/op it reports
// the process's CPU per request (cpu-µs/op: the goroutine hand-offs and
// wake-ups count there, not in ns/op when cores sit idle) and p99 in µs.
func BenchmarkShortRequest(b *testing.B) {
	for _, conc := range []int{1, 32} {
		b.Run(fmt.Sprintf("goroutines=%d", conc), func(b *testing.B) {
			sys := NewSystem(zerologNop(), nil)
			defer sys.Shutdown()
			svc, err := sys.Start(*poolConfig(1, ladder.SelRR), nil)
			if err != nil {
				b.Fatal(err)
			}
			defer svc.Stop(context.Background())
			var mu sync.Mutex
			h := hdrhistogram.New(1, int64(time.Second/time.Microsecond), 3)
			b.ReportAllocs()
			b.SetParallelism(max(conc/runtime.GOMAXPROCS(0), 1))
			cpu := processCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				rr := &RouteRequest{}
				var lat []int64
				for pb.Next() {
					start := time.Now()
					rt, err := svc.Route(ctx, rr)
					if err != nil || !rt.Decision.Available() {
						b.Errorf("route: %v %s", err, rt.Decision.String())
						return
					}
					rt.Ticket.Conclude(Outcome{Leg: LegSingle, Status: 200}, Result{OK: true})
					lat = append(lat, int64(time.Since(start)/time.Microsecond))
				}
				mu.Lock()
				for _, v := range lat {
					h.RecordValue(v)
				}
				mu.Unlock()
			})
			b.StopTimer()
			b.ReportMetric(float64(processCPU()-cpu)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64(h.ValueAtQuantile(99)), "p99-µs")
		})
	}
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
