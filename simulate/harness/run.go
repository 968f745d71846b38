package harness

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/llbproject/llb/simulate/des"
	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/worker"
	"github.com/llbproject/llb/simulate/workload"
)

// DaemonSource says where a run's llbd comes from: a binary the harness
// starts once per run with the strategy's environment, or an address of a
// daemon already running.
type DaemonSource struct {
	// Bin is the llbd binary to start (see BuildDaemon).
	Bin string
	// Attach is the REST address of a running llbd; when set, Bin is
	// ignored and the strategy's environment is NOT applied (the caller
	// must have started the daemon with it).
	Attach string
	// LogLevel is llbd's --log-level when started. Default "warn".
	LogLevel string
}

// RunConfig is one measured run: a strategy at one rate over a trace on a
// fresh fleet.
type RunConfig struct {
	// Trace is the request sequence (shared read-only).
	Trace *workload.Trace
	// Strategy is the routing policy.
	Strategy strategy.Strategy
	// Rate is the offered load in requests per model second (> 0) of the
	// open-loop arrivals; ignored when Concurrency is set.
	Rate float64
	// Concurrency, when > 0, sends the trace in a closed loop of that many
	// clients instead: each sends its next request (the next of the trace)
	// as soon as its previous one completed, so Concurrency requests are in
	// flight until the trace runs out.
	Concurrency int
	// Warmup is how many leading requests are sent and served but left out
	// of every metric (they warm the caches); at least one request must be
	// measured.
	Warmup int
	// Fleet is the fleet every run starts afresh.
	Fleet FleetConfig
	// Daemon is where llbd comes from.
	Daemon DaemonSource
	// RuleArgs are serviceArguments added to the strategy's rule (for
	// instance admission's fc_* keys); they may not replace the strategy's
	// own.
	RuleArgs map[string]any
	// Replicas runs the rule on several llbd processes (independent, or
	// one router in cluster mode) with the trace spread round-robin over
	// them; zero is one llbd.
	Replicas Replicas
	// WorkDir receives each run's llbd state dir and log (required).
	WorkDir string
	// TTFTSLO is the goodput objective in model time. Default 2s.
	TTFTSLO time.Duration
	// RequestTimeout bounds one request in wall time. Default 10m.
	RequestTimeout time.Duration
	// DrainTimeout bounds the wait for in-flight requests after the last
	// one was sent, in wall time. Default 10m.
	DrainTimeout time.Duration
	// SampleEvery is the wall interval of the engines' queue sampling.
	// Default 20ms.
	SampleEvery time.Duration
	// KeepRecords keeps every request's Record in the Result.
	KeepRecords bool
	// PeerKeys are the trace's routing keys (des.NewTrace of the same
	// trace: prompt text and block-key chain per request), which a peer
	// strategy's router reads (required for one; llbd does not need them).
	PeerKeys []des.RequestKeys
	// Progress, when set, is called (from many goroutines) each time a
	// request completes, with the number completed so far.
	Progress func(done int)
}

// DefaultTTFTSLO is RunConfig.TTFTSLO's default.
const DefaultTTFTSLO = 2 * time.Second

func (c *RunConfig) withDefaults() RunConfig {
	out := *c
	if out.TTFTSLO == 0 {
		out.TTFTSLO = DefaultTTFTSLO
	}
	if out.RequestTimeout == 0 {
		out.RequestTimeout = 10 * time.Minute
	}
	if out.DrainTimeout == 0 {
		out.DrainTimeout = 10 * time.Minute
	}
	if out.SampleEvery == 0 {
		out.SampleEvery = 20 * time.Millisecond
	}
	return out
}

