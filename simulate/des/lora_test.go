package des

import (
	"strings"
	"testing"

	"github.com/llbproject/llb/simulate/strategy"
)

func TestLoRA_TheScenarioRunsForLLBAndItsPeersWithTheGaugeSteeringLLB(t *testing.T) {
	sc := LoRAScenarios(300, 1)[0]
	sc.Trace.Name = sc.Name
	tr, err := NewTrace(sc.Trace)
	if err != nil {
		t.Fatal(err)
	}
	fl, err := sc.Fleet(tr)
	if err != nil {
		t.Fatal(err)
	}
	var p90 []float64
	for _, name := range []string{"headroom", "llm-d-lora", "aibrix-lora", "aibrix"} {
		s, err := strategy.ByName(name)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(tr, RunConfig{Fleet: fl, Strategy: s, Rate: 20, RecordRoutes: true, ScrapeEvery: DefaultScrape})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if name == "headroom" {
			n := 0
			for _, r := range res.Routes {
				if strings.Contains(r.Decision, "lora=lora_") {
					n++
				}
			}
			if n != len(res.Routes) {
				t.Errorf("llb decided %d of %d adapter requests with the LoRA policy; want all", n, len(res.Routes))
			}
		}
		p90 = append(p90, res.TTFT.P90)
	}
	t.Logf("TTFT p90 llb %.3f, llm-d-lora %.3f, aibrix-lora %.3f, aibrix %.3f", p90[0], p90[1], p90[2], p90[3])
}
