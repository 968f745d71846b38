package inventory

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/VictoriaMetrics/metrics"
	zmq "github.com/pebbe/zmq4"
	"github.com/rs/zerolog"
)

// Feed defaults.
const (
	// DefaultPollInterval bounds how long Run waits before checking ctx.
	DefaultPollInterval = 100 * time.Millisecond
	// DefaultReconnectIvl is ZMQ's first reconnect delay.
	DefaultReconnectIvl = 100 * time.Millisecond
	// DefaultReconnectIvlMax caps ZMQ's exponential reconnect backoff.
	DefaultReconnectIvlMax = 5 * time.Second
	// DefaultReplayTimeout bounds one whole replay exchange.
	DefaultReplayTimeout = 2 * time.Second
	// DefaultRcvHWM is the SUB receive high-water mark in messages: a feed
	// that falls this far behind drops the rest (seen as a gap). With
	// DefaultMaxMsgSize it bounds what libzmq may buffer for one feed.
	// (vLLM's PUB uses 100000 as its send HWM; at one batch per engine step
	// 10000 is minutes of backlog.)
	DefaultRcvHWM = 10_000
	// DefaultMaxMsgSize is the largest KV-event message (ZMQ_MAXMSGSIZE) a
	// feed accepts, in bytes (LLB_KV_MAX_MSG_BYTES). A vLLM batch holds one
	// engine step's events — with 8k–64k batched tokens per step well under
	// 1 MiB. libzmq refuses a larger frame before allocating it by dropping
	// the connection, which then reconnects (counted as a disconnect, with
	// the lost batches as a sequence gap).
	DefaultMaxMsgSize = 16 << 20
	// MaxPublishRate bounds how many batches per second a publisher can
	// plausibly send: a sequence gap is counted as at most the window plus
	// that many batches per second since the last batch, so one bogus
	// sequence number cannot add billions to lost_batches.
	MaxPublishRate = 10_000
	// DefaultHeartbeat is the ZMTP heartbeat interval of a feed's SUB
	// socket: libzmq pings the publisher (whose libzmq answers by itself)
	// and drops a connection that stays silent for three intervals, so a
	// frozen or cut-off publisher shows as disconnected, as a dead one
	// does.
	DefaultHeartbeat = 2 * time.Second
	// DefaultLogEvery rate-limits malformed-input log lines.
	DefaultLogEvery = 10 * time.Second
	// maxDrain bounds messages read per poll so ctx is checked often.
	maxDrain = 4096
)

// Feed subscribes to one publisher (an endpoint's DP rank) and turns its
// stream into Updates: it owns the ZMQ SUB socket (and, during a replay, a
// DEALER socket), decodes frames and payloads, and applies the sequence
// rules (SeqTracker). It never touches a Mirror: the sink forwards Updates
// to the mirror's owner.
//
// Run must be called once; every other method is safe from any goroutine.
type Feed struct {
	cfg FeedConfig
	log zerolog.Logger
	mg  *metricGroup

	// Written by the Run goroutine, read anywhere.
	feedSeries
	replays, replFa *metrics.Counter
	lastSeq         atomic.Uint64
	haveSeq         atomic.Bool
	rateBits        atomic.Uint64
	started         atomic.Bool
	tallyMu         sync.Mutex
	tally           IgnoreTally // copy of ignored.tally for Stats

	// Owned by the Run goroutine.
	seq        SeqTracker
	everUp     bool
	downSince  time.Time  // when the connection dropped; zero while up or never up
	limiter    logLimiter // malformed input
	ignored    *ignoreLog // invalid and unknown events
	gapLimiter logLimiter // gaps and replay failures
	lastAt     time.Time  // when the last batch was accepted
	rateAt     time.Time
	rateEvents uint64
}

// NewFeed validates cfg and registers the feed's metric series (they are
// unregistered when Run returns).
func NewFeed(cfg FeedConfig) (*Feed, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	f := &Feed{
		cfg: cfg,
		log: cfg.Logger.With().Str(logService, cfg.ID.Service).Int(logEpIdx, cfg.ID.EpIdx).
			Int(logRank, cfg.ID.Rank).Str(logAddr, cfg.Endpoint).Logger(),
		mg:  newMetricGroup(cfg.Metrics, cfg.ID),
		seq: SeqTracker{Window: cfg.GapWindow, Replay: cfg.ReplayEndpoint != ""},
	}
	f.limiter.every, f.gapLimiter.every = cfg.LogEvery, cfg.LogEvery
	f.ignored = newIgnoreLog(f.log, f.mg, 0)
	f.feedSeries = newFeedSeries(f.mg)
	f.replays = f.mg.counter(MetricReplays)
	f.replFa = f.mg.counter(MetricReplayFailures)
	return f, nil
}

