package report

import (
	"reflect"
	"runtime"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/saturation"
)

func TestTierShares_LargestFirstTiesByName(t *testing.T) {
	tests := []struct {
		name string
		give map[string]int
		want []TierShare
	}{
		{"empty", nil, nil},
		{"all zero", map[string]int{"1": 0}, nil},
		{"ordered", map[string]int{"sel:rr": 1, "1.5": 6, "none": 1, "1": 2},
			[]TierShare{{"1.5", 60}, {"1", 20}, {"none", 10}, {"sel:rr", 10}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TierShares(tt.give); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v; want %v", got, tt.want)
			}
		})
	}
	if got, want := tierMix(map[string]int{"1.5": 3, "sel:rr": 1}), "1.5 75%, sel:rr 25%"; got != want {
		t.Fatalf("tierMix %q; want %q", got, want)
	}
}

func TestTargetResult_VerdictAndLine(t *testing.T) {
	tests := []struct {
		give TargetResult
		want string
	}{
		{TargetResult{Target: "t", Scenario: "s", Measured: "m", Pass: true}, "[pass] t (s): m"},
		{TargetResult{Target: "t", Scenario: "s", Measured: "m"}, "[MISS] t (s): m"},
		{TargetResult{Target: "t", Scenario: "s", Measured: "runs missing", Missing: true}, "[not measured] t (s): runs missing"},
	}
	for _, tt := range tests {
		if got := tt.give.String(); got != tt.want {
			t.Fatalf("got %q; want %q", got, tt.want)
		}
	}
}

func TestNewMeta_FillsTheSchemaAndTheBuild(t *testing.T) {
	m := NewMeta(SourceHTTP, "llbsim bench", 7, "abc")
	if m.Schema != SchemaVersion || m.Source != SourceHTTP || m.Generator != "llbsim bench" || m.Seed != 7 ||
		m.Commit != "abc" || m.GoVersion != runtime.Version() {
		t.Fatalf("meta %+v", m)
	}
}

func TestScenario_SetSaturationRecordsTheOutcome(t *testing.T) {
	o := saturation.Outcome{Strategy: "hard", Rate: 10, Unstable: 11, Criterion: saturation.Criterion{MaxWaitP90: time.Second},
		Probes: []saturation.Probe{{Rate: 10, Stable: true, Measured: saturation.Measured{QueueWaitP90: 0.2}, Throughput: 9.9}, {Rate: 11}}}
	var s Scenario
	s.SetSaturation(&o)
	if s.SaturationRate != 10 || s.SaturationUnstable != 11 || s.SaturationStrategy != "hard" ||
		s.SaturationCriterion != "stable = engine queue-wait p90 ≤ 1 s, every request completed" ||
		!reflect.DeepEqual(s.Probes, []Probe{{Rate: 10, Stable: true, QueueWaitP90: 0.2, Throughput: 9.9}, {Rate: 11}}) {
		t.Fatalf("scenario %+v", s)
	}
}
