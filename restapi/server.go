package restapi

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/labstack/echo/v4"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/rule"
)

// Defaults of Config.
const (
	DefaultBodyLimit         = 1 << 20
	DefaultApplyTimeout      = 10 * time.Second
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 60 * time.Second
	DefaultIdleTimeout       = 120 * time.Second
	// RetryAfterSeconds is the Retry-After of a write refused during restore.
	RetryAfterSeconds = 5
)

// Config configures a Server. Zero durations and limits take the defaults above.
type Config struct {
	// Logger receives transitions at Info and per-request detail at Debug.
	Logger zerolog.Logger
	// Metrics is the set restapi registers its series in and /metrics writes.
	// Required; one Server per Set. Built by cmd/llbd and shared with the
	// data plane so that /metrics shows everything.
	Metrics *metrics.Set
	// ProcessMetrics adds Go runtime and process series to /metrics.
	ProcessMetrics bool
	// Runtime is the data plane. Required: pass NewNoDataPlane() explicitly
	// to run without one.
	Runtime Runtime
	// StateDir holds rules.json. Required; created (0700) if missing.
	StateDir string
	// StateFile is the rules file's name in StateDir ("" → rules.json). In
	// cluster mode it is the local cache of the shared rules.
	StateFile string
	// Shared, when set, keeps the configuration in a store the replicas of
	// a cluster share (etcd) instead of the rules file, which then only
	// caches it (see shared.go). nil: a single node.
	Shared *SharedConfig
	// FS is the file system of StateDir; nil means OSFS.
	FS FS
	// Token, when non-empty, is the bearer token every request must carry.
	Token string
	// BodyLimit caps a request body in bytes (0 → 1 MiB); larger bodies get 413.
	BodyLimit int64
	// Version is reported by GET /netlox/v1/version.
	Version string
	// Now is the clock for lastUpdated stamps and file names; nil means time.Now.
	Now func() time.Time
	// NewID mints rule ids; nil means random UUIDv4.
	NewID func() string
	// SelfAddrs are llbd's own listeners besides the rules' VIPs (the REST
	// API, the debug listener): no endpoint may point at them.
	SelfAddrs []netip.AddrPort
	// LocalAddr reports this host's own addresses (an endpoint on one of
	// them reaches a listener on the unspecified address); nil means
	// HostAddrs().
	LocalAddr func(netip.Addr) bool
	// MaxRules is the most rules the daemon holds (0 → DefaultMaxRules); a
	// write that would add one more is refused with 422.
	MaxRules int
	// MaxRuleBytes bounds one rule as stored, in bytes of compact JSON
	// (0 → DefaultMaxRuleBytes); a larger rule is refused with 422.
	MaxRuleBytes int
	// ApplyTimeout bounds one Runtime.Apply or Remove call (0 → 10 s).
	ApplyTimeout time.Duration
	// ReadHeaderTimeout, ReadTimeout, WriteTimeout and IdleTimeout configure
	// the http.Server returned by HTTPServer (0 → 10 s, 30 s, 60 s, 120 s).
	ReadHeaderTimeout, ReadTimeout, WriteTimeout, IdleTimeout time.Duration
}

