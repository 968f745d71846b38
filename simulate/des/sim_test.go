package des

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/workload"
)

func TestRun_IsDeterministicForASeed(t *testing.T) {
	tr := sharedTrace(t, 300, 3)
	for _, s := range strategy.All() {
		t.Run(s.Name, func(t *testing.T) {
			cfg := RunConfig{Fleet: FleetFor(tr, 4, 64), Strategy: s, Rate: 40, Warmup: 50, RecordRoutes: true}
			a, err := Run(tr, cfg)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Run(tr, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a, b) {
				t.Fatal("two runs of the same trace and config differ")
			}
		})
	}
	// A different seed is a different trace, so the routes differ.
	other := sharedTrace(t, 300, 4)
	cfg := RunConfig{Fleet: FleetFor(tr, 4, 64), Strategy: mustStrategy(t, strategy.NameHard), Rate: 40, RecordRoutes: true}
	a, err := Run(tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(other, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(workersOf(a.Routes), workersOf(b.Routes)) && a.TTFT == b.TTFT {
		t.Fatal("seeds 3 and 4 gave identical runs")
	}
}

func TestRR_AlternatesBetweenTwoWorkers(t *testing.T) {
	res := run(t, hotTrace(t, 6, 2), strategy.NameRR, 2, 64, 1, nil)
	if got, want := workersOf(res.Routes), []int{0, 1, 0, 1, 0, 1}; !slices.Equal(got, want) {
		t.Fatalf("got workers %v; want %v", got, want)
	}
	for _, r := range res.Routes {
		if r.Tier != ladder.TierSelector {
			t.Fatalf("request %d decided by tier %s; want the selector", r.Seq, r.Tier)
		}
	}
}

// With every request in flight at once (1 ms apart, 2.4 s of decode each)
// and one shared prefix key, CHWBL keeps the key's home endpoint while its
// load is under ceil(1.75·(L+1)/2): L = 0..6 stay home, the 8th request
// (L = 7, bound 7) walks to the other endpoint.
func TestCHWBL_KeepsOnePrefixHomeUntilItsBound(t *testing.T) {
	res := run(t, hotTrace(t, 8, 200), strategy.NameCHWBL, 2, 256, 1000, nil)
	home := res.Routes[0].Worker
	for i, r := range res.Routes[:7] {
		if r.Worker != home || r.Flags.Has(ladder.FlagBoundWalk) {
			t.Fatalf("request %d went to %d (%s); want home %d", i, r.Worker, r.Decision, home)
		}
	}
	last := res.Routes[7]
	if last.Worker == home || !last.Flags.Has(ladder.FlagBoundWalk) {
		t.Fatalf("request 7 went to %d (%s); want the other worker after a bound walk", last.Worker, last.Decision)
	}
	for l := uint64(0); l < 7; l++ {
		if b := ladder.CHWBLBound(l, 1, 2); l >= b {
			t.Fatalf("bound at L=%d is %d; the hand count above is wrong", l, b)
		}
	}
	if b := ladder.CHWBLBound(7, 1, 2); b != 7 {
		t.Fatalf("bound at L=7 is %d; want 7", b)
	}
}

// Requests 1 s apart finish before the next arrives, so load never binds:
// the first request misses (empty inventory → RR → worker 0), every later
// one is a Tier-1.5 hit on worker 0 — until the 16th hit, which cold-start
// seeding diverts to the still-empty worker 1.
func TestHard_RoutesToTheHolderAndSeedsTheColdWorker(t *testing.T) {
	res := run(t, hotTrace(t, 20, 2), strategy.NameHard, 2, 64, 1, nil)
	first := res.Routes[0]
	if first.Worker != 0 || first.Tier != ladder.TierSelector {
		t.Fatalf("request 0: %s; want the selector's worker 0", first.Decision)
	}
	for i, r := range res.Routes[1:] {
		seq := i + 1
		if r.Tier != ladder.Tier15 {
			t.Fatalf("request %d: %s; want tier 1.5", seq, r.Decision)
		}
		if seq == 16 {
			if r.Worker != 1 || !r.Flags.Has(ladder.FlagColdSeed) {
				t.Fatalf("request 16 (the 16th hit): %s; want a cold seed to worker 1", r.Decision)
			}
			continue
		}
		if r.Worker != 0 && seq < 16 {
			t.Fatalf("request %d: %s; want worker 0, the holder", seq, r.Decision)
		}
		if r.Worker == 0 && (r.Overlap < 8 || r.CachedTokens < 128) {
			t.Fatalf("request %d on the holder: overlap %d blocks, %d cached tokens; want the 8-block preamble", seq, r.Overlap, r.CachedTokens)
		}
	}
	if res.MirrorVerified == 0 || res.MirrorBlocks == 0 {
		t.Fatalf("mirrors verified %d runs and hold %d blocks; the KV-event path did not run", res.MirrorVerified, res.MirrorBlocks)
	}
}

// Request 1 arrives 1 s after request 0, which still decodes (200 tokens ×
// 12 ms). Among the candidates (only worker 0 holds the preamble) the hard
// law keeps worker 0, but spill relief finds it at its fleet-wide cap
// (ceil(1.75·1·½) = 1) and moves the request to idle worker 1. Off has no
// bound and keeps it on the holder.
func TestHardRelievesTheBusyHolderButOffDoesNot(t *testing.T) {
	for _, tc := range []struct {
		give       string
		wantWorker int
		wantFlags  ladder.Flags
	}{
		{give: strategy.NameHard, wantWorker: 1, wantFlags: ladder.FlagSpill | ladder.FlagRelief},
		{give: strategy.NameOff, wantWorker: 0, wantFlags: 0},
	} {
		t.Run(tc.give, func(t *testing.T) {
			res := run(t, hotTrace(t, 2, 200), tc.give, 2, 256, 1, nil)
			r := res.Routes[1]
			if r.Tier != ladder.Tier15 || r.Worker != tc.wantWorker || r.Flags&(ladder.FlagSpill|ladder.FlagRelief) != tc.wantFlags {
				t.Fatalf("request 1: %s; want worker %d with flags %v", r.Decision, tc.wantWorker, tc.wantFlags)
			}
		})
	}
}

func TestRun_KeepsEveryInvariantUnderABurst(t *testing.T) {
	tr := sharedTrace(t, 120, 9)
	for _, s := range []string{strategy.NameRR, strategy.NameHard, strategy.NameTier1, strategy.NamePDHard} {
		t.Run(s, func(t *testing.T) {
			res := run(t, tr, s, 2, 48, 500, func(c *RunConfig) {
				c.Fleet.Engine.MaxNumSeqs = 2
				c.Warmup = 20
			})
			served, waited := 0, false
			for i, w := range res.PerWorker {
				if w.MaxRunning > 2 {
					t.Fatalf("worker %d ran %d requests at once; max-num-seqs is 2", i, w.MaxRunning)
				}
				waited = waited || w.MaxWaiting > 0
				served += w.Requests
			}
			if !waited {
				t.Fatal("no request ever waited; the burst did not exercise the queue")
			}
			if served != res.Requests || res.Requests != 100 {
				t.Fatalf("workers served %d measured requests, result counts %d; want 100", served, res.Requests)
			}
			for _, r := range res.Routes {
				if r.TTFT <= 0 || r.E2E < r.TTFT {
					t.Fatalf("request %d: ttft %v, e2e %v", r.Seq, r.TTFT, r.E2E)
				}
			}
		})
	}
}

func TestProgress_ReportsBrokenInvariants(t *testing.T) {
	at := epoch.Add(time.Second)
	for _, tc := range []struct {
		name string
		give []engine.Progress
	}{
		{"finished twice", []engine.Progress{
			{Ticket: 1, Admitted: true, AdmittedAt: at, FirstTokenAt: at, Generated: 1, Done: true, DoneAt: at, Finish: engine.FinishLength},
			{Ticket: 1, Done: true, DoneAt: at, Finish: engine.FinishLength},
		}},
		{"aborted", []engine.Progress{{Ticket: 1, FirstTokenAt: at, Done: true, DoneAt: at, Finish: engine.FinishAbort}}},
		{"done without a first token", []engine.Progress{{Ticket: 1, Done: true, DoneAt: at, Finish: engine.FinishLength}}},
		{"unknown ticket", []engine.Progress{{Ticket: 9, Done: true, DoneAt: at, Finish: engine.FinishLength}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := hotTrace(t, 1, 2)
			s, err := newSim(tr, RunConfig{Fleet: FleetFor(tr, 1, 64), Strategy: mustStrategy(t, strategy.NameRR), Rate: 1})
			if err != nil {
				t.Fatal(err)
			}
			s.workers[0].tickets = []int32{0}
			s.workers[0].active = 1
			var got error
			for i := range tc.give {
				if got = s.progress(0, time.Second, &tc.give[i]); got != nil {
					break
				}
			}
			if !errors.Is(got, ErrInvariant) {
				t.Fatalf("got %v; want ErrInvariant", got)
			}
		})
	}
}

func TestRun_RejectsBadConfigs(t *testing.T) {
	tr := hotTrace(t, 4, 2)
	good := RunConfig{Fleet: FleetFor(tr, 2, 64), Strategy: mustStrategy(t, strategy.NameHard), Rate: 1}
	for _, tc := range []struct {
		name string
		edit func(*RunConfig)
	}{
		{"no workers", func(c *RunConfig) { c.Fleet.Workers = 0 }},
		{"too many workers", func(c *RunConfig) { c.Fleet.Workers = ladder.MaxEndpoints }},
		{"zero rate", func(c *RunConfig) { c.Rate = 0 }},
		{"warm-up eats the trace", func(c *RunConfig) { c.Warmup = 4 }},
		{"block size differs", func(c *RunConfig) { c.Fleet.Engine.BlockSize = 32 }},
		{"hash differs", func(c *RunConfig) { c.Fleet.Engine.Hash.Seed = "1" }},
		{"P/D engine role", func(c *RunConfig) { c.Fleet.Engine.KVRole = engine.KVProducer; c.Fleet.Engine.EngineID = "p" }},
		{"bad env", func(c *RunConfig) { c.Strategy.FactorPct = 50 }},
		{"cache smaller than a request", func(c *RunConfig) { c.Fleet.Engine.NumBlocks = 2 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := good
			tc.edit(&cfg)
			if _, err := Run(tr, cfg); !errors.Is(err, ErrConfig) {
				t.Fatalf("got %v; want ErrConfig", err)
			}
		})
	}
	if _, err := Run(tr, good); err != nil {
		t.Fatalf("the good config failed: %v", err)
	}
}

// A P/D strategy pins a conversation once its first turn's first token is
// out: every later turn of the conversation is a Tier-0 hit on the worker
// that served the first one (turns arrive 1 s apart, long after).
func TestPD_PinsConversationsToTheirFirstWorker(t *testing.T) {
	tr, err := NewTrace(TraceConfig{
		Name:     "chat",
		Spec:     workload.MultiTurn{Conversations: 3, Turns: 4, SystemTokens: 32, HistoryTokens: 32, QuestionTokens: 8, AnswerTokens: 4},
		Requests: 24, Seed: 2, Arrivals: workload.ArriveConstant,
	})
	if err != nil {
		t.Fatal(err)
	}
	res := run(t, tr, strategy.NameTier1, 3, 128, 1, nil)
	home := map[string]int{}
	tier0 := 0
	for i, r := range res.Routes {
		key := tr.Keys[i].SessionKey
		if key == "" {
			t.Fatalf("request %d has no session key", i)
		}
		w, seen := home[key]
		switch {
		case !seen:
			home[key] = r.Worker
			if r.Tier == ladder.Tier0 {
				t.Fatalf("request %d, the first of %s, was a Tier-0 hit: %s", i, key, r.Decision)
			}
		case r.Tier != ladder.Tier0 || r.Worker != w:
			t.Fatalf("request %d of %s: %s; want Tier 0 on worker %d", i, key, r.Decision, w)
		default:
			tier0++
		}
	}
	if tier0 == 0 || len(home) < 3 {
		t.Fatalf("%d Tier-0 hits over %d conversations; the test exercised nothing", tier0, len(home))
	}
}
