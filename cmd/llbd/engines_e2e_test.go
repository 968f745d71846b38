package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llbproject/llb/restapi"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/worker"
)

// End-to-end tests of the engines beside vLLM: the real llbd in front of
// simulated SGLang and TensorRT-LLM workers speaking their dialects (SGLang's
// page-hash events over real ZMQ, one publisher per DP rank; TensorRT-LLM's
// POST /kv_cache_events over real HTTP).

// engineFleet starts a fleet of one dialect on its own addresses.
func engineFleet(t *testing.T, dialect worker.Dialect, cfg fleet.Config, blockSize int) *fleet.Fleet {
	t.Helper()
	tmpl := workerCfg("", 0, engine.KVNone, 0, 0.02)
	tmpl.KVEvents = true
	tmpl.Dialect = dialect
	if blockSize != 0 {
		tmpl.Engine.BlockSize = blockSize
	}
	cfg.Template = &tmpl
	f, err := fleet.Start(cfg)
	if err != nil {
		t.Fatalf("%s fleet: %v", dialect, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.Stop(ctx)
	})
	return f
}

// textPrompt is a completion of a long shared prefix plus i.
func textPrompt(prefix string, i int) string {
	return fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":2}`, strings.Repeat(prefix+" ", 30)+strconv.Itoa(i))
}

// tokenPrompt is a completion of token ids: base.. (n of them), then i
// (TensorRT-LLM has no /tokenize: token-id prompts need no tokenizer).
func tokenPrompt(base, n, i int) string {
	var sb strings.Builder
	sb.WriteString(`{"model":"sim-model","max_tokens":2,"prompt":[`)
	for k := 0; k < n; k++ {
		fmt.Fprintf(&sb, "%d,", base+k)
	}
	fmt.Fprintf(&sb, "%d]}", 30000+i)
	return sb.String()
}

var kvTruthRE = regexp.MustCompile(`kv_predicted=(\d+) kv_cached=(\d+)`)

// tierOneFiveHit is routesToOwnerByTierOneFive that also checks that the
// owner reported as cached what llb predicted from its mirror (the blocks
// were really there). It returns the owner.
func tierOneFiveHit(t *testing.T, d *daemon, vip string, body func(int) string) int {
	t.Helper()
	owner, route := routesToOwnerByTierOneFiveAt(t, d, vip, "/v1/completions", body)
	if m := kvTruthRE.FindStringSubmatch(route); m == nil || m[1] != m[2] || m[1] == "0" {
		t.Fatalf("tier 1.5 to %d: %q; want the engine's cached tokens equal to llb's prediction", owner, route)
	}
	return owner
}

// overlapHit reports a Tier-1.5 decision made on a mirrored overlap, not a
// miss the headroom law placed (flags least_kv, pending).
func overlapHit(h http.Header) bool {
	route := " " + h.Get("X-Llb-Route") + " "
	return strings.Contains(route, " tier=1.5 ") && !strings.Contains(route, " least_kv ") && !strings.Contains(route, " pending ")
}

// inventory reads one endpoint's inventory view.
func (d *daemon) inventory(service string, ep int) restapi.InventoryView {
	d.t.Helper()
	var v restapi.InventoryView
	d.getJSON(inventoryPath(service, ep), &v)
	return v
}

// mirroredBlocks is the size of llb's mirror of each endpoint of rule key.
func (d *daemon) mirroredBlocks(key string) []int {
	d.t.Helper()
	var n []int
	for ep := 0; ; ep++ {
		code, body := d.do(http.MethodGet, inventoryPath(key, ep, "limit", "1"), "")
		if code != http.StatusOK {
			if ep == 0 {
				d.t.Fatalf("inventory of %s: %d %s", key, code, body)
			}
			return n
		}
		var v restapi.InventoryView
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			d.t.Fatalf("inventory of %s endpoint %d: %v: %s", key, ep, err, body)
		}
		n = append(n, v.Total)
	}
}

// feedsConnected waits until every rank feed of the rule's endpoints is
// connected.
func (d *daemon) feedsConnected(service string, eps, ranks int) {
	d.t.Helper()
	for ep := 0; ep < eps; ep++ {
		eventually(d.t, fmt.Sprintf("%s endpoint %d: %d feeds connected", service, ep, ranks), func() (bool, string) {
			v := d.inventory(service, ep)
			n := 0
			for _, r := range v.LLB.Ranks {
				if r.Feed != nil && r.Feed.Connected {
					n++
				}
			}
			var feeds []restapi.FeedStats
			for _, r := range v.LLB.Ranks {
				if r.Feed != nil {
					feeds = append(feeds, *r.Feed)
				}
			}
			var kvLog []string
			for _, l := range strings.Split(d.log.text(), "\n") {
				if strings.Contains(l, "kv") {
					kvLog = append(kvLog, l)
				}
			}
			return n == ranks, fmt.Sprintf("%+v\nkv log:\n%s", feeds, strings.Join(kvLog[max(0, len(kvLog)-15):], "\n"))
		})
	}
}

