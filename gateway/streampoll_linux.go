//go:build linux

package gateway

import (
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// streamPolls tells that streams can park with the poller.
const streamPolls = true

// The stream poller: one epoll instance and one goroutine waiting on it for
// the upstream sockets of parked streams (streamhijack.go), instead of a
// goroutine per stream parked in Go's netpoller. It follows the departure
// watch's rules (departures_linux.go): one-shot registrations named by a
// number in the event's data, never by the descriptor, and the descriptor
// used only under the connection's hold (RawConn.Control). A parked
// stream's socket is read by no one; the goroutine a wake starts owns it
// again, and the one-shot registration is spent or stale by then, so the
// connection may be closed or pooled as any other (the kernel drops a
// closed socket's registration; a stale one fires for a number no stream
// holds).
type streamPoller struct {
	once   sync.Once
	epfd   int
	err    error
	next   atomic.Uint64
	mu     sync.Mutex
	parked map[uint64]*hijackedStream
}

var streamPoll streamPoller

// start creates the epoll instance and its goroutine.
func (sp *streamPoller) start() error {
	sp.once.Do(func() {
		sp.epfd, sp.err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if sp.err != nil {
			return
		}
		sp.parked = make(map[uint64]*hijackedStream)
		go sp.run()
	})
	return sp.err
}

// count is how many streams are parked.
func (sp *streamPoller) count() int {
	sp.mu.Lock()
	defer sp.mu.Unlock()
	return len(sp.parked)
}

func (sp *streamPoller) take(id uint64) *hijackedStream {
	sp.mu.Lock()
	st := sp.parked[id]
	delete(sp.parked, id)
	sp.mu.Unlock()
	return st
}

// run waits for registrations to fire, for the life of the process.
func (sp *streamPoller) run() {
	events := make([]syscall.EpollEvent, 256)
	for {
		n, err := syscall.EpollWait(sp.epfd, events, -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return
		}
		for i := range events[:n] {
			id := epollID(&events[i])
			if st := sp.take(id); st != nil {
				st.parked.wake(id)
			}
		}
	}
}

// parkedStream is a hijacked stream's registration with the poller.
type parkedStream struct {
	st *hijackedStream
	c  *upConn // the upstream connection it waits on
	mu sync.Mutex
	// id is the registration waiting (0: none); tail: the parking
	// goroutine still runs after registering, and woke: a wake came
	// meanwhile (the parking goroutine then goes on itself).
	id         uint64
	tail, woke bool
	// timer wakes the stream at its upstream read deadline, which the
	// poller does not see.
	timer *time.Timer
}

// park parks st's stream until its upstream connection is readable, its
// read deadline passes or the exchange is aborted. It reports false when
// the stream must wait in its goroutine after all (no poller, or a wake
// came while it parked: the caller's wait then returns at once).
func (st *hijackedStream) park() bool {
	if streamPoll.start() != nil {
		return false
	}
	c := st.x.stream.body.c
	c.shed() // nothing is buffered: the read buffer goes back to the pool
	p := &st.parked
	id := streamPoll.next.Add(1)
	p.mu.Lock()
	p.st, p.c, p.id, p.tail, p.woke = st, c, id, true, false
	p.mu.Unlock()
	c.parkedOn.Store(p)
	streamPoll.mu.Lock()
	streamPoll.parked[id] = st
	streamPoll.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollOneShot}
	setEpollID(&ev, id)
	var errno error
	err := c.raw.Control(func(fd uintptr) {
		op := syscall.EPOLL_CTL_MOD
		if !c.polled {
			op = syscall.EPOLL_CTL_ADD
		}
		errno = syscall.EpollCtl(streamPoll.epfd, op, int(fd), &ev)
		if errno == syscall.ENOENT && op == syscall.EPOLL_CTL_MOD {
			errno = syscall.EpollCtl(streamPoll.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
		}
	})
	if err != nil || errno != nil {
		streamPoll.take(id)
		p.mu.Lock()
		p.id, p.tail = 0, false
		p.mu.Unlock()
		c.parkedOn.Store(nil)
		return false
	}
	c.polled = true
	if !c.deadline.IsZero() {
		if p.timer == nil {
			p.timer = time.AfterFunc(time.Until(c.deadline), p.expire)
		} else {
			p.timer.Reset(time.Until(c.deadline))
		}
	}
	// An abort that came before parkedOn was set did not kick: its mark
	// is read here (killUp sets it under the exchange's mu).
	st.x.mu.Lock()
	killed := c.killed
	st.x.mu.Unlock()
	if killed {
		p.wake(id)
	}
	p.mu.Lock()
	p.tail = false
	woke := p.woke
	p.woke = false
	p.mu.Unlock()
	if woke {
		c.parkedOn.Store(nil)
		return false
	}
	return true
}

// wake resumes the stream parked under registration id, once: the first
// of the poller, the timer and an abort to call it does.
func (p *parkedStream) wake(id uint64) {
	p.mu.Lock()
	if id == 0 || p.id != id {
		p.mu.Unlock()
		return
	}
	p.id = 0
	if p.tail {
		p.woke = true
		p.mu.Unlock()
		streamPoll.take(id)
		return
	}
	p.mu.Unlock()
	streamPoll.take(id)
	go p.st.resume()
}

// kick wakes whatever registration waits now (an abort, the timer).
func (p *parkedStream) kick() {
	p.mu.Lock()
	id := p.id
	p.mu.Unlock()
	p.wake(id)
}

// expire is the read deadline's timer.
func (p *parkedStream) expire() { p.kick() }

// stop ends the timer of a stream that ended.
func (p *parkedStream) stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
}

// resume goes on with the stream in a new goroutine.
func (st *hijackedStream) resume() {
	st.parked.c.parkedOn.Store(nil)
	st.x.stream.woken = true
	st.run()
}
