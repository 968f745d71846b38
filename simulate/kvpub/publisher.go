package kvpub

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	zmq "github.com/pebbe/zmq4"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/inventory"
)

// Log field names this package writes (shared ones from internal/logfield).
const (
	logReplayEndpoint = "replay_endpoint"
	logKill           = "kill"
	logFrames         = "frames"
	logSeq            = "seq"
)

// Stats counts what a Publisher did.
type Stats struct {
	// Published is the number of batches sent on the PUB socket.
	Published uint64
	// Dropped is the number of batches refused by a full queue.
	Dropped uint64
	// SendErrors is the number of PUB or ROUTER sends that failed.
	SendErrors uint64
	// Replays is the number of replay requests answered.
	Replays uint64
	// ReplayedBatches is the number of batches re-sent by replays.
	ReplayedBatches uint64
	// BadReplayRequests is the number of replay requests of the wrong shape
	// (ignored, as vLLM ignores them).
	BadReplayRequests uint64
	// NextSeq is the sequence number the next batch will carry.
	NextSeq uint64
}

// stopMode says how the socket goroutine ends.
type stopMode uint8

const (
	stopGraceful stopMode = iota // drain the queue, linger
	stopKill                     // drop everything, linger 0
)

// Publisher is a running KV-event publisher. Publish may be called from any
// goroutine; the sockets belong to the Publisher's own goroutine.
type Publisher struct {
	cfg            Config
	endpoint       string
	replayEndpoint string

	queue chan []byte
	stop  chan stopMode
	done  chan struct{}
	once  sync.Once

	closed                                      atomic.Bool
	published, dropped, sendErrs, replays       atomic.Uint64
	replayedBatches, badReplayReqs, nextSeqSeen atomic.Uint64
}

// Start creates, binds and starts a Publisher. It returns once the sockets
// are bound (or failed to bind, wrapping ErrBind).
func Start(cfg Config) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := &Publisher{
		cfg:   cfg,
		queue: make(chan []byte, cfg.QueueSize),
		stop:  make(chan stopMode, 1),
		done:  make(chan struct{}),
	}
	ready := make(chan error, 1)
	go p.run(ready)
	if err := <-ready; err != nil {
		<-p.done
		return nil, err
	}
	p.cfg.Logger.Info().Str(logfield.Endpoint, p.endpoint).Str(logReplayEndpoint, p.replayEndpoint).Msg("kv event publisher bound")
	return p, nil
}

// Endpoint is the PUB address actually bound (the port filled in when the
// configured port was "*").
func (p *Publisher) Endpoint() string { return p.endpoint }

// ReplayEndpoint is the ROUTER address actually bound ("" when disabled).
func (p *Publisher) ReplayEndpoint() string { return p.replayEndpoint }

// Publish encodes events as one EventBatch stamped ts and queues it for
// sending. An empty events list publishes nothing (vLLM publishes only steps
// that produced events). A full queue drops the batch and returns
// ErrQueueFull; the sequence number is assigned at send time, so a drop
// leaves no gap a subscriber could notice — exactly as a batch lost before
// vLLM's publisher thread.
func (p *Publisher) Publish(ts time.Time, events []inventory.Event) error {
	if len(events) == 0 {
		return nil
	}
	if p.closed.Load() {
		return ErrClosed
	}
	b := inventory.Batch{
		TS:        float64(ts.UnixNano()) / 1e9,
		Events:    events,
		DPRank:    int64(p.cfg.DPRank),
		HasDPRank: true,
	}
	payload, err := inventory.AppendBatch(nil, &b, inventory.EncodeOptions{Layout: p.cfg.Layout, DigestHashes: p.cfg.DigestHashes})
	if err != nil {
		return fmt.Errorf("publish %d events: %w: %w", len(events), ErrEncode, err)
	}
	select {
	case p.queue <- payload:
		return nil
	default:
		p.dropped.Add(1)
		return fmt.Errorf("publish %d events: %w", len(events), ErrQueueFull)
	}
}

// Stats returns the counters.
func (p *Publisher) Stats() Stats {
	return Stats{
		Published:         p.published.Load(),
		Dropped:           p.dropped.Load(),
		SendErrors:        p.sendErrs.Load(),
		Replays:           p.replays.Load(),
		ReplayedBatches:   p.replayedBatches.Load(),
		BadReplayRequests: p.badReplayReqs.Load(),
		NextSeq:           p.nextSeqSeen.Load(),
	}
}

// Close sends what is queued, lets it linger for subscribers, closes the
// sockets and waits for the socket goroutine. Safe to call twice.
func (p *Publisher) Close() { p.shutdown(stopGraceful) }

// Kill closes the sockets at once, dropping queued batches: a crash.
func (p *Publisher) Kill() { p.shutdown(stopKill) }

func (p *Publisher) shutdown(mode stopMode) {
	p.once.Do(func() {
		p.closed.Store(true)
		p.stop <- mode
		p.cfg.Logger.Info().Str(logfield.Endpoint, p.endpoint).Bool(logKill, mode == stopKill).Msg("kv event publisher closing")
	})
	<-p.done
}

// entry is one buffered batch for replay.
type entry struct {
	seq     uint64
	payload []byte
}

