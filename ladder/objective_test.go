package ladder

import "testing"

func TestRunsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inflight uint32
		k        uint64
		want     bool
	}{
		{"idle", 0, 16, true},
		{"one slot left", 15, 16, true},
		{"at its concurrency", 16, 16, false},
		{"over it", 40, 16, false},
		{"no room for the prompt at all", 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RunsAtOnce(tc.inflight, tc.k); got != tc.want {
				t.Fatalf("RunsAtOnce(%d, %d) = %t; want %t", tc.inflight, tc.k, got, tc.want)
			}
		})
	}
}
