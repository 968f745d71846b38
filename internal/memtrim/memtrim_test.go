package memtrim

import (
	"testing"
	"time"
)

// fake runs a Trim on a fake clock and scheduler.
type fake struct {
	*Trim
	over   bool
	clock  time.Time
	queued []func()
	delays []time.Duration
	frees  int
	resets int
}

func newFake(delay, every time.Duration) *fake {
	f := &fake{over: true, clock: time.Unix(1000, 0)}
	f.Trim = New(delay, every, func() bool { return f.over }, func() { f.resets++ })
	f.Free = func() { f.frees++ }
	f.Now = func() time.Time { return f.clock }
	f.After = func(d time.Duration, fn func()) { f.delays = append(f.delays, d); f.queued = append(f.queued, fn) }
	return f
}

func (f *fake) run(d time.Duration) {
	f.clock = f.clock.Add(d)
	q := f.queued
	f.queued = nil
	for _, fn := range q {
		fn()
	}
}

func TestTrim_ArmedTwiceChecksOnce(t *testing.T) {
	f := newFake(time.Second, 10*time.Second)
	f.Arm()
	f.Arm()
	if len(f.queued) != 1 || f.delays[0] != time.Second {
		t.Fatalf("%d checks (delays %v); want one after 1s", len(f.queued), f.delays)
	}
	f.run(time.Second)
	if f.frees != 1 || f.resets != 1 {
		t.Fatalf("frees %d resets %d; want 1 and 1", f.frees, f.resets)
	}
	f.Arm() // armable again once the check ran
	if len(f.queued) != 1 {
		t.Fatalf("%d checks after a trim's Arm; want 1", len(f.queued))
	}
}

func TestTrim_ABurstAgainCancelsTheCheck(t *testing.T) {
	f := newFake(time.Second, 10*time.Second)
	f.Arm()
	f.over = false
	f.run(time.Second)
	if f.frees != 0 || len(f.queued) != 0 {
		t.Fatalf("frees %d, %d checks; want none: the burst started again", f.frees, len(f.queued))
	}
	f.over = true
	f.Arm()
	f.run(time.Second)
	if f.frees != 1 {
		t.Fatalf("frees %d after the next arming; want 1", f.frees)
	}
}

func TestTrim_WaitsOutThePeriod(t *testing.T) {
	f := newFake(0, 2*time.Second)
	f.Arm()
	f.run(0)
	f.Arm()
	f.run(0)
	if f.frees != 1 || len(f.queued) != 1 || f.delays[len(f.delays)-1] != 2*time.Second {
		t.Fatalf("frees %d, %d checks, delays %v; want 1 trim and a check in 2s", f.frees, len(f.queued), f.delays)
	}
	f.run(2 * time.Second)
	if f.frees != 2 {
		t.Fatalf("frees %d after the period; want 2", f.frees)
	}
}
