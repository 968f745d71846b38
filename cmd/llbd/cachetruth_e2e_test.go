package main

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llbproject/llb/restapi"
)

// Cache truth on the simulated fleet (issue 14): the real llbd in front of
// simulated vLLM worker processes, real ZMQ KV events, real HTTP. llb
// predicts, for every request, the cached tokens of the prefill endpoint it
// picked and compares them with the usage.prompt_tokens_details.cached_tokens
// the worker reports. A healthy fleet agrees; a wrong hash seed, a wrong
// kvBlockSize and a worker restarted with a cold cache behind llb's back
// are each detected, named and demoted. The tests log after how many
// requests (make cache-truth-soak runs the healthy fleet for ten minutes).

// envCacheTruthSoak selects the long healthy soak (make cache-truth-soak);
// its value is the duration ("10m").
const envCacheTruthSoak = "LLB_CACHE_TRUTH_SOAK"

// truthLoad sends completions whose prompts share a few long prefixes
// ("documents"), the workload that makes a prefix cache matter.
type truthLoad struct {
	t    *testing.T
	f    *pdFleet
	c    *http.Client
	docs []string
	sent int
	// routes are the X-Llb-Route headers seen, in order.
	routes []string
}

func newTruthLoad(t *testing.T, f *pdFleet, docs int, tag string) *truthLoad {
	l := &truthLoad{t: t, f: f, c: loadClient(1)}
	for i := 0; i < docs; i++ {
		l.docs = append(l.docs, strings.Repeat(fmt.Sprintf("Document %s-%d is about subject %d and its many details. ", tag, i, i*7), 10))
	}
	t.Cleanup(l.c.CloseIdleConnections)
	return l
}

// send asks one question about document doc; anything but a complete 2xx
// fails the test. It returns the route header.
func (l *truthLoad) send(doc int) string {
	l.t.Helper()
	l.sent++
	outcome, detail, h := ask(l.c, l.f.vip, fmt.Sprintf("%s Question %d: what follows?", l.docs[doc], l.sent), 2, false, 25*time.Second)
	if outcome != outOK {
		l.t.Fatalf("request %d: %s %s", l.sent, outcome, detail)
	}
	r := h.Get("X-Llb-Route")
	l.routes = append(l.routes, r)
	return r
}

// prefillStates is the prefill endpoints' status (prefill endpoints first).
func (l *truthLoad) prefillStates() []endpointState {
	return l.f.status()[:len(l.f.prefill)]
}

// mismatched returns the first prefill endpoint whose predictions are in
// mismatch, or -1.
func mismatched(eps []endpointState) int {
	for i, e := range eps {
		if e.KVPrediction != nil && e.KVPrediction.State == restapi.PredictionMismatch {
			return i
		}
	}
	return -1
}

// untilMismatch sends questions round-robin over the documents until a
// prefill endpoint's predictions are in mismatch; it returns how many
// requests and how long that took, and the endpoint's state.
func (l *truthLoad) untilMismatch(max int) (int, time.Duration, endpointState) {
	l.t.Helper()
	start, began := l.sent, time.Now()
	for l.sent-start < max {
		l.send((l.sent - start) % len(l.docs))
		eps := l.prefillStates()
		if i := mismatched(eps); i >= 0 {
			return l.sent - start, time.Since(began), eps[i]
		}
	}
	l.t.Fatalf("no prediction mismatch after %d requests; states %+v", max, predictionsOf(l.prefillStates()))
	return 0, 0, endpointState{}
}

// mismatchedAll reports whether every prefill endpoint is in mismatch.
func mismatchedAll(eps []endpointState) bool {
	for _, e := range eps {
		if e.KVPrediction == nil || e.KVPrediction.State != restapi.PredictionMismatch {
			return false
		}
	}
	return true
}

