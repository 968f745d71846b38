//go:build linux

package gateway

import (
	"net"
	"syscall"
	"unsafe"
)

// Socket peeks (MSG_PEEK) that never consume a byte: the server or the
// upstream client reads the connection afterwards as if nothing happened.

// peek1 peeks at one byte without waiting. It reports EAGAIN as wait.
func peek1(fd uintptr) (n uintptr, errno syscall.Errno) {
	var b [1]byte
	n, _, errno = syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&b[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return n, errno
}

// connAlive reports whether an idle upstream connection is still open: no
// close, reset or stray bytes from the backend are waiting on it.
func connAlive(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := true
	_ = rc.Read(func(fd uintptr) bool {
		_, errno := peek1(fd)
		alive = errno == syscall.EAGAIN
		return true
	})
	return alive
}

// peerWatchSupported reports whether clientConn can watch for departures.
const peerWatchSupported = true

// unsentBytes returns how many bytes written to rc's socket its peer has
// not acknowledged yet (SIOCOUTQ): when it falls while nothing is written,
// the peer is taking bytes.
func unsentBytes(rc syscall.RawConn) (int, bool) {
	var n int32
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCOUTQ, uintptr(unsafe.Pointer(&n)))
	}); err != nil || errno != 0 {
		return 0, false
	}
	return int(n), true
}

// readable reports, without waiting, whether fd has something to read:
// bytes, an end of stream or an error.
func readable(fd uintptr) bool {
	_, errno := peek1(fd)
	return errno != syscall.EAGAIN && errno != syscall.EINTR
}
