package ladder

import (
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// ruleCase is one generated rule with the inputs of a few decisions.
type ruleCase struct {
	svc ServiceSpec
	eps []EndpointSpec
	env Env
}

func genRule(t *rapid.T) ruleCase {
	pd := rapid.Bool().Draw(t, "pd")
	n := rapid.IntRange(1, MaxEndpoints).Draw(t, "n")
	eps := make([]EndpointSpec, n)
	for i := range eps {
		eps[i].Addr = "10.0.0." + strconv.Itoa(i) + ":8000"
		eps[i].Weight = uint8(rapid.IntRange(0, 255).Draw(t, "w"))
		eps[i].Backup = !pd && rapid.IntRange(0, 4).Draw(t, "backup") == 0
	}
	var svc ServiceSpec
	svc.PDDisagg = pd
	if pd {
		if n < 2 {
			eps = append(eps, EndpointSpec{})
			n = 2
		}
		for i := range eps {
			eps[i].Role = Role(rapid.IntRange(0, 2).Draw(t, "role"))
		}
		eps[0].Role, eps[1].Role = RolePrefill, RoleDecode
		svc.CacheAware = rapid.Bool().Draw(t, "cacheAware")
		svc.KVExactMode = KVExactMode(rapid.SampledFrom([]uint8{0, 1}).Draw(t, "kv"))
		svc.Selector = SelectorKind(rapid.SampledFrom([]uint8{0, 9}).Draw(t, "sel"))
		svc.BalanceAbsThreshold = rapid.IntRange(0, 6).Draw(t, "balance")
		svc.Admission.MaxInflightPerEP = rapid.SampledFrom([]int{0, 0, 3, 8}).Draw(t, "cap")
		svc.Admission.QueueDepthPerEP = rapid.IntRange(0, 3).Draw(t, "depth")
	} else {
		svc.KVExactMode = KVExactMode(rapid.SampledFrom([]uint8{0, 3}).Draw(t, "kv"))
		svc.Selector = SelectorKind(rapid.SampledFrom([]uint8{0, 1, 2, 3, 4, 8, 9, 10}).Draw(t, "sel"))
	}
	svc.KVBlockSize = rapid.SampledFrom([]int{1, 16}).Draw(t, "block")
	env := DefaultEnv()
	env.LBMode = LBMode(rapid.IntRange(0, int(LBAuto)).Draw(t, "mode"))
	env.SpillRelief = Tristate(rapid.IntRange(0, 2).Draw(t, "relief"))
	env.ColdStartSeedN = uint32(rapid.IntRange(0, 4).Draw(t, "seedN"))
	env.MinMatchTokens = uint32(rapid.SampledFrom([]int{0, 16}).Draw(t, "minMatch"))
	return ruleCase{svc: svc, eps: eps, env: env}
}

func genViews(t *rapid.T, n int) []EndpointView {
	views := make([]EndpointView, n)
	for i := range views {
		v := &views[i]
		v.ActiveConns = uint32(rapid.IntRange(0, 12).Draw(t, "conns"))
		v.QueuedRequests = uint32(rapid.IntRange(0, 4).Draw(t, "queued"))
		v.SwapPressure = uint32(rapid.IntRange(0, 2).Draw(t, "swap"))
		v.Down = rapid.IntRange(0, 5).Draw(t, "down") == 0
		v.BreakerOpen = rapid.IntRange(0, 7).Draw(t, "cb") == 0
		v.Draining = rapid.IntRange(0, 7).Draw(t, "drain") == 0
		v.Ctrl = CtrlState(rapid.SampledFrom([]uint8{0, 0, 0, 1, 2, 3}).Draw(t, "ctrl"))
		v.CtrlWeight = uint8(rapid.IntRange(0, 120).Draw(t, "weight"))
		v.KVCapacityBlocks = uint32(rapid.SampledFrom([]int{0, 1, 500, 2000, 9_000_000}).Draw(t, "capacity"))
		v.InventoryBlocks = uint32(rapid.IntRange(0, 40).Draw(t, "inv"))
		v.Overlap = uint32(rapid.IntRange(0, 12).Draw(t, "overlap"))
		v.Parked = uint32(rapid.IntRange(0, 3).Draw(t, "parked"))
	}
	return views
}

func genRequest(t *rapid.T, n int) Request {
	var req Request
	if rapid.Bool().Draw(t, "hasKey") {
		req.SessionKey = "s" + strconv.Itoa(rapid.IntRange(0, 3).Draw(t, "key"))
		if rapid.Bool().Draw(t, "found") {
			req.Session = SessionLookup{Found: true, Pin: Pin{
				Prefill: rapid.IntRange(-1, n+1).Draw(t, "pinP"),
				Decode:  rapid.IntRange(-1, n+1).Draw(t, "pinD"),
			}}
		}
	}
	req.Prompt = []byte(rapid.StringOfN(rapid.RuneFrom([]rune("ab")), 0, 8, -1).Draw(t, "prompt"))
	req.KV.PromptBlocks = uint32(rapid.IntRange(0, 10).Draw(t, "blocks"))
	req.KV.Guard = Reason(rapid.SampledFrom([]uint8{0, 0, 0, uint8(ReasonTokenize), 250}).Draw(t, "guard"))
	req.HasPrefixHash = rapid.Bool().Draw(t, "hasPrefix")
	req.PrefixHash = rapid.Uint64().Draw(t, "prefix")
	req.HasConvHash = rapid.Bool().Draw(t, "hasConv")
	req.ConvHash = rapid.Uint64().Draw(t, "conv")
	req.ClientHash = rapid.Uint64().Draw(t, "client")
	req.ClientKey = rapid.SampledFrom([]string{"", "c1", "c2"}).Draw(t, "ckey")
	return req
}

// checkDecision asserts the invariants every decision must hold.
func checkDecision(t *rapid.T, r *Router, req *Request, views []EndpointView, d *Decision) {
	excl, drain := foldMasks(views)
	if d.Prefill >= 0 && excl.Has(d.Prefill) {
		t.Fatalf("picked excluded endpoint %d: %s", d.Prefill, d)
	}
	if d.Decode >= 0 && excl.Has(d.Decode) {
		t.Fatalf("picked excluded decode endpoint %d: %s", d.Decode, d)
	}
	if (d.Prefill >= 0) != d.Available() {
		t.Fatalf("prefill %d but Available()=%v: %s", d.Prefill, d.Available(), d)
	}
	if !r.svc.PDDisagg {
		if d.Decode != -1 {
			t.Fatalf("single pool with a decode endpoint: %s", d)
		}
		if d.Prefill >= 0 && drain.Has(d.Prefill) {
			t.Fatalf("single pool picked draining %d: %s", d.Prefill, d)
		}
		if d.Prefill >= 0 && r.eps[d.Prefill].Backup && !d.Flags.Has(FlagBackup) {
			t.Fatalf("backup %d used without FlagBackup: %s", d.Prefill, d)
		}
		primaryUp := r.primaries&^excl&^drain != 0
		if primaryUp && (d.Flags.Has(FlagBackup) || d.Prefill < 0) {
			t.Fatalf("a primary is available but got %s", d)
		}
		if !primaryUp && r.backups&^excl&^drain != 0 && d.Prefill < 0 {
			t.Fatalf("a backup is available but got %s", d)
		}
		return
	}
	switch d.Tier {
	case Tier0, Tier1, Tier15, Tier2, TierResume:
		if r.eps[d.Prefill].Role != RolePrefill {
			t.Fatalf("prefill %d has role %s: %s", d.Prefill, r.eps[d.Prefill].Role, d)
		}
		if d.Decode < 0 || r.eps[d.Decode].Role != RoleDecode {
			t.Fatalf("decode %d is not a decode endpoint: %s", d.Decode, d)
		}
		if d.Tier != Tier0 && d.Tier != TierResume && drain.Has(d.Prefill) {
			t.Fatalf("new work on draining prefill %d: %s", d.Prefill, d)
		}
		pinnedDecode := req.Session.Found && req.Session.Pin.Decode == d.Decode
		if drain.Has(d.Decode) && !pinnedDecode {
			t.Fatalf("new work on draining decode %d: %s", d.Decode, d)
		}
	case TierRescue:
		if r.eps[d.Prefill].Role != RoleNone || d.Decode != -1 || drain.Has(d.Prefill) {
			t.Fatalf("rescue picked %d (role %s): %s", d.Prefill, r.eps[d.Prefill].Role, d)
		}
	case TierNone:
		if d.Prefill != -1 || d.Decode != -1 {
			t.Fatalf("no tier but endpoints: %s", d)
		}
		if d.Admission == Admit && d.Unavailable == ReasonNone {
			t.Fatalf("no tier, admitted, yet not unavailable: %s", d)
		}
	default:
		t.Fatalf("unexpected tier %s", d.Tier)
	}
	// With admission off, a healthy pair means the pair is used.
	if r.maxInflight == 0 && r.maxTotal == 0 {
		if r.prefill&^excl&^drain != 0 && r.decode&^excl&^drain != 0 && (d.Tier == TierRescue || d.Tier == TierNone) {
			t.Fatalf("healthy prefill and decode exist but got %s", d)
		}
	}
	if d.Admission == Park && (!r.prefill.Has(d.ParkOn) || excl.Has(d.ParkOn) || drain.Has(d.ParkOn)) {
		t.Fatalf("parked on ineligible endpoint %d: %s", d.ParkOn, d)
	}
}

func TestProperty_DecisionsRespectHealthRolesAndDraining(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rc := genRule(t)
		r, err := NewRouter(rc.svc, rc.eps, rc.env, RouterConfig{})
		if err != nil {
			t.Fatalf("generated rule invalid: %v", err)
		}
		now := time.Unix(1000, 0)
		for k := 0; k < 4; k++ {
			views := genViews(t, len(rc.eps))
			req := genRequest(t, len(rc.eps))
			if r.trie != nil && len(req.Prompt) > 0 {
				r.Learn(req.Prompt, rapid.IntRange(0, len(rc.eps)-1).Draw(t, "learnEP"))
			}
			d, err := r.Decide(now, &req, &Snapshot{Endpoints: views, TotalInflight: uint64(rapid.IntRange(0, 3).Draw(t, "total"))})
			if err != nil {
				t.Fatalf("Decide: %v", err)
			}
			checkDecision(t, r, &req, views, &d)
			if d.Admission == Park {
				rd, err := r.Resume(now, &req, &Snapshot{Endpoints: views}, d.ParkOn)
				if err != nil {
					t.Fatalf("Resume: %v", err)
				}
				checkDecision(t, r, &req, views, &rd)
			}
		}
	})
}

