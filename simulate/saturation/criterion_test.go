package saturation

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestCriterion_StableNeedsAShortP90AndEveryRequestDone(t *testing.T) {
	tests := []struct {
		name string
		give Criterion
		m    Measured
		want bool
	}{
		{"default bound, short wait", Criterion{}, Measured{QueueWaitP90: 0.2}, true},
		{"default bound is 1 s inclusive", Criterion{}, Measured{QueueWaitP90: 1}, true},
		{"default bound, long wait", Criterion{}, Measured{QueueWaitP90: 1.01}, false},
		{"tighter bound", Criterion{MaxWaitP90: 500 * time.Millisecond}, Measured{QueueWaitP90: 0.6}, false},
		{"a failed request", Criterion{}, Measured{QueueWaitP90: 0, Failed: 1}, false},
		{"a cut run", Criterion{}, Measured{QueueWaitP90: 0, Cut: true}, false},
		{"NaN wait is not stable", Criterion{}, Measured{QueueWaitP90: math.NaN()}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.give.Stable(tt.m); got != tt.want {
				t.Fatalf("got %v; want %v", got, tt.want)
			}
			if p := tt.give.Judge(3, tt.m, 2); p.Stable != tt.want || p.Rate != 3 || p.Throughput != 2 || p.Failed != tt.m.Failed {
				t.Fatalf("judge %+v; want the verdict %v with the measurement", p, tt.want)
			}
		})
	}
}

func TestCriterion_DefaultsValidationAndWording(t *testing.T) {
	if got := (Criterion{}).WithDefaults().MaxWaitP90; got != DefaultMaxWaitP90 || DefaultMaxWaitP90 != time.Second {
		t.Fatalf("default %v; want 1s", got)
	}
	if err := (Criterion{MaxWaitP90: -time.Second}).Validate(); !errors.Is(err, ErrConfig) {
		t.Fatalf("negative bound: got %v; want ErrConfig", err)
	}
	if err := (Criterion{}).Validate(); err != nil {
		t.Fatalf("zero criterion: %v", err)
	}
	want := "stable = engine queue-wait p90 ≤ 0.5 s, every request completed"
	if got := (Criterion{MaxWaitP90: 500 * time.Millisecond}).String(); got != want {
		t.Fatalf("got %q; want %q", got, want)
	}
}

func TestOutcome_SettleSortsTheProbes(t *testing.T) {
	o := Outcome{Probes: []Probe{{Rate: 8}, {Rate: 2}, {Rate: 5}}}
	o.Settle(Bracket{Stable: 5, Unstable: 8})
	if o.Rate != 5 || o.Unstable != 8 || o.Probes[0].Rate != 2 || o.Probes[1].Rate != 5 || o.Probes[2].Rate != 8 {
		t.Fatalf("outcome %+v; want rate 5, unstable 8, probes by rate", o)
	}
}
