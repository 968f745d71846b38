//go:build unix

package gateway

import (
	"math"
	"syscall"
)

// openFileLimit returns the soft RLIMIT_NOFILE (math.MaxUint64 when
// unlimited), or 0 when unknown.
func openFileLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	if l.Cur == math.MaxUint64 { // RLIM_INFINITY
		return math.MaxUint64
	}
	return l.Cur
}
