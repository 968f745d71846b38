package gateway

import (
	"sync/atomic"

	"github.com/llbproject/llb/internal/memtrim"
)

// Memory trim after a wave of connections. Thousands of streams at once
// grow the heap (exchanges, request contexts, write buffers, the pooled
// read and relay buffers) and the goroutine stacks; once they are over,
// that memory is garbage the runtime returns to the OS only after its next
// collections, which an idle daemon runs every two minutes at most — and
// sync.Pool keeps what it holds through one of them. Without a trim, one
// llbd reused for five runs of 1 000 streams grew from 85 to 137 MB peak
// and gave nothing back after 20 s.
//
// waveTrim counts the client connections of every listener. When a wave
// of at least waveMin connections falls below a quarter of its peak and
// stays there trimDelay, it collects twice (pooled buffers nobody took
// since are dropped) and returns the free memory to the OS, at most once
// per trimEvery. A steady load never falls that far, so it pays for no
// collection.
const waveMin = 256

// waveTrim decides when to give a connection wave's memory back. Safe for
// concurrent use.
type waveTrim struct {
	*memtrim.Trim
	open atomic.Int64
	peak atomic.Int64 // the most open at once since the last trim
}

func newWaveTrim() *waveTrim {
	w := &waveTrim{}
	// A new wave that rose by the check leaves the trim to its end; the
	// next wave is measured from what is open at the trim.
	w.Trim = memtrim.New(trimDelay, trimEvery,
		func() bool { return w.open.Load() <= w.peak.Load()/4 },
		func() { w.peak.Store(w.open.Load()) })
	return w
}

// waves is the process's wave trim: memory is the process's, whichever
// listener the connections came to.
var waves = newWaveTrim()

// opened notes a client connection accepted.
func (w *waveTrim) opened() {
	n := w.open.Add(1)
	for p := w.peak.Load(); n > p && !w.peak.CompareAndSwap(p, n); p = w.peak.Load() {
	}
}

// closed notes a client connection closed.
func (w *waveTrim) closed() {
	n := w.open.Add(-1)
	if p := w.peak.Load(); p < waveMin || n > p/4 {
		return
	}
	w.Arm()
}