// Stats returns a snapshot of the counters.
func (f *Feed) Stats() FeedStats {
	return FeedStats{
		Connected:      f.connected.Get() == 1,
		Reconnects:     f.reconnects.Get(),
		Disconnects:    f.disconnects.Get(),
		RecvErrors:     f.recvErrs.Get(),
		Batches:        f.batches.Get(),
		Events:         f.events.Get(),
		InvalidEvents:  f.invalid.Get(),
		UnknownEvents:  f.unknown.Get(),
		LastSeq:        f.lastSeq.Load(),
		HaveSeq:        f.haveSeq.Load(),
		Duplicates:     f.duplicates.Get(),
		Gaps:           f.gaps.Get(),
		LostBatches:    f.lost.Get(),
		Resyncs:        f.resyncs.Get(),
		Restarts:       f.restarts.Get(),
		Replays:        f.replays.Get(),
		ReplayFailures: f.replFa.Get(),
		EventsPerSec:   math.Float64frombits(f.rateBits.Load()),
		Ignored:        f.ignoredTally(),
	}
}

func (f *Feed) ignoredTally() IgnoreTally {
	f.tallyMu.Lock()
	defer f.tallyMu.Unlock()
	return f.tally
}

// Run connects, then receives until ctx is done; it returns nil after a
// clean shutdown, or an error if the sockets could not be set up (a bad
// endpoint string, for instance). Publisher outages are not errors: ZMQ
// reconnects by itself with backoff. All sockets are closed by this
// goroutine before Run returns, and the metric series are unregistered.
func (f *Feed) Run(ctx context.Context) error {
	if !f.started.CompareAndSwap(false, true) {
		return fmt.Errorf("feed %s: Run called twice: %w", f.cfg.Endpoint, ErrConfig)
	}
	defer f.mg.close()
	zctx, err := zmq.NewContext()
	if err != nil {
		return fmt.Errorf("zmq context: %w", err)
	}
	defer func() {
		if err := zctx.Term(); err != nil {
			f.log.Warn().Err(err).Msg("zmq context term")
		}
	}()
	sub, mon, err := f.open(zctx)
	if err != nil {
		return err
	}
	defer func() {
		closeSocket(mon)
		closeSocket(sub)
		if f.connected.Get() == 1 {
			f.connected.Set(0)
		}
	}()
	poller := zmq.NewPoller()
	poller.Add(sub, zmq.POLLIN)
	poller.Add(mon, zmq.POLLIN)
	f.rateAt = time.Now()
	for ctx.Err() == nil {
		polled, err := poller.Poll(f.cfg.PollInterval)
		if err != nil {
			if zmq.AsErrno(err) == zmq.ETERM {
				return fmt.Errorf("feed %s: %w", f.cfg.Endpoint, err)
			}
			f.recvErrs.Inc()
			f.malformed("poll failed", err)
			select { // back off instead of spinning on a persistent error
			case <-ctx.Done():
			case <-time.After(f.cfg.PollInterval):
			}
			continue
		}
		for _, p := range polled {
			switch p.Socket {
			case sub:
				f.drain(ctx, zctx, sub)
			case mon:
				f.monitorEvents(mon)
			}
		}
		now := time.Now()
		f.redial(sub, now)
		f.tickRate(now)
	}
	return nil
}

