//go:build linux

package gateway

import (
	"sync"
	"sync/atomic"
	"syscall"
)

// The departure watch of every client connection in the process: one epoll
// instance of its own and one goroutine waiting on it, instead of a
// goroutine per streaming client blocked on its socket (at thousands of
// streams that goroutine and its stack were a third of a stream's memory).
// A connection is registered one-shot for input, a hang-up or an error;
// when it fires, a peek tells a departure (end of stream, reset) from
// bytes the client sent on (a pipelined request: not a departure, and no
// longer watched, as before).
//
// A registration is named by a number, never by the descriptor: the
// kernel drops a closed socket's registration by itself, and its number
// may by then belong to another connection. The descriptor is only used
// under the connection's own hold (RawConn.Control), so it cannot be closed
// and reused meanwhile.

// departureWatch is the process's watcher, started on first use.
type departureWatch struct {
	once  sync.Once
	epfd  int
	err   error
	next  atomic.Uint64
	mu    sync.Mutex
	conns map[uint64]*clientConn
}

var departures departureWatch

// start creates the epoll instance and its goroutine.
func (d *departureWatch) start() error {
	d.once.Do(func() {
		d.epfd, d.err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if d.err != nil {
			return
		}
		d.conns = make(map[uint64]*clientConn)
		go d.run()
	})
	return d.err
}

// add watches cc (under cc.mu) and records the registration in cc.watchID.
// It reports false when cc cannot be watched (closed, or no epoll).
func (d *departureWatch) add(cc *clientConn) bool {
	if d.start() != nil {
		return false
	}
	id := d.next.Add(1)
	d.mu.Lock()
	d.conns[id] = cc
	d.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollOneShot}
	setEpollID(&ev, id)
	var errno error
	if err := cc.raw.Control(func(fd uintptr) {
		errno = syscall.EpollCtl(d.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
	}); err != nil || errno != nil {
		d.forget(id)
		return false
	}
	cc.watchID = id
	return true
}

// remove ends cc's registration (under cc.mu).
func (d *departureWatch) remove(cc *clientConn) {
	id := cc.watchID
	if id == 0 {
		return
	}
	cc.watchID = 0
	d.forget(id)
	// A closed connection's registration went with it (and its number may
	// be another's now): Control refuses to run then.
	_ = cc.raw.Control(func(fd uintptr) {
		_ = syscall.EpollCtl(d.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil)
	})
}

// count is how many connections are watched.
func (d *departureWatch) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.conns)
}

func (d *departureWatch) forget(id uint64) {
	d.mu.Lock()
	delete(d.conns, id)
	d.mu.Unlock()
}

// run waits for registrations to fire, for the life of the process.
func (d *departureWatch) run() {
	waitEpoll(d.epfd, 128, func(id uint64, _ uint32) {
		d.mu.Lock()
		cc := d.conns[id]
		delete(d.conns, id)
		d.mu.Unlock()
		if cc != nil {
			cc.fired(id)
		}
	})
}

// waitEpoll hands the id and events of each registration of epfd that
// fires to fire, taking up to n events a wait, until the descriptor fails.
func waitEpoll(epfd, n int, fire func(id uint64, events uint32)) {
	events := make([]syscall.EpollEvent, n)
	for {
		n, err := syscall.EpollWait(epfd, events, -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return
		}
		for i := range events[:n] {
			fire(epollID(&events[i]), events[i].Events)
		}
	}
}

// fired handles cc's registration id firing: a departure aborts the
// exchange in progress; bytes from the client end the watch.
func (cc *clientConn) fired(id uint64) {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.watchID != id {
		return // the exchange ended meanwhile
	}
	cc.watchID = 0 // one-shot: the registration is spent
	gone := false
	_ = cc.raw.Control(func(fd uintptr) {
		n, errno := peek1(fd)
		switch errno {
		case syscall.EAGAIN, syscall.EINTR:
			// Spurious: nothing to read after all. Watch again, known to
			// the watcher before the registration can fire (as in add).
			ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollOneShot}
			setEpollID(&ev, id)
			departures.mu.Lock()
			departures.conns[id] = cc
			departures.mu.Unlock()
			if syscall.EpollCtl(departures.epfd, syscall.EPOLL_CTL_MOD, int(fd), &ev) != nil {
				departures.forget(id)
				return
			}
			cc.watchID = id
		case 0:
			gone = n == 0 // end of stream: the client closed
		default:
			gone = true // reset or broken
		}
	})
	if gone && !cc.watchOff && cc.x != nil { // under mu: the exchange cannot end meanwhile
		cc.x.abort(causeClient, errClientGone)
	}
}

// epollOneShot is EPOLLONESHOT (the syscall package's constant is negative
// on some architectures).
const epollOneShot = 1 << 30

// setEpollID and epollID keep a registration's number in the event's data
// (Fd and Pad: the kernel's 64-bit epoll_data).
func setEpollID(ev *syscall.EpollEvent, id uint64) {
	ev.Fd, ev.Pad = int32(uint32(id)), int32(uint32(id>>32))
}

func epollID(ev *syscall.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}
