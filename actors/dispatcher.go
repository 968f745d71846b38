package actors

import (
	"runtime"
	"sync"
)

// workerDispatcher runs actor mailboxes on a pool of long-lived goroutines.
//
// protoactor's default dispatcher starts a fresh goroutine every time an
// idle mailbox gets a message. On the routing hot path that is several
// goroutines per request, and each one starts on a small stack and grows it
// (runtime.copystack was half of the router's CPU profile). Pool workers
// keep their grown stacks. When every worker is busy the dispatcher falls
// back to a fresh goroutine, so a slow actor can never stall the others.
type workerDispatcher struct {
	work       chan func()
	throughput int
	stop       chan struct{}
	once       sync.Once
}

// newWorkerDispatcher starts workers goroutines (0 means 64, enough for a
// 32-endpoint fan-out to find idle workers);
// throughput is messages per mailbox turn, as in protoactor.
func newWorkerDispatcher(workers, throughput int) *workerDispatcher {
	if workers <= 0 {
		workers = max(64, 8*runtime.GOMAXPROCS(0))
	}
	d := &workerDispatcher{work: make(chan func()), throughput: throughput, stop: make(chan struct{})}
	for i := 0; i < workers; i++ {
		go d.worker()
	}
	return d
}

func (d *workerDispatcher) worker() {
	for {
		select {
		case fn := <-d.work:
			fn()
		case <-d.stop:
			return
		}
	}
}

// Schedule implements actor.Dispatcher.
func (d *workerDispatcher) Schedule(fn func()) {
	select {
	case d.work <- fn:
	default:
		go fn()
	}
}

// Throughput implements actor.Dispatcher.
func (d *workerDispatcher) Throughput() int { return d.throughput }

// close stops the idle workers; mailboxes scheduled later run on fresh
// goroutines.
func (d *workerDispatcher) close() { d.once.Do(func() { close(d.stop) }) }