func TestProperty_DecideIsDeterministic(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rc := genRule(t)
		a, err := NewRouter(rc.svc, rc.eps, rc.env, RouterConfig{})
		if err != nil {
			t.Fatalf("generated rule invalid: %v", err)
		}
		b, _ := NewRouter(rc.svc, rc.eps, rc.env, RouterConfig{})
		now := time.Unix(1000, 0)
		for k := 0; k < 6; k++ {
			views := genViews(t, len(rc.eps))
			req := genRequest(t, len(rc.eps))
			if a.trie != nil && len(req.Prompt) > 0 {
				a.Learn(req.Prompt, 0)
				b.Learn(req.Prompt, 0)
			}
			snap := Snapshot{Endpoints: views}
			da, _ := a.Decide(now, &req, &snap)
			db, _ := b.Decide(now, &req, &snap)
			if da != db {
				t.Fatalf("step %d: same inputs and state, different decisions:\n%s\n%s", k, &da, &db)
			}
		}
	})
}

func TestProperty_CHWBLNeverExceedsItsBoundWhileAnUnderBoundEndpointExists(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, MaxEndpoints).Draw(t, "n")
		weighted := rapid.Bool().Draw(t, "weighted")
		eps := make([]EndpointSpec, n)
		for i := range eps {
			eps[i] = EndpointSpec{Addr: fmt.Sprintf("192.0.2.%d:80", i), Weight: uint8(rapid.IntRange(0, 100).Draw(t, "w"))}
		}
		sel := SelCHWBL
		if weighted {
			sel = SelWeightedCHWBL
		}
		r, err := NewRouter(ServiceSpec{Selector: sel}, eps, DefaultEnv(), RouterConfig{})
		if err != nil {
			t.Fatal(err)
		}
		views := make([]EndpointView, n)
		for i := range views {
			views[i].ActiveConns = uint32(rapid.IntRange(0, 30).Draw(t, "load"))
			views[i].Down = rapid.IntRange(0, 6).Draw(t, "down") == 0
		}
		req := Request{PrefixHash: rapid.Uint64().Draw(t, "key"), HasPrefixHash: true}
		d, err := r.Decide(time.Unix(0, 0), &req, &Snapshot{Endpoints: views})
		if err != nil {
			t.Fatal(err)
		}
		// Recompute the bounds independently.
		var load, total uint64
		for i := range views {
			if !views[i].Down {
				load += uint64(views[i].ActiveConns)
				total += shareOf(eps[i], weighted)
			}
		}
		bound := func(i int) uint64 {
			// ceil(175·(L+1)·share / (100·total)) in big-enough integers.
			num := 175 * (load + 1) * shareOf(eps[i], weighted)
			den := 100 * total
			return (num + den - 1) / den
		}
		anyUnder := false
		for i := range views {
			if !views[i].Down && uint64(views[i].ActiveConns) < bound(i) {
				anyUnder = true
			}
		}
		if d.Prefill < 0 {
			if total > 0 {
				t.Fatalf("no pick although %d endpoints are up", n)
			}
			return
		}
		if views[d.Prefill].Down {
			t.Fatalf("picked down endpoint %d", d.Prefill)
		}
		if anyUnder && uint64(views[d.Prefill].ActiveConns) >= bound(d.Prefill) {
			t.Fatalf("picked %d at load %d ≥ bound %d while an under-bound endpoint exists", d.Prefill, views[d.Prefill].ActiveConns, bound(d.Prefill))
		}
	})
}

