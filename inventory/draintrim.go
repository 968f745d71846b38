package inventory

import (
	"time"

	"github.com/llbproject/llb/internal/memtrim"
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
	// (a collection of llbd's heap takes tens of milliseconds): a large
	// drain within it is trimmed at its end.
	drainTrimEvery = 2 * time.Second
)

// drainTrim is the process's trim after large drains: no delay, nothing to
// wait for but the period.
var drainTrim = memtrim.New(0, drainTrimEvery, func() bool { return true }, nil)

// trimAfterDrain gives the memory of a drain of n bytes back when it was
// large, and reports whether it armed the trim. The drain's body must no
// longer be referenced.
func trimAfterDrain(n int) bool {
	if n < drainTrimAfter {
		return false
	}
	drainTrim.Arm()
	return true
}
