package ladder

import (
	"testing"
	"time"
)

func TestFillAverage_Light(t *testing.T) {
	type sample struct {
		at             time.Duration // since the first sample
		inflight, room uint64
	}
	tests := []struct {
		name    string
		samples []sample
		want    []bool // light after each sample
	}{
		{"the first sample is the average", []sample{{0, 6, 10}}, []bool{true}},
		{"at the threshold is not light", []sample{{0, 7, 10}}, []bool{false}},
		{"no headroom is not light", []sample{{0, 0, 0}}, []bool{false}},
		{"a full fleet a moment after a half-full one is still light",
			[]sample{{0, 5, 10}, {time.Second, 10, 10}}, []bool{true, true}},
		{"a full fleet for three windows is not",
			[]sample{{0, 5, 10}, {3 * SettleFillWindow, 10, 10}}, []bool{true, false}},
		{"a lull at a busy fleet does not open it",
			[]sample{{0, 9, 10}, {10 * time.Second, 9, 10}, {11 * time.Second, 3, 10}}, []bool{false, false, false}},
		{"a sample out of order counts no time",
			[]sample{{10 * time.Second, 5, 10}, {0, 10, 10}, {10 * time.Second, 10, 10}}, []bool{true, true, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a fillAverage
			for i, s := range tt.samples {
				if got := a.light(goldenEpoch.Add(s.at), s.inflight, s.room); got != tt.want[i] {
					t.Fatalf("sample %d (%v, %d/%d): light = %v, want %v (average %.3f)", i, s.at, s.inflight, s.room, got, tt.want[i], a.fill)
				}
			}
		})
	}
}
