//go:build linux

package gateway

import (
	"io"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// streamPolls tells that streams can park with the poller.
const streamPolls = true

// The stream poller: epoll instances with a goroutine each, waiting for
// the upstream sockets of parked streams (streamhijack.go), instead of a
// goroutine per stream parked in Go's netpoller. It follows the departure
// watch's rules (departures_linux.go): registrations named by a number in
// the event's data, never by the descriptor, and the descriptor used only
// under the connection's hold (RawConn.Control). A parked stream's socket
// is read by no one; the goroutine a wake starts owns it again.
//
// There is one instance (a shard) per P, each socket registered with one
// of them, so that where the machine saturates the streams' events are
// relayed on every core, not queued behind one goroutine. A shard's
// goroutine does not block in epoll_wait: the instance's own descriptor is
// watched by Go's netpoller (an epoll descriptor turns readable when one
// of its registrations fires), and the goroutine drains it with
// epoll_wait's zero timeout and parks as any socket reader does. A
// goroutine blocked in the system call would need a P back at every
// return: at saturation it waited on the scheduler's global queue, an
// added delay the relay's streams, woken by the netpoller, did not have.
//
// A stream registers its upstream socket once, edge-triggered, for as long
// as it relays from that connection, as Go's netpoller does: an event
// costs no epoll_ctl to re-arm when the read before the park drained the
// socket (a read shorter than its buffer), since whatever arrives after
// that read raises an edge; an edge that comes while the stream runs is
// kept (parkedStream.edge) and the next park reads at once instead. A park
// that cannot tell the socket is drained (the relay's goroutine parking)
// re-arms it with EPOLL_CTL_MOD, which reports data already waiting. A
// registration outlives its stream when the connection goes back to the
// pool: the kernel drops it when the socket closes, the next stream to
// park there replaces it (in the same shard: upConn.shard), and until
// then it fires for a number no stream holds (ignored).
type streamPoller struct {
	once   sync.Once
	err    error
	shards []*pollShard
	next   atomic.Uint64 // registration numbers, unique across shards
	spread atomic.Uint64 // the shard of the next socket registered
	parks  atomic.Uint64 // parks so far (tests)
	arms   atomic.Uint64 // of them, parks that called epoll_ctl (tests)
}

// pollShard is one epoll instance and the streams registered with it.
type pollShard struct {
	epfd int
	// file keeps the instance's descriptor in Go's netpoller (and open:
	// its finalizer would close it); nil where that failed and the
	// goroutine blocks in epoll_wait instead.
	file   *os.File
	mu     sync.Mutex
	parked map[uint64]*hijackedStream
}

var streamPoll streamPoller

// startStreamPoller starts the poller (a failure is met again at the first
// park, which then leaves the stream in its goroutine).
func startStreamPoller() { _ = streamPoll.start() }

// start creates the epoll instances and their goroutines.
func (sp *streamPoller) start() error {
	sp.once.Do(func() {
		n := runtime.GOMAXPROCS(0)
		for range n {
			sh, err := newPollShard()
			if err != nil {
				sp.err = err
				break
			}
			sp.shards = append(sp.shards, sh)
		}
		if len(sp.shards) > 0 {
			sp.err = nil // fewer shards than Ps still serve
		}
		for _, sh := range sp.shards {
			go sh.run()
		}
	})
	return sp.err
}

// newPollShard creates an epoll instance, non-blocking so that Go's
// netpoller can watch it.
func newPollShard() (*pollShard, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	sh := &pollShard{epfd: epfd, parked: make(map[uint64]*hijackedStream)}
	if syscall.SetNonblock(epfd, true) == nil {
		sh.file = os.NewFile(uintptr(epfd), "stream-poller")
	}
	return sh, nil
}

// shardFor returns the shard c's socket is registered with, or the one
// it is to be registered with.
func (sp *streamPoller) shardFor(c *upConn) *pollShard {
	if !c.polled {
		c.shard = int(sp.spread.Add(1) % uint64(len(sp.shards)))
	}
	return sp.shards[c.shard]
}

// epollEdge is EPOLLET (the syscall package's constant is negative).
const epollEdge = 1 << 31

// count is how many streams are parked.
func (sp *streamPoller) count() int {
	n := 0
	for _, sh := range sp.shards {
		sh.mu.Lock()
		for _, st := range sh.parked {
			p := &st.parked
			p.mu.Lock()
			if p.armed {
				n++
			}
			p.mu.Unlock()
		}
		sh.mu.Unlock()
	}
	return n
}

// get returns the stream registered under id, or nil.
func (sh *pollShard) get(id uint64) *hijackedStream {
	sh.mu.Lock()
	st := sh.parked[id]
	sh.mu.Unlock()
	return st
}

// forget drops registration id's stream.
func (sh *pollShard) forget(id uint64) {
	sh.mu.Lock()
	delete(sh.parked, id)
	sh.mu.Unlock()
}

// fire hands one event of the instance to the stream registered for it,
// in a goroutine of its own when apart.
func (sh *pollShard) fire(id uint64, events uint32, apart bool) {
	if st := sh.get(id); st != nil {
		st.parked.fire(id, events&(syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) != 0, apart)
	}
}

// run waits for registrations to fire, for the life of the process: in
// Go's netpoller when the instance's descriptor is in it, else blocked in
// epoll_wait.
func (sh *pollShard) run() {
	if sh.file != nil {
		if rc, err := sh.file.SyscallConn(); err == nil {
			events := make([]syscall.EpollEvent, 256)
			err = rc.Read(func(fd uintptr) bool {
				for {
					n, err := sh.drain(events)
					if err != nil {
						return true
					}
					if n < len(events) {
						return false // drained: wait for the next edge
					}
				}
			})
			if err == nil {
				return // epoll_wait failed: as waitEpoll, give up
			}
			// Not pollable after all: block in epoll_wait.
		}
	}
	waitEpoll(sh.epfd, 256, func(id uint64, events uint32) { sh.fire(id, events, false) })
}

// inlineBatch is the most registrations of one batch the shard's
// goroutine relays itself; the rest of a larger batch goes to a goroutine
// each (drain). Tests set it to 0 to take every event apart.
var inlineBatch atomic.Int32

func init() { inlineBatch.Store(4) }

// drain takes the registrations that fired from the instance (without
// waiting) and hands each to its stream: the first inlineBatch relayed in
// this goroutine, the others each in a goroutine of its own. Where the
// machine saturates, Go's scheduler gives each runnable goroutine its turn
// in order, and one that ran its slice (10 ms) or lost its P in a system
// call waits at the back of the global queue: a shard's goroutine relaying
// a whole batch for thousands of streams got one turn where the relay's
// streams get one each, ran long enough to lose it, and its events waited
// hundreds of milliseconds (go tool trace: the shards runnable 78 % of the
// time at 4 000 streams). A goroutine per fired stream gives a backlog as
// many turns as the relay's would have, and the shard's own turn stays
// short; a batch of a few, the idle machine's case, costs no goroutine.
func (sh *pollShard) drain(events []syscall.EpollEvent) (int, error) {
	for {
		n, err := syscall.EpollWait(sh.epfd, events, 0)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		// The goroutines first, for the other Ps to take while this one
		// relays the first few.
		inline := min(n, int(inlineBatch.Load()))
		for i := inline; i < n; i++ {
			sh.fire(epollID(&events[i]), events[i].Events, true)
		}
		for i := range events[:inline] {
			sh.fire(epollID(&events[i]), events[i].Events, false)
		}
		return n, nil
	}
}

// parkedStream is a hijacked stream's registration with the poller.
type parkedStream struct {
	st *hijackedStream
	c  *upConn    // the upstream connection registered
	sh *pollShard // the shard it is registered with
	mu sync.Mutex
	// id is the registration of c (0: none); armed: the stream waits on
	// it; edge: it fired while the stream ran. tail: the parking
	// goroutine still runs after arming, and woke: a wake came meanwhile
	// (the parking goroutine then goes on itself).
	id                      uint64
	armed, edge, tail, woke bool
	// timer wakes the stream at its upstream read deadline, which the
	// poller does not see.
	timer *time.Timer
}

// park parks st's stream until its upstream connection is readable, its
// read deadline passes or the exchange is aborted. It reports false when
// the stream must wait in its goroutine after all (no poller, or a wake
// came while it parked: the caller's wait then returns at once). drained
// says the last read of the connection found it empty (st.drained).
func (st *hijackedStream) park() bool {
	if streamPoll.start() != nil {
		return false
	}
	drained := st.drained
	st.drained = false
	c := st.x.stream.body.c
	c.shed() // nothing is buffered: the read buffer goes back to the pool
	p := &st.parked
	p.mu.Lock()
	fresh := p.c != c || p.id == 0
	if !fresh && drained && p.edge {
		// Bytes came after the read that drained the socket.
		p.edge = false
		p.mu.Unlock()
		return false
	}
	old, oldSh, id := p.id, p.sh, p.id
	sh := streamPoll.shardFor(c)
	if fresh {
		id = streamPoll.next.Add(1)
	}
	p.st, p.c, p.sh, p.id, p.armed, p.edge, p.tail, p.woke = st, c, sh, id, true, false, true, false
	p.mu.Unlock()
	streamPoll.parks.Add(1)
	c.parkedOn.Store(p)
	if fresh {
		if old != 0 {
			oldSh.forget(old)
		}
		sh.mu.Lock()
		sh.parked[id] = st
		sh.mu.Unlock()
	}
	if fresh || !drained {
		// Register, or re-arm: EPOLL_CTL_MOD reports what already waits.
		streamPoll.arms.Add(1)
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollEdge}
		setEpollID(&ev, id)
		var errno error
		err := c.raw.Control(func(fd uintptr) {
			op := syscall.EPOLL_CTL_MOD
			if !c.polled {
				op = syscall.EPOLL_CTL_ADD
			}
			errno = syscall.EpollCtl(sh.epfd, op, int(fd), &ev)
			if errno == syscall.ENOENT && op == syscall.EPOLL_CTL_MOD {
				errno = syscall.EpollCtl(sh.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
			}
		})
		if err != nil || errno != nil {
			sh.forget(id)
			p.mu.Lock()
			p.id, p.armed, p.tail = 0, false, false
			p.mu.Unlock()
			c.parkedOn.Store(nil)
			return false
		}
		c.polled = true
	}
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
	killed := c.killed.Load()
	st.x.mu.Unlock()
	if killed {
		p.wake(id, false)
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
func (p *parkedStream) wake(id uint64, edge bool) {
	if p.claim(id, edge) {
		go p.st.resume()
	}
}

// claim takes the stream waiting under registration id for the caller
// and reports whether the caller is to go on with it (not while the
// parking goroutine still runs: it is told it woke and goes on itself).
// An edge (the poller's) for a stream that is not waiting is kept for
// its next park.
func (p *parkedStream) claim(id uint64, edge bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id == 0 || p.id != id {
		return false
	}
	if !p.armed {
		p.edge = p.edge || edge
		return false
	}
	p.armed = false
	if p.tail {
		p.woke = true
		return false
	}
	return true
}

// fire is the poller's wake: the stream's next event is relayed here, in
// the poller's goroutine, when it is one the step takes (step); anything
// else resumes the stream in a goroutine of its own. hangup: the peer
// closed or the socket failed — a read that returns data then does not
// tell the end that follows it, and no edge will come for it, so the
// relay's goroutine reads on.
func (p *parkedStream) fire(id uint64, hangup, apart bool) {
	if !p.claim(id, true) {
		return
	}
	if apart {
		go p.relay(hangup)
		return
	}
	if hangup || !p.st.step() {
		go p.st.resume()
	}
}

// relay is fire's relay in a goroutine of its own, which resumes the
// stream itself when the step cannot take its event.
func (p *parkedStream) relay(hangup bool) {
	if hangup || !p.st.step() {
		p.st.resume()
	}
}

// kick wakes the stream if it waits (an abort, the timer).
func (p *parkedStream) kick() {
	p.mu.Lock()
	id := p.id
	p.mu.Unlock()
	p.wake(id, false)
}

// expire is the read deadline's timer.
func (p *parkedStream) expire() { p.kick() }

// stop ends the timer of a stream that ended and forgets its
// registration (a wake that comes later finds no stream).
func (p *parkedStream) stop() {
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Lock()
	id, sh := p.id, p.sh
	p.id, p.armed = 0, false
	p.mu.Unlock()
	if id != 0 {
		sh.forget(id)
	}
}

// resume goes on with the stream in a new goroutine: first the rest of a
// chunk the step could not write whole, then the relay, from what the
// step handed on (bytes read, an event's start) or, when it handed on
// nothing, from the read the wake was for.
func (st *hijackedStream) resume() {
	s := st.x.stream
	st.parked.c.parkedOn.Store(nil)
	if st.pending != nil {
		_, err := st.cc.Write(st.pending)
		chunkFrames.Put(st.pendingBuf)
		st.pending, st.pendingBuf = nil, nil
		if err != nil {
			s.writeErr = true
			s.release()
			st.end(err)
			return
		}
		st.x.bytes += int64(st.pendingBody)
	}
	// After a chunk the step read whole and could not write whole, the
	// relay waits for the next event; otherwise it reads what the wake was
	// for at once.
	s.woken = !st.wrote && s.carry == 0
	st.wrote = false
	st.run()
}

// step relays the events a parked stream's upstream socket has for it, in
// the poller's goroutine, and parks the stream again: one read of the
// socket, its whole chunks de-chunked (dechunkPrefix), through the usage
// scanner and the migration tracker (relayStream.pass), written to the
// client as one chunk with one non-blocking write. A chunk the read cut
// off is kept, raw, as the connection's early bytes (upConn.pre) for the
// next step, which reads behind it — so a stream that fell behind (a read
// that fills the buffer cuts a chunk) stays with the poller instead of
// taking a goroutine of its own: at saturation a resumed stream's
// goroutine queues behind every other runnable one, and the poller's
// goroutine, which relays thousands of streams, queued behind them too.
// It reports false when the stream must go on in a goroutine (resume): the
// body's end or a malformed chunk (left to bodyReader, in the connection's
// early bytes), a chunk larger than the read buffer, an error or the end of
// the connection, an event cut across chunks (carried), a write the
// client's socket did not take whole (the rest is written, under the send
// bound, by resume), a deadline due. What the step did not do is then done
// by the relay's own code, so the stream's end stays in one place.
func (st *hijackedStream) step() bool {
	x, s := st.x, st.x.stream
	c := s.body.c
	if s.body.framing != framingChunked || s.body.inChunk || s.body.eof || c.br != nil && c.br.Buffered() > 0 ||
		len(c.pre) > 0 && c.early == nil || c.preErr != nil || s.firstByte.IsZero() || s.buf != nil {
		return false
	}
	now := time.Now()
	if !c.deadline.IsZero() && !now.Before(c.deadline) || !st.cc.send.limit.IsZero() && !now.Before(st.cc.send.limit) {
		return false // the relay's read or write meets it
	}
	// The read goes behind the cut chunk an earlier step kept, moved to
	// the buffer's start.
	bp, kept := c.early, len(c.pre)
	if bp != nil {
		copy(*bp, c.pre)
		c.early, c.pre = nil, nil
	} else {
		bp = earlyReads.Get().(*[]byte)
	}
	keep := func(raw []byte) { // hands raw on to the next step or bodyReader
		if len(raw) == 0 {
			earlyReads.Put(bp)
			return
		}
		c.early, c.pre = bp, raw
	}
	if kept == len(*bp) {
		keep((*bp)[:kept]) // a chunk larger than the buffer: bodyReader's
		return false
	}
	var n int
	var rerr error
	if err := c.raw.Read(func(fd uintptr) bool {
		for {
			n, rerr = syscall.Read(int(fd), (*bp)[kept:])
			if rerr != syscall.EINTR {
				break
			}
		}
		return true
	}); err != nil {
		keep((*bp)[:kept])
		return false
	}
	switch {
	case rerr == syscall.EAGAIN:
		keep((*bp)[:kept])
		st.drained = true
		return st.repark() // nothing after all
	case rerr != nil:
		keep((*bp)[:kept])
		c.preErr = os.NewSyscallError("read", rerr)
		return false
	case n == 0:
		keep((*bp)[:kept])
		c.preErr = io.EOF
		return false
	}
	raw := (*bp)[:kept+n]
	drained := kept+n < len(*bp)
	s.lg.alive()
	bufp := x.h.bufs.Get().(*[]byte)
	body, used, cut := dechunkPrefix((*bufp)[:0], raw)
	rest := raw[used:]
	if used == 0 {
		x.h.bufs.Put(bufp)
		keep(raw)
		if !cut || len(raw) == len(*bp) {
			return false // read first by bodyReader
		}
		st.drained = drained
		return st.repark()
	}
	keep(rest)
	s.buf = bufp
	buf := *bufp
	p, carry := s.pass(buf, 0, len(body), 0)
	if len(p) > 0 {
		fp := chunkFrames.Get().(*[]byte)
		frame := appendChunk((*fp)[:0], p)
		*fp = frame
		wn := 0
		_ = st.cc.raw.Write(func(fd uintptr) bool {
			for wn < len(frame) {
				k, err := syscall.Write(int(fd), frame[wn:])
				if err == syscall.EINTR {
					continue
				}
				if err != nil || k <= 0 {
					break
				}
				wn += k
			}
			return true
		})
		if wn < len(frame) {
			// The client's socket is full (or broken): resume writes the
			// rest under the send bound, holding it until then.
			st.pending, st.pendingBuf, st.pendingBody = frame[wn:], fp, len(p)
			st.wrote = true
			st.hold(buf, len(body), carry)
			return false
		}
		chunkFrames.Put(fp)
		x.bytes += int64(len(p))
	}
	if carry > 0 {
		st.hold(buf, len(body), carry)
		return false
	}
	s.release()
	if len(rest) > 0 && !cut {
		return false // the body's end or a malformed chunk: bodyReader's
	}
	st.drained = drained
	return st.repark()
}

// hold keeps the start of an event the step carried (the last carry bytes
// of buf[:n]) at the relay buffer's start for the relay, or gives the
// buffer back when there is none.
func (st *hijackedStream) hold(buf []byte, n, carry int) {
	s := st.x.stream
	if carry == 0 {
		s.release()
		return
	}
	copy(buf, buf[n-carry:n])
	s.carry = carry
}

// repark parks the stream again from the poller, as the relay would where
// it waits; false when it must go on in a goroutine after all.
func (st *hijackedStream) repark() bool {
	st.x.stream.lg.armRead()
	return st.park()
}
