// Package worker is a GPU-free stand-in for one vLLM server: the OpenAI
// completions and chat endpoints (streaming and not), /tokenize, /health,
// /metrics with vLLM's names, /v1/models and /reset_prefix_cache, KV events
// on a real ZMQ PUB socket (plus an optional replay ROUTER), the P/D NIXL
// protocol with a side channel, and fault injection (POST /_sim/faults).
//
// A Worker drives a simulate/engine.Engine in real time from one goroutine
// (the driver); request handlers talk to it through commands and read their
// progress from per-request trackers. Everything binds the worker's own IP so
// a fleet can give every worker its own 127.0.0.x and one shared ZMQ port.
package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/kvpub"
)

// Worker is a running simulated vLLM server.
type Worker struct {
	cfg        Config
	engineID   string
	eng        *engine.Engine
	drv        *driver
	pub        *kvpub.Publisher // nil without ZMQ KV events
	ring       *trtRing         // TensorRT-LLM's event ring; nil otherwise
	rooms      rooms            // SGLang bootstrap rooms (prefill side)
	bootClient *http.Client     // SGLang decode side: joins rooms
	ctxIDs     atomic.Int64     // TensorRT-LLM ctx_request_id
	dpRanks    []*httputil.ReverseProxy
	dpNext     atomic.Uint64
	faults     *faultState
	met        *workerMetrics
	receipts   *receiptLog
	responses  responseStore // the Responses API's stored responses
	loras      loraState     // loaded LoRA adapters and the lora_requests_info gauge
	log        *zerolog.Logger
	started    time.Time
	pullClient *http.Client

	srv, nixlSrv *http.Server // nixlSrv nil for KVNone
	ln, nixlLn   net.Listener
	bootSrv      *http.Server // SGLang prefill's bootstrap port; nil otherwise
	bootLn       net.Listener
	serving      sync.WaitGroup // Serve goroutines

	// inflight counts handlers; closing (under mu) refuses new ones once
	// shutdown waits for the count.
	mu       sync.Mutex
	closing  bool
	inflight sync.WaitGroup

	stopping chan struct{} // closed when handlers must give up
	done     chan struct{} // closed when everything is down
	once     sync.Once
	crashed  bool // set before done closes
}

