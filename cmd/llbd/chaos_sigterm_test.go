package main

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SIGTERM under load: llbd stops accepting, lets the streams in flight
// finish within --drain-timeout, cuts (never fakes the end of) those that
// would outlive it, and exits 0.

// drainRun is one SIGTERM of a daemon with streams in flight.
type drainRun struct {
	streams  *tally        // the streams in flight at SIGTERM
	late     *tally        // requests sent after SIGTERM
	exitCode int           // llbd's exit status
	exitIn   time.Duration // SIGTERM to exit
	lastEnd  time.Duration // SIGTERM to the last in-flight stream's end
}

// sigtermWhileStreaming starts n streams of maxTokens, sends SIGTERM once
// every one of them is under way, keeps sending new requests until the
// daemon exits, and reports what the clients saw.
func sigtermWhileStreaming(t *testing.T, f *pdFleet, n, maxTokens int) drainRun {
	t.Helper()
	run := drainRun{streams: newTally(), late: newTally()}
	c := loadClient(n)
	defer c.CloseIdleConnections()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sent time.Time
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := streamRequest(t, f.vip, fmt.Sprintf("Drain stream %d: tell a long story.", i), maxTokens)
			outcome, detail, h := classify(c, req.Request, true, maxTokens, run.streams)
			req.cancel()
			mu.Lock()
			if !sent.IsZero() {
				run.lastEnd = max(run.lastEnd, time.Since(sent))
			}
			mu.Unlock()
			run.streams.add(outcome, detail, h)
		}()
	}
	waitUntil(t, "every stream under way", 10*time.Second, func() bool {
		under := 0
		for _, w := range f.decode {
			under += run.streams.streamingOn(w.addr())
		}
		return under == n
	})
	mu.Lock()
	sent = time.Now()
	mu.Unlock()
	if err := f.d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// New requests while llbd drains: served, refused or closed, never hung.
	exited := make(chan struct{})
	lateDone := make(chan struct{})
	go func() {
		defer close(lateDone)
		lc := loadClient(1)
		for i := 0; ; i++ {
			select {
			case <-exited:
				return
			default:
			}
			outcome, detail, h := ask(lc, f.vip, fmt.Sprintf("After SIGTERM %d.", i), 2, false, 25*time.Second)
			run.late.add(outcome, detail, h)
			time.Sleep(20 * time.Millisecond)
		}
	}()
	run.exitCode = f.d.awaitExit(30 * time.Second)
	run.exitIn = time.Since(sent)
	close(exited)
	<-lateDone
	wg.Wait()
	return run
}

func TestChaos_SIGTERMDrainsStreamsWithinTheDeadlineAndExitsZero(t *testing.T) {
	const clients = 8
	fs := fleetSpec{prefill: 2, decode: 2, timeScale: 1, drain: "10s"}
	f := startPDFleet(t, fs)
	// 100 tokens at 12 ms: streams of 1.2–2.4 s, well inside the 10 s drain.
	rounds := soak(1, 5)
	for r := 0; r < rounds; r++ {
		if r > 0 {
			f.startDaemon(fs)
		}
		run := sigtermWhileStreaming(t, f, clients, 100)
		t.Logf("drain %d: exit %d after %v; last stream ended %v after SIGTERM; streams %s; sent during the drain %s",
			r, run.exitCode, run.exitIn.Round(time.Millisecond), run.lastEnd.Round(time.Millisecond), run.streams, run.late)
		if run.exitCode != 0 {
			t.Errorf("drain %d: exit code %d; want 0\nlog:\n%s", r, run.exitCode, f.d.log.text())
		}
		// Every stream in flight at SIGTERM finished whole.
		run.streams.check(t, outOK)
		if run.streams.total() != clients {
			t.Errorf("drain %d: %d streams accounted for; want %d", r, run.streams.total(), clients)
		}
		// llbd waited for them, and no longer than it had to.
		if run.exitIn < run.lastEnd || run.exitIn > run.lastEnd+3*time.Second {
			t.Errorf("drain %d: exited %v after SIGTERM, last stream ended at %v; want the exit right after it", r, run.exitIn, run.lastEnd)
		}
		// Sent while llbd drains: served, refused, or — a connection the
		// kernel had queued when the listener closed — closed unanswered.
		run.late.check(t, outOK, outRefused, outClosed)
		if run.late.get(outRefused) == 0 {
			t.Errorf("drain %d: no request was refused during the drain (%s)", r, run.late)
		}
	}

	// A drain deadline shorter than the streams: they are cut at the
	// deadline — a broken stream for the client, never a fake [DONE] — and
	// llbd still exits 0, within the deadline plus the cut grace.
	short := fleetSpec{prefill: 2, decode: 2, timeScale: 1, drain: "1s"}
	f.startDaemon(short)
	run := sigtermWhileStreaming(t, f, clients, 400) // 4.8 s and more
	t.Logf("short drain: exit %d after %v; streams %s; sent during the drain %s",
		run.exitCode, run.exitIn.Round(time.Millisecond), run.streams, run.late)
	if run.exitCode != 0 {
		t.Errorf("short drain: exit code %d; want 0", run.exitCode)
	}
	run.streams.check(t, outStreamCut)
	if run.streams.get(outStreamCut) != clients {
		t.Errorf("short drain: %d of %d streams cut (%s)", run.streams.get(outStreamCut), clients, run.streams)
	}
	// REST drain (instant) + the data plane's 1 s + its cut grace.
	if run.exitIn > 1*time.Second+3*time.Second {
		t.Errorf("short drain: exited %v after SIGTERM; want within the 1 s deadline plus the cut", run.exitIn)
	}
	run.late.check(t, outOK, outRefused, outClosed)
}