// open creates the SUB socket and its monitor.
func (f *Feed) open(zctx *zmq.Context) (sub, mon *zmq.Socket, err error) {
	if sub, err = zctx.NewSocket(zmq.SUB); err != nil {
		return nil, nil, fmt.Errorf("zmq sub socket: %w", err)
	}
	fail := func(op string, err error) (*zmq.Socket, *zmq.Socket, error) {
		closeSocket(mon)
		closeSocket(sub)
		return nil, nil, fmt.Errorf("feed %s: %s: %w", f.cfg.Endpoint, op, err)
	}
	for _, step := range []struct {
		op string
		do func() error
	}{
		{"linger", func() error { return sub.SetLinger(0) }},
		{"rcvhwm", func() error { return sub.SetRcvhwm(f.cfg.RcvHWM) }},
		{"maxmsgsize", func() error { return sub.SetMaxmsgsize(int64(f.cfg.MaxMsgSize)) }},
		{"reconnect_ivl", func() error { return sub.SetReconnectIvl(f.cfg.ReconnectIvl) }},
		{"reconnect_ivl_max", func() error { return sub.SetReconnectIvlMax(f.cfg.ReconnectIvlMax) }},
		{"heartbeat_ivl", func() error { return sub.SetHeartbeatIvl(f.cfg.Heartbeat) }},
		{"heartbeat_timeout", func() error { return sub.SetHeartbeatTimeout(3 * f.cfg.Heartbeat) }},
		{"subscribe", func() error { return sub.SetSubscribe(f.cfg.Topic) }},
	} {
		if err := step.do(); err != nil {
			return fail(step.op, err)
		}
	}
	monAddr := fmt.Sprintf("inproc://llb-kv-monitor-%p", f)
	// Connected means the ZMTP handshake succeeded, not only the TCP
	// connection: the subscription goes out right after the handshake, and
	// a publisher drops what it sends before the subscription reaches it.
	if err := sub.Monitor(monAddr, zmq.EVENT_HANDSHAKE_SUCCEEDED|zmq.EVENT_DISCONNECTED); err != nil {
		return fail("monitor", err)
	}
	if mon, err = zctx.NewSocket(zmq.PAIR); err != nil {
		return fail("monitor socket", err)
	}
	if err := mon.SetLinger(0); err != nil {
		return fail("monitor linger", err)
	}
	if err := mon.Connect(monAddr); err != nil {
		return fail("monitor connect", err)
	}
	if err := sub.Connect(f.cfg.Endpoint); err != nil {
		return fail("connect", err)
	}
	return sub, mon, nil
}

// closeSocket closes a socket owned by the calling goroutine.
func closeSocket(s *zmq.Socket) {
	if s != nil {
		_ = s.Close() // linger 0: nothing left to flush; a close error leaves nothing to do
	}
}

// monitorEvents tracks connection state from the socket monitor.
func (f *Feed) monitorEvents(mon *zmq.Socket) {
	for {
		ev, addr, _, err := mon.RecvEvent(zmq.DONTWAIT)
		if err != nil {
			return // EAGAIN: drained
		}
		switch {
		case ev&zmq.EVENT_HANDSHAKE_SUCCEEDED != 0:
			f.connected.Set(1)
			f.downSince = time.Time{}
			if f.everUp {
				f.reconnects.Inc()
			}
			f.everUp = true
			f.log.Info().Str(logEndpoint, addr).Msg("kv feed connected")
			f.cfg.Sink(Update{ID: f.cfg.ID, Kind: UpdateConnected})
		case ev&zmq.EVENT_DISCONNECTED != 0:
			f.connected.Set(0)
			f.disconnects.Inc()
			f.downSince = time.Now()
			f.seq.Disconnected()
			// libzmq does not say why: a publisher restart, a network
			// fault, or a message above MaxMsgSize, which it refuses by
			// dropping the connection (the lost batches then show as a gap).
			f.log.Warn().Str(logEndpoint, addr).Int(logMaxMsg, f.cfg.MaxMsgSize).
				Msg("kv feed disconnected (publisher gone, network fault, or a message above LLB_KV_MAX_MSG_BYTES refused); zmq reconnects with backoff")
			f.cfg.Sink(Update{ID: f.cfg.ID, Kind: UpdateDisconnected})
		}
	}
}

