package inventory

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
)

// DrainFeed defaults.
const (
	// DefaultDrainPollMin is the poll interval right after a drain that
	// returned events.
	DefaultDrainPollMin = 5 * time.Millisecond
	// DefaultDrainPollMax is the longest interval between idle polls (the
	// interval grows 1.5× per empty drain up to it). LoxiLB polls at 5–20 ms.
	DefaultDrainPollMax = 50 * time.Millisecond
	// DefaultDrainTimeout bounds one POST /kv_cache_events. trtllm-serve
	// answers an idle drain at once, but its older builds wait up to 2 s
	// for an event before answering [].
	DefaultDrainTimeout = 10 * time.Second
	// DefaultDrainMaxBody bounds one drain's JSON, in bytes (about 64 bytes
	// a token: a 64 MiB drain is a million tokens' worth of blocks).
	DefaultDrainMaxBody = 64 << 20
	// DefaultDrainRetryMax caps the back-off between failed drains.
	DefaultDrainRetryMax = 2 * time.Second
	// drainDownAfter consecutive failed drains mark the feed disconnected.
	drainDownAfter = 2
	// maxDrainRanks bounds the attention-DP ranks a drain may name; events
	// of further ranks are invalid.
	maxDrainRanks = 64
	// drainMaxHeader bounds a drain answer's headers (trtllm-serve sends
	// four short ones).
	drainMaxHeader = 64 << 10
	// drainErrBody is how much of a failed drain's body is read for its
	// log line.
	drainErrBody = 512
)

// DrainConfig configures a DrainFeed.
type DrainConfig struct {
	// ID names the endpoint (labels, log fields, Update.ID); Rank is 0.
	ID EndpointID
	// URL is the drain, e.g. DrainURL(ip, port). Required.
	URL string
	// Sink receives every Update in stream order on the feed goroutine. It
	// must not block for long (the engine's ring keeps filling meanwhile).
	// Required.
	Sink func(Update)
	// BlockSize is the rule's kvBlockSize (TensorRT-LLM's tokens_per_block,
	// 32 by default). Required.
	BlockSize int
	// GapWindow is the largest event_id gap that keeps the mirror (default
	// DefaultGapWindow); a larger one clears it.
	GapWindow uint64
	// PollMin and PollMax bound the adaptive poll interval.
	PollMin, PollMax time.Duration
	// Timeout bounds one drain request.
	Timeout time.Duration
	// MaxBody bounds one drain's body in bytes.
	MaxBody int
	// MaxEvents and MaxElements bound one drain's events and the array
	// elements inside them (blocks, tokens, block hashes); a drain past
	// either is dropped before it is decoded.
	MaxEvents, MaxElements int
	// RetryMax caps the back-off after failed drains.
	RetryMax time.Duration
	// Client makes the requests; nil builds one without proxies.
	Client *http.Client
	// Leader, when set, says whether this feed drains the engine itself
	// (a cluster runs one drainer per endpoint: the drain is destructive).
	// While it returns false the feed applies the bodies arriving on Relay
	// instead, drained by the leader. Nil: always drain.
	Leader func() bool
	// Relay delivers the bodies another replica drained (with Leader).
	Relay <-chan []byte
	// Drained, when set, receives every non-empty body this feed drained
	// (the leader hands it to its peers). It must not block, and must not
	// keep the slice past the call unless it copies it.
	Drained func(body []byte)
	// LogEvery rate-limits failure log lines.
	LogEvery time.Duration
	// Logger receives transitions (Info) and failures (Warn, rate-limited).
	Logger zerolog.Logger
	// Metrics receives the feed's series; nil keeps them private.
	Metrics *metrics.Set
}

// DrainURL is the drain of a TensorRT-LLM endpoint: its serving port's POST
// /kv_cache_events.
func DrainURL(ip string, port int) string {
	return "http://" + net.JoinHostPort(ip, strconv.Itoa(port)) + "/kv_cache_events"
}

