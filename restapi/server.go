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
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/labstack/echo/v4"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/catalog"
	"github.com/llbproject/llb/catalog/statefs"
	"github.com/llbproject/llb/internal/logfield"
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
	// caches it (see package catalog). nil: a single node.
	Shared *catalog.SharedConfig
	// Keys receives every accepted table of API keys and tenant limits (the
	// data plane's tenant.Gate); nil: they are stored and served, not
	// enforced.
	Keys catalog.KeysSetter
	// FS is the file system of StateDir; nil means statefs.OSFS.
	FS statefs.FS
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
		c.FS = statefs.OSFS{}
	}
	if c.BodyLimit == 0 {
		c.BodyLimit = DefaultBodyLimit
	}
	if c.StateFile == "" {
		c.StateFile = catalog.StateFileName
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
	cat     *catalog.Catalog
	echo    *echo.Echo
	metrics *serverMetrics
	auth    *tokenChecker // nil: no authentication
	routes  map[string]bool

	// ctrlMu serializes controller updates, so completing a partial update
	// from the endpoint's current instruction and applying it is atomic
	// against other updates.
	ctrlMu sync.Mutex
}

// New builds a Server from cfg.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	s := &Server{
		cfg: cfg,
		log: cfg.Logger.With().Str(logfield.Component, "restapi").Logger(),
	}
	if cfg.Token != "" {
		s.auth = newTokenChecker(cfg.Token)
	}
	ctl, _ := cfg.Runtime.(ControllerRuntime)
	cat, err := catalog.New(catalog.Config{
		Logger: s.log, Metrics: cfg.Metrics, Runtime: cfg.Runtime, Controllers: ctl, Keys: cfg.Keys, DecodeEntry: DecodeEntry,
		FS: cfg.FS, StateDir: cfg.StateDir, StateFile: cfg.StateFile, Shared: cfg.Shared,
		Now: cfg.Now, NewID: cfg.NewID, ApplyTimeout: cfg.ApplyTimeout,
	})
	if err != nil {
		return nil, err
	}
	s.cat = cat
	s.metrics = newServerMetrics(cfg.Metrics)
	s.echo = s.buildEcho()
	return s, nil
}

// Restore loads the stored configuration, hands every rule to the Runtime
// and then opens writes (catalog.Catalog.Restore). It runs once; call it
// after the server is listening (GETs are served meanwhile; writes get 503
// + Retry-After).
func (s *Server) Restore(ctx context.Context) (catalog.RestoreReport, error) {
	return s.cat.Restore(ctx)
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
func (s *Server) WritesAccepted() bool { return s.cat.WritesAccepted() }

// newUUID mints a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail (it aborts the process instead)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// write runs one configuration change through the catalog: decide, the
// API's own checks (limits, loops), persist, publish, apply.
func (s *Server) write(ctx context.Context, decide catalog.Decide) ([]catalog.Change, error) {
	return s.cat.Write(ctx, func(prev *catalog.Rules) (*catalog.Rules, []catalog.Change, error) {
		next, changes, err := decide(prev)
		if err != nil || len(changes) == 0 {
			return next, changes, err
		}
		if err := s.checkLimits(prev, next, changes); err != nil {
			return nil, nil, err
		}
		if err := s.checkLoops(next, changes); err != nil {
			return nil, nil, err
		}
		return next, changes, nil
	})
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