// redial re-creates the connection when it stayed down longer than the
// reconnect backoff allows. libzmq reconnects by itself after a network
// fault, but it gives up on a connection it dropped for a protocol error —
// a message above MaxMsgSize among them — and the feed would stay
// disconnected for good.
func (f *Feed) redial(sub *zmq.Socket, now time.Time) {
	if f.downSince.IsZero() || now.Sub(f.downSince) < f.cfg.ReconnectIvlMax+f.cfg.ReconnectIvl {
		return
	}
	f.downSince = now                  // try again after another full backoff
	_ = sub.Disconnect(f.cfg.Endpoint) // the session may already be gone
	if err := sub.Connect(f.cfg.Endpoint); err != nil {
		f.recvErrs.Inc()
		f.malformed("kv feed reconnect failed", err)
		return
	}
	f.log.Warn().Msg("kv feed still disconnected after the reconnect backoff (libzmq gives up after a protocol error such as an oversized message); reconnecting")
}

// drain reads the messages already queued on the SUB socket.
func (f *Feed) drain(ctx context.Context, zctx *zmq.Context, sub *zmq.Socket) {
	for n := 0; n < maxDrain && ctx.Err() == nil; n++ {
		parts, err := recvMessage(sub, zmq.DONTWAIT)
		switch {
		case errors.Is(err, ErrMalformed): // consumed and dropped; read on
			f.recvErrs.Inc()
			f.malformed("malformed kv event message dropped", err)
			continue
		case err != nil:
			if zmq.AsErrno(err) != zmq.Errno(syscall.EAGAIN) {
				f.recvErrs.Inc()
				f.malformed("receive failed", err)
			}
			return
		}
		f.handle(ctx, zctx, parts)
	}
}

// handle processes one live message.
func (f *Feed) handle(ctx context.Context, zctx *zmq.Context, parts [][]byte) {
	frame, err := ParseFrame(parts)
	if err != nil {
		f.recvErrs.Inc()
		f.malformed("malformed kv event message dropped", err)
		return
	}
	d := f.seq.Observe(frame.Seq)
	if d.Action == SeqDuplicate {
		f.duplicates.Inc()
		return
	}
	now := time.Now()
	since := now.Sub(f.lastAt)
	f.lastAt = now
	f.lastSeq.Store(frame.Seq)
	f.haveSeq.Store(true)
	batch := f.decode(frame)
	reset := ResetNone
	switch d.Action {
	case SeqGapKeep:
		f.countGap(d, since)
	case SeqGapResync:
		f.countGap(d, since)
		reset = ResetGap
	case SeqRestart:
		f.restarts.Inc()
		f.resyncs.Inc()
		if ok, suppressed := f.gapLimiter.allow(time.Now()); ok {
			f.log.Info().Uint64(logSeq, frame.Seq).Int(logCount, suppressed).
				Msg("kv publisher restarted (sequence went backwards); clearing the mirror")
		}
		reset = ResetRestart
		if d.Missing > 0 {
			reset = f.fillRestart(ctx, zctx, frame.Seq)
		}
	case SeqGapReplay:
		f.countGap(d, since)
		reset = f.fillGap(ctx, zctx, d, frame.Seq)
	}
	if reset != ResetNone && d.Action != SeqRestart {
		f.resyncs.Inc()
	}
	if batch == nil && reset == ResetNone {
		return
	}
	f.cfg.Sink(Update{ID: f.cfg.ID, Kind: UpdateBatch, Seq: frame.Seq, Reset: reset, Batch: batch})
}

// decode decodes a payload, counting and logging failures (nil batch).
func (f *Feed) decode(frame Frame) *Batch {
	b := new(Batch)
	if err := b.Decode(frame.Payload); err != nil {
		f.recvErrs.Inc()
		f.malformed(fmt.Sprintf("malformed kv event batch seq %d dropped", frame.Seq), err)
		return nil
	}
	f.batches.Inc()
	f.events.Add(len(b.Events))
	now := time.Now()
	if b.Invalid > 0 {
		f.invalid.Add(b.Invalid)
		f.ignored.count(now, IgnoreInvalid, b.Invalid, 0, func() string {
			return fmt.Sprintf("%d invalid events dropped from batch seq %d: %v", b.Invalid, frame.Seq, b.InvalidErr)
		})
	}
	if b.Unknown > 0 {
		f.unknown.Add(b.Unknown)
		f.ignored.count(now, IgnoreUnknownTag, b.Unknown, 0, func() string {
			return fmt.Sprintf("%d events of unknown kind (tag %s) skipped in batch seq %d", b.Unknown, b.UnknownTag, frame.Seq)
		})
	}
	if b.Invalid > 0 || b.Unknown > 0 {
		f.tallyMu.Lock()
		f.tally = f.ignored.tally
		f.tallyMu.Unlock()
	}
	return b
}