// servePool posts a kvExactMode:3 rule over f on d and waits until it
// serves with every feed (ranks per endpoint) connected and its 1 s warm-up
// over; it returns the rule key and the VIP's URL.
func (d *daemon) servePool(f *fleet.Fleet, ranks int, extra map[string]any) (key, vip string) {
	d.t.Helper()
	port := freePort(d.t)
	sa := map[string]any{"kvExactMode": 3, "kvWarmupSec": 1}
	for k, v := range extra {
		sa[k] = v
	}
	d.post(ruleJSON(d.t, f, "127.0.0.1", port, sa))
	d.waitActive(port)
	key = fmt.Sprintf("tcp:127.0.0.1:%d", port)
	d.feedsConnected(key, len(f.Members()), ranks)
	time.Sleep(1100 * time.Millisecond) // kvWarmupSec
	return key, fmt.Sprintf("http://127.0.0.1:%d", port)
}

func TestE2E_SGLangTierOneFiveFollowsItsPageEvents(t *testing.T) {
	f := engineFleet(t, worker.DialectSGLang, fleet.Config{Single: 2, BaseIP: "127.0.0.70"}, 16)
	d := startDataPlane(t, "LOXILB_KV_COLDSTART_SEED_N=0")
	key, vip := d.servePool(f, 1, nil)
	owner := tierOneFiveHit(t, d, vip, func(i int) string { return textPrompt("an sglang page-hash preamble", i) })
	v := d.inventory(key, owner)
	if v.HashAlgo != "sha256_sglang" || v.Total == 0 {
		t.Fatalf("inventory hash_algo %q total %d; want sha256_sglang and the owner's pages", v.HashAlgo, v.Total)
	}
	if c := v.LLB.Ranks[0].Mirror.Contract; c.State != "ok" || c.Verified == 0 || c.Mismatched != 0 {
		t.Fatalf("contract %+v; want ok with pages verified against SGLang's hash", c)
	}
}

func TestE2E_SGLangThreeDPRanksPublishIntoOneInventory(t *testing.T) {
	f := engineFleet(t, worker.DialectSGLang, fleet.Config{Single: 2, BaseIP: "127.0.0.73", DPRanks: 3}, 16)
	d := startDataPlane(t, "LOXILB_KV_COLDSTART_SEED_N=0")
	key, vip := d.servePool(f, 3, nil)
	// Each worker spreads its requests over its three ranks in turn: every
	// rank publishes pages on its own port, into the endpoint's inventory.
	for i := 0; i < 12; i++ {
		if res, body := complete(t, vip, textPrompt(fmt.Sprintf("dp rank warm-up %d", i), i)); res.StatusCode != 200 {
			t.Fatalf("warm-up %d: %d %s", i, res.StatusCode, body)
		}
	}
	for ep := 0; ep < 2; ep++ {
		eventually(t, fmt.Sprintf("endpoint %d: every rank's pages mirrored", ep), func() (bool, string) {
			v := d.inventory(key, ep)
			ok := len(v.LLB.Ranks) == 3
			for _, r := range v.LLB.Ranks {
				ok = ok && r.Feed != nil && r.Feed.Events > 0 && r.Mirror.Blocks > 0 && r.Feed.Gaps == 0
			}
			return ok, fmt.Sprintf("%+v", v.LLB.Ranks)
		})
	}
	// The endpoint's inventory is the union of its ranks: the prefix one
	// rank cached routes the follow-up there by Tier 1.5 (whichever rank
	// the worker then hands it to; llb predicts no cached tokens for an
	// endpoint with several ranks).
	res, b := complete(t, vip, textPrompt("a prefix cached by one rank", 0))
	if res.StatusCode != 200 {
		t.Fatalf("first: %d %s", res.StatusCode, b)
	}
	_, owner, _ := routeOf(t, res.Header)
	eventually(t, "tier 1.5 routes the prefix to the endpoint one of whose ranks holds it", func() (bool, string) {
		res, _ := complete(t, vip, textPrompt("a prefix cached by one rank", 1))
		tier, ep, _ := routeOf(t, res.Header)
		return tier == "1.5" && ep == owner && overlapHit(res.Header) && !strings.Contains(res.Header.Get("X-Llb-Route"), "kv_predicted"), res.Header.Get("X-Llb-Route")
	})
}

