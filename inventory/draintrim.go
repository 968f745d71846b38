package inventory

import (
	"runtime/debug"
	"sync/atomic"
	"time"
)

// Memory of a large drain goes back at once. A drain of tens of MiB is
// garbage as soon as it is applied, but the Go runtime collects it only
// when the heap doubles (or after two idle minutes) and keeps the pages
// meanwhile, so the next large drain comes on top of the last one's.
const (
	// drainTrimAfter is the body size from which a drain is followed by a
	// trim.
	drainTrimAfter = 16 << 20
	// drainTrimEvery is the least time between two trims, process-wide
	// (a collection of llbd's heap takes tens of milliseconds).
	drainTrimEvery = 2 * time.Second
)

var (
	// lastDrainTrim is when a drain last trimmed (Unix nanoseconds).
	lastDrainTrim atomic.Int64
	// freeOSMemory collects and returns free memory (a variable for tests).
	freeOSMemory = debug.FreeOSMemory
)

// trimAfterDrain gives the memory of a drain of n bytes back when it was
// large and no drain trimmed in the last drainTrimEvery. The drain's body
// must no longer be referenced.
func trimAfterDrain(n int, now time.Time) bool {
	if n < drainTrimAfter {
		return false
	}
	last := lastDrainTrim.Load()
	if now.UnixNano()-last < int64(drainTrimEvery) || !lastDrainTrim.CompareAndSwap(last, now.UnixNano()) {
		return false
	}
	freeOSMemory()
	return true
}