// Start validates cfg, binds every socket and starts serving. On error
// nothing is left running.
func Start(cfg Config) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &Worker{
		cfg:      cfg,
		receipts: &receiptLog{max: 64},
		started:  time.Now(),
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
	}
	w.log = cfg.Logger
	if w.log == nil {
		nop := zerolog.Nop()
		w.log = &nop
	}
	l := w.log.With().Str(logWorker, cfg.Name).Logger()
	w.log = &l
	w.engineID = randomHex(16)
	w.cfg.Dialect, _ = ParseDialect(string(cfg.Dialect)) // validated
	ec := cfg.Engine
	ec.EngineID = w.engineID
	ec.Hash.Model = cfg.Model
	ec.Hash.Algo = w.cfg.Dialect.hashAlgo(ec.Hash.Algo)
	if cfg.SeedUnset {
		ec.Hash.NoneHash = make([]byte, digestSize(ec.Hash.Algo))
		_, _ = rand.Read(ec.Hash.NoneHash) // crypto/rand never fails on Linux
	}
	w.cfg.Engine = ec
	eng, err := engine.New(ec)
	if err != nil {
		return nil, err
	}
	w.eng = eng
	for _, u := range cfg.DPRoute {
		target, err := url.Parse(u)
		if err != nil {
			return nil, fmt.Errorf("worker %s: dp route %q: %w: %w", cfg.Name, u, ErrConfig, err)
		}
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.Transport = &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
		rp.FlushInterval = -1
		w.dpRanks = append(w.dpRanks, rp)
	}
	w.faults = newFaultState(cfg.Faults, cfg.FaultSeed)
	w.loras.init(cfg.LoRAs)
	w.pullClient = newPullClient(cfg.PullTimeout)

	if w.ln, err = net.Listen("tcp", net.JoinHostPort(cfg.IP, strconv.Itoa(cfg.HTTPPort))); err != nil {
		return nil, fmt.Errorf("worker %s: http: %w: %w", cfg.Name, ErrListen, err)
	}
	if ec.KVRole != engine.KVNone {
		if w.nixlLn, err = net.Listen("tcp", net.JoinHostPort(cfg.IP, strconv.Itoa(cfg.NIXLPort))); err != nil {
			_ = w.ln.Close()
			return nil, fmt.Errorf("worker %s: nixl side channel: %w: %w", cfg.Name, ErrListen, err)
		}
	}
	if w.cfg.Dialect == DialectSGLang && ec.KVRole.ServesRemoteDecode() {
		if w.bootLn, err = net.Listen("tcp", net.JoinHostPort(cfg.IP, strconv.Itoa(cfg.BootstrapPort))); err != nil {
			w.closeListeners()
			return nil, fmt.Errorf("worker %s: bootstrap port: %w: %w", cfg.Name, ErrListen, err)
		}
	}
	w.bootClient = newPullClient(w.cfg.BootstrapTimeout)
	var sink eventSink
	switch {
	case !cfg.KVEvents:
	case w.cfg.Dialect == DialectTRTLLM:
		w.ring = newTRTRing(max(cfg.EventBuffer, 1), ec.MaxModelLen)
		sink = w.ring
	default:
		if w.pub, err = kvpub.Start(w.pubConfig()); err != nil {
			w.closeListeners()
			return nil, fmt.Errorf("worker %s: kv events: %w: %w", cfg.Name, ErrListen, err)
		}
		sink = w.pub
		if w.cfg.Dialect == DialectSGLang {
			sink = &sglangSink{pub: w.pub}
		}
	}
	w.drv = newDriver(eng, sink, cfg.EventInterval, cfg.LeanEvents, w.log)
	w.met = newMetrics(w)
	w.srv = &http.Server{Handler: w.track(w.routes()), ReadHeaderTimeout: 10 * time.Second}
	w.serve(w.srv, w.ln)
	if w.nixlLn != nil {
		mux := http.NewServeMux()
		mux.HandleFunc(nixlReadPath, w.handleNIXLRead)
		w.nixlSrv = &http.Server{Handler: w.track(mux), ReadHeaderTimeout: 10 * time.Second}
		w.serve(w.nixlSrv, w.nixlLn)
	}
	if w.bootLn != nil {
		w.bootSrv = &http.Server{Handler: w.track(w.bootstrapMux()), ReadHeaderTimeout: 10 * time.Second}
		w.serve(w.bootSrv, w.bootLn)
		go w.sweepRooms()
	}
	w.log.Info().Str(logfield.Addr, w.Addr()).Str(logRole, ec.KVRole.String()).Str(logKVEndpoint, w.KVEndpoint()).
		Str(logNIXLAddr, w.NIXLAddr()).Msg("simulated worker started")
	return w, nil
}

// pubConfig is the publisher configuration derived from the worker's.
func (w *Worker) pubConfig() kvpub.Config {
	port := "*"
	if w.cfg.KVPort != 0 {
		port = strconv.Itoa(w.cfg.KVPort)
	}
	pc := kvpub.Config{
		Endpoint:     "tcp://" + net.JoinHostPort(w.cfg.IP, port),
		Topic:        w.topic(),
		Layout:       w.cfg.Layout,
		DigestHashes: w.cfg.DigestHashes,
		DPRank:       w.cfg.DPRank,
		BindRetry:    w.cfg.KVBindRetry,
		Logger:       w.log,
	}
	if w.cfg.Dialect == DialectSGLang {
		pc.Layout, pc.DigestHashes = inventory.LayoutSGLang, false
	}
	if w.cfg.Replay {
		rp := "*"
		if w.cfg.ReplayPort != 0 {
			rp = strconv.Itoa(w.cfg.ReplayPort)
		}
		pc.ReplayEndpoint = "tcp://" + net.JoinHostPort(w.cfg.IP, rp)
	}
	return pc
}

// topic is frame 0 of the KV messages.
func (w *Worker) topic() string {
	switch w.cfg.Topic {
	case "-":
		return ""
	case "":
		return "kv@" + w.Addr() + "@" + w.cfg.Model
	}
	return w.cfg.Topic
}

