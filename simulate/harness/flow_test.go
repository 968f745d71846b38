package harness

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/workload"
)

func TestDealTrace_MarksEveryRequestAndOnlyKeepsArrivalTimes(t *testing.T) {
	tr, err := workload.NewTrace(workload.TraceConfig{Spec: FlowSpec(), Requests: 3000, Seed: 3, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	streams := []FlowStream{{Tenant: "a", Class: ladder.ClassStandard, Weight: 5}, {Tenant: "b", Class: ladder.ClassCritical, Weight: 1}, {Class: ladder.ClassSheddable, Weight: 4}}
	ft, err := DealTrace(tr, streams, 7)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, len(streams))
	for i, r := range ft.Trace.Requests {
		s := ft.Stream[i]
		counts[s]++
		if r.Header[flowClassHeader] != streams[s].Class.String() || r.Header[flowTenantHeader] != streams[s].Tenant {
			t.Fatalf("request %d of stream %d has headers %v", i, s, r.Header)
		}
		if len(tr.Requests[i].Header) != 0 {
			t.Fatalf("the dealt trace changed the original's request %d: %v", i, tr.Requests[i].Header)
		}
	}
	for s, want := range []float64{0.5, 0.1, 0.4} {
		if got := float64(counts[s]) / 3000; got < want-0.04 || got > want+0.04 {
			t.Errorf("stream %d has %.3f of the requests; want about %.1f", s, got, want)
		}
	}
	sub, warm := ft.Only(300, 1)
	if len(sub.Trace.Requests) != counts[1] || warm < 10 || warm > 60 {
		t.Fatalf("only stream 1: %d requests (want %d), %d in the warm-up", len(sub.Trace.Requests), counts[1], warm)
	}
	j := 0
	for i := range ft.Trace.Requests {
		if ft.Stream[i] != 1 {
			continue
		}
		if sub.Trace.Requests[j].UnitAt != ft.Trace.Requests[i].UnitAt || sub.Trace.Requests[j].Seq != j || sub.Stream[j] != 1 {
			t.Fatalf("kept request %d: %+v; want request %d's arrival", j, sub.Trace.Requests[j], i)
		}
		j++
	}
	if _, err := DealTrace(tr, []FlowStream{{Weight: 0}}, 1); err == nil {
		t.Fatal("a zero weight was accepted")
	}
}

// TestFlowPlan_TenantsAndClassesThroughTheRealDaemon runs the flood and
// class scenarios through llbd (one seed, 20 model seconds a run; `make
// flow-test` runs the standard plan): a tenant sending 5× another's rate
// at 120 % load leaves the other's TTFT p90 within 1.3× of alone, and the
// critical class's p90 at 130 % load is within 1.2× of 70 %.
func TestFlowPlan_TenantsAndClassesThroughTheRealDaemon(t *testing.T) {
	p := StandardFlowPlan()
	p.Daemon.Bin, p.WorkDir = llbdBin(t), t.TempDir()
	p.Seeds, p.Loads, p.Duration, p.Fairness = []uint64{1}, []float64{0.7, 1.3}, 10*time.Second, false
	if os.Getenv("LLB_FLOW_LONG") == "1" {
		p = StandardFlowPlan()
		p.Daemon.Bin, p.WorkDir = llbdBin(t), t.TempDir()
	}
	p.Progress = func(what string) { t.Log(what) }
	rep, err := RunFlowPlan(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.Markdown())

	a, b := rep.FloodA, rep.FloodB
	if b.Answered != b.Requests || a.Answered != a.Requests {
		t.Fatalf("flood: a answered %d of %d, b %d of %d; want every request answered (the flood parks, it is not refused)", a.Answered, a.Requests, b.Answered, b.Requests)
	}
	// The flood is held at the cap and parks; b, under its fair share,
	// is admitted in the headroom and seldom parks.
	if a.Parked < a.Requests/2 || b.Parked > b.Requests/3 {
		t.Fatalf("flood: a parked %d of %d, b %d of %d; want the flood parked and b mostly not", a.Parked, a.Requests, b.Parked, b.Requests)
	}
	if rep.FloodRatio > 1.3 {
		t.Errorf("b's TTFT p90 with the flood is %.2f× alone (%v against %v); want within 1.3×", rep.FloodRatio, rep.FloodShared, rep.FloodAlone)
	}

	var lo, hi FlowClassRow
	for _, row := range rep.Classes {
		switch row.Load {
		case 0.7:
			lo = row
		case 1.3:
			hi = row
		}
	}
	crit, std, shed := ladder.ClassCritical.Index(), ladder.ClassStandard.Index(), ladder.ClassSheddable.Index()
	for _, row := range []FlowClassRow{lo, hi} {
		for _, c := range []int{crit, std} {
			if r := row.Classes[c]; r.Answered != r.Requests {
				t.Fatalf("%.0f %%: class %d answered %d of %d; only the sheddable class may be refused", 100*row.Load, c, r.Answered, r.Requests)
			}
		}
	}
	if s := hi.Classes[shed]; s.Shed == 0 || s.Parked != 0 {
		t.Fatalf("130 %%: sheddable refused %d, parked %d; want it refused at once when capped, never parked", s.Shed, s.Parked)
	}
	if hi.Classes[std].TTFT.P90 <= hi.Classes[crit].TTFT.P90 {
		t.Fatalf("130 %%: standard p90 %v, critical %v; want the standard class to wait for the critical one", hi.Classes[std].TTFT.P90, hi.Classes[crit].TTFT.P90)
	}
	if rep.CriticalRatio > 1.2 {
		t.Errorf("critical TTFT p90 at 130 %% is %.2f× that at 70 %%; want within 1.2×", rep.CriticalRatio)
	}
	if fa, fb := rep.FairA, rep.FairB; p.Fairness {
		// Both ask for more than half: each should be answered at about
		// half the rate (VTC, and full queues giving way to the tenant
		// behind in service).
		if share := fb.Throughput / (fa.Throughput + fb.Throughput); share < 0.4 || share > 0.6 {
			t.Errorf("fairness: b's share of the answered rate %.2f (a %.1f/s, b %.1f/s); want about half", share, fa.Throughput, fb.Throughput)
		}
	}
}