// predictionsOf renders the prefill endpoints' records for messages.
func predictionsOf(eps []endpointState) string {
	var b strings.Builder
	for i, e := range eps {
		late := uint64(0)
		if e.KVPrediction != nil {
			late = e.KVPrediction.Late
		}
		fmt.Fprintf(&b, "[%d %s late=%d ignored=%s]", i, restapi.FormatKVPrediction(e.KVPrediction), late, restapi.FormatKVIgnored(e.KVIgnored))
	}
	return b.String()
}

// truthTotals sums the prefill endpoints' outcomes.
func truthTotals(eps []endpointState) (match, over, under, late uint64) {
	for _, e := range eps {
		if p := e.KVPrediction; p != nil {
			match, over, under, late = match+p.Match, over+p.Over, under+p.Under, late+p.Late
		}
	}
	return
}

// truthFleet starts a 2-prefill, 2-decode fleet with a 1 s KV warm-up and
// waits it out.
func truthFleet(t *testing.T, fs fleetSpec) *pdFleet {
	fs.prefill, fs.decode = 2, 2
	if fs.timeScale == 0 {
		fs.timeScale = 0.2
	}
	if fs.rule == nil {
		fs.rule = map[string]any{}
	}
	fs.rule["kvWarmupSec"] = 1
	fs.env = append(fs.env, "LOXILB_KV_COLDSTART_SEED_N=0")
	f := startPDFleet(t, fs)
	waitWarm(t, f)
	return f
}

var truthHeaderRE = regexp.MustCompile(`kv_predicted=(\d+) kv_cached=(\d+)`)

func TestCacheTruth_HealthyFleetAgreesAndRaisesNoAlarm(t *testing.T) {
	// Small GPU caches (128 blocks of 16 tokens) under 24 documents of
	// about 8 blocks: the engines evict all the time, so predictions race
	// with BlockRemoved events, as on a busy fleet.
	f := truthFleet(t, fleetSpec{prefillSpec: func(s *procSpec) { s.NumBlocks = 128 }})
	// The short version: 3 clients, 40 requests each. The soak: 4 clients
	// for LLB_CACHE_TRUTH_SOAK (make cache-truth-soak: 10 minutes).
	clients, perClient, soakFor := 3, 40, time.Duration(0)
	if v := os.Getenv(envCacheTruthSoak); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", envCacheTruthSoak, v, err)
		}
		clients, soakFor = 4, d
	}
	loads := make([]*truthLoad, clients)
	for i := range loads {
		// Every client asks about the same 24 documents: requests for one
		// prefix run concurrently, as in production.
		loads[i] = newTruthLoad(t, f, 24, "healthy")
	}
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan string, clients)
	for i, l := range loads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < perClient || time.Since(start) < soakFor; n++ {
				select {
				case <-stop:
					return
				default:
				}
				doc := (n*7 + i*5) % len(l.docs)
				l.sent++
				outcome, detail, h := ask(l.c, f.vip, fmt.Sprintf("%s Question %d-%d: what follows?", l.docs[doc], i, l.sent), 2, false, 25*time.Second)
				if outcome != outOK {
					errs <- fmt.Sprintf("client %d request %d: %s %s", i, l.sent, outcome, detail)
					return
				}
				l.routes = append(l.routes, h.Get("X-Llb-Route"))
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case e := <-errs:
			close(stop)
			<-done
			t.Fatal(e)
		case <-time.After(5 * time.Second):
			if eps := f.status()[:len(f.prefill)]; mismatched(eps) >= 0 {
				close(stop)
				<-done
				t.Fatalf("alarm on a healthy fleet after %s: %s", time.Since(start).Round(time.Second), predictionsOf(eps))
			}
		}
	}
	select {
	case e := <-errs:
		t.Fatal(e)
	default:
	}
	sent := 0
	var routes []string
	for _, l := range loads {
		sent += l.sent
		routes = append(routes, l.routes...)
	}
	// The last answers' comparisons may still be waiting on the mirror
	// (an under is confirmed up to 250 ms after its answer).
	waitUntil(t, "every request compared", 5*time.Second, func() bool {
		m, o, u, _ := truthTotals(f.status()[:len(f.prefill)])
		return m+o+u >= uint64(sent)
	})
	eps := f.status()[:len(f.prefill)]
	match, over, under, late := truthTotals(eps)
	if j := mismatched(eps); j >= 0 || f.d.log.has("kv cache predictions keep disagreeing") {
		t.Fatalf("alarm on a healthy fleet: %s\n%s", predictionsOf(eps), grepLog(f.d.log, "kv cache predictions"))
	}
	// An under or over the mirror confirmed afterwards was its lag (a
	// request of the prefix placed a moment before; an eviction whose
	// event was on the way); the rest must be rare.
	if match+over+under != uint64(sent) || match+late < uint64(sent)*98/100 {
		t.Fatalf("%d requests: %d match, %d over, %d under (%d late); want every request compared, ≥ 98%% matching or late", sent, match, over, under, late)
	}
	hits := 0
	for _, r := range routes {
		if m := truthHeaderRE.FindStringSubmatch(r); m != nil && m[1] == m[2] && m[1] != "0" {
			hits++
		}
	}
	if hits == 0 {
		t.Fatalf("no route header carried equal non-zero predicted and cached tokens: %q", routes[len(routes)-1])
	}
	m := f.metrics()
	if got := m.sum("llb_kv_prediction_total", `outcome="match"`); got != float64(match) {
		t.Fatalf("llb_kv_prediction_total match %v; status says %d", got, match)
	}
	if got := m.sum("llb_kv_prediction_error_tokens_count"); got != float64(sent) {
		t.Fatalf("error histogram count %v; want %d", got, sent)
	}
	var evicted uint64
	for _, w := range f.prefill {
		evicted += w.debug().Engine.BlocksRemoved
	}
	if evicted == 0 {
		t.Fatal("the engines evicted nothing; the test wants cache pressure")
	}
	t.Logf("healthy fleet: %d clients, %d requests over %s, %d blocks evicted by the engines, %d match, %d over, %d under (%d of them late: the mirror caught up once the engine answered); %d route headers with equal non-zero predicted and cached tokens; no alarm",
		clients, sent, time.Since(start).Round(time.Second), evicted, match, over, under, late, hits)
}

