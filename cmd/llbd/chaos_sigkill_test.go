package main

import (
	"fmt"
	"testing"
	"time"
)

// SIGKILLed workers: worker processes die mid-stream (decode) and
// mid-prefill while clients keep the rule busy. Whatever had not reached a
// client is retried or resent elsewhere, or answered with a clean error; a
// stream that had sent bytes goes on on another pair (migration, issue 28;
// chaos_migrate_test.go checks its text) or is cut — never ended with a
// fake [DONE]; the dead
// endpoint is excluded within the probe's configured time; a restarted
// worker comes back.

// Bounds from the rule of startPDFleet (probeTimeout 1 s, probeRetries 2).
const (
	// excludeWithin: two failed probes a second apart, plus slack; under
	// load the breaker (3 consecutive failures) is usually first.
	excludeWithin = 3 * time.Second
	// probeUpWithin: the probe period grows by a second per failure while
	// down, up to 6 s (actors.ProbeConfig.MaxBackoff), plus slack.
	probeUpWithin = 8 * time.Second
	// backWithin: the breaker's 30 s open window (LoxiLB's P/D default),
	// then one half-open trial, plus slack.
	backWithin = 40 * time.Second
)

// killReport is what one kill measured.
type killReport struct {
	victim string
	// excluded is when the router stopped choosing the endpoint (breaker
	// or probe, whichever was first); probedDown when its probe saw it dead.
	excluded, probedDown time.Duration
	// probedUp is when the probe saw the restarted worker.
	probedUp time.Duration
	// back is when it served again (0 when not awaited: short run).
	back time.Duration
}

// killWhileBusy SIGKILLs endpoint ep's worker while it works — a prefill
// worker as soon as the router counts two of its prefill legs in flight, a
// decode worker as soon as two clients are reading streams from it —,
// measures how long the endpoint takes to be excluded, restarts the worker
// and measures how long its probe takes to see it again (and, with
// awaitBack, until it serves again).
func killWhileBusy(t *testing.T, f *pdFleet, ep int, live *tally, awaitBack bool) killReport {
	t.Helper()
	w := f.worker(ep)
	if w.spec.Role == "decode" {
		waitUntil(t, w.spec.Name+" streaming", 10*time.Second, func() bool { return live.streamingOn(w.addr()) >= 2 })
	} else {
		f.waitEndpoints(fmt.Sprintf("%s busy", w.spec.Name), 10*time.Second, func(eps []endpointState) bool {
			return len(eps) > ep && eps[ep].InFlight >= 2
		})
	}
	w.kill()
	killed := time.Now()
	rep := killReport{victim: w.spec.Name}
	rep.excluded = f.waitEndpoints(w.spec.Name+" excluded", excludeWithin, func(eps []endpointState) bool {
		return eps[ep].State != "active"
	})
	before := live.total()
	f.waitEndpoints(w.spec.Name+" probed down", excludeWithin-time.Since(killed), func(eps []endpointState) bool {
		return eps[ep].Probe == "down"
	})
	rep.probedDown = time.Since(killed)
	// The survivors carry the load for a while before the worker returns.
	waitUntil(t, "requests served while "+w.spec.Name+" is dead", 10*time.Second, func() bool { return live.total() >= before+16 })
	start := time.Now()
	w.start()
	f.waitEndpoints(w.spec.Name+" probed up after its restart", probeUpWithin, func(eps []endpointState) bool {
		return eps[ep].Probe == "up"
	})
	rep.probedUp = time.Since(start)
	if awaitBack {
		f.waitEndpoints(w.spec.Name+" serving again", backWithin, func(eps []endpointState) bool {
			return eps[ep].State == "active" && eps[ep].InFlight > 0
		})
		rep.back = time.Since(start)
	}
	return rep
}

func TestChaos_SIGKILLedWorkersCutOnlyWhatReachedTheClientAndComeBack(t *testing.T) {
	runSIGKILLChaos(t, "")
}

