package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/worker"
)

// End-to-end tests of SGLang's P/D through the real llbd: simulated SGLang
// workers (bootstrap rooms on each prefill's bootstrap port, page-hash KV
// events over real ZMQ from the prefill side) behind a kvEngineType
// "sglang" P/D rule; llb dispatches each pair concurrently.

// sglangPD starts an SGLang P/D fleet of two prefill and two decode
// workers from baseIP, and llbd serving a kvExactMode:1 rule over it; it
// returns the fleet, the daemon, the rule key and the VIP's URL.
func sglangPD(t *testing.T, baseIP string, custom func(int, ladder.Role, *worker.Config), env ...string) (*fleet.Fleet, *daemon, string, string) {
	t.Helper()
	f := engineFleet(t, worker.DialectSGLang, fleet.Config{Prefill: 2, Decode: 2, BaseIP: baseIP, Customize: custom}, 16)
	if r := f.Rule(); r.KVEngineType != "sglang" || !r.PDDisaggMode || r.PDBootstrapPort == 0 {
		t.Fatalf("fleet rule %+v; want an sglang P/D rule with its bootstrap port", r)
	}
	d := startDataPlane(t, append([]string{"LOXILB_KV_COLDSTART_SEED_N=0"}, env...)...)
	port := freePort(t)
	d.post(ruleJSON(t, f, "127.0.0.1", port, map[string]any{"kvExactMode": 1, "kvWarmupSec": 1}))
	d.waitActive(port)
	key := fmt.Sprintf("tcp:127.0.0.1:%d", port)
	d.feedsConnected(key, 2, 1) // the prefill side publishes
	// kvWarmupSec runs on llbd's wall clock from the rule's start, with no
	// state to poll.
	time.Sleep(1100 * time.Millisecond)
	return f, d, key, fmt.Sprintf("http://127.0.0.1:%d", port)
}

// injected is how many faults of kind a worker injected.
func injected(t *testing.T, w *worker.Worker, kind string) uint64 {
	t.Helper()
	res, err := http.Get(w.URL() + "/_sim/faults")
	if err != nil {
		t.Fatalf("faults of %s: %v", w.URL(), err)
	}
	defer res.Body.Close()
	var v worker.FaultsView
	if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
		t.Fatalf("faults of %s: %v", w.URL(), err)
	}
	return v.Injected[kind]
}

// TestE2E_SGLangPDAnswersStreamedAndNotAndHitsTierOneFive: pairs answer
// with the decode's tokens, streamed or not, through one bootstrap room per
// pair on the prefill's bootstrap port; once the prefill side's page events
// arrive, Tier 1.5 routes a shared prefix to the prefill that cached it,
// which reports as cached what llb predicted.
func TestE2E_SGLangPDAnswersStreamedAndNotAndHitsTierOneFive(t *testing.T) {
	f, d, key, vip := sglangPD(t, "127.0.0.100", nil)
	res, body := complete(t, vip, `{"model":"sim-model","prompt":"Tell me about bootstrap rooms","max_tokens":8}`)
	if res.StatusCode != 200 {
		t.Fatalf("non-stream: %d %s\nlog:\n%s", res.StatusCode, body, d.log.text())
	}
	var out struct {
		Choices []struct{ Text string } `json:"choices"`
		Usage   struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil || len(out.Choices) != 1 || out.Usage.CompletionTokens != 8 {
		t.Fatalf("non-stream body %s (%v); want one choice of 8 tokens", body, err)
	}
	route := res.Header.Get("X-Llb-Route")
	if _, p, dc := routeOf(t, res.Header); p < 0 || p > 1 || dc < 2 || !strings.Contains(route, " engine=sglang") {
		t.Fatalf("route %q; want a prefill (0, 1), a decode (2, 3) and engine=sglang", route)
	}

	res, body = complete(t, vip, `{"model":"sim-model","prompt":"Stream a story about rooms","max_tokens":6,"stream":true}`)
	if res.StatusCode != 200 || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %q %s", res.StatusCode, res.Header.Get("Content-Type"), body)
	}
	if n := strings.Count(body, "data: {"); n != 6 || !strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]") {
		t.Fatalf("stream body has %d data events (want 6) and ends %q", n, body[max(0, len(body)-40):])
	}
	// Every pair went through a room: the decode legs pulled the KV their
	// prefill computed.
	var pulled uint64
	for _, m := range f.Members() {
		if m.Role == ladder.RoleDecode {
			pulled += m.Worker().Stats().RemotePrefillLegs
		}
	}
	if pulled != 2 {
		t.Fatalf("decode legs served from a prefill's KV: %d; want 2", pulled)
	}

	owner := tierOneFiveHit(t, d, vip, func(i int) string { return textPrompt("an sglang P/D rule's shared preamble", i) })
	if owner > 1 {
		t.Fatalf("tier 1.5 chose endpoint %d; want a prefill endpoint", owner)
	}
	if v := d.inventory(key, owner); v.HashAlgo != "sha256_sglang" || v.Total == 0 {
		t.Fatalf("inventory of prefill %d: hash_algo %q total %d; want sha256_sglang pages", owner, v.HashAlgo, v.Total)
	}
}

