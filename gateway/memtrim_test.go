package gateway

import (
	"testing"
	"time"
)

// fakeTrim is a memTrim on a fake clock and scheduler: scheduled checks
// run when the test says.
type fakeTrim struct {
	*memTrim
	reserved int64
	clock    time.Time
	queued   []func()
	delays   []time.Duration
	frees    int
}

func newFakeTrim(limit int64) *fakeTrim {
	f := &fakeTrim{clock: time.Unix(1000, 0)}
	f.memTrim = newMemTrim(limit, func() int64 { return f.reserved })
	f.Free = func() { f.frees++ }
	f.Now = func() time.Time { return f.clock }
	f.After = func(d time.Duration, fn func()) { f.delays = append(f.delays, d); f.queued = append(f.queued, fn) }
	return f
}

// runQueued advances the clock by d and runs the checks scheduled so far.
func (f *fakeTrim) runQueued(d time.Duration) {
	f.clock = f.clock.Add(d)
	q := f.queued
	f.queued = nil
	for _, fn := range q {
		fn()
	}
}

// body reserves n, then releases it.
func (f *fakeTrim) body(n int64) {
	f.reserved += n
	f.reserve(n)
	f.reserved -= n
	f.release(f.reserved)
}

func TestMemTrim_OnlyLargeBodiesArmIt(t *testing.T) {
	tests := []struct {
		name      string
		bodies    []int64
		held      int64 // reserved by requests still in flight at the end
		wantFrees int
	}{
		{"small bodies never arm it", repeat(maxKeptBodyBuffer, 10_000), 0, 0},
		{"large bodies under the volume", repeat(8<<20, 1), 0, 0},
		{"large bodies over the volume, then quiet", repeat(8<<20, 2), 0, 1},
		{"still busy at the check", repeat(16<<20, 8), 16 << 20, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeTrim(1 << 30)
			for _, n := range tt.bodies {
				f.body(n)
			}
			f.reserved = tt.held
			f.runQueued(trimDelay)
			if f.frees != tt.wantFrees {
				t.Errorf("%d trims; want %d", f.frees, tt.wantFrees)
			}
			if len(f.queued) != 0 {
				t.Errorf("%d checks still scheduled", len(f.queued))
			}
		})
	}
}

func TestMemTrim_WaitsForQuietAndTrimsAtMostEveryPeriod(t *testing.T) {
	f := newFakeTrim(1 << 30)
	for range 8 {
		f.body(16 << 20)
	}
	if len(f.queued) != 1 || f.delays[0] != trimDelay {
		t.Fatalf("%d checks scheduled (delays %v); want one after %v", len(f.queued), f.delays, trimDelay)
	}
	f.runQueued(trimDelay)
	if f.frees != 1 {
		t.Fatalf("%d trims after the quiet delay; want 1", f.frees)
	}
	// A second burst right after: the trim waits out trimEvery.
	for range 8 {
		f.body(16 << 20)
	}
	f.runQueued(trimDelay)
	if f.frees != 1 || len(f.queued) != 1 || f.delays[len(f.delays)-1] != trimEvery-trimDelay {
		t.Fatalf("within the period: %d trims, %d checks, last delay %v; want 1 trim and a check in %v",
			f.frees, len(f.queued), f.delays[len(f.delays)-1], trimEvery-trimDelay)
	}
	f.runQueued(trimEvery - trimDelay)
	if f.frees != 2 {
		t.Fatalf("%d trims after the period; want 2", f.frees)
	}
	// Quiet again with nothing new: no trim.
	f.body(1 << 10)
	f.runQueued(trimEvery)
	if f.frees != 2 || len(f.queued) != 0 {
		t.Errorf("%d trims, %d checks after small traffic; want 2 and none", f.frees, len(f.queued))
	}
}

func repeat(n int64, times int) []int64 {
	s := make([]int64, times)
	for i := range s {
		s[i] = n
	}
	return s
}
