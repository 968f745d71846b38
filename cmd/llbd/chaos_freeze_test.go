package main

import (
	"syscall"
	"testing"
	"time"
)

// Frozen workers: a worker process stopped with SIGSTOP (a hung GPU, an
// NCCL deadlock) keeps its sockets open and accepts connections, but never
// answers. Unlike a dead worker, nothing fails fast: only the rule's
// timeouts can end the requests it holds. Every one must end within them —
// a stream cut after timeoutMemberData of silence, a request that got
// nothing answered 504 — and the breaker and the probe must exclude it.

// Timeouts of the frozen-worker rule.
const (
	freezeDataTimeout    = 2 * time.Second // timeoutMemberData
	freezePrefillTimeout = 3               // LLB_PD_PREFILL_TIMEOUT_SEC
)

// signal sends sig to the worker process.
func (p *procWorker) signal(sig syscall.Signal) {
	p.t.Helper()
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if err := cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%v to %s: %v", sig, p.spec.Name, err)
	}
}

func TestChaos_FrozenWorkersAreTimedOutAndExcludedNeverWaitedFor(t *testing.T) {
	runFreezeChaos(t, "")
}

// The same on SGLang's P/D, where the decode leg runs from the start of the
// pair: its silence until the prefill's KV arrives is the prefill's time,
// not the decode's (a timeoutMemberData shorter than the prefill deadline
// must not open a healthy decode's breaker for a frozen prefill).
func TestChaos_SGLangFrozenWorkersAreTimedOutAndExcluded(t *testing.T) {
	runFreezeChaos(t, "sglang")
}

// runFreezeChaos freezes a decode worker mid-stream, then a prefill worker
// mid-prefill, of a P/D fleet of engine's workers ("" is vLLM) under load,
// and checks every request ends within the rule's timeouts.
func runFreezeChaos(t *testing.T, engine string) {
	f := startPDFleet(t, fleetSpec{
		prefill: 2, decode: 2, timeScale: 0.5, dialect: engine,
		// Prefill legs of at least 400 ms, streams of 1.5 s and more: a
		// freeze lands mid-prefill and mid-stream.
		prefillLatencyMS: 400,
		env:              []string{"LLB_PD_PREFILL_TIMEOUT_SEC=3", "LOXILB_KV_COLDSTART_SEED_N=0"},
		rule:             map[string]any{"timeoutMemberData": int(freezeDataTimeout / time.Millisecond)},
	})
	const clients = 8
	load := loadSpec{clients: clients, maxTokens: 256, stream: true, hungAfter: 25 * time.Second}
	stop := make(chan struct{})
	result := make(chan *tally, 1)
	live := newTally()
	go func() { result <- runLoadInto(f.vip, load, stop, live) }()

	// Freeze a decode worker while two clients read streams from it, then
	// at once a prefill worker as soon as it holds two prefill legs.
	type frozen struct {
		name               string
		excluded, probedDn time.Duration
	}
	var report []frozen
	for _, pair := range soak([][2]int{{2, 0}}, [][2]int{{2, 0}, {3, 1}, {2, 1}}) {
		dec, pre := f.worker(pair[0]), f.worker(pair[1])
		waitUntil(t, dec.spec.Name+" streaming", 10*time.Second, func() bool { return live.streamingOn(dec.addr()) >= 2 })
		dec.signal(syscall.SIGSTOP)
		frozenAt := time.Now()
		f.waitEndpoints(pre.spec.Name+" prefilling", 5*time.Second, func(eps []endpointState) bool { return eps[pair[1]].InFlight >= 2 })
		pre.signal(syscall.SIGSTOP)
		// The first requests each holds time out (data timeout 2 s, prefill
		// deadline 3 s); three of them open its breaker. The probe's
		// /health times out too (2 s per probe, two probes).
		for _, ep := range pair {
			w := f.worker(ep)
			f.waitEndpoints(w.spec.Name+" excluded", 10*time.Second-time.Since(frozenAt), func(eps []endpointState) bool { return eps[ep].State != "active" })
			ex := time.Since(frozenAt)
			f.waitEndpoints(w.spec.Name+" probed down", 12*time.Second-time.Since(frozenAt), func(eps []endpointState) bool { return eps[ep].Probe == "down" })
			report = append(report, frozen{w.spec.Name, ex, time.Since(frozenAt)})
		}
		for _, ep := range pair {
			f.worker(ep).signal(syscall.SIGCONT)
		}
		for _, ep := range pair {
			w := f.worker(ep)
			f.waitEndpoints(w.spec.Name+" probed up after SIGCONT", probeUpWithin, func(eps []endpointState) bool { return eps[ep].Probe == "up" })
			if chaosLong() {
				f.waitEndpoints(w.spec.Name+" serving again", backWithin, func(eps []endpointState) bool {
					return eps[ep].State == "active" && eps[ep].InFlight > 0
				})
			}
		}
	}
	close(stop)
	tl := <-result
	for _, r := range report {
		t.Logf("SIGSTOP %s: excluded within %v, probed down within %v", r.name, r.excluded.Round(time.Millisecond), r.probedDn.Round(time.Millisecond))
	}
	t.Logf("frozen workers: requests %s", tl)

	// Nothing waited for a frozen worker beyond the rule's timeouts: a
	// stream it froze went on on the other decode (migration, issue 28)
	// once the probe or timeoutMemberData took it out, a request it held
	// before its first byte was answered 504.
	tl.check(t, outOK, outStreamCut, "http_504_pd_idle_timeout", "http_504_pd_prefill_timeout")
	if m := f.metrics(); m.sum("llb_migrations_total", `outcome="migrated"`) == 0 {
		t.Errorf("no stream moved off the frozen decode: the decode freeze did not land mid-stream (%s)", tl)
	}
	if tl.get("http_504_pd_prefill_timeout") == 0 {
		t.Errorf("no prefill leg hit its deadline: the prefill freeze did not land mid-prefill (%s)", tl)
	}
	// Only what a frozen worker held, or was sent before its breaker
	// opened (three timeouts), can fail.
	if failed := tl.total() - tl.get(outOK); failed > len(report)*(clients+3) {
		t.Errorf("%d requests failed for %d freezes; at most %d could have been held by a frozen worker (%s)",
			failed, len(report), len(report)*(clients+3), tl)
	}
}