// routes is the OpenAI/vLLM API plus the /_sim control endpoints.
func (w *Worker) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/completions", w.dpFront(w.handleGenerate(false)))
	mux.HandleFunc("/v1/chat/completions", w.dpFront(w.handleGenerate(true)))
	if w.cfg.Dialect == DialectTRTLLM {
		// trtllm-serve has no /tokenize; its events are drained here.
		mux.HandleFunc("/kv_cache_events", w.handleKVCacheEvents)
	} else {
		mux.HandleFunc("/tokenize", w.handleTokenize)
		mux.HandleFunc("/v1/tokenize", w.handleTokenize)
	}
	mux.HandleFunc("GET /health", w.handleHealth)
	mux.HandleFunc("GET /ping", w.handleHealth)
	mux.HandleFunc("GET /v1/models", w.handleModels)
	mux.HandleFunc("GET /metrics", w.handleMetrics)
	if w.cfg.Dialect == DialectTRTLLM {
		mux.HandleFunc("GET /prometheus/metrics", w.handleMetrics)
	}
	mux.HandleFunc("/reset_prefix_cache", w.handleReset)
	w.apiRoutes(mux)
	mux.HandleFunc("/_sim/faults", w.handleFaults)
	mux.HandleFunc("GET /_sim/debug", w.handleDebug)
	mux.HandleFunc("/", func(rw http.ResponseWriter, r *http.Request) {
		writeError(rw, http.StatusNotFound, "no route "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// dpFront spreads generation requests over the worker's data-parallel
// ranks in turn (itself first); without ranks it is h.
func (w *Worker) dpFront(h http.HandlerFunc) http.HandlerFunc {
	if len(w.dpRanks) == 0 {
		return h
	}
	return func(rw http.ResponseWriter, r *http.Request) {
		i := int((w.dpNext.Add(1) - 1) % uint64(len(w.dpRanks)+1))
		if i == 0 {
			h(rw, r)
			return
		}
		w.dpRanks[i-1].ServeHTTP(rw, r)
	}
}

// track counts in-flight handlers so shutdown can wait for them.
func (w *Worker) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.mu.Lock()
		if w.closing {
			w.mu.Unlock()
			writeError(rw, http.StatusServiceUnavailable, "worker is shutting down")
			return
		}
		w.inflight.Add(1)
		w.mu.Unlock()
		defer w.inflight.Done()
		h.ServeHTTP(rw, r)
	})
}

// serve runs srv on ln in a tracked goroutine.
func (w *Worker) serve(srv *http.Server, ln net.Listener) {
	w.serving.Add(1)
	go func() {
		defer w.serving.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			w.log.Error().Err(err).Msg("http server stopped")
		}
	}()
}

// Addr is the OpenAI API address, ip:port.
func (w *Worker) Addr() string { return w.ln.Addr().String() }

// URL is the OpenAI API base URL, http://ip:port.
func (w *Worker) URL() string { return "http://" + w.Addr() }

// HTTPPort is the bound API port.
func (w *Worker) HTTPPort() int { return w.ln.Addr().(*net.TCPAddr).Port }

// KVEndpoint is the bound ZMQ PUB address ("" without KV events).
func (w *Worker) KVEndpoint() string {
	if w.pub == nil {
		return ""
	}
	return w.pub.Endpoint()
}

// ReplayEndpoint is the bound ROUTER address ("" without replay).
func (w *Worker) ReplayEndpoint() string {
	if w.pub == nil {
		return ""
	}
	return w.pub.ReplayEndpoint()
}

// NIXLAddr is the side-channel address ("" for KVNone).
func (w *Worker) NIXLAddr() string {
	if w.nixlLn == nil {
		return ""
	}
	return w.nixlLn.Addr().String()
}

// nixlPort is the side-channel port (0 for KVNone).
func (w *Worker) nixlPort() int {
	if w.nixlLn == nil {
		return 0
	}
	return w.nixlLn.Addr().(*net.TCPAddr).Port
}

// EngineID is remote_engine_id of this worker.
func (w *Worker) EngineID() string { return w.engineID }

// Config is the worker's effective configuration (engine id and hash
// overrides filled in).
func (w *Worker) Config() Config { return w.cfg }

// Stats is the engine's gauges and counters as of its last step.
func (w *Worker) Stats() engine.Stats { return w.drv.snapshot() }

// pubStats is the publisher's counters (zero without KV events).
func (w *Worker) pubStats() kvpub.Stats {
	if w.pub == nil {
		return kvpub.Stats{}
	}
	return w.pub.Stats()
}

// Done is closed once the worker has stopped (Stop, Crash, or a crash
// fault).
func (w *Worker) Done() <-chan struct{} { return w.done }