// run owns the sockets: it binds them, reports on ready, then sends queued
// batches and answers replay requests until stopped.
func (p *Publisher) run(ready chan<- error) {
	defer close(p.done)
	pub, router, err := p.open()
	if err != nil {
		ready <- err
		return
	}
	ready <- nil

	var (
		seq  uint64
		ring []entry // oldest first, at most BufferSteps
		tick <-chan time.Time
	)
	if router != nil {
		t := time.NewTicker(p.cfg.ReplayPoll)
		defer t.Stop()
		tick = t.C
	}
	send := func(payload []byte) {
		var seq8 [8]byte
		binary.BigEndian.PutUint64(seq8[:], seq)
		if _, err := pub.SendMessage(p.cfg.Topic, seq8[:], payload); err != nil {
			p.sendErrs.Add(1)
			p.cfg.Logger.Debug().Err(err).Uint64(logSeq, seq).Msg("kv event batch send failed")
		} else {
			p.published.Add(1)
		}
		if router != nil && p.cfg.BufferSteps > 0 {
			if len(ring) == p.cfg.BufferSteps {
				ring[0] = entry{}
				ring = ring[1:]
			}
			ring = append(ring, entry{seq: seq, payload: payload})
		}
		seq++
		p.nextSeqSeen.Store(seq)
	}
	for {
		select {
		case payload := <-p.queue:
			send(payload)
		case <-tick:
			p.serveReplays(router, ring)
		case mode := <-p.stop:
			linger := time.Duration(0)
			if mode == stopGraceful {
				for drained := false; !drained; {
					select {
					case payload := <-p.queue:
						send(payload)
					default:
						drained = true
					}
				}
				linger = p.cfg.Linger
			}
			closeSocket(pub, linger)
			if router != nil {
				closeSocket(router, 0)
			}
			return
		}
	}
}

// open creates and binds (or connects) the sockets.
func (p *Publisher) open() (pub, router *zmq.Socket, err error) {
	pub, err = zmq.NewSocket(zmq.PUB)
	if err != nil {
		return nil, nil, fmt.Errorf("pub socket: %w: %w", ErrBind, err)
	}
	if err = pub.SetSndhwm(p.cfg.HWM); err != nil {
		closeSocket(pub, 0)
		return nil, nil, fmt.Errorf("pub hwm: %w: %w", ErrBind, err)
	}
	if p.cfg.Connect {
		if err = pub.Connect(p.cfg.Endpoint); err != nil {
			closeSocket(pub, 0)
			return nil, nil, fmt.Errorf("connect %s: %w: %w", p.cfg.Endpoint, ErrBind, err)
		}
		p.endpoint = p.cfg.Endpoint
	} else if p.endpoint, err = p.bind(pub, p.cfg.Endpoint); err != nil {
		closeSocket(pub, 0)
		return nil, nil, err
	}
	if p.cfg.ReplayEndpoint == "" {
		return pub, nil, nil
	}
	router, err = zmq.NewSocket(zmq.ROUTER)
	if err != nil {
		closeSocket(pub, 0)
		return nil, nil, fmt.Errorf("router socket: %w: %w", ErrBind, err)
	}
	if p.replayEndpoint, err = p.bind(router, p.cfg.ReplayEndpoint); err != nil {
		closeSocket(pub, 0)
		closeSocket(router, 0)
		return nil, nil, err
	}
	return pub, router, nil
}

// bind binds s to addr, retrying while the address is still in use (a
// crashed worker's socket is torn down asynchronously), and returns the
// address actually bound.
func (p *Publisher) bind(s *zmq.Socket, addr string) (string, error) {
	deadline := time.Now().Add(p.cfg.BindRetry)
	backoff := 5 * time.Millisecond
	for {
		err := s.Bind(addr)
		if err == nil {
			got, gerr := s.GetLastEndpoint()
			if gerr != nil || got == "" {
				got = addr
			}
			return got, nil
		}
		if zmq.AsErrno(err) != zmq.EADDRINUSE || time.Now().After(deadline) {
			return "", fmt.Errorf("bind %s: %w: %w", addr, ErrBind, err)
		}
		time.Sleep(backoff) // retry policy for a port still held by a closed socket, not synchronisation
		backoff = min(2*backoff, 100*time.Millisecond)
	}
}

// serveReplays answers every pending replay request.
func (p *Publisher) serveReplays(router *zmq.Socket, ring []entry) {
	for {
		msg, err := router.RecvMessageBytes(zmq.DONTWAIT)
		if err != nil {
			if zmq.AsErrno(err) != zmq.Errno(syscall.EAGAIN) {
				p.cfg.Logger.Debug().Err(err).Msg("kv replay receive failed")
			}
			return
		}
		if len(msg) != 3 || len(msg[1]) != 0 || len(msg[2]) != 8 {
			p.badReplayReqs.Add(1)
			p.cfg.Logger.Debug().Int(logFrames, len(msg)).Msg("kv replay request ignored: want [identity, \"\", seq8]")
			continue
		}
		id := msg[0]
		start := binary.BigEndian.Uint64(msg[2])
		var seq8 [8]byte
		for _, e := range ring {
			if e.seq < start {
				continue
			}
			binary.BigEndian.PutUint64(seq8[:], e.seq)
			if _, err := router.SendMessage(id, "", p.cfg.Topic, seq8[:], e.payload); err != nil {
				p.sendErrs.Add(1)
				continue
			}
			p.replayedBatches.Add(1)
		}
		end := [8]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
		if _, err := router.SendMessage(id, "", "", end[:], ""); err != nil {
			p.sendErrs.Add(1)
		}
		p.replays.Add(1)
	}
}

// closeSocket closes s with the given linger.
func closeSocket(s *zmq.Socket, linger time.Duration) {
	_ = s.SetLinger(linger) // best effort: the socket is being closed either way
	_ = s.Close()
}