func (c *Config) validate() error {
	var errs []error
	if c.Metrics == nil {
		errs = append(errs, errors.New("Metrics is required"))
	}
	if c.Runtime == nil {
		errs = append(errs, errors.New("Runtime is required (use NewNoDataPlane() to run without a data plane)"))
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("StateDir is required"))
	}
	if c.BodyLimit < 0 {
		errs = append(errs, fmt.Errorf("BodyLimit %d is negative", c.BodyLimit))
	}
	if c.Shared != nil && c.Shared.Rules == nil {
		errs = append(errs, errors.New("Shared needs a Rules store"))
	}
	if c.MaxRules < 0 || c.MaxRuleBytes < 0 {
		errs = append(errs, fmt.Errorf("MaxRules %d and MaxRuleBytes %d must not be negative", c.MaxRules, c.MaxRuleBytes))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("restapi: config: %w", err)
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.FS == nil {
		c.FS = OSFS{}
	}
	if c.BodyLimit == 0 {
		c.BodyLimit = DefaultBodyLimit
	}
	if c.StateFile == "" {
		c.StateFile = StateFileName
	}
	if c.LocalAddr == nil {
		c.LocalAddr = HostAddrs()
	}
	if c.MaxRules == 0 {
		c.MaxRules = DefaultMaxRules
	}
	if c.MaxRuleBytes == 0 {
		c.MaxRuleBytes = DefaultMaxRuleBytes
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NewID == nil {
		c.NewID = newUUID
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.ApplyTimeout, DefaultApplyTimeout)
	def(&c.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&c.ReadTimeout, DefaultReadTimeout)
	def(&c.WriteTimeout, DefaultWriteTimeout)
	def(&c.IdleTimeout, DefaultIdleTimeout)
}

// Server is the REST control plane. Create it with New, serve Handler (or
// HTTPServer), and call Restore once: until Restore returns, GETs are served
// and writes are refused with 503 + Retry-After.
type Server struct {
	cfg     Config
	log     zerolog.Logger
	store   *Store
	echo    *echo.Echo
	metrics *serverMetrics
	auth    *tokenChecker // nil: no authentication
	routes  map[string]bool

	// tbl is the current rule table; readers Load it without locks.
	tbl atomic.Pointer[table]
	// writeMu serializes writes: decide, persist, publish, apply.
	writeMu sync.Mutex
	// ready opens writes once Restore has finished.
	ready     atomic.Bool
	restoring atomic.Bool
	report    atomic.Pointer[RestoreReport]

	applyMu   sync.Mutex
	applyErrs map[rule.RuleKey]string // guarded by applyMu

	// ctrlMu serializes controller updates, so completing a partial update
	// from the endpoint's current instruction and applying it is atomic
	// against other updates.
	ctrlMu sync.Mutex

	// shared is the cluster-mode state (nil on a single node).
	shared *sharedState
}

// New builds a Server from cfg.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	s := &Server{
		cfg:       cfg,
		log:       cfg.Logger.With().Str(logfield.Component, "restapi").Logger(),
		store:     NewStoreFile(cfg.FS, cfg.StateDir, cfg.StateFile, cfg.Now),
		applyErrs: make(map[rule.RuleKey]string),
	}
	if cfg.Token != "" {
		s.auth = newTokenChecker(cfg.Token)
	}
	s.tbl.Store(newTable(nil))
	m, err := newServerMetrics(cfg.Metrics, func() int { return len(s.tbl.Load().order) })
	if err != nil {
		return nil, err
	}
	s.metrics = m
	if cfg.Shared != nil {
		s.shared = newSharedState(*cfg.Shared)
		s.metrics.shared(cfg.Metrics, s.shared)
	}
	s.echo = s.buildEcho()
	return s, nil
}

// Handler is the HTTP handler of every route.
func (s *Server) Handler() http.Handler { return s.echo }

// HTTPServer returns an http.Server for Handler with the configured
// timeouts; tlsConf, when non-nil, is its TLS configuration.
func (s *Server) HTTPServer(tlsConf *tls.Config) *http.Server {
	return &http.Server{
		Handler:           s.echo,
		TLSConfig:         tlsConf,
		ReadHeaderTimeout: s.cfg.ReadHeaderTimeout,
		ReadTimeout:       s.cfg.ReadTimeout,
		WriteTimeout:      s.cfg.WriteTimeout,
		IdleTimeout:       s.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          log.New(debugWriter{s.log}, "", 0),
	}
}

// debugWriter sends net/http's own error log (TLS handshake failures, ...)
// to zerolog at Debug.
type debugWriter struct{ log zerolog.Logger }

// Write logs p as one debug line.
func (w debugWriter) Write(p []byte) (int, error) {
	w.log.Debug().Msg(string(p))
	return len(p), nil
}