// countGap counts a gap of d.Missing batches, since the time since the
// previous batch. The lost-batch count is capped at what the publisher could
// have sent meanwhile (the gap window plus MaxPublishRate per second), so a
// bogus sequence number — a jump of billions, then back — counts as a gap
// and a restart, not as billions of lost batches.
func (f *Feed) countGap(d SeqDecision, since time.Duration) {
	f.gaps.Inc()
	plausible := f.seq.window() + uint64(max(since.Seconds(), 0)*MaxPublishRate)
	lost := min(d.Missing, plausible, math.MaxInt32)
	f.lost.Add(int(lost))
	if ok, suppressed := f.gapLimiter.allow(time.Now()); ok {
		ev := f.log.Info()
		if lost < d.Missing {
			ev = f.log.Warn().Uint64(logCounted, lost)
		}
		ev.Uint64(logMissing, d.Missing).Uint64(logSeq, d.From+d.Missing).Stringer(logReason, d.Action).
			Int(logCount, suppressed).Msg("kv event sequence gap")
	}
}

// fillGap replays [d.From, seq), delivering batches as they arrive. If the
// replay stops short, the batches still missing decide by the window rule
// whether the mirror is kept or cleared; it returns the reset to apply
// before the live batch.
func (f *Feed) fillGap(ctx context.Context, zctx *zmq.Context, d SeqDecision, seq uint64) ResetReason {
	next, err := f.replay(ctx, zctx, d.From, seq, func(s uint64, b *Batch) {
		f.cfg.Sink(Update{ID: f.cfg.ID, Kind: UpdateBatch, Seq: s, Batch: b})
	})
	if err == nil {
		f.replays.Inc()
		return ResetNone
	}
	f.replFa.Inc()
	rest := SeqDecision{Action: SeqGapReplay, Missing: seq - next, From: next}
	act := f.seq.Fallback(rest)
	if ok, suppressed := f.gapLimiter.allow(time.Now()); ok {
		f.log.Warn().Err(err).Uint64(logMissing, rest.Missing).Stringer(logReason, act).Int(logCount, suppressed).Msg("kv replay failed")
	}
	if act == SeqGapResync {
		return ResetReplayFailed
	}
	return ResetNone
}

// fillRestart replays a restarted publisher's first batches [0, seq),
// lost before the subscription reached it, when a replay endpoint is
// configured: the first one delivered clears the mirror. It returns the
// reset the live batch still needs (ResetRestart when nothing was
// delivered). Without replay, or if it fails, what the lost batches stored
// is missing from the mirror until the engine stores it again.
func (f *Feed) fillRestart(ctx context.Context, zctx *zmq.Context, seq uint64) ResetReason {
	if f.cfg.ReplayEndpoint == "" {
		return ResetRestart
	}
	reset := ResetRestart
	_, err := f.replay(ctx, zctx, 0, seq, func(s uint64, b *Batch) {
		f.cfg.Sink(Update{ID: f.cfg.ID, Kind: UpdateBatch, Seq: s, Reset: reset, Batch: b})
		reset = ResetNone
	})
	if err == nil {
		f.replays.Inc()
		return reset
	}
	f.replFa.Inc()
	if ok, suppressed := f.gapLimiter.allow(time.Now()); ok {
		f.log.Warn().Err(err).Uint64(logMissing, seq).Int(logCount, suppressed).
			Msg("kv replay of a restarted publisher's first batches failed")
	}
	return reset
}

// malformed logs bad input, rate-limited.
func (f *Feed) malformed(msg string, err error) {
	ok, suppressed := f.limiter.allow(time.Now())
	if !ok {
		return
	}
	f.log.Warn().Err(err).Int(logCount, suppressed).Msg(msg)
}

// tickRate refreshes EventsPerSec about once a second.
func (f *Feed) tickRate(now time.Time) {
	el := now.Sub(f.rateAt)
	if el < time.Second {
		return
	}
	ev := f.events.Get()
	f.rateBits.Store(math.Float64bits(float64(ev-f.rateEvents) / el.Seconds()))
	f.rateAt, f.rateEvents = now, ev
}