// TestCacheTruth_WrongHashSeedIsDetectedAndDemoted: llb hashes prompts with
// LLB_KV_NONE_HASH_SEED=12345 while the engines run PYTHONHASHSEED=0, so
// the mirror never matches a prompt. With vLLM's full events the contract
// check sees it too; with lean events (LoxiLB's CI publisher, vLLM before
// mid-2025) only the prediction check can.
func TestCacheTruth_WrongHashSeedIsDetectedAndDemoted(t *testing.T) {
	for _, lean := range []bool{true, false} {
		t.Run(fmt.Sprintf("lean_events=%v", lean), func(t *testing.T) {
			f := truthFleet(t, fleetSpec{
				env:         []string{"LLB_KV_NONE_HASH_SEED=12345"},
				rule:        map[string]any{"kvNoneHashSeed": nil},
				prefillSpec: func(s *procSpec) { s.LeanEvents = lean },
			})
			l := newTruthLoad(t, f, 3, "seed")
			n, took, ep := l.untilMismatch(400)
			p := ep.KVPrediction
			if p.Cause != "hash_seed" || !p.Demoted || !strings.Contains(p.Detail, "PYTHONHASHSEED") {
				t.Fatalf("endpoint %d: %+v; want hash_seed, demoted", ep.EpIdx, p)
			}
			warn := f.d.log.waitMsg(t, "kv cache predictions keep disagreeing", 5*time.Second)
			if warn["level"] != "warn" || warn["reason"] != "hash_seed" {
				t.Fatalf("warning %v; want level warn, reason hash_seed", warn)
			}
			// A wrong seed shows on every endpoint: once all are demoted, a
			// prompt llb has not placed recently (so no recent placement
			// to follow, the headroom law's "pending") falls through Tier
			// 1.5 saying why: the demotion, or (full events) the contract
			// check that tripped as well.
			all := l.sent
			for mismatchedAll(l.prefillStates()) == false {
				if l.sent-all > 400 {
					t.Fatalf("not every endpoint demoted after %d more requests: %s", l.sent-all, predictionsOf(l.prefillStates()))
				}
				l.send(l.sent % len(l.docs))
			}
			fresh := newTruthLoad(t, f, 1, "fresh")
			demoted := fresh.send(0)
			ok := strings.Contains(demoted, "via=no_session_key,cache_aware_off,prediction_mismatch ")
			if !lean {
				// The contract check trips after 3 checkable runs of an
				// endpoint; once it has, its guard comes first.
				ok = ok || strings.Contains(demoted, "via=no_session_key,cache_aware_off,hash_contract ")
			}
			if !ok {
				t.Fatalf("a fresh prompt was routed %q; want Tier 1.5 to fall through with prediction_mismatch", demoted)
			}
			t.Logf("wrong hash seed (lean events %v): detected after %d requests (%s) on endpoint %d — %s; contract check: %s\n  warning: %s\n  route: %s",
				lean, n, took.Round(10*time.Millisecond), ep.EpIdx, restapi.FormatKVPrediction(p), contractState(t, f, ep.EpIdx), warn["message"], demoted)
		})
	}
}

