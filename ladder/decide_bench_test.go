package ladder

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// benchPD builds a P/D rule with n endpoints (n−2 prefill, 2 decode),
// cache-aware with a trie that holds a short shared head (so Tier 1 walks
// the trie and then falls through on the match rate), KV-exact on, spill
// relief and cold seeding active, and a request with a 128-block chain and
// an 8 KiB prompt. Every tier down to 1.5 runs on each decision.
func benchPD(b testing.TB, n int) (*Router, *Request, *Snapshot) {
	eps := make([]EndpointSpec, n)
	for i := range eps {
		eps[i] = EndpointSpec{Addr: fmt.Sprintf("10.1.0.%d:8000", i), Role: RolePrefill, Weight: 1}
	}
	eps[n-1].Role, eps[n-2].Role = RoleDecode, RoleDecode
	svc := ServiceSpec{Name: "bench", PDDisagg: true, CacheAware: true, KVExactMode: KVPrefill,
		CacheThresholdPct: 20, BalanceAbsThreshold: 64, KVBlockSize: 16}
	env := DefaultEnv()
	env.SpillRelief = TriOn
	r, err := NewRouter(svc, eps, env, RouterConfig{})
	if err != nil {
		b.Fatal(err)
	}
	prompt := bytes.Repeat([]byte("tok "), 128*16) // 8 KiB: 128 blocks × 16 tokens × 4 bytes
	r.Learn(prompt[:512], 0)
	rng := rand.New(rand.NewPCG(7, 7))
	views := make([]EndpointView, n)
	for i := range views {
		views[i] = EndpointView{
			ActiveConns:      uint32(rng.IntN(8)),
			QueuedRequests:   uint32(rng.IntN(3)),
			KVCapacityBlocks: uint32(2000 + rng.IntN(2000)),
			InventoryBlocks:  uint32(1000 + rng.IntN(1000)),
			Overlap:          uint32(rng.IntN(129)),
		}
	}
	req := &Request{
		SessionKey: "conversation-123",
		Prompt:     prompt,
		KV:         KVInput{PromptBlocks: 128, PromptTokens: 2048},
	}
	return r, req, &Snapshot{Endpoints: views}
}

func BenchmarkDecide(b *testing.B) {
	now := time.Unix(1_000_000, 0)
	for _, n := range []int{8, 32} {
		b.Run(fmt.Sprintf("pd/endpoints=%d", n), func(b *testing.B) {
			r, req, snap := benchPD(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				d, _ := r.Decide(now, req, snap)
				if d.Tier != Tier15 {
					b.Fatalf("decided at tier %s; the benchmark wants Tier 1.5", d.Tier)
				}
			}
		})
	}
	for _, n := range []int{8, 32} {
		b.Run(fmt.Sprintf("kv3/endpoints=%d", n), func(b *testing.B) {
			eps := make([]EndpointSpec, n)
			for i := range eps {
				eps[i].Addr = fmt.Sprintf("10.2.0.%d:8000", i)
			}
			r, err := NewRouter(ServiceSpec{Selector: SelCHWBL, KVExactMode: KVSinglePool, KVBlockSize: 16}, eps, DefaultEnv(), RouterConfig{})
			if err != nil {
				b.Fatal(err)
			}
			_, req, snap := benchPD(b, n)
			req.HasPrefixHash, req.PrefixHash = true, 0x9e3779b97f4a7c15
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r.Decide(now, req, snap)
			}
		})
	}
}

// BenchmarkDecide_Refit is the headroom law's costliest Tier-1.5 path: the
// pick must compute most of the prompt again, so every decision sums the
// footprint table (every slot holding a live key) to test a refit.
func BenchmarkDecide_Refit(b *testing.B) {
	now := time.Unix(1_000_000, 0)
	for _, n := range []int{8, 32} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			r, req, snap := refitBench(b, now, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r.Decide(now, req, snap)
			}
		})
	}
}

// refitBench builds a mode-3 headroom rule of n endpoints of 2000 blocks
// whose footprint table is full (footprintSlots keys of 16 blocks, so
// every endpoint's footprint overflows), and a 128-block request that
// endpoint 0 holds 10 blocks of.
func refitBench(tb testing.TB, now time.Time, n int) (*Router, *Request, *Snapshot) {
	eps := make([]EndpointSpec, n)
	for i := range eps {
		eps[i].Addr = fmt.Sprintf("10.3.0.%d:8000", i)
	}
	r, err := NewRouter(ServiceSpec{KVExactMode: KVSinglePool, KVBlockSize: 16}, eps, DefaultEnv(), RouterConfig{})
	if err != nil {
		tb.Fatal(err)
	}
	views := make([]EndpointView, n)
	for i := range views {
		views[i] = EndpointView{KVCapacityBlocks: 2000, InventoryBlocks: 2000, KVUsageKnown: true, KVUsedBlocks: 100}
	}
	snap := &Snapshot{Endpoints: views}
	for k := uint64(1); k <= footprintSlots; k++ {
		r.Decide(now, &Request{HasPrefixHash: true, PrefixHash: k, KV: KVInput{PromptBlocks: 16}}, snap)
	}
	views[0].Overlap = 10
	req := &Request{HasPrefixHash: true, PrefixHash: footprintSlots + 1, KV: KVInput{PromptBlocks: 128}}
	if d, _ := r.Decide(now, req, snap); d.Tier != Tier15 || d.Prefill != 0 {
		tb.Fatalf("decided %s at tier %s; the benchmark wants a Tier-1.5 pick of endpoint 0", d.AppendText(nil), d.Tier)
	}
	return r, req, snap
}

func TestDecide_SteadyStateDoesNotAllocate(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	for _, n := range []int{8, 32} {
		r, req, snap := benchPD(t, n)
		if allocs := testing.AllocsPerRun(200, func() { r.Decide(now, req, snap) }); allocs != 0 {
			t.Errorf("P/D Decide at %d endpoints allocates %v times per call; want 0", n, allocs)
		}
	}
	for _, n := range []int{8, 32} {
		r, req, snap := refitBench(t, now, n)
		if allocs := testing.AllocsPerRun(200, func() { r.Decide(now, req, snap) }); allocs != 0 {
			t.Errorf("headroom Decide with a refit test at %d endpoints allocates %v times per call; want 0", n, allocs)
		}
	}
	for _, sel := range []SelectorKind{SelRR, SelHash, SelPriority, SelPersist, SelLeastConn, SelCHWBL, SelGPUAware, SelWeightedCHWBL} {
		eps := make([]EndpointSpec, 16)
		for i := range eps {
			eps[i].Addr = fmt.Sprintf("10.4.0.%d:80", i)
		}
		r, err := NewRouter(ServiceSpec{Selector: sel, KVExactMode: KVSinglePool, KVBlockSize: 16}, eps, DefaultEnv(), RouterConfig{})
		if err != nil {
			t.Fatal(err)
		}
		views := make([]EndpointView, len(eps))
		for i := range views {
			views[i] = EndpointView{ActiveConns: uint32(i % 3), InventoryBlocks: 10, Overlap: uint32(i % 2)}
		}
		req := &Request{HasPrefixHash: true, PrefixHash: 99, ClientKey: "client", KV: KVInput{PromptBlocks: 4}}
		snap := &Snapshot{Endpoints: views}
		r.Decide(now, req, snap) // a persist pin is created once; steady state reuses it
		if allocs := testing.AllocsPerRun(200, func() { r.Decide(now, req, snap) }); allocs != 0 {
			t.Errorf("single-pool %s Decide allocates %v times per call; want 0", sel, allocs)
		}
	}
}