// Validate reports every configuration problem at once.
func (c DrainConfig) Validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("URL is required"))
	}
	if c.Sink == nil {
		errs = append(errs, errors.New("Sink is required"))
	}
	if c.BlockSize < 1 || c.BlockSize > MaxBlockSize {
		errs = append(errs, fmt.Errorf("BlockSize %d (want 1..%d)", c.BlockSize, MaxBlockSize))
	}
	for name, d := range map[string]time.Duration{"PollMin": c.PollMin, "PollMax": c.PollMax, "Timeout": c.Timeout,
		"RetryMax": c.RetryMax, "LogEvery": c.LogEvery} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %v (want >= 0)", name, d))
		}
	}
	for name, n := range map[string]int{"MaxBody": c.MaxBody, "MaxEvents": c.MaxEvents, "MaxElements": c.MaxElements} {
		if n < 0 {
			errs = append(errs, fmt.Errorf("%s %d (want >= 0)", name, n))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("drain config: %w: %w", ErrConfig, errors.Join(errs...))
	}
	return nil
}

func (c *DrainConfig) defaults() {
	if c.PollMin == 0 {
		c.PollMin = DefaultDrainPollMin
	}
	if c.PollMax == 0 {
		c.PollMax = DefaultDrainPollMax
	}
	c.PollMax = max(c.PollMax, c.PollMin)
	if c.Timeout == 0 {
		c.Timeout = DefaultDrainTimeout
	}
	if c.MaxBody == 0 {
		c.MaxBody = DefaultDrainMaxBody
	}
	if c.MaxEvents == 0 {
		c.MaxEvents = DefaultDrainMaxEvents
	}
	if c.MaxElements == 0 {
		c.MaxElements = DefaultDrainMaxElements
	}
	if c.RetryMax == 0 {
		c.RetryMax = DefaultDrainRetryMax
	}
	if c.LogEvery == 0 {
		c.LogEvery = DefaultLogEvery
	}
	if c.Client == nil {
		// The drain reads the endpoint it names: a redirect is a failed
		// drain, not a hop to wherever the engine points (another host,
		// another path, the same events twice).
		c.Client = &http.Client{
			Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 1, IdleConnTimeout: 30 * time.Second,
				MaxResponseHeaderBytes: drainMaxHeader},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
}

// DrainFeed is the KV-event feed of one TensorRT-LLM endpoint, which has no
// publisher: its events wait in an engine-side ring and POST
// /kv_cache_events on the serving port hands them out destructively. The
// feed drains with one request at a time (a second outstanding request
// would receive a random share), as often as events arrive (PollMin) and
// backing off to PollMax when idle, and turns the events into the same
// Updates a ZMQ Feed delivers:
//
//   - event_id is the sequence, one per attention-DP rank
//     (attention_dp_rank, absent = 0): a gap means events were lost — the
//     ring overflowed, or another consumer drained them (llb must be the
//     only one) — and keeps the mirror up to GapWindow events, else
//     clears it; an event_id that goes back means a restarted engine.
//   - created (a fresh cache) clears the mirror: AllBlocksCleared.
//   - stored becomes a BlockStored with the engine hashes as handles and
//     the blocks' tokens, which a token-keyed Mirror keys with llb's chain;
//     blocks it cannot key end the run, counted by reason.
//   - removed becomes a BlockRemoved; updated (a block's cache level or
//     priority) is counted and not applied.
//   - events of an attention window other than the first one seen since
//     the engine (re)started are counted and skipped (a variable-window
//     model sends one stream per window).
//
// Run must be called once; Stats is safe from any goroutine.
type DrainFeed struct {
	cfg DrainConfig
	log zerolog.Logger
	mg  *metricGroup

	feedSeries
	lastSeq  atomic.Uint64
	haveSeq  atomic.Bool
	rateBits atomic.Uint64
	started  atomic.Bool
	tallyMu  sync.Mutex
	tally    IgnoreTally

	// Owned by the Run goroutine.
	ev         trtEvent // the event being decoded
	buf        []byte   // the read buffer, kept while small
	lastBody   int      // the size of the last drain's body
	ranks      map[int64]*SeqTracker
	window     int64 // the attention window mirrored; -1 until the first event
	up, everUp bool
	failures   int
	ignored    *ignoreLog
	limiter    logLimiter
	run        trtRun
	rateAt     time.Time
	rateEvents uint64
}

// NewDrainFeed validates cfg and registers the feed's metric series (they
// are unregistered when Run returns).
func NewDrainFeed(cfg DrainConfig) (*DrainFeed, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	f := &DrainFeed{
		cfg:    cfg,
		log:    cfg.Logger.With().Str(logService, cfg.ID.Service).Int(logEpIdx, cfg.ID.EpIdx).Str(logAddr, cfg.URL).Logger(),
		mg:     newMetricGroup(cfg.Metrics, cfg.ID),
		ranks:  map[int64]*SeqTracker{},
		window: -1,
	}
	f.limiter.every = cfg.LogEvery
	f.ignored = newIgnoreLog(f.log, f.mg, 0)
	f.feedSeries = newFeedSeries(f.mg)
	return f, nil
}

// Stats returns a snapshot of the counters (LostBatches counts lost events:
// each TensorRT-LLM event has its own sequence number).
func (f *DrainFeed) Stats() FeedStats {
	f.tallyMu.Lock()
	tally := f.tally
	f.tallyMu.Unlock()
	return FeedStats{
		Connected:     f.connected.Get() == 1,
		Reconnects:    f.reconnects.Get(),
		Disconnects:   f.disconnects.Get(),
		RecvErrors:    f.recvErrs.Get(),
		Batches:       f.batches.Get(),
		Events:        f.events.Get(),
		InvalidEvents: f.invalid.Get(),
		UnknownEvents: f.unknown.Get(),
		LastSeq:       f.lastSeq.Load(),
		HaveSeq:       f.haveSeq.Load(),
		Duplicates:    f.duplicates.Get(),
		Gaps:          f.gaps.Get(),
		LostBatches:   f.lost.Get(),
		Resyncs:       f.resyncs.Get(),
		Restarts:      f.restarts.Get(),
		EventsPerSec:  math.Float64frombits(f.rateBits.Load()),
		Ignored:       tally,
	}
}

// Run drains until ctx is done and returns nil (an unreachable or failing
// engine is retried with back-off, never an error). The metric series are
// unregistered before it returns.
func (f *DrainFeed) Run(ctx context.Context) error {
	if !f.started.CompareAndSwap(false, true) {
		return fmt.Errorf("drain %s: Run called twice: %w", f.cfg.URL, ErrConfig)
	}
	defer f.mg.close()
	defer f.cfg.Client.CloseIdleConnections()
	defer f.connected.Set(0)
	f.rateAt = time.Now()
	wait := f.cfg.PollMin
	for {
		if f.cfg.Leader != nil && !f.cfg.Leader() {
			if !f.follow(ctx) {
				return nil
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		f.applyRelayed() // what the previous leader drained before handing over
		n, err := f.drainOnce(ctx)
		now := time.Now()
		trimAfterDrain(f.lastBody)
		f.tickRate(now)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			f.fail(now, err)
			wait = min(max(wait*2, 100*time.Millisecond), f.cfg.RetryMax)
		case n > 0:
			f.ok()
			wait = f.cfg.PollMin
		default:
			f.ok()
			wait = min(wait*3/2+time.Millisecond, f.cfg.PollMax)
		}
	}
}

// drainOnce posts one drain and applies what it returned; n is the number
// of events.
func (f *DrainFeed) drainOnce(ctx context.Context) (int, error) {
	f.lastBody = 0
	rctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, f.cfg.URL, http.NoBody)
	if err != nil {
		return 0, fmt.Errorf("drain request: %w", err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.cfg.Client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("drain: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, drainErrBody))
		return 0, fmt.Errorf("drain: status %d: %.200s", resp.StatusCode, b)
	}
	if resp.ContentLength > int64(f.cfg.MaxBody) {
		// Not read: the events are gone from the engine either way.
		f.recvErrs.Inc()
		f.malformed(fmt.Sprintf("kv drain of %d bytes, larger than %d, dropped unread (its events count as a gap)", resp.ContentLength, f.cfg.MaxBody), ErrMalformed)
		return 0, nil
	}
	body, err := f.read(resp.Body, resp.ContentLength)
	f.lastBody = len(body)
	if err != nil {
		return 0, fmt.Errorf("drain: read body: %w", err)
	}
	return f.consume(body, true)
}

// drainKeepBuf is the largest read buffer a feed keeps between drains (a
// larger one, after a big drain, goes with it).
const drainKeepBuf = 1 << 20

// read reads a drain's body, at most MaxBody+1 bytes (one more says the
// body is over the bound). The buffer grows to the declared length at
// once, else by doubling up to that bound, never past it: a body at the
// bound costs it once and its halves once, not a doubling beyond.
func (f *DrainFeed) read(r io.Reader, declared int64) ([]byte, error) {
	limit := f.cfg.MaxBody + 1
	buf := f.buf[:0]
	if declared >= 0 && int(declared) < limit && cap(buf) < int(declared)+1 {
		buf = make([]byte, 0, declared+1)
	}
	if cap(buf) == 0 {
		buf = make([]byte, 0, min(64<<10, limit))
	}
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= limit {
				break
			}
			grown := make([]byte, len(buf), min(2*cap(buf), limit))
			copy(grown, buf)
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if cap(buf) <= drainKeepBuf {
		f.buf = buf[:0]
	} else {
		f.buf = nil
	}
	return buf, nil
}

// applyRelayed applies the relayed bodies already waiting, without
// blocking.
func (f *DrainFeed) applyRelayed() {
	for {
		select {
		case body := <-f.cfg.Relay:
			_, _ = f.consume(body, false)
			trimAfterDrain(len(body))
		default:
			return
		}
	}
}

// follow applies relayed bodies while another replica leads; false when
// ctx ended. It returns to check the leadership every PollMax.
func (f *DrainFeed) follow(ctx context.Context) bool {
	f.ok() // the leader holds the engine's connection; llb hears it
	t := time.NewTimer(f.cfg.PollMax)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case body := <-f.cfg.Relay:
			_, _ = f.consume(body, false)
			trimAfterDrain(len(body))
			f.tickRate(time.Now())
		case <-t.C:
			return true
		}
	}
}

// consume decodes and applies one drain body; drained bodies with events
// go to Drained too.
func (f *DrainFeed) consume(body []byte, drained bool) (int, error) {
	if len(body) > f.cfg.MaxBody {
		// The events are gone from the engine either way; the next drain's
		// event ids show the gap.
		f.recvErrs.Inc()
		f.malformed(fmt.Sprintf("kv drain larger than %d bytes dropped (its events count as a gap)", f.cfg.MaxBody), ErrMalformed)
		return 0, nil
	}
	if !json.Valid(body) {
		f.recvErrs.Inc()
		f.malformed("malformed kv drain dropped (its events count as a gap)", fmt.Errorf("not JSON: %w", ErrMalformed))
		return 0, nil
	}
	// The shape is checked before anything is decoded, then each event is
	// decoded alone: a bad event costs itself, not its drain.
	n, err := splitDrain(body, f.cfg.MaxEvents, f.cfg.MaxElements, nil)
	if err != nil {
		f.recvErrs.Inc()
		f.malformed("kv drain dropped (its events count as a gap)", err)
		return 0, nil
	}
	if n > 0 {
		if drained && f.cfg.Drained != nil {
			f.cfg.Drained(body)
		}
		f.apply(body)
	}
	return n, nil
}

// ok records a successful drain: the feed is (again) connected.
func (f *DrainFeed) ok() {
	f.failures = 0
	if f.up {
		return
	}
	f.up = true
	f.connected.Set(1)
	if f.everUp {
		f.reconnects.Inc()
	}
	f.everUp = true
	f.log.Info().Msg("kv drain connected")
	f.cfg.Sink(Update{ID: f.cfg.ID, Kind: UpdateConnected})
}

// fail records a failed drain; the feed goes down after drainDownAfter in a
// row.
func (f *DrainFeed) fail(now time.Time, err error) {
	f.recvErrs.Inc()
	f.failures++
	if f.up && f.failures >= drainDownAfter {
		f.up = false
		f.connected.Set(0)
		f.disconnects.Inc()
		f.log.Warn().Err(err).Msg("kv drain failing (engine gone or unreachable); retrying with back-off")
		f.cfg.Sink(Update{ID: f.cfg.ID, Kind: UpdateDisconnected})
		return
	}
	if ok, suppressed := f.limiter.allow(now); ok {
		f.log.Warn().Err(err).Int(logCount, suppressed).Msg("kv drain failed")
	}
}

// malformed logs bad input, rate-limited.
func (f *DrainFeed) malformed(msg string, err error) {
	if ok, suppressed := f.limiter.allow(time.Now()); ok {
		f.log.Warn().Err(err).Int(logCount, suppressed).Msg(msg)
	}
}

// apply decodes one drain's events and turns them into Updates: events
// accumulate in one batch, cut where a sequence decision asks the mirror to
// clear first. An event that does not decode is invalid; its event_id,
// when readable, still counts in the sequence.
func (f *DrainFeed) apply(body []byte) {
	b := &drainBatch{batch: new(Batch)}
	now := time.Now()
	_, _ = splitDrain(body, f.cfg.MaxEvents, f.cfg.MaxElements, func(raw []byte) { f.applyEvent(now, raw, b) })
	f.flush(b)
	f.ev = trtEvent{} // the last event's slices go with the drain
}

// drainBatch is the batch a drain is building and what the mirror must do
// before it.
type drainBatch struct {
	batch *Batch
	reset ResetReason
	seq   uint64
}

// flush hands the batch to the sink when it holds events or a reset.
func (f *DrainFeed) flush(b *drainBatch) {
	if len(b.batch.Events) > 0 || b.reset != ResetNone {
		f.batches.Inc()
		f.cfg.Sink(Update{ID: f.cfg.ID, Kind: UpdateBatch, Seq: b.seq, Reset: b.reset, Batch: b.batch})
		b.batch, b.reset = new(Batch), ResetNone
	}
}

// applyEvent decodes one event of a drain and adds it to b.
func (f *DrainFeed) applyEvent(now time.Time, raw []byte, b *drainBatch) {
	e := &f.ev
	*e = trtEvent{}
	decErr := json.Unmarshal(raw, e)
	if decErr != nil {
		// The event counts in its rank's sequence only if its identity
		// alone decodes.
		var who trtIdentity
		if json.Unmarshal(raw, &who) != nil {
			who = trtIdentity{}
		}
		e.EventID, e.AttentionDPRank = who.EventID, who.AttentionDPRank
	}
	id, err := strconv.ParseUint(e.EventID.String(), 10, 64)
	rank := int64(0)
	if e.AttentionDPRank != nil {
		rank = *e.AttentionDPRank
	}
	if err != nil || rank < 0 || rank >= maxDrainRanks {
		f.invalid.Inc()
		f.countIgnored(now, IgnoreInvalid, 1, 0, func() string {
			return fmt.Sprintf("a TensorRT-LLM event with event_id %q and attention_dp_rank %d (want a non-negative integer and a rank below %d)", e.EventID, rank, maxDrainRanks)
		})
		return
	}
	f.events.Inc()
	tr := f.ranks[rank]
	if tr == nil {
		tr = &SeqTracker{Window: f.cfg.GapWindow}
		f.ranks[rank] = tr
	}
	d := tr.Observe(id)
	switch d.Action {
	case SeqDuplicate:
		f.duplicates.Inc()
		return
	case SeqGapKeep, SeqGapResync:
		f.gaps.Inc()
		f.lost.Add(int(min(d.Missing, math.MaxInt32)))
		if ok, suppressed := f.limiter.allow(now); ok {
			f.log.Info().Uint64(logMissing, d.Missing).Uint64(logSeq, id).Int64(logRank, rank).Stringer(logReason, d.Action).Int(logCount, suppressed).
				Msg("kv event_id gap: events lost (engine ring overflow, or another consumer drained /kv_cache_events: llb must be the only one)")
		}
		if d.Action == SeqGapResync {
			f.flush(b)
			b.reset = ResetGap
			f.resyncs.Inc()
		}
	case SeqRestart:
		f.flush(b)
		b.reset = ResetRestart
		f.resyncs.Inc()
		f.restarts.Inc()
		f.window = -1 // a restarted engine may run another attention window
		f.log.Info().Uint64(logSeq, id).Int64(logRank, rank).Msg("TensorRT-LLM event_id went back: the engine restarted; clearing the mirror")
	}
	b.seq = id
	f.lastSeq.Store(id)
	f.haveSeq.Store(true)
	if decErr != nil {
		f.invalid.Inc()
		f.countIgnored(now, IgnoreInvalid, 1, 0, func() string {
			return fmt.Sprintf("a TensorRT-LLM event (event_id %d) that does not decode: %v", id, decErr)
		})
		return
	}
	f.convert(now, e, b.batch)
}

// convert appends e's mirror events to batch, counting what it skips.
func (f *DrainFeed) convert(now time.Time, e *trtEvent, batch *Batch) {
	win := int64(-1)
	if e.WindowSize != nil {
		win = *e.WindowSize
	}
	switch {
	case f.window == -1:
		f.window = win
	case win != f.window:
		f.countIgnored(now, IgnoreWindow, 1, len(e.Data.Blocks)+len(e.Data.BlockHashes), func() string {
			return fmt.Sprintf("an event for attention window %d; llb mirrors window %d (the first one seen since the engine started)", win, f.window)
		})
		return
	}
	switch e.Data.Type {
	case trtCreated:
		batch.Events = append(batch.Events, Event{Kind: EventAllBlocksCleared})
	case trtStored:
		err := trtStoredRun(e.Data.Blocks, f.cfg.BlockSize, &f.run)
		if err == nil && e.Data.ParentHash.bad {
			err = fmt.Errorf("a stored run's parent_hash is not null, an integer or a string: %w", ErrMalformed)
		}
		if err != nil {
			f.invalid.Inc()
			f.countIgnored(now, IgnoreInvalid, 1, len(e.Data.Blocks), func() string { return err.Error() })
			return
		}
		r := &f.run
		if r.cut != noCut {
			f.countIgnored(now, r.cut, 0, r.cutBlocks, func() string { return r.cutCause })
		}
		if len(r.hashes) == 0 {
			return
		}
		ev := Event{Kind: EventBlockStored, BlockHashes: append([]uint64(nil), r.hashes...),
			TokenIDs: append([]uint32(nil), r.tokens...), BlockSize: r.blockSize, Medium: MediumGPU, HasMedium: true}
		ev.Parent, ev.HasParent = e.Data.ParentHash.v, e.Data.ParentHash.set
		batch.Events = append(batch.Events, ev)
	case trtRemoved:
		ev := Event{Kind: EventBlockRemoved, Medium: MediumGPU, HasMedium: true, BlockHashes: make([]uint64, 0, len(e.Data.BlockHashes))}
		for _, h := range e.Data.BlockHashes {
			if !h.set {
				f.invalid.Inc()
				f.countIgnored(now, IgnoreInvalid, 1, len(e.Data.BlockHashes), func() string {
					return "a removed event names a block_hash that is not an integer or a string"
				})
				return
			}
			ev.BlockHashes = append(ev.BlockHashes, h.v)
		}
		batch.Events = append(batch.Events, ev)
	case trtUpdated:
		f.countIgnored(now, IgnoreCacheLevel, 1, 1, func() string {
			return "TensorRT-LLM 'updated' events (a block moved between cache levels, or its priority changed) are not applied: llb mirrors its blocks in one tier"
		})
	default:
		f.unknown.Inc()
		f.countIgnored(now, IgnoreUnknownTag, 1, 0, func() string {
			return fmt.Sprintf("a TensorRT-LLM event of type %q llb does not know", e.Data.Type)
		})
	}
}

// countIgnored counts skipped input and publishes the tally for Stats.
func (f *DrainFeed) countIgnored(now time.Time, r IgnoreReason, events, blocks int, cause func() string) {
	f.ignored.count(now, r, events, blocks, cause)
	f.tallyMu.Lock()
	f.tally = f.ignored.tally
	f.tallyMu.Unlock()
}

// tickRate refreshes EventsPerSec about once a second.
func (f *DrainFeed) tickRate(now time.Time) {
	el := now.Sub(f.rateAt)
	if el < time.Second {
		return
	}
	ev := f.events.Get()
	f.rateBits.Store(math.Float64bits(float64(ev-f.rateEvents) / el.Seconds()))
	f.rateAt, f.rateEvents = now, ev
}