// contractState reads an endpoint's rank-0 hash contract from the KV
// inventory view.
func contractState(t *testing.T, f *pdFleet, ep int) string {
	t.Helper()
	code, body := f.d.do(http.MethodGet, "/netlox/v1/config/ai/kv/inventory?service_id="+f.key+"&ep_idx="+strconv.Itoa(ep)+"&limit=1", "")
	if code != http.StatusOK {
		t.Fatalf("inventory view: %d %s", code, body)
	}
	i := strings.Index(body, `"contract":{"state":"`)
	if i < 0 {
		return "unknown"
	}
	rest := body[i+len(`"contract":{"state":"`):]
	state, _, _ := strings.Cut(rest, `"`)
	if r := regexp.MustCompile(`"reason":"([a-z_]+)"`).FindStringSubmatch(rest); r != nil && state == "tripped" {
		state += " (" + r[1] + ")"
	}
	return state
}

// TestCacheTruth_WrongBlockSizeIsDetected: the rule says kvBlockSize 32,
// the engines use 16-token blocks.
func TestCacheTruth_WrongBlockSizeIsDetected(t *testing.T) {
	f := truthFleet(t, fleetSpec{rule: map[string]any{"kvBlockSize": 32}})
	l := newTruthLoad(t, f, 3, "blocks")
	n, took, ep := l.untilMismatch(400)
	p := ep.KVPrediction
	if p.Cause != "block_size" || !p.Demoted {
		t.Fatalf("endpoint %d: %+v; want block_size, demoted", ep.EpIdx, p)
	}
	t.Logf("wrong kvBlockSize: detected after %d requests (%s) on endpoint %d — %s: %s; contract check: %s",
		n, took.Round(10*time.Millisecond), ep.EpIdx, restapi.FormatKVPrediction(p), p.Detail, contractState(t, f, ep.EpIdx))
}

