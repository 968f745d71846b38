package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/llbproject/llb/internal/etcdtest"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/harness"
	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/workload"
)

// The long cluster soaks (make cluster-test, LLB_CLUSTER_LONG=1): the
// figures of issue 11's "Show" list, each printed as a FIGURE line. Three
// replicas, a three-member etcd on loopback addresses and eight simulated
// workers (four prefill and four decode for the P/D rules, eight for the
// single pool).

func clusterLong(t *testing.T) {
	t.Helper()
	if os.Getenv(envClusterLong) != "1" {
		t.Skip("long cluster soak: run with LLB_CLUSTER_LONG=1 (make cluster-test)")
	}
	if !etcdtest.Available() {
		t.Skip("etcd binary not on PATH (make deps installs etcd-server)")
	}
}

// figure prints one reported figure.
func figure(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Logf("FIGURE "+format, args...)
}

// ---- Show 1: sessions keep their prefill worker --------------------------

// pdAllTiers is a P/D rule with every tier on: Tier 0 sessions, the Tier-1
// trie (pd_cache_aware_mode) and Tier-1.5 KV-exact with the hard law.
func pdAllTiers() strategy.Strategy {
	return strategy.Strategy{Name: "pd-all-tiers", Shape: strategy.ShapePD, Selector: ladder.SelRR, CacheAware: true, KVExact: true, Law: ladder.LBHard}
}

func TestClusterSoak_SessionsKeepTheirWorker(t *testing.T) {
	clusterLong(t)
	e := etcdtest.Start(t, etcdtest.Options{Members: 3})
	bin := buildDaemon(t)
	eng := engine.DefaultConfig()
	// Conversations share only a short system prompt (16 tokens, under
	// Tier 1's 20 % match floor): what keeps a conversation on its worker
	// is its own history — Tier 0, or a trie or KV inventory that knows
	// it — not a prefix every conversation shares.
	spec := workload.MultiTurn{Options: workload.Options{Stream: true}, Conversations: 24, Turns: 5,
		SystemTokens: 16, HistoryTokens: 2000, QuestionTokens: 100, AnswerTokens: 100}
	tier1, err := strategy.ByName(strategy.NameTier1)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []strategy.Strategy{tier1, pdAllTiers()} {
		for _, mode := range []string{"cluster", "independent"} {
			b := harness.Bench{
				Scenario: harness.Scenario{Name: "multi-turn", Workload: spec, Requests: 600, Seed: 11, Warmup: 0.1, CachePressure: 1.5,
					Fleet: harness.FleetConfig{Workers: 4, DecodeWorkers: 4, Engine: eng}},
				Strategies: []strategy.Strategy{s}, Rates: []float64{3},
				Daemon: harness.DaemonSource{Bin: bin}, WorkDir: t.TempDir(), KeepRecords: false,
				Replicas: harness.Replicas{N: 3},
			}
			if mode == "cluster" {
				b.Replicas.Cluster = &harness.ClusterConfig{Etcd: e.Endpoints()}
			}
			out, err := b.Execute(t.Context())
			if err != nil {
				t.Fatalf("%s %s: %v", s.Name, mode, err)
			}
			r := out.Runs[0].Result
			share := 100 * float64(r.SessionsKept) / float64(max(r.Sessions, 1))
			figure(t, "show1 strategy=%s replicas=3 mode=%s sessions=%d kept_on_one_prefill=%d (%.1f%%) tiers=%v errors=%v ttft_p90=%.3fs hit=%.3f",
				s.Name, mode, r.Sessions, r.SessionsKept, share, r.TierMix, r.Errors, r.TTFT.P90, r.HitRate)
			if mode == "cluster" && share < 99 {
				t.Errorf("%s cluster: %.1f%% of sessions kept every turn on one prefill; want >= 99%%", s.Name, share)
			}
		}
	}
}

// ---- Show 2: a shared-prefix load spread over replicas --------------------

