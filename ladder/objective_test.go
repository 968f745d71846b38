package ladder

import (
	"testing"
	"time"
)

func TestObjectiveFor(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		pred    time.Duration
		trusted bool
		budget  time.Duration
		waiting uint32
		want    ObjectiveMove
	}{
		{"meets, no queue: keep", 80 * ms, true, 100 * ms, 0, ObjectiveKeep},
		{"meets exactly, no queue: keep", 100 * ms, true, 100 * ms, 0, ObjectiveKeep},
		{"meets, the engine queues: look for room", 80 * ms, true, 100 * ms, 1, ObjectiveQueued},
		{"misses: look for one that meets", 101 * ms, true, 100 * ms, 0, ObjectiveMissed},
		{"misses on a queue: a miss all the same", 300 * ms, true, 100 * ms, 5, ObjectiveMissed},
		{"untrusted: llb cannot tell", 300 * ms, false, 100 * ms, 5, ObjectiveKeep},
		{"untrusted, meets: keep", 10 * ms, false, 100 * ms, 0, ObjectiveKeep},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ObjectiveFor(tc.pred, tc.trusted, tc.budget, tc.waiting); got != tc.want {
				t.Fatalf("ObjectiveFor(%v, %t, %v, %d) = %d; want %d", tc.pred, tc.trusted, tc.budget, tc.waiting, got, tc.want)
			}
		})
	}
}

func TestRunsAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name              string
		waiting, inflight uint32
		k                 uint64
		want              bool
	}{
		{"idle", 0, 0, 16, true},
		{"one slot left", 0, 15, 16, true},
		{"at its concurrency", 0, 16, 16, false},
		{"over it", 0, 40, 16, false},
		{"the engine reported waiting requests", 1, 0, 16, false},
		{"no room for the prompt at all", 0, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := RunsAtOnce(tc.waiting, tc.inflight, tc.k); got != tc.want {
				t.Fatalf("RunsAtOnce(%d, %d, %d) = %t; want %t", tc.waiting, tc.inflight, tc.k, got, tc.want)
			}
		})
	}
}