// Crashed reports whether the worker ended by Crash; valid after Done.
func (w *Worker) Crashed() bool {
	<-w.done
	return w.crashed
}

// Stop shuts the worker down gracefully: no new connections, in-flight
// requests finish (until ctx ends, then they are cut), queued KV events are
// flushed, every socket is closed. It returns ctx's error when it had to cut
// requests. Safe to call more than once and after Crash.
func (w *Worker) Stop(ctx context.Context) error {
	var err error
	w.once.Do(func() {
		w.log.Info().Msg("simulated worker stopping")
		err = w.srv.Shutdown(ctx)
		for _, s := range []*http.Server{w.nixlSrv, w.bootSrv} {
			if s == nil {
				continue
			}
			if e := s.Shutdown(ctx); err == nil {
				err = e
			}
		}
		if err != nil {
			_ = w.srv.Close() // ctx ended: cut what is left
			for _, s := range []*http.Server{w.nixlSrv, w.bootSrv} {
				if s != nil {
					_ = s.Close()
				}
			}
		}
		close(w.stopping)
		w.waitHandlers()
		w.drv.shutdown()
		if w.pub != nil {
			w.pub.Close()
		}
		w.finish(false)
	})
	<-w.done
	return err
}

// Crash stops the worker abruptly, like a killed process: listeners and
// connections close at once (in-flight requests see a reset or a truncated
// stream), queued KV events are dropped, the ZMQ sockets close with no
// linger. Safe to call more than once.
func (w *Worker) Crash() {
	w.once.Do(func() {
		w.log.Info().Msg("simulated worker crashing")
		_ = w.srv.Close() // closing is the point; errors are moot
		for _, s := range []*http.Server{w.nixlSrv, w.bootSrv} {
			if s != nil {
				_ = s.Close()
			}
		}
		close(w.stopping)
		if w.pub != nil {
			w.pub.Kill()
		}
		w.drv.shutdown()
		w.waitHandlers()
		w.finish(true)
	})
	<-w.done
}

// waitHandlers refuses new handlers and waits for the running ones.
func (w *Worker) waitHandlers() {
	w.mu.Lock()
	w.closing = true
	w.mu.Unlock()
	w.inflight.Wait()
}

// finish releases what is left and marks the worker done.
func (w *Worker) finish(crashed bool) {
	w.serving.Wait()
	w.pullClient.CloseIdleConnections()
	w.bootClient.CloseIdleConnections()
	for _, rp := range w.dpRanks {
		rp.Transport.(*http.Transport).CloseIdleConnections()
	}
	w.crashed = crashed
	close(w.done)
	w.log.Info().Bool(logCrashed, crashed).Msg("simulated worker stopped")
}

// closeListeners closes the listeners (Start failed before serving).
func (w *Worker) closeListeners() {
	_ = w.ln.Close() // nothing accepted yet
	if w.nixlLn != nil {
		_ = w.nixlLn.Close()
	}
	if w.bootLn != nil {
		_ = w.bootLn.Close()
	}
}

// randomHex is n random hex characters.
func randomHex(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b) // crypto/rand never fails on Linux
	return hex.EncodeToString(b)[:n]
}

// digestSize is the NONE_HASH length of an algorithm.
func digestSize(a engine.HashAlgo) int {
	switch a {
	case engine.HashXXHashCBOR:
		return 16
	case engine.HashFNV, engine.HashSGLang, engine.HashTRTLLM:
		return 8
	}
	return 32
}

// BootstrapAddr is an SGLang prefill worker's bootstrap address ("" when it
// has none).
func (w *Worker) BootstrapAddr() string {
	if w.bootLn == nil {
		return ""
	}
	return w.bootLn.Addr().String()
}

// bootstrapPort is the bound bootstrap port (0 without one).
func (w *Worker) bootstrapPort() int {
	if w.bootLn == nil {
		return 0
	}
	return w.bootLn.Addr().(*net.TCPAddr).Port
}

// sweepRooms forgets rooms a pair never completed, until the worker stops.
func (w *Worker) sweepRooms() {
	t := time.NewTicker(w.cfg.BootstrapTimeout)
	defer t.Stop()
	for {
		select {
		case <-w.stopping:
			return
		case <-t.C:
			w.rooms.sweep(2 * w.cfg.BootstrapTimeout)
		}
	}
}