// WritesAccepted reports whether Restore has finished and writes are open
// (in cluster mode: and the rules were read from the shared store).
func (s *Server) WritesAccepted() bool {
	return s.ready.Load() && (s.shared == nil || s.shared.writable() == nil)
}

// newUUID mints a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (it aborts the process instead)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// write runs one configuration change: decide against the current table,
// persist the result, publish it, then hand each change to the Runtime, all
// under writeMu so the Runtime sees changes in the order they were accepted.
// A decide error or a persistence failure leaves everything unchanged.
func (s *Server) write(ctx context.Context, decide func(*table) (*table, []Change, error)) ([]Change, error) {
	if !s.ready.Load() {
		return nil, ErrMaintenance
	}
	if s.shared != nil {
		return s.writeShared(ctx, decide)
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	prev := s.tbl.Load()
	next, changes, err := decide(prev)
	if err != nil || len(changes) == 0 {
		return nil, err
	}
	if err := s.checkLimits(prev, next, changes); err != nil {
		return nil, err
	}
	if err := s.checkLoops(next, changes); err != nil {
		return nil, err
	}
	if err := s.store.save(next.order); err != nil {
		s.metrics.stateWriteErrs.Inc()
		return nil, fmt.Errorf("restapi: state write failed, the change was not made: %w", err)
	}
	s.metrics.stateWrites.Inc()
	s.tbl.Store(next)
	for _, ch := range changes {
		s.metrics.change(ch.Kind)
		s.logChange(ch)
		s.apply(ctx, ch)
	}
	return changes, nil
}

func (s *Server) logChange(ch Change) {
	ev := s.log.Info().Str(logfield.Change, string(ch.Kind)).Str(logfield.Rule, ch.Key.String())
	if r := ch.New; r != nil {
		ev = ev.Str(logfield.RuleID, r.ID()).Str(logfield.RuleName, r.Name()).Int(logfield.Endpoints, len(r.Effective.Endpoints))
	}
	if len(ch.Trace) > 0 {
		ev = ev.Strs(logfield.Reason, ch.Trace)
	}
	ev.Msg("rule " + string(ch.Kind))
}

// apply hands one change to the Runtime, bounded by ApplyTimeout and detached
// from the request's cancellation (a client hanging up must not leave the data
// plane half-configured). A failure or panic is recorded for GET …/status.
func (s *Server) apply(ctx context.Context, ch Change) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ApplyTimeout)
	defer cancel()
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("restapi: runtime panicked: %v", p)
			}
		}()
		if ch.Kind == ChangeDeleted {
			return s.cfg.Runtime.Remove(actx, ch.Key)
		}
		return s.cfg.Runtime.Apply(actx, ch.New.Clone())
	}()
	s.applyMu.Lock()
	if err != nil && ch.Kind != ChangeDeleted {
		s.applyErrs[ch.Key] = err.Error()
	} else {
		delete(s.applyErrs, ch.Key)
	}
	s.applyMu.Unlock()
	if err != nil {
		s.metrics.applyErrs.Inc()
		s.log.Warn().Err(err).Str(logfield.Rule, ch.Key.String()).Str(logfield.Change, string(ch.Kind)).
			Msg("data plane did not apply the change; the rule stays configured and reports ERROR")
	}
}

func (s *Server) applyErr(k rule.RuleKey) string {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	return s.applyErrs[k]
}

// readBody reads a request body up to BodyLimit.
func (s *Server) readBody(c echo.Context) ([]byte, error) {
	r := c.Request()
	if r.ContentLength > s.cfg.BodyLimit {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", ErrBodyTooLarge, r.ContentLength, s.cfg.BodyLimit)
	}
	b, err := io.ReadAll(http.MaxBytesReader(c.Response().Writer, r.Body, s.cfg.BodyLimit))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return nil, fmt.Errorf("%w: the limit is %d bytes", ErrBodyTooLarge, s.cfg.BodyLimit)
	case err != nil:
		return nil, fmt.Errorf("%w: reading the body: %v", ErrMalformedRequest, err)
	}
	return b, nil
}
