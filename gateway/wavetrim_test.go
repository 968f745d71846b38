package gateway

import (
	"testing"
	"time"
)

// fakeWaves is a waveTrim on a fake clock and scheduler: scheduled checks
// run when the test says.
type fakeWaves struct {
	*waveTrim
	clock  time.Time
	queued []func()
	frees  int
}

func newFakeWaves() *fakeWaves {
	f := &fakeWaves{waveTrim: newWaveTrim(), clock: time.Unix(1000, 0)}
	f.Free = func() { f.frees++ }
	f.Now = func() time.Time { return f.clock }
	f.After = func(_ time.Duration, fn func()) { f.queued = append(f.queued, fn) }
	return f
}

// runQueued advances the clock by d and runs the checks scheduled so far.
func (f *fakeWaves) runQueued(d time.Duration) {
	f.clock = f.clock.Add(d)
	q := f.queued
	f.queued = nil
	for _, fn := range q {
		fn()
	}
}

func (f *fakeWaves) open(n int) {
	for range n {
		f.opened()
	}
}

func (f *fakeWaves) close(n int) {
	for range n {
		f.closed()
	}
}

func TestWaveTrim_TrimsOnceAWaveIsOver(t *testing.T) {
	tests := []struct {
		name      string
		peak      int // connections open at once
		left      int // still open at the end
		reopen    int // opened again before the check
		wantFrees int
	}{
		{"a small wave never arms it", waveMin - 1, 0, 0, 0},
		{"a wave that ended", 1000, 0, 0, 1},
		{"a wave down to a quarter", 1000, 250, 0, 1},
		{"a steady load above a quarter", 1000, 251, 0, 0},
		{"a new wave before the check", 1000, 0, 600, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeWaves()
			f.open(tt.peak)
			f.close(tt.peak - tt.left)
			f.open(tt.reopen)
			f.runQueued(trimDelay)
			if f.frees != tt.wantFrees {
				t.Fatalf("trims: %d; want %d", f.frees, tt.wantFrees)
			}
		})
	}
}

func TestWaveTrim_AtMostOncePerPeriodThenAgain(t *testing.T) {
	f := newFakeWaves()
	f.open(1000)
	f.close(1000)
	f.runQueued(trimDelay)
	f.open(1000) // a second wave at once
	f.close(1000)
	f.runQueued(trimDelay)
	if f.frees != 1 {
		t.Fatalf("trims within trimEvery: %d; want 1", f.frees)
	}
	f.runQueued(trimEvery)
	if f.frees != 2 {
		t.Fatalf("trims after trimEvery: %d; want 2 (the second wave's)", f.frees)
	}
	f.runQueued(trimEvery)
	if f.frees != 2 || len(f.queued) != 0 {
		t.Fatalf("trims with no new wave: %d, %d checks queued; want 2 and none", f.frees, len(f.queued))
	}
}