// Validate reports every problem at once.
func (c *RunConfig) Validate() error {
	var errs []error
	if c.Trace == nil || len(c.Trace.Requests) == 0 {
		errs = append(errs, errors.New("no trace"))
	} else if c.Warmup < 0 || c.Warmup >= len(c.Trace.Requests) {
		errs = append(errs, fmt.Errorf("warmup %d of %d requests (want 0..%d)", c.Warmup, len(c.Trace.Requests), len(c.Trace.Requests)-1))
	}
	if c.Trace != nil && c.Trace.BlockSize != c.Fleet.Engine.BlockSize {
		errs = append(errs, fmt.Errorf("trace block size %d differs from the engines' %d", c.Trace.BlockSize, c.Fleet.Engine.BlockSize))
	}
	switch {
	case c.Concurrency < 0:
		errs = append(errs, fmt.Errorf("concurrency %d (want >= 0)", c.Concurrency))
	case c.Concurrency == 0 && (!(c.Rate > 0) || math.IsInf(c.Rate, 0)):
		errs = append(errs, fmt.Errorf("rate %v requests/s (want > 0)", c.Rate))
	}
	if c.Strategy.Name == "" {
		errs = append(errs, errors.New("strategy without a name"))
	}
	switch {
	case c.Strategy.IsPeer():
		if c.Trace != nil && len(c.PeerKeys) != len(c.Trace.Requests) {
			errs = append(errs, fmt.Errorf("peer %s: %d routing keys for %d requests", c.Strategy.Name, len(c.PeerKeys), len(c.Trace.Requests)))
		}
		if err := c.Fleet.serves(&c.Strategy); err != nil {
			errs = append(errs, err)
		}
	case c.Daemon.Bin == "" && c.Daemon.Attach == "":
		errs = append(errs, errors.New("no llbd: give a binary or an address to attach to"))
	}
	if c.WorkDir == "" {
		errs = append(errs, errors.New("no work dir"))
	}
	if c.TTFTSLO < 0 || c.RequestTimeout < 0 || c.DrainTimeout < 0 || c.SampleEvery < 0 {
		errs = append(errs, errors.New("negative duration"))
	}
	if err := c.Fleet.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Replicas.validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("run config: %w: %w", ErrConfig, errors.Join(errs...))
}