// The same kills on SGLang's P/D, where both legs of a pair run at once
// (the prefill waits in its bootstrap room for the decode), and on
// TensorRT-LLM's context and generation legs.
func TestChaos_EnginePDSIGKILLedWorkersCutOnlyWhatReachedTheClient(t *testing.T) {
	for _, engine := range []string{"sglang", "trtllm"} {
		t.Run(engine, func(t *testing.T) { runSIGKILLChaos(t, engine) })
	}
}

// runSIGKILLChaos kills a decode then a prefill worker of a P/D fleet of
// engine's workers ("" is vLLM) under load (the soak: each in turn, waiting
// for each to serve again) and checks the outcomes.
func runSIGKILLChaos(t *testing.T, engine string) {
	f := startPDFleet(t, fleetSpec{
		prefill: 2, decode: 2, timeScale: 0.5, dialect: engine,
		// Prefill legs take at least 150 ms, so a kill lands mid-prefill.
		prefillLatencyMS: 150,
		env:              []string{"LLB_PD_PREFILL_TIMEOUT_SEC=5", "LOXILB_KV_COLDSTART_SEED_N=0"},
	})
	const clients = 8
	// Streams of 64 tokens at 6 ms: a kill lands mid-stream.
	load := loadSpec{clients: clients, maxTokens: 64, stream: true, hungAfter: 25 * time.Second}
	stop := make(chan struct{})
	result := make(chan *tally, 1)
	live := newTally()
	go func() { result <- runLoadInto(f.vip, load, stop, live) }()

	// The short run kills a decode then a prefill worker once; the soak
	// kills each worker in turn and waits for every one to serve again.
	victims := soak([]int{2, 0}, []int{2, 0, 3, 1, 2, 0})
	var reports []killReport
	for _, ep := range victims {
		reports = append(reports, killWhileBusy(t, f, ep, live, chaosLong()))
	}
	close(stop)
	tl := <-result
	for _, r := range reports {
		back := "not awaited"
		if r.back > 0 {
			back = r.back.Round(time.Millisecond).String()
		}
		t.Logf("SIGKILL %s: excluded after %v, probed down after %v; after its restart probed up in %v, serving again: %s",
			r.victim, r.excluded.Round(time.Millisecond), r.probedDown.Round(time.Millisecond), r.probedUp.Round(time.Millisecond), back)
	}
	t.Logf("SIGKILL chaos: requests %s", tl)

	// Nothing hung; nothing ended with a fake [DONE]. With migration a
	// decode's death fails nothing; without it (or past its limit) a
	// stream cut by its decode worker's death and a non-streaming request
	// whose decode died before answering (502 pd_decode_backend_died,
	// LoxiLB's rule) are the only failures, and only the requests in
	// flight on a killed decode worker can have them.
	tl.check(t, outOK, outStreamCut, "http_502_pd_decode_backend_died")
	decodeKills := 0
	for _, ep := range victims {
		if ep >= 2 {
			decodeKills++
		}
	}
	if cut := tl.get(outStreamCut) + tl.get("http_502_pd_decode_backend_died"); cut > clients*decodeKills {
		t.Errorf("%d requests cut or failed by decode deaths; at most %d were in flight (%s)", cut, clients*decodeKills, tl)
	}
	if m := f.metrics(); m.sum("llb_migrations_total", `outcome="migrated"`) == 0 {
		t.Errorf("no stream moved to another pair: the decode kills did not land mid-stream (%s)", tl)
	}
	// The prefill kill: legs in flight on it and connects refused before
	// its exclusion were re-routed and succeeded.
	if tl.retriedOK() == 0 {
		t.Errorf("no request was retried on another endpoint after a kill (%s)", tl)
	}
	m := f.metrics()
	for _, name := range []string{"loxilb_pd_prefill_ep_died_total", "loxilb_pd_connect_failover_total", "loxilb_pd_cb_flips_total"} {
		if m.sum(name) == 0 {
			t.Errorf("%s is 0 after the kills", name)
		}
	}
}