func shareOf(ep EndpointSpec, weighted bool) uint64 {
	if !weighted {
		return 1
	}
	return ep.weight()
}

// naiveRing rebuilds the ring the slow, obvious way: every virtual node's
// hash computed with fmt, a full sort, and a linear scan per lookup.
type naiveRing struct {
	hashes []uint64
	owner  map[uint64]int
}

func newNaiveRing(eps []EndpointSpec, weighted bool) *naiveRing {
	nr := &naiveRing{owner: map[uint64]int{}}
	var sumW uint64
	for _, e := range eps {
		sumW += e.weight()
	}
	for i, e := range eps {
		count := RingVNodes
		if weighted {
			count = max(int(uint64(RingVNodes*len(eps))*e.weight()/sumW), 1)
		}
		for j := 0; j < count; j++ {
			key := fmt.Sprintf("%s#%d", e.Addr, j)
			if e.Addr == "" {
				key = fmt.Sprintf("#%d#%d", i, j)
			}
			h := XXH64([]byte(key), ringSeed)
			if prev, ok := nr.owner[h]; !ok || i < prev {
				nr.owner[h] = i
			}
			nr.hashes = append(nr.hashes, h)
		}
	}
	sort.Slice(nr.hashes, func(a, b int) bool { return nr.hashes[a] < nr.hashes[b] })
	return nr
}