func TestClusterSoak_SharedPrefixAcrossReplicas(t *testing.T) {
	clusterLong(t)
	e := etcdtest.Start(t, etcdtest.Options{Members: 3})
	bin := buildDaemon(t)
	hard, err := strategy.ByName(strategy.NameHard)
	if err != nil {
		t.Fatal(err)
	}
	scenario := harness.Scenario{
		Name: "shared-prefix", Seed: 1, Requests: 1000, Warmup: 0.2, CachePressure: 1.5,
		Workload: workload.SharedPrefix{Options: workload.Options{Stream: true}, Groups: 64, PromptsPerGroup: 16,
			SystemTokens: 2048, QuestionTokens: 128, OutputTokens: 256},
		Fleet: harness.FleetConfig{Workers: 8, Engine: engine.DefaultConfig()},
	}
	// Load 1.0 is one replica's saturation rate with the hard law.
	one := harness.Bench{Scenario: scenario, Strategies: []strategy.Strategy{hard}, Loads: []float64{0.7},
		Saturation: harness.SaturationConfig{Requests: 500}, Daemon: harness.DaemonSource{Bin: bin}, WorkDir: t.TempDir()}
	out, err := one.Execute(t.Context())
	if err != nil {
		t.Fatalf("one replica: %v", err)
	}
	sat := out.Info.SaturationRate
	base := out.Runs[0].Result
	figure(t, "show2 saturation=%.3g req/s (hard, one replica); load 70%% = %.3g req/s", sat, 0.7*sat)
	report := func(label string, r *harness.Result) {
		figure(t, "show2 %s hit=%.3f (oracle %.3f) ttft_p50=%.3fs ttft_p90=%.3fs completed=%d/%d errors=%v hit_vs_one=%+.1f%% ttft_p90_vs_one=%+.1f%%",
			label, r.HitRate, r.OracleHitRate, r.TTFT.P50, r.TTFT.P90, r.Completed, r.Requests, r.Errors,
			100*(r.HitRate/base.HitRate-1), 100*(r.TTFT.P90/base.TTFT.P90-1))
	}
	report("replicas=1", base)
	for _, mode := range []string{"cluster", "independent"} {
		b := one
		b.Loads, b.SaturationRate, b.WorkDir = []float64{0.7}, sat, t.TempDir()
		b.Replicas = harness.Replicas{N: 3}
		if mode == "cluster" {
			b.Replicas.Cluster = &harness.ClusterConfig{Etcd: e.Endpoints()}
		}
		o, err := b.Execute(t.Context())
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		report("replicas=3 mode="+mode, o.Runs[0].Result)
	}
}

// ---- load for the fault soaks ---------------------------------------------

// loadGen sends conversations through the live replicas: each client is a
// conversation whose turns rotate over the replicas (a front load balancer
// that stops sending to a replica once it is known dead).
type loadGen struct {
	r *clusterRig

	// mu orders every request's start (picking a live replica, counting it
	// in flight) and end against remove, so a count read with a replica's
	// removal is exact.
	mu   sync.Mutex
	live []*replicaProc
	// by replica index: requests sent, failed; failures' descriptions.
	sent, failed map[int]int
	failures     []string
	// inflight counts the requests waiting for an answer, by replica.
	inflight map[int]int
	tokens   int // max_tokens per request
	stop     chan struct{}
	wg       sync.WaitGroup
}

func newLoadGen(r *clusterRig, clients int, gap time.Duration) *loadGen {
	g := &loadGen{r: r, live: slices.Clone(r.replicas), sent: map[int]int{}, failed: map[int]int{}, inflight: map[int]int{}, tokens: 64, stop: make(chan struct{})}
	for c := 0; c < clients; c++ {
		g.wg.Add(1)
		go g.client(c, gap)
	}
	return g
}

func (g *loadGen) client(c int, gap time.Duration) {
	defer g.wg.Done()
	conv := fmt.Sprintf("soak-%d", c)
	for turn := 0; ; turn++ {
		select {
		case <-g.stop:
			return
		case <-time.After(gap/2 + time.Duration(rand.Int64N(int64(gap)))):
		}
		g.mu.Lock()
		p := g.live[(c+turn)%len(g.live)]
		g.inflight[p.idx]++
		g.mu.Unlock()
		res := p.chatN(g.r.port, conv, fmt.Sprintf("%s turn %d: tell me more about the thing we discussed", conv, turn), g.tokens)
		g.mu.Lock()
		g.inflight[p.idx]--
		g.sent[p.idx]++
		if res.err != nil || res.status != 200 {
			g.failed[p.idx]++
			g.failures = append(g.failures, fmt.Sprintf("replica %d %s turn %d: %v %d", p.idx, conv, turn, res.err, res.status))
		}
		g.mu.Unlock()
	}
}

