package harness

import (
	"reflect"
	"testing"

	"github.com/llbproject/llb/simulate/des"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/workload"
)

// Both tools build their traces with workload.NewTrace; this checks that
// the configurations they hand it agree (seed, block size, arrival process),
// so a harness scenario replays exactly the simulator's requests at the
// same moments.
func TestScenarioPrepare_TraceIsTheDiscreteEventSimulatorsTraceForTheSameSeed(t *testing.T) {
	specs := []struct {
		name string
		spec workload.Spec
	}{
		{"shared prefix", workload.SharedPrefix{Groups: 6, PromptsPerGroup: 4, SystemTokens: 200, QuestionTokens: 24, OutputTokens: 8, ZipfAlpha: 1.1}},
		{"hot prefix", workload.HotPrefix{Clients: 5, PrefixTokens: 120, SuffixTokens: 10, OutputTokens: 4}},
		{"multi-turn", workload.MultiTurn{Conversations: 3, Turns: 3, SystemTokens: 50, HistoryTokens: 60, QuestionTokens: 10, AnswerTokens: 6}},
	}
	for _, tt := range specs {
		t.Run(tt.name, func(t *testing.T) {
			const n, seed = 80, 7
			sc := Scenario{Name: "x", Workload: tt.spec, Requests: n, Seed: seed, Fleet: FleetConfig{Workers: 2, Engine: engine.DefaultConfig()}}
			got, _, err := sc.Prepare()
			if err != nil {
				t.Fatal(err)
			}
			sim, err := des.NewTrace(des.TraceConfig{Spec: tt.spec, Requests: n, Seed: seed})
			if err != nil {
				t.Fatal(err)
			}
			want := sim.Trace
			want.Requests = append([]workload.TraceRequest(nil), want.Requests...)
			for i := range want.Requests {
				want.Requests[i].Tokens = nil // the simulator keeps the prompt tokens; the harness sends bodies
			}
			if !reflect.DeepEqual(*got, want) {
				t.Fatalf("the harness's trace differs from the simulator's:\n%+v\n%+v", got.Requests[0], want.Requests[0])
			}
		})
	}
}
