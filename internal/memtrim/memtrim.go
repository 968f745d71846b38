// Package memtrim gives the process's free memory back to the OS once a
// burst is over. The garbage a burst leaves (large bodies, a wave of
// streams, a large KV-event drain) is collected and returned by the Go
// runtime only at its next collections, which an idle daemon runs every
// two minutes at most, and the burst has raised the heap goal that paces
// them; sync.Pool keeps what it holds through one collection more. So
// without a trim the RSS stays at the burst's peak long after it.
//
// A Trim is one trigger: its owner arms it when a burst may be over; Delay
// later the trim runs if Over still says so, at most once per Every (a
// collection of llbd's heap takes tens of milliseconds). A burst that
// started again leaves the trim to the arming that ends it.
package memtrim

import (
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Trim decides when to give memory back. Safe for concurrent use.
type Trim struct {
	delay, every time.Duration
	over         func() bool // whether the burst is still over at the check
	reset        func()      // what the owner forgets at a trim (may be nil)

	// Free collects twice (what pools held is dropped by the second) and
	// returns the free pages to the OS; After and Now are the scheduler
	// and the clock. Tests replace them before the first Arm.
	Free  func()
	After func(time.Duration, func())
	Now   func() time.Time

	pending atomic.Bool // a check is scheduled

	mu   sync.Mutex
	last time.Time // the last trim
}

// New returns a trim that runs delay after an Arm if over reports true
// then, at most once per every, calling reset just before it frees.
func New(delay, every time.Duration, over func() bool, reset func()) *Trim {
	return &Trim{
		delay: delay,
		every: every,
		over:  over,
		reset: reset,
		Free:  func() { runtime.GC(); debug.FreeOSMemory() },
		After: func(d time.Duration, f func()) { time.AfterFunc(d, f) },
		Now:   time.Now,
	}
}

// Arm schedules a check unless one is already scheduled.
func (t *Trim) Arm() {
	if !t.pending.CompareAndSwap(false, true) {
		return
	}
	t.After(t.delay, t.check)
}

// check trims if the burst is still over, waiting out every since the last
// trim.
func (t *Trim) check() {
	if !t.over() {
		t.pending.Store(false)
		return
	}
	t.mu.Lock()
	wait := t.last.Add(t.every).Sub(t.Now())
	if wait <= 0 {
		t.last = t.Now()
	}
	t.mu.Unlock()
	if wait > 0 {
		t.After(wait, t.check)
		return
	}
	if t.reset != nil {
		t.reset()
	}
	t.Free()
	t.pending.Store(false)
}