// remove takes replica p out of the live set and runs act (a signal to
// it; nil for none) in the same instant: no request starts on p and no
// answer is counted in between. It returns the requests then in flight on
// p — exactly those act can cut off — and the failures so far by replica.
func (g *loadGen) remove(p *replicaProc, act func()) (inflight int, failed map[int]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.live = slices.DeleteFunc(g.live, func(x *replicaProc) bool { return x == p })
	if act != nil {
		act()
	}
	return g.inflight[p.idx], maps(g.failed)
}

// without removes replica p from the live set.
func (g *loadGen) without(p *replicaProc) { g.remove(p, nil) }

// with puts replica p back.
func (g *loadGen) with(p *replicaProc) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.live = append(g.live, p)
}

func (g *loadGen) close() {
	close(g.stop)
	g.wg.Wait()
}

// counts returns the sent and failed requests by replica.
func (g *loadGen) counts() (sent, failed map[int]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps(g.sent), maps(g.failed)
}

func maps(m map[int]int) map[int]int {
	out := make(map[int]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// ---- Show 3: rules through etcd, etcd faults --------------------------------

func TestClusterSoak_RulesAndEtcdFaults(t *testing.T) {
	clusterLong(t)
	r := startRig(t, rigConfig{replicas: 3, etcdMembers: 3, prefill: 4, decode: 4, scale: 1})
	a, b, c := r.replicas[0], r.replicas[1], r.replicas[2]
	r.serveRule(a)
	load := newLoadGen(r, 12, 200*time.Millisecond)

	// POST on A, served on B and C; DELETE on B, gone on A and C — 20 times
	// on a rule of its own (port 3000+i).
	var post, del []time.Duration
	for i := 0; i < 20; i++ {
		port := 3000 + i
		body := ruleJSON(t, r.fleet, r.vip, port, map[string]any{"pd_cache_aware_mode": true, "kvExactMode": 1})
		start := time.Now()
		if code, resp := a.do(http.MethodPost, "/netlox/v1/config/loadbalancer", body); code != 200 {
			t.Fatalf("POST %d: %d %s", port, code, resp)
		}
		for _, p := range []*replicaProc{b, c} {
			waitUntil(t, "served on the others", 2*time.Second, func() bool { return p.chat(port, "", "x").status == 200 })
		}
		post = append(post, time.Since(start))
		path := fmt.Sprintf("/netlox/v1/config/loadbalancer/externalipaddress/%s/port/%d/protocol/tcp", r.vip, port)
		start = time.Now()
		if code, resp := b.do(http.MethodDelete, path, ""); code != 200 {
			t.Fatalf("DELETE %d: %d %s", port, code, resp)
		}
		for _, p := range []*replicaProc{a, c} {
			waitUntil(t, "gone on the others", 2*time.Second, func() bool { return p.chat(port, "", "x").err != nil })
		}
		del = append(del, time.Since(start))
	}
	slices.Sort(post)
	slices.Sort(del)
	figure(t, "show3 POST on A -> served on B and C: p50 %v max %v (20 rules); DELETE on B -> gone on A and C: p50 %v max %v",
		post[10].Round(time.Millisecond), post[19].Round(time.Millisecond), del[10].Round(time.Millisecond), del[19].Round(time.Millisecond))
	if post[19] > time.Second || del[19] > time.Second {
		t.Errorf("a rule change took more than 1 s to reach every replica (POST max %v, DELETE max %v)", post[19], del[19])
	}

	// kill -9 of the etcd leader for 10 s: nothing changes.
	sent0, failed0 := load.counts()
	leader := etcdLeader(t, r.etcd)
	r.etcd.Member(leader).Kill()
	writes, writeErrs := 0, 0
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; time.Now().Before(deadline); i++ {
		port := 3100 + i
		body := ruleJSON(t, r.fleet, r.vip, port, nil)
		code, _ := r.replicas[i%3].do(http.MethodPost, "/netlox/v1/config/loadbalancer", body)
		writes++
		if code != 200 {
			writeErrs++
		}
		path := fmt.Sprintf("/netlox/v1/config/loadbalancer/externalipaddress/%s/port/%d/protocol/tcp", r.vip, port)
		if code, _ := r.replicas[(i+1)%3].do(http.MethodDelete, path, ""); code != 200 {
			writeErrs++
		}
		writes++
		time.Sleep(200 * time.Millisecond)
	}
	if err := r.etcd.Member(leader).Restart(); err != nil {
		t.Fatal(err)
	}
	sent1, failed1 := load.counts()
	figure(t, "show3 kill -9 of the etcd leader (member %d of 3, 10 s): REST writes %d, failed %d; data-plane requests %d, failed %d; members %d/%d/%d",
		leader, writes, writeErrs, sum(sent1)-sum(sent0), sum(failed1)-sum(failed0), len(a.cluster().Members), len(b.cluster().Members), len(c.cluster().Members))
	if writeErrs > 0 || sum(failed1) != sum(failed0) {
		t.Errorf("one etcd member down changed something: %d write errors, %d data-plane errors", writeErrs, sum(failed1)-sum(failed0))
	}
	if err := r.etcd.WaitHealthy(20 * time.Second); err != nil {
		t.Fatal(err)
	}

	// Every etcd member down for 20 s: REST writes 503, no data-plane error.
	r.etcd.KillAll()
	start := time.Now()
	code, body := c.do(http.MethodPost, "/netlox/v1/config/loadbalancer", ruleJSON(t, r.fleet, r.vip, 3999, nil))
	answered := time.Since(start)
	if code != http.StatusServiceUnavailable {
		t.Errorf("POST with etcd down: %d %s; want 503", code, body)
	}
	time.Sleep(20*time.Second - answered)
	sent2, failed2 := load.counts()
	if err := r.etcd.RestartAll(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	waitUntil(t, "writes accepted again", 30*time.Second, func() bool {
		code, _ := a.do(http.MethodPost, "/netlox/v1/config/loadbalancer", ruleJSON(t, r.fleet, r.vip, 3998, nil))
		return code == 200
	})
	resumed := time.Since(back)
	load.close()
	sent3, failed3 := load.counts()
	figure(t, "show3 all etcd members down 20 s: REST POST answered %d in %v (%q); data-plane requests during the outage %d, failed %d; writes accepted %v after etcd restarted; whole soak %d requests, %d failed",
		code, answered.Round(time.Millisecond), firstLine(body), sum(sent2)-sum(sent1), sum(failed2)-sum(failed1), resumed.Round(time.Millisecond), sum(sent3), sum(failed3))
	if sum(failed3) > 0 {
		t.Errorf("data-plane errors: %v", load.failures)
	}
}

// ---- Show 4: SIGKILL of a replica under load ----------------------------------

func TestClusterSoak_ReplicaKilledUnderLoad(t *testing.T) {
	clusterLong(t)
	r := startRig(t, rigConfig{replicas: 3, etcdMembers: 3, prefill: 4, decode: 4, scale: 1})
	a, b, c := r.replicas[0], r.replicas[1], r.replicas[2]
	r.serveRule(a)
	load := newLoadGen(r, 36, 300*time.Millisecond)
	time.Sleep(15 * time.Second) // sessions pinned everywhere

	owned := c.cluster().OwnedShards
	sent0, _ := load.counts()
	killed := time.Now()
	// The front load balancer stops sending to C as it dies.
	inflight, failed0 := load.remove(c, func() { _ = c.cmd.Process.Signal(syscall.SIGKILL) })
	<-c.done
	// Until every shard the killed replica owned is active on a survivor.
	var reanswer time.Duration
	waitUntil(t, "C's shards answered by the survivors", 30*time.Second, func() bool {
		have := map[string]bool{}
		for _, p := range []*replicaProc{a, b} {
			for _, s := range p.cluster().OwnedShards {
				have[s] = true
			}
		}
		for _, s := range owned {
			if !have[s] {
				return false
			}
		}
		reanswer = time.Since(killed)
		return true
	})
	r.waitMembers(2, 30*time.Second)
	membersAfter := time.Since(killed)
	time.Sleep(15 * time.Second)
	load.close()
	sent1, failed1 := load.counts()
	lostOnC := failed1[c.idx] - failed0[c.idx]
	errsAB := failed1[a.idx] + failed1[b.idx] - failed0[a.idx] - failed0[b.idx]
	figure(t, "show4 SIGKILL of replica C with %d requests in flight on it: lost %d (all on C), errors on A and B %d of %d requests after the kill; C's %d session shards answered again by A/B %v after the kill; membership settled at 2 after %v",
		inflight, lostOnC, errsAB, sum(sent1)-sum(sent0)-(sent1[c.idx]-sent0[c.idx]), len(owned), reanswer.Round(10*time.Millisecond), membersAfter.Round(10*time.Millisecond))
	if errsAB != 0 {
		t.Errorf("errors on the surviving replicas: %v", load.failures)
	}
	if lostOnC > inflight {
		t.Errorf("lost %d requests on C; only %d were in flight", lostOnC, inflight)
	}
}

// ---- frozen replica ---------------------------------------------------------

func TestClusterSoak_ReplicaFrozenRejoins(t *testing.T) {
	clusterLong(t)
	r := startRig(t, rigConfig{replicas: 3, etcdMembers: 3, prefill: 4, decode: 4, scale: 1})
	a, b, c := r.replicas[0], r.replicas[1], r.replicas[2]
	r.serveRule(a)
	load := newLoadGen(r, 24, 300*time.Millisecond)
	time.Sleep(10 * time.Second)
	before := c.cluster()
	frozen := time.Now()
	_ = c.cmd.Process.Signal(syscall.SIGSTOP)
	load.without(c)
	sent0, failed0 := load.counts()
	r.replicas = []*replicaProc{a, b}
	r.waitMembers(2, 15*time.Second)
	left := time.Since(frozen)
	time.Sleep(10*time.Second - time.Since(frozen))
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	thawed := time.Now()
	r.replicas = []*replicaProc{a, b, c}
	r.waitMembers(3, 30*time.Second)
	rejoin := time.Since(thawed)
	load.with(c)
	time.Sleep(10 * time.Second)
	load.close()
	after := c.cluster()
	// No shard is active on two replicas after the heal.
	seen := map[string]int{}
	for _, p := range r.replicas {
		for _, s := range p.cluster().OwnedShards {
			seen[s]++
		}
	}
	doubles := 0
	for _, n := range seen {
		if n > 1 {
			doubles++
		}
	}
	sent1, failed1 := load.counts()
	errsAB := failed1[a.idx] + failed1[b.idx] - failed0[a.idx] - failed0[b.idx]
	figure(t, "show-freeze SIGSTOP of replica C for 10 s: A and B dropped it after %v; after SIGCONT C rejoined as a fresh member (%s -> %s, rejoins %d, reason %q) and all three agreed after %v; double activations %d; errors on A and B %d of %d; errors overall %d",
		left.Round(10*time.Millisecond), before.MemberID, after.MemberID, after.Rejoins, after.LastRejoinReason, rejoin.Round(10*time.Millisecond), doubles,
		errsAB, sum(sent1)-sum(sent0), sum(failed1))
	if doubles > 0 || after.MemberID == before.MemberID || errsAB != 0 {
		t.Errorf("frozen replica: doubles %d, member id %s -> %s, errors on A/B %d (%v)", doubles, before.MemberID, after.MemberID, errsAB, load.failures)
	}
}

func sum(m map[int]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 140 {
		return s[:140] + "…"
	}
	return s
}

// etcdLeader returns the index of the etcd cluster's leader.
func etcdLeader(t *testing.T, c *etcdtest.Cluster) int {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for i := 0; i < c.Members(); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := cli.Status(ctx, c.Member(i).ClientURL)
		cancel()
		if err == nil && st.Leader == st.Header.MemberId {
			return i
		}
	}
	t.Fatal("no etcd leader found")
	return -1
}