func TestE2E_TRTLLMDrainSurvivesASecondConsumer(t *testing.T) {
	f := engineFleet(t, worker.DialectTRTLLM, fleet.Config{Single: 2, BaseIP: "127.0.0.76"}, 32)
	d := startDataPlane(t, "LOXILB_KV_COLDSTART_SEED_N=0")
	key, vip := d.servePool(f, 1, nil)
	owner := tierOneFiveHit(t, d, vip, func(i int) string { return tokenPrompt(1000, 96, i) })
	if v := d.inventory(key, owner); v.LLB.Ranks[0].Feed.Gaps != 0 || v.Total == 0 {
		t.Fatalf("before the thief: gaps %d, total %d", v.LLB.Ranks[0].Feed.Gaps, v.Total)
	}

	// A worker's event ids start where its cache does, so a feed detects
	// stolen ids only once it has drained some of that worker's events:
	// every worker stores a prompt sent to it directly and llb drains it
	// (a worker the Tier-1.5 check never used would otherwise lose its
	// first events to the thief, and llb would start after them).
	for ep, w := range f.Workers() {
		complete(t, w.URL(), tokenPrompt(3000+100*ep, 96, ep))
		eventually(t, "llb drains every worker's events before the thief", func() (bool, string) {
			fs := d.inventory(key, ep).LLB.Ranks[0].Feed
			return fs != nil && fs.LastSeq != nil, fmt.Sprintf("worker %d: %+v", ep, fs)
		})
	}

	// A second consumer drains /kv_cache_events of every worker in a
	// tight loop: it takes events llb never sees.
	ctx, stopThief := context.WithCancel(context.Background())
	var stolen atomic.Int64
	robbed := make([]atomic.Int64, len(f.Workers()))
	var wg sync.WaitGroup
	for i, w := range f.Workers() {
		wg.Add(1)
		go func(url string) {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/kv_cache_events", nil)
				if res, err := http.DefaultClient.Do(req); err == nil {
					buf := make([]byte, 64)
					if n, _ := res.Body.Read(buf); n > 2 {
						stolen.Add(1)
						robbed[i].Add(1)
					}
					res.Body.Close()
				}
			}
		}(w.URL())
	}
	for i := 0; i < 40 && stolen.Load() < 3; i++ {
		complete(t, vip, tokenPrompt(5000+100*i, 96, i))
	}
	stopThief()
	wg.Wait()
	if stolen.Load() == 0 {
		t.Fatal("the thief drained nothing")
	}
	gaps := uint64(0)
	eventually(t, "llb detects the stolen events as event_id gaps", func() (bool, string) {
		gaps = 0
		for ep, w := range f.Workers() {
			if robbed[ep].Load() == 0 {
				continue
			}
			// The thief's drains show on the next event llb drains from
			// that worker: a request sent to it directly makes one
			// (through llb it might go to the other worker every time).
			complete(t, w.URL(), tokenPrompt(9000+ep, 96, ep))
			gaps += d.inventory(key, ep).LLB.Ranks[0].Feed.Gaps
		}
		return gaps > 0, fmt.Sprintf("gaps %d after %d stolen drains", gaps, stolen.Load())
	})
	// Hits recover for prompts stored after the thief stopped.
	tierOneFiveHit(t, d, vip, func(i int) string { return tokenPrompt(20000, 96, i) })
	t.Logf("%d drains stolen, %d gaps detected; Tier 1.5 hits again afterwards", stolen.Load(), gaps)
}

func TestE2E_OneDaemonServesVLLMSGLangAndTRTLLMRules(t *testing.T) {
	vl := engineFleet(t, worker.DialectVLLM, fleet.Config{Single: 2, BaseIP: "127.0.0.80"}, 16)
	sg := engineFleet(t, worker.DialectSGLang, fleet.Config{Single: 2, BaseIP: "127.0.0.83"}, 16)
	tr := engineFleet(t, worker.DialectTRTLLM, fleet.Config{Single: 2, BaseIP: "127.0.0.86"}, 32)
	d := startDataPlane(t, "LOXILB_KV_COLDSTART_SEED_N=0")
	type svc struct {
		name     string
		f        *fleet.Fleet
		key, vip string
		body     func(int) string
	}
	svcs := []svc{
		{name: "vllm", f: vl, body: func(i int) string { return textPrompt("a vllm rule's own prefix", i) }},
		{name: "sglang", f: sg, body: func(i int) string { return textPrompt("an sglang rule's own prefix", i) }},
		{name: "trtllm", f: tr, body: func(i int) string { return tokenPrompt(40000, 96, i) }},
	}
	for i := range svcs {
		svcs[i].key, svcs[i].vip = d.servePool(svcs[i].f, 1, map[string]any{"name": svcs[i].name})
	}
	owners := map[string]int{}
	for _, s := range svcs {
		owners[s.name] = tierOneFiveHit(t, d, s.vip, s.body)
	}
	// Isolated inventories: each rule mirrors its own engines only, with
	// its own contract.
	wantAlgo := map[string]string{"vllm": "sha256_cbor", "sglang": "sha256_sglang", "trtllm": "token_keyed"}
	for _, s := range svcs {
		v := d.inventory(s.key, owners[s.name])
		if v.HashAlgo != wantAlgo[s.name] {
			t.Errorf("%s inventory hash_algo %q; want %q", s.name, v.HashAlgo, wantAlgo[s.name])
		}
		want := s.f.Workers()[owners[s.name]].Stats().CachedBlocks
		if v.Total == 0 || v.Total > want {
			t.Errorf("%s inventory holds %d blocks; its engine caches %d", s.name, v.Total, want)
		}
	}
}