func (nr *naiveRing) first(key uint64, set EndpointSet) int {
	for _, h := range nr.hashes {
		if h >= key && set.Has(nr.owner[h]) {
			return nr.owner[h]
		}
	}
	for _, h := range nr.hashes {
		if set.Has(nr.owner[h]) {
			return nr.owner[h]
		}
	}
	return -1
}

func TestProperty_RingMatchesNaiveImplementation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 12).Draw(t, "n")
		weighted := rapid.Bool().Draw(t, "weighted")
		eps := make([]EndpointSpec, n)
		for i := range eps {
			if rapid.IntRange(0, 3).Draw(t, "noAddr") > 0 {
				eps[i].Addr = fmt.Sprintf("198.51.100.%d:%d", rapid.IntRange(0, 255).Draw(t, "ip"), 8000+i)
			}
			eps[i].Weight = uint8(rapid.IntRange(0, 255).Draw(t, "w"))
		}
		ring := NewRing(eps, weighted)
		naive := newNaiveRing(eps, weighted)
		if ring.Len() != len(naive.hashes) {
			t.Fatalf("ring has %d points; naive %d", ring.Len(), len(naive.hashes))
		}
		all := EndpointSet(1<<uint(n) - 1)
		for k := 0; k < 20; k++ {
			key := rapid.Uint64().Draw(t, "key")
			set := EndpointSet(rapid.Uint64Range(0, uint64(all)).Draw(t, "set"))
			if got, want := ring.Home(key), naive.first(key, all); got != want {
				t.Fatalf("Home(%#x) = %d; naive %d", key, got, want)
			}
			if got, want := ring.First(key, set), naive.first(key, set); got != want {
				t.Fatalf("First(%#x, %b) = %d; naive %d", key, set, got, want)
			}
		}
	})
}

func TestRing_RemovingAnEndpointMovesOnlyItsKeys(t *testing.T) {
	eps := []EndpointSpec{{Addr: "a:1"}, {Addr: "b:1"}, {Addr: "c:1"}, {Addr: "d:1"}}
	full := NewRing(eps, false)
	less := NewRing([]EndpointSpec{eps[0], eps[1], eps[3]}, false)
	toFull := []int{0, 1, 3} // index in `less` → index in `full`
	moved := 0
	for k := uint64(0); k < 4000; k++ {
		key := XXH64String(strconv.FormatUint(k, 10), 1)
		before := full.Home(key)
		after := toFull[less.Home(key)]
		if before != 2 && after != before {
			t.Fatalf("key %d moved from %d to %d although its endpoint stayed", k, before, after)
		}
		if before == 2 {
			moved++
		}
	}
	if moved < 500 || moved > 1500 {
		t.Fatalf("endpoint c owned %d of 4000 keys; want about a quarter", moved)
	}
}

func TestRing_WeightedVirtualNodesFollowWeights(t *testing.T) {
	eps := []EndpointSpec{{Addr: "a", Weight: 50}, {Addr: "b", Weight: 30}, {Addr: "c", Weight: 20}}
	r := NewRing(eps, true)
	counts := map[uint8]int{}
	for _, p := range r.points {
		counts[p.ep]++
	}
	want := map[uint8]int{0: 384, 1: 230, 2: 153} // 768·w/100, floored
	for ep, c := range want {
		if counts[ep] != c {
			t.Errorf("endpoint %d has %d virtual nodes; want %d", ep, counts[ep], c)
		}
	}
}