// Without timeoutMemberData: the defaults bound a frozen decode worker (issue
// 13). A stream it held goes on on the other decode (migration, issue 28)
// when the probe takes the worker out or after the stream idle bound; a streamed
// request waiting for its first event is sent to the other decode after the
// decode bound; a non-streamed one is sent elsewhere as soon as the probe
// or the breaker takes the worker out. No request waits for the 24 h max
// stream duration, and none that had nothing yet fails.
func TestChaos_AFrozenDecodeIsBoundedByTheDefaultsWithoutADataTimeout(t *testing.T) {
	f := startPDFleet(t, fleetSpec{
		prefill: 1, decode: 2, timeScale: 0.5,
		env: []string{"LLB_PD_DECODE_TIMEOUT_SEC=2", "LLB_PD_IDLE_TIMEOUT_SEC=2", "LOXILB_KV_COLDSTART_SEED_N=0"},
	})
	const clients = 8
	load := loadSpec{clients: clients, maxTokens: 256, stream: true, hungAfter: 25 * time.Second}
	stop := make(chan struct{})
	result := make(chan *tally, 1)
	live := newTally()
	go func() { result <- runLoadInto(f.vip, load, stop, live) }()

	dec := f.worker(1) // decode-0
	waitUntil(t, dec.spec.Name+" streaming", 10*time.Second, func() bool { return live.streamingOn(dec.addr()) >= 2 })
	dec.signal(syscall.SIGSTOP)
	frozenAt := time.Now()
	f.waitEndpoints(dec.spec.Name+" probed down", 15*time.Second, func(eps []endpointState) bool { return eps[1].Probe == "down" })
	down := time.Since(frozenAt)
	time.Sleep(3 * time.Second) // load runs on the remaining decode meanwhile
	dec.signal(syscall.SIGCONT)
	f.waitEndpoints(dec.spec.Name+" probed up after SIGCONT", probeUpWithin, func(eps []endpointState) bool { return eps[1].Probe == "up" })
	close(stop)
	tl := <-result
	t.Logf("SIGSTOP %s: probed down within %v; requests %s", dec.spec.Name, down.Round(time.Millisecond), tl)
	tl.check(t, outOK, outStreamCut)
	if m := f.metrics(); m.sum("llb_migrations_total", `outcome="migrated"`) == 0 {
		t.Errorf("no stream moved off the frozen decode: the freeze did not land mid-stream (%s)", tl)
	}
	if tl.get(outStreamCut) > clients {
		t.Errorf("%d streams cut; at most the %d clients' streams on the frozen worker could be", tl.get(outStreamCut), clients)
	}
}
