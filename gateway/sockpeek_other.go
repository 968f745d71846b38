//go:build !linux

package gateway

import (
	"net"
	"syscall"
)

// Without MSG_PEEK support wired up, idle upstream connections are assumed
// open (a stale one is retried once) and a departed client is noticed when
// a write to it fails.

func connAlive(net.Conn) bool { return true }

const peerWatchSupported = false

// unsentBytes is unknown here: the send bound sees progress only when a
// write goes on.
func unsentBytes(syscall.RawConn) (int, bool) { return 0, false }

// readable is not checked here: a read waits with its buffer.
func readable(uintptr) bool { return true }