// Run performs one measured run: a fresh fleet, a fresh llbd (unless
// attached) with the strategy's environment, the strategy's rule, the
// trace sent open-loop at the rate, and the measurement. The daemon and the
// fleet are stopped before it returns.
func Run(ctx context.Context, cfg RunConfig) (*Result, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	s := &c.Strategy

	fl, err := startFleet(&c.Fleet, s.Shape)
	if err != nil {
		return nil, err
	}
	defer func() { _ = stopFleet(fl, 10*time.Second) }()
	if s.IsPeer() {
		return runPeer(ctx, &c, fl)
	}

	if c.Replicas.N > 1 {
		return runReplicas(ctx, &c, fl)
	}
	d, err := c.daemon(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = d.Stop(15 * time.Second) }()

	vip := "127.0.0.1"
	port, err := freePort(vip)
	if err != nil {
		return nil, fmt.Errorf("vip port: %w: %w", ErrDaemon, err)
	}
	rule, err := c.rule(fl, vip, port)
	if err != nil {
		return nil, err
	}
	if err := d.PostRule(ctx, rule); err != nil {
		return nil, err
	}
	if c.Daemon.Attach != "" {
		defer func() { _ = d.DeleteRule(context.Background(), vip, port) }()
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = d.WaitActive(actx, vip, port)
	cancel()
	if err != nil {
		return nil, err
	}
	return measured(ctx, &c, fl, daemonProbe{cpu: d.CPU, pred: predictionReader(d)}, "http://"+net.JoinHostPort(vip, strconv.Itoa(port)))
}

// daemonProbe reads the llbd processes under test: their CPU time, and
// their TTFT prediction histograms (pred nil: a peer, none).
type daemonProbe struct {
	cpu  func() time.Duration
	pred func(context.Context) (predCounts, error)
}

// measured waits out the KV warm-up guard when the strategy needs it, sends
// the trace (spread round-robin over urls) and measures.
func measured(ctx context.Context, c *RunConfig, fl *fleet.Fleet, probe daemonProbe, urls ...string) (*Result, error) {
	s := &c.Strategy
	if s.KVExact {
		// llbd's Tier-1.5 warm-up guard is wall-clock time from the rule's
		// start; there is no state to poll, so wait it out.
		select {
		case <-time.After(KVWarmupSec*time.Second + 250*time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	m, err := drive(ctx, c, fl, probe, urls)
	if err != nil {
		return nil, err
	}
	return measure(c, m), nil
}

// runPeer measures a peer strategy: its router (peerRouter) on the VIP in
// place of llbd. The KV-event routers get a second for their ZMQ
// subscriptions to connect, as llbd's rules get their warm-up.
func runPeer(ctx context.Context, c *RunConfig, fl *fleet.Fleet) (*Result, error) {
	vip := "127.0.0.1"
	port, err := freePort(vip)
	if err != nil {
		return nil, fmt.Errorf("vip port: %w: %w", ErrDaemon, err)
	}
	pr, err := startPeerRouter(c.Strategy.Peer, fl, servingWorkers(fl, c.Fleet.Workers), c.PeerKeys, c, vip, port)
	if err != nil {
		return nil, err
	}
	defer pr.close()
	if c.Strategy.Peer.UsesKVEvents() {
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	m, err := drive(ctx, c, fl, daemonProbe{cpu: func() time.Duration { return 0 }}, []string{"http://" + net.JoinHostPort(vip, strconv.Itoa(port))})
	if err != nil {
		return nil, err
	}
	return measure(c, m), nil
}

// daemon starts (or attaches to) the run's llbd.
func (c *RunConfig) daemon(ctx context.Context) (*Daemon, error) {
	if c.Daemon.Attach != "" {
		return AttachDaemon(ctx, c.Daemon.Attach)
	}
	dir, err := os.MkdirTemp(c.WorkDir, "llbd-"+safeName(c.Strategy.Name)+"-")
	if err != nil {
		return nil, fmt.Errorf("llbd state dir: %w: %w", ErrDaemon, err)
	}
	return StartDaemon(ctx, DaemonConfig{
		Bin: c.Daemon.Bin, Env: c.Strategy.EnvList(), StateDir: dir,
		LogPath: filepath.Join(dir, "llbd.log"), LogLevel: c.Daemon.LogLevel,
	})
}

// safeName keeps letters, digits, '-' and '.', mapping the rest to '_'.
func safeName(s string) string {
	b := []byte(s)
	for i, ch := range b {
		if !(ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '.') {
			b[i] = '_'
		}
	}
	return string(b)
}

// sample is one reading of the serving engines' waiting queues.
type sample struct {
	at      time.Duration
	waiting []int
}

// counters are the serving workers' prefix-cache counters at one moment.
type counters struct {
	queries, hits []uint64
}

func readCounters(ws []*worker.Worker) counters {
	c := counters{queries: make([]uint64, len(ws)), hits: make([]uint64, len(ws))}
	for i, w := range ws {
		st := w.Stats()
		c.queries[i], c.hits[i] = st.PrefixQueries, st.PrefixHits
	}
	return c
}

// raw is what drive collects for measure.
type raw struct {
	// warmOnce guards atWarm, read before the first measured send.
	warmOnce     sync.Once
	records      []Record
	samples      []sample
	atWarm, end  counters
	wall         time.Duration
	harnessCPU   time.Duration
	daemonCPU    time.Duration
	drainTimeout bool
	// predWarm and predEnd are llbd's TTFT prediction histograms at the
	// warm-up boundary and at the end; predOK is false when either could
	// not be read (or there is no llbd).
	predWarm, predEnd predCounts
	predOK            bool
	// workerTTFT are the serving workers' own TTFT totals (single-pool
	// rules only: a P/D worker's histogram mixes both legs).
	workerTTFT   histTotals
	workerTTFTOK bool
}

// drive sends the trace (open-loop at the rate, or in a closed loop of
// c.Concurrency clients), request i to urls[i mod len(urls)], and collects
// the records.
func drive(ctx context.Context, c *RunConfig, fl *fleet.Fleet, probe daemonProbe, urls []string) (*raw, error) {
	tr := c.Trace
	serving := servingWorkers(fl, c.Fleet.Workers)
	transport := newTransport()
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	r := &raw{records: make([]Record, len(tr.Requests))}

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	now := func() time.Duration { return max(time.Since(start), 1) }
	cpu0, dcpu0 := selfCPU(), probe.cpu()
	// The prediction histograms are read over HTTP: at the warm-up
	// boundary off the request's path (warmRead), so that the boundary's
	// request is not held up.
	readPred := func(ctx context.Context, into *predCounts, ok *bool) {
		if probe.pred == nil {
			return
		}
		p, err := probe.pred(ctx)
		*into, *ok = p, err == nil
	}
	var warmOK, endOK bool
	// A strategy with Objective sends the run's goodput objective as every
	// request's TTFT objective, in wall milliseconds.
	objective := ""
	if c.Strategy.Objective {
		objective = strconv.FormatFloat(c.TTFTSLO.Seconds()*c.Fleet.TimeScale()*1000, 'f', 3, 64)
	}
	warmRead := make(chan struct{})

	// Sampler: the serving engines' waiting queues.
	samplerDone := make(chan struct{})
	stopSampler := make(chan struct{})
	go func() {
		defer close(samplerDone)
		t := time.NewTicker(c.SampleEvery)
		defer t.Stop()
		for {
			s := sample{at: now(), waiting: make([]int, len(serving))}
			for i, w := range serving {
				s.waiting[i] = w.Stats().Waiting
			}
			r.samples = append(r.samples, s)
			select {
			case <-stopSampler:
				return
			case <-t.C:
			}
		}
	}()

	var wg sync.WaitGroup
	var completed atomic.Int64
	send := func(i int, at time.Duration) {
		if i >= c.Warmup {
			// The counter window opens before any measured request leaves:
			// the goroutine or client carrying a later request may run
			// before the boundary's, and the Once holds it until the read.
			r.warmOnce.Do(func() {
				r.atWarm = readCounters(serving)
				go func() {
					defer close(warmRead)
					readPred(rctx, &r.predWarm, &warmOK)
				}()
			})
		}
		rec := &r.records[i]
		rec.Seq, rec.Arrival = i, max(at, 1)
		qctx, qcancel := context.WithTimeout(rctx, c.RequestTimeout)
		exchange(qctx, client, urls[i%len(urls)], &tr.Requests[i], rec, now, objective)
		qcancel()
		n := completed.Add(1)
		if c.Progress != nil {
			c.Progress(int(n))
		}
	}
	if c.Concurrency > 0 {
		// Closed loop: each client takes the next request of the trace as
		// soon as its previous one completed.
		var next atomic.Int64
		for range min(c.Concurrency, len(tr.Requests)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1) - 1)
					if i >= len(tr.Requests) || rctx.Err() != nil {
						return
					}
					send(i, now())
				}
			}()
		}
	} else if err := r.openLoop(ctx, c, cancel, &wg, start, send); err != nil {
		return nil, err
	}
	allDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(allDone)
	}()
	select {
	case <-allDone:
	case <-time.After(c.DrainTimeout):
		r.drainTimeout = true
		cancel()
		<-allDone
	case <-ctx.Done():
		cancel()
		<-allDone
		return nil, ctx.Err()
	}
	r.wall = time.Since(start)
	r.harnessCPU, r.daemonCPU = selfCPU()-cpu0, probe.cpu()-dcpu0
	readPred(ctx, &r.predEnd, &endOK)
	r.warmOnce.Do(func() { close(warmRead) }) // the boundary was never reached
	<-warmRead
	r.predOK = warmOK && endOK
	close(stopSampler)
	<-samplerDone
	r.end = readCounters(serving)
	if c.Strategy.Shape == strategy.ShapePool {
		var err error
		r.workerTTFT, err = scrapeTTFT(ctx, serving)
		r.workerTTFTOK = err == nil
	}
	return r, nil
}

// openLoop sends the trace's requests at their arrival times (scaled to
// c.Rate and the time scale), each from its own goroutine registered in wg,
// and returns when the last one is sent. A cancelled ctx cancels every
// request (cancel), waits for them and returns ctx's error.
func (r *raw) openLoop(ctx context.Context, c *RunConfig, cancel context.CancelFunc, wg *sync.WaitGroup, start time.Time, send func(int, time.Duration)) error {
	tr := c.Trace
	scale := c.Fleet.TimeScale()
	timer := time.NewTimer(0)
	<-timer.C
	base := tr.Requests[0].UnitAt
	for i := range tr.Requests {
		at := time.Duration((tr.Requests[i].UnitAt - base) / c.Rate * scale * float64(time.Second))
		if wait := at - time.Since(start); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				cancel()
				wg.Wait()
				return ctx.Err()
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			send(i, at)
		}()
	}
	return nil
}