// TestCacheTruth_ColdRestart restarts the owner of several prefixes with an
// empty cache. When its KV events come back, llb's feed sees the publisher
// restart and clears the mirror: at most one wrong prediction per prefix,
// no alarm. When the worker comes back without KV events (redeployed
// without --kv-events-config), the mirror stays stale and only the
// prediction check can tell.
func TestCacheTruth_ColdRestart(t *testing.T) {
	for _, events := range []bool{true, false} {
		t.Run(fmt.Sprintf("kv_events=%v", events), func(t *testing.T) {
			f := truthFleet(t, fleetSpec{})
			l := newTruthLoad(t, f, 32, "restart")
			// Warm every document and learn which endpoint holds it.
			owner := map[int]int{}
			for round := 0; round < 3; round++ {
				for d := range l.docs {
					tier, ep, _ := routeOfHeader(t, l.send(d))
					if tier == "1.5" {
						owner[d] = ep
					}
				}
			}
			count := map[int]int{}
			for _, ep := range owner {
				count[ep]++
			}
			o := 0
			if count[1] > count[0] {
				o = 1
			}
			var mine []int
			for d, ep := range owner {
				if ep == o {
					mine = append(mine, d)
				}
			}
			// A restart behind llb's back costs each stale prefix one wrong
			// prediction (the engine caches it again); it takes stale
			// prefixes asked for over ladder.TruthMinBad to tell.
			if len(mine) < 12 {
				t.Fatalf("endpoint %d owns %d documents (%v); want at least 12", o, len(mine), owner)
			}
			sort.Ints(mine)
			before := l.prefillStates()[o].KVPrediction
			w := f.prefill[o]
			w.kill()
			w.spec.KVEvents = events
			w.start()
			f.waitEndpoints(w.spec.Name+" active", probeUpWithin, func(eps []endpointState) bool { return eps[o].State == "active" })
			if events {
				waitUntil(t, "the restarted worker's feed to reconnect", 10*time.Second, func() bool {
					return f.metrics().sum("loxilb_kv_subscriber_connected", fmt.Sprintf(`ep_idx="%d"`, o)) == 1
				})
				for round := 0; round < 4; round++ {
					for _, d := range mine {
						l.send(d)
					}
				}
				after := l.prefillStates()[o].KVPrediction
				wrong := (after.Over + after.Under) - (before.Over + before.Under)
				if after.State != restapi.PredictionOK || wrong > uint64(len(mine)) {
					t.Fatalf("after a restart the feed saw: %+v (%d wrong); want ok, at most one wrong per document", after, wrong)
				}
				t.Logf("cold restart with events: %d wrong predictions over %d requests for the %d documents it held, no alarm (the feed saw the publisher restart and cleared the mirror)",
					wrong, 4*len(mine), len(mine))
				return
			}
			// The stale prefixes come back one by one, as traffic does (a
			// request every 250 ms): a misconfiguration must outlast
			// ladder.TruthMinBad, a burst of misses does not count.
			start, began := l.sent, time.Now()
			var hit endpointState
			for round := 0; round < 2 && hit.KVPrediction == nil; round++ {
				for _, d := range mine {
					l.send(d)
					if eps := l.prefillStates(); eps[o].KVPrediction.State == restapi.PredictionMismatch {
						hit = eps[o]
						break
					}
					time.Sleep(250 * time.Millisecond) // workload pacing, not synchronisation
				}
			}
			if hit.KVPrediction == nil {
				t.Fatalf("no mismatch after %d requests: %s", l.sent-start, predictionsOf(l.prefillStates()))
			}
			if hit.KVPrediction.Cause != "stale_mirror" || !hit.KVPrediction.Demoted {
				t.Fatalf("endpoint %d: %+v; want stale_mirror, demoted", o, hit.KVPrediction)
			}
			t.Logf("cold restart without events: detected after %d requests (%s) for the %d documents endpoint %d held — %s: %s",
				l.sent-start, time.Since(began).Round(10*time.Millisecond), len(mine), o, restapi.FormatKVPrediction(hit.KVPrediction), hit.KVPrediction.Detail)
		})
	}
}

// routeOfHeader parses an X-Llb-Route value.
func routeOfHeader(t *testing.T, v string) (tier string, prefill, decode int) {
	h := http.Header{}
	h.Set("X-Llb-Route", v)
	return routeOf(t, h)
}

// grepLog returns the daemon's log lines whose message contains msg.
func grepLog(w *logWatch, msg string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for i, l := range w.lines {
		if m, _ := l["message"].(string); strings.Contains(m, msg) {
			out = append(out, w.raw[min(i, len(w.raw)-1)])
		}
	}
	return strings.Join(out, "\n")
}
