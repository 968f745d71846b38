package proxybench

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// raiseFileLimit raises the soft open-file limit to the hard one, set
// explicitly so child processes (the backend, HAProxy, llbd) inherit it
// too (Go raises its own soft limit but gives children the original).
func raiseFileLimit() uint64 {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	if l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
	return l.Cur
}

// procRSS returns a process's resident set size in bytes (0 when unknown),
// from /proc/<pid>/status.
func procRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmRSS:")); ok {
			f := bytes.Fields(v)
			if len(f) == 0 {
				return 0
			}
			kb, _ := strconv.ParseInt(string(f[0]), 10, 64)
			return kb << 10
		}
	}
	return 0
}
