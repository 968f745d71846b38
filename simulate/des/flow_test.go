package des

import (
	"os"
	"testing"
	"time"
)

// TestFlowPlan_TenantsAndClassesMeetTheirTargets runs the issue-27
// scenarios on the standard plan cut to one seed and two loads and checks the targets:
// a tenant flooding at 5× its neighbour's rate (120 % load) leaves the
// neighbour's TTFT p90 within 1.3× of alone; the critical class's TTFT
// p90 at 130 % load within 1.2× of 70 %; and two backlogged tenants'
// service gap within the VTC bound. LLB_FLOW_REPORT=1 prints the full
// report (llbsim flow runs the standard plan).
func TestFlowPlan_TenantsAndClassesMeetTheirTargets(t *testing.T) {
	p := StandardFlowPlan()
	p.Seeds, p.Loads = []int64{1}, []float64{0.7, 1.3}
	rep, err := RunFlowPlan(p)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv("LLB_FLOW_REPORT") != "" {
		t.Log("\n" + rep.Markdown())
	}
	if rep.FloodRatio > 1.3 {
		t.Errorf("flooded tenant's TTFT p90 %.0f ms is %.2f× its %.0f ms alone; want ≤ 1.3×", 1000*rep.FloodShared[0], rep.FloodRatio, 1000*rep.FloodAlone[0])
	}
	if rep.FloodShedB > 0 {
		t.Errorf("%d of the calm tenant's requests were shed", rep.FloodShedB)
	}
	if rep.CriticalRatio > 1.2 {
		t.Errorf("critical TTFT p90 at 130 %% is %.2f× that at 70 %%; want ≤ 1.2×", rep.CriticalRatio)
	}
	if rep.FairGap > rep.FairBound {
		t.Errorf("service gap %d tokens over the bound %d", rep.FairGap, rep.FairBound)
	}
	// Overloaded, the sheddable class is shed, the critical one never.
	hi := rep.Classes[len(rep.Classes)-1].Classes
	if hi[0].Shed+hi[0].TimedOut != 0 || hi[2].Shed == 0 {
		t.Errorf("at 130 %%: critical shed %d, sheddable shed %d; want none and some", hi[0].Shed+hi[0].TimedOut, hi[2].Shed)
	}
}

func TestRunFlow_IsDeterministic(t *testing.T) {
	p := StandardFlowPlan()
	cfg := FlowConfig{Workers: 2, Engine: p.engine(), Cap: 8, Depth: 8, MaxPark: 5 * time.Second,
		Streams: []FlowStream{flowStream("a", 0, 40), flowStream("b", 1, 5)}, Duration: 20 * time.Second, Warmup: 2 * time.Second, Seed: 9}
	a, err := RunFlow(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := RunFlow(cfg)
	if a.Streams[0] != b.Streams[0] || a.Streams[1] != b.Streams[1] || a.MaxGap != b.MaxGap {
		t.Fatalf("two runs differ: %+v vs %+v", a.Streams, b.Streams)
	}
	if _, err := RunFlow(FlowConfig{}); err == nil {
		t.Fatal("an empty config ran")
	}
}