// TestE2E_SGLangPDRetriesAFailedPrefillOnAnotherPair: a prefill that drops
// its connection, or answers 500, while its decode waits in the room: the
// decode leg is cut and the request answered by another pair.
func TestE2E_SGLangPDRetriesAFailedPrefillOnAnotherPair(t *testing.T) {
	f, d, _, vip := sglangPD(t, "127.0.0.110", nil)
	faulty := f.Members()[0].Worker()
	for _, tc := range []struct {
		kind   string
		faults worker.Faults
	}{
		{"drop", worker.Faults{DropNext: 1}},
		{"error", worker.Faults{FailNext: 1}},
	} {
		if err := faulty.SetFaults(tc.faults); err != nil {
			t.Fatal(err)
		}
		retried := false
		for i := 0; i < 30 && injected(t, faulty, tc.kind) == 0; i++ {
			res, body := complete(t, vip, textPrompt(fmt.Sprintf("prefill %s %d", tc.kind, i), i))
			if res.StatusCode != 200 {
				t.Fatalf("%s %d: %d %s\nlog:\n%s", tc.kind, i, res.StatusCode, body, d.log.text())
			}
			route := res.Header.Get("X-Llb-Route")
			if strings.Contains(route, " retries=1") {
				retried = true
				if _, p, _ := routeOf(t, res.Header); p != 1 {
					t.Fatalf("%s: retried to prefill %d (%q); want the other prefill", tc.kind, p, route)
				}
			}
		}
		if injected(t, faulty, tc.kind) != 1 || !retried {
			t.Fatalf("%s: injected %d, retried %v; want the faulted prefill's pair retried once", tc.kind, injected(t, faulty, tc.kind), retried)
		}
	}
	if cut := d.metricValue("llb_pd_pair_cuts_total", `leg="decode"`); cut < 2 {
		t.Fatalf("decode legs cut after their prefill failed: %v; want 2", cut)
	}
}

// TestE2E_SGLangPDRelaysAnOriginClientError: a prompt longer than the
// engines' context is refused 400 by SGLang; llb relays the engine's
// answer as it is, not a 502, and does not retry it.
func TestE2E_SGLangPDRelaysAnOriginClientError(t *testing.T) {
	short := func(_ int, _ ladder.Role, c *worker.Config) { c.Engine.MaxModelLen = 256 }
	_, d, _, vip := sglangPD(t, "127.0.0.120", short)
	for _, stream := range []bool{false, true} {
		res, body := complete(t, vip, fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":4,"stream":%v}`, strings.Repeat("token ", 400), stream))
		if res.StatusCode != 400 || !strings.Contains(body, "256") {
			t.Fatalf("stream=%v: %d %s; want the engine's 400 naming its limit\nlog:\n%s", stream, res.StatusCode, body, d.log.text())
		}
		if strings.Contains(res.Header.Get("X-Llb-Route"), " error=") || strings.Contains(res.Header.Get("X-Llb-Route"), "retries=1") {
			t.Fatalf("stream=%v: route %q; want the origin's answer, not retried", stream, res.Header.Get("X-Llb-Route"))
		}
	}
}

// TestE2E_SGLangPDDecodeDeathMigratesTheStream: a decode worker that drops
// a stream after its first tokens: the stream goes on on a new pair (a new
// room), spliced into the client's, which gets every token and [DONE].
func TestE2E_SGLangPDDecodeDeathMigratesTheStream(t *testing.T) {
	f, d, _, vip := sglangPD(t, "127.0.0.130", nil)
	faulty := f.Members()[2].Worker()
	if err := faulty.SetFaults(worker.Faults{DropNext: 1, DropMode: worker.DropMidStream, DropAfterTokens: 3}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 30 && injected(t, faulty, "drop") == 0; i++ {
		res, body := complete(t, vip, `{"model":"sim-model","prompt":"a stream that outlives its decode `+strconv.Itoa(i)+`","max_tokens":12,"stream":true}`)
		if res.StatusCode != 200 {
			t.Fatalf("stream %d: %d %s", i, res.StatusCode, body)
		}
		if n := strings.Count(body, "data: {"); n < 12 || !strings.HasSuffix(strings.TrimSpace(body), "data: [DONE]") {
			t.Fatalf("stream %d has %d data events and ends %q; want all 12 tokens and [DONE]\nlog:\n%s", i, n, body[max(0, len(body)-60):], d.log.text())
		}
	}
	if injected(t, faulty, "drop") != 1 {
		t.Fatal("no stream reached the faulty decode")
	}
	eventually(t, "the broken stream counted as migrated", func() (bool, string) {
		v := d.metricValue("llb_migrations_total", `outcome="migrated"`)
		return v == 1, fmt.Sprint(v)
	})
}

// TestE2E_SGLangPDDecodeDeathCutsAStreamThatCannotGoOn: a stream whose
// request cannot be continued faithfully (echo) is cut when its decode
// dies mid-stream, never ended as if it were complete, and counted.
func TestE2E_SGLangPDDecodeDeathCutsAStreamThatCannotGoOn(t *testing.T) {
	f, d, _, vip := sglangPD(t, "127.0.0.140", nil)
	faulty := f.Members()[3].Worker()
	if err := faulty.SetFaults(worker.Faults{DropNext: 1, DropMode: worker.DropMidStream, DropAfterTokens: 3}); err != nil {
		t.Fatal(err)
	}
	cut := false
	for i := 0; i < 30 && injected(t, faulty, "drop") == 0; i++ {
		res, body := complete(t, vip, `{"model":"sim-model","prompt":"an echoed stream `+strconv.Itoa(i)+`","max_tokens":12,"stream":true,"echo":true}`)
		if res.StatusCode != 200 {
			t.Fatalf("stream %d: %d %s", i, res.StatusCode, body)
		}
		if _, _, dc := routeOf(t, res.Header); dc == 3 {
			cut = !strings.Contains(body, "[DONE]")
		}
	}
	if injected(t, faulty, "drop") != 1 || !cut {
		t.Fatalf("drops injected %d, stream cut %v; want the faulty decode's stream cut", injected(t, faulty, "drop"), cut)
	}
	eventually(t, "the cut counted as unsupported", func() (bool, string) {
		v := d.metricValue("llb_migrations_total", `outcome="unsupported"`)
		return v == 1, fmt.Sprint(v)
	})
}
