package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/simulate/engine"
)

// tracker is one request's view of its progress, written by the driver and
// read by the request's handler.
type tracker struct {
	mu     sync.Mutex
	prog   engine.Progress
	err    error
	notify chan struct{} // capacity 1: "something changed"; shared by the runs of one HTTP request
}

// set records new progress and wakes the handler.
func (t *tracker) set(p engine.Progress) {
	t.mu.Lock()
	t.prog = p
	t.mu.Unlock()
	t.wake()
}

// fail records a terminal error and wakes the handler.
func (t *tracker) fail(err error) {
	t.mu.Lock()
	t.err = err
	t.mu.Unlock()
	t.wake()
}

func (t *tracker) wake() {
	select {
	case t.notify <- struct{}{}:
	default:
	}
}

// get returns the latest progress and error.
func (t *tracker) get() (engine.Progress, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.prog, t.err
}

// Commands to the driver goroutine.
type (
	submitCmd struct {
		req   engine.Request
		tr    *tracker
		reply chan submitReply
	}
	submitReply struct {
		ticket engine.Ticket
		err    error
	}
	abortCmd struct {
		ticket engine.Ticket
	}
	releaseCmd struct {
		requestID string
		blockIDs  []int
		reply     chan releaseReply
	}
	releaseReply struct {
		blocks int
		err    error
	}
	resetCmd struct {
		reply chan error
	}
)

// driver owns the engine (and drives it in real time) and the KV-event
// publisher's input. One goroutine, run; everything else talks to it through
// cmds. Readers of the engine's gauges use the stats snapshot, which takes
// no lock.
type driver struct {
	eng      *engine.Engine
	pub      eventSink // nil: events are discarded
	interval time.Duration
	log      *zerolog.Logger
	lean     bool // strip the fields Config.LeanEvents omits

	cmds chan any
	stop chan struct{}
	done chan struct{}
	once sync.Once

	stats         atomic.Pointer[engine.Stats]
	publishErrors atomic.Uint64

	// owned by run
	trackers map[engine.Ticket]*tracker
}

func newDriver(eng *engine.Engine, pub eventSink, interval time.Duration, lean bool, log *zerolog.Logger) *driver {
	d := &driver{
		eng: eng, pub: pub, interval: interval, log: log, lean: lean,
		cmds:     make(chan any, 1024),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		trackers: make(map[engine.Ticket]*tracker),
	}
	st := eng.Stats()
	d.stats.Store(&st)
	go d.run()
	return d
}

// shutdown stops the driver; in-flight requests fail with ErrStopped.
func (d *driver) shutdown() {
	d.once.Do(func() { close(d.stop) })
	<-d.done
}

// send delivers a command unless the driver is gone or ctx ends.
func (d *driver) send(ctx context.Context, c any) error {
	select {
	case d.cmds <- c:
		return nil
	case <-d.done:
		return ErrStopped
	case <-ctx.Done():
		return fmt.Errorf("driver: %w", ctx.Err())
	}
}

// submit queues req; tr receives its progress.
func (d *driver) submit(ctx context.Context, req engine.Request, tr *tracker) (engine.Ticket, error) {
	reply := make(chan submitReply, 1)
	if err := d.send(ctx, submitCmd{req: req, tr: tr, reply: reply}); err != nil {
		return 0, err
	}
	select {
	case r := <-reply:
		return r.ticket, r.err
	case <-d.done:
		return 0, ErrStopped
	}
}

// abort cancels a request (best effort: a stopped driver has nothing left).
func (d *driver) abort(t engine.Ticket) {
	_ = d.send(context.Background(), abortCmd{ticket: t}) // ErrStopped: nothing to abort
}

// release ends a prefill lease.
func (d *driver) release(ctx context.Context, id string, blocks []int) (int, error) {
	reply := make(chan releaseReply, 1)
	if err := d.send(ctx, releaseCmd{requestID: id, blockIDs: blocks, reply: reply}); err != nil {
		return 0, err
	}
	select {
	case r := <-reply:
		return r.blocks, r.err
	case <-d.done:
		return 0, ErrStopped
	}
}

// reset resets the prefix cache.
func (d *driver) reset(ctx context.Context) error {
	reply := make(chan error, 1)
	if err := d.send(ctx, resetCmd{reply: reply}); err != nil {
		return err
	}
	select {
	case err := <-reply:
		return err
	case <-d.done:
		return ErrStopped
	}
}

// snapshot is the engine's gauges and counters as of the last step.
func (d *driver) snapshot() engine.Stats { return *d.stats.Load() }

// run is the engine's goroutine: one command or one timer wake per
// iteration, then Advance to now, hand progress to trackers, publish the
// step's KV events, and sleep until the next engine event or flush.
func (d *driver) run() {
	defer close(d.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var (
		progress  []engine.Progress
		events    []inventory.Event
		lastFlush time.Time
	)
	for {
		select {
		case c := <-d.cmds:
			d.handle(c)
		case <-timer.C:
		case <-d.stop:
			for t, tr := range d.trackers {
				tr.fail(ErrStopped)
				delete(d.trackers, t)
			}
			return
		}
		now := time.Now()
		progress = d.eng.Advance(now, progress[:0])
		// Publish the gauges before waking handlers, so a client that got
		// its answer never scrapes a state older than that answer.
		st := d.eng.Stats()
		d.stats.Store(&st)
		for _, p := range progress {
			if tr, ok := d.trackers[p.Ticket]; ok {
				tr.set(p)
				if p.Done {
					delete(d.trackers, p.Ticket)
				}
			}
		}
		next, ok := d.eng.NextEventTime()
		if pending := d.eng.PendingEvents(); pending > 0 {
			switch {
			case d.pub == nil:
				events = d.eng.TakeEvents(events[:0])
			case d.interval == 0 || now.Sub(lastFlush) >= d.interval:
				// One batch per step; Publish encodes before the engine
				// reuses the events' storage.
				events = d.eng.TakeEvents(events[:0])
				if d.lean {
					for i := range events {
						ev := &events[i]
						ev.ExtraKeys, ev.HasExtraKeys, ev.HasGroupIdx, ev.HasSpecKind = nil, false, false, false
					}
				}
				if err := d.pub.Publish(now, events); err != nil {
					d.publishErrors.Add(1)
					d.log.Debug().Err(err).Int(logEvents, len(events)).Msg("kv event batch not published")
				}
				lastFlush = now
			default:
				if flushAt := lastFlush.Add(d.interval); !ok || flushAt.Before(next) {
					next, ok = flushAt, true
				}
			}
			clear(events)
		}
		if ok {
			timer.Reset(max(time.Until(next), 0))
		} else {
			timer.Stop()
		}
	}
}

// handle executes one command at the current time.
func (d *driver) handle(c any) {
	now := time.Now()
	switch c := c.(type) {
	case submitCmd:
		t, err := d.eng.Submit(now, c.req)
		if err == nil {
			d.trackers[t] = c.tr
		}
		c.reply <- submitReply{ticket: t, err: err}
	case abortCmd:
		if err := d.eng.Abort(now, c.ticket); err != nil && !errors.Is(err, engine.ErrUnknownRequest) {
			d.log.Debug().Err(err).Msg("abort failed")
		}
	case releaseCmd:
		n, err := d.eng.ReleaseLease(now, c.requestID, c.blockIDs)
		c.reply <- releaseReply{blocks: n, err: err}
	case resetCmd:
		c.reply <- d.eng.Reset(now)
	default:
		d.log.Error().Str(logType, fmt.Sprintf("%T", c)).Msg("driver: unknown command")
	}
}
