package harness

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTick is the kernel's USER_HZ, the unit of /proc/<pid>/stat CPU
// times (100 on every Linux architecture Go supports).
const clockTick = 10 * time.Millisecond

// ProcCPU returns user+system CPU time of process pid from /proc (0 when
// unreadable).
func ProcCPU(pid int) time.Duration { return procCPU(pid) }

// procCPU returns user+system CPU time of process pid from
// /proc/<pid>/stat (0 when unreadable, e.g. not on Linux).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name (field 2) may hold spaces; fields after its closing
	// parenthesis are space-separated: state is field 3, utime 14, stime 15.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(ut+st) * clockTick
}

// selfCPU returns the harness process's user+system CPU time (the fleet's
// workers run in it too).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
