package gateway

import (
	"sync/atomic"
	"time"

	"github.com/llbproject/llb/internal/memtrim"
)

// Memory trim after large bodies. Once a burst of large request bodies is
// over, the memory they took is garbage that the Go runtime collects and
// returns to the OS only at its next collections; an idle daemon runs none
// for up to two minutes (the runtime's forced period), and the burst has
// raised the heap goal that paces them. So the RSS stayed at the burst's
// peak long after it (438 MiB of 445 in make attack's data-plane family).
//
// memTrim collects at once instead: when large bodies (over
// maxKeptBodyBuffer: the ones the server's pools do not keep) worth
// trimAfter have been reserved since the last trim, and the reserved bytes
// fall below the quiet level, it gives the memory back trimDelay later — if
// the data plane is still quiet then — and at most once per trimEvery
// (internal/memtrim).
// Small bodies never arm it: the common path pays for no collection.
const (
	// trimAfter is the large-body volume that arms a trim: a body at the
	// default limit's worth.
	trimAfter = DefaultBodyLimit
	// trimDelay is how long the reserved bytes must stay quiet.
	trimDelay = time.Second
	// trimEvery is the least time between two trims.
	trimEvery = 10 * time.Second
	// trimQuietMax bounds the quiet level (the budget's eighth otherwise).
	trimQuietMax = 8 << 20
)

// memTrim decides when to give the memory of large bodies back. Safe for
// concurrent use.
type memTrim struct {
	*memtrim.Trim
	quiet    int64        // reserved bytes under which the data plane is quiet
	reserved func() int64 // the budget's reserved bytes now

	large atomic.Int64 // large-body bytes reserved since the last trim
}

// newMemTrim returns the trim of a budget of limit bytes whose reserved
// bytes reserved reads.
func newMemTrim(limit int64, reserved func() int64) *memTrim {
	t := &memTrim{quiet: min(limit/8, trimQuietMax), reserved: reserved}
	t.Trim = memtrim.New(trimDelay, trimEvery,
		func() bool { return t.reserved() < t.quiet },
		func() { t.large.Store(0) })
	return t
}

// reserve notes a reservation of n bytes.
func (t *memTrim) reserve(n int64) {
	if n > maxKeptBodyBuffer {
		t.large.Add(n)
	}
}

// release notes a release that left reserved bytes reserved.
func (t *memTrim) release(reserved int64) {
	if reserved >= t.quiet || t.large.Load() < trimAfter {
		return
	}
	t.Arm()
}