// TestE2E_ClusterServesSGLangAndTRTLLMRules: two replicas in cluster mode.
// Every replica subscribes to SGLang's ZMQ publishers itself (PUB fans out);
// TensorRT-LLM's destructive drain is drained by one replica, which relays
// the bodies: both replicas hit Tier 1.5 on prompts the other one routed,
// and neither sees an event_id gap (two drainers would split the events).
func TestE2E_ClusterServesSGLangAndTRTLLMRules(t *testing.T) {
	for _, tc := range []struct {
		dialect   worker.Dialect
		blockSize int
		body      func(int) string
	}{
		{worker.DialectSGLang, 16, func(i int) string { return textPrompt("a clustered sglang prefix", i) }},
		{worker.DialectTRTLLM, 32, func(i int) string { return tokenPrompt(60000, 96, i) }},
	} {
		t.Run(string(tc.dialect), func(t *testing.T) {
			r := startRig(t, rigConfig{replicas: 2, etcdMembers: 1, single: 2, dialect: tc.dialect, blockSize: tc.blockSize, scale: 0.02})
			a, b := r.replicas[0], r.replicas[1]
			body := ruleJSON(t, r.fleet, r.vip, r.port, map[string]any{"kvExactMode": 3, "kvWarmupSec": 1})
			if code, resp := a.do(http.MethodPost, "/netlox/v1/config/loadbalancer", body); code != 200 {
				t.Fatalf("POST on A: %d %s", code, resp)
			}
			key := fmt.Sprintf("tcp:%s:%d", r.vip, r.port)
			for _, p := range r.replicas {
				p.feedsConnected(key, 2, 1)
			}
			time.Sleep(1100 * time.Millisecond)
			vipOf := func(p *replicaProc) string { return fmt.Sprintf("http://%s:%d", p.ip, r.port) }
			// A prompt routed through A; its follow-up through B hits by
			// Tier 1.5 where the engine cached it, and the other way round.
			for i, pair := range [][2]*replicaProc{{a, b}, {b, a}} {
				first, then := pair[0], pair[1]
				res, out := complete(t, vipOf(first), tc.body(100*i))
				if res.StatusCode != 200 {
					t.Fatalf("first via replica %d: %d %s", first.idx, res.StatusCode, out)
				}
				_, owner, _ := routeOf(t, res.Header)
				eventually(t, fmt.Sprintf("replica %d routes replica %d's prefix by tier 1.5", then.idx, first.idx), func() (bool, string) {
					res, _ := complete(t, vipOf(then), tc.body(100*i+1))
					tier, ep, _ := routeOf(t, res.Header)
					m := kvTruthRE.FindStringSubmatch(res.Header.Get("X-Llb-Route"))
					return tier == "1.5" && ep == owner && m != nil && m[1] != "0" && m[1] == m[2], res.Header.Get("X-Llb-Route")
				})
			}
			// More traffic through both replicas: each replica's mirror of
			// each engine holds every block the engine caches (two drainers
			// would each see part of the events), with no gap.
			for i := 0; i < 16; i++ {
				if res, out := complete(t, vipOf(r.replicas[i%2]), tc.body(1000+7*i)); res.StatusCode != 200 {
					t.Fatalf("burst %d: %d %s", i, res.StatusCode, out)
				}
			}
			for _, p := range r.replicas {
				for ep := 0; ep < 2; ep++ {
					w := r.fleet.Workers()[ep]
					eventually(t, fmt.Sprintf("replica %d mirrors endpoint %d's whole cache", p.idx, ep), func() (bool, string) {
						v := p.inventory(key, ep)
						f := v.LLB.Ranks[0].Feed
						want := w.Stats().CachedBlocks
						return f != nil && f.Gaps == 0 && v.Total == want, fmt.Sprintf("total %d, engine %d, feed %+v", v.Total, want, f)
					})
				}
			}
		})
	}
}
