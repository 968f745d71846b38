package catalog

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/catalog/statefs"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/tenant"
)

// Runtime is the data plane as the catalog drives it: every accepted change,
// in the order accepted, from one goroutine at a time, after the change is
// durable (on disk, or acknowledged by the shared store).
//
// Apply errors (a VIP:port that cannot be bound, ...) do not undo the
// change: the configuration stays accepted and stored, and the error is kept
// for ApplyErr (GET …/status reports it).
type Runtime interface {
	// Apply makes r live, creating or replacing the rule with key r.Key. It
	// must not keep references into r beyond the call unless it clones it,
	// and must honour ctx's deadline.
	Apply(ctx context.Context, r rule.Rule) error
	// Remove tears down the rule with key k; removing an unknown key is not
	// an error.
	Remove(ctx context.Context, k rule.RuleKey) error
}

// Config configures a Catalog. Every field is required unless it says
// otherwise; restapi fills them from its own Config.
type Config struct {
	// Logger receives transitions at Info and detail at Debug.
	Logger zerolog.Logger
	// Metrics is the set the catalog registers its series in (one Catalog
	// per Set).
	Metrics *metrics.Set
	// Runtime is the data plane every change is applied to.
	Runtime Runtime
	// Controllers applies the controller instructions a cluster shares
	// (Shared.Controller); nil when the data plane takes none.
	Controllers ControllerSetter
	// Keys receives every accepted table of API keys and tenant limits
	// (the data plane's tenant.Gate); nil when nothing enforces them.
	Keys KeysSetter
	// DecodeEntry decodes a stored rule exactly as a POST body is decoded
	// (restapi.DecodeEntry), so a restored rule is one the API accepts.
	DecodeEntry func([]byte) (*rule.LoadbalanceEntry, error)
	// FS, StateDir and StateFile (a name in StateDir) locate the state
	// file (in cluster mode the local cache of the shared rules).
	FS                  statefs.FS
	StateDir, StateFile string
	// Shared, when set, keeps the configuration in a store the replicas of
	// a cluster share (etcd); nil: a single node.
	Shared *SharedConfig
	// Now stamps changes and names moved-aside files.
	Now func() time.Time
	// NewID mints the id of a rule that has none.
	NewID func() string
	// ApplyTimeout bounds one Runtime.Apply or Remove call.
	ApplyTimeout time.Duration
}

func (c *Config) validate() error {
	var errs []error
	if c.Metrics == nil {
		errs = append(errs, errors.New("Metrics is required"))
	}
	if c.Runtime == nil {
		errs = append(errs, errors.New("Runtime is required"))
	}
	if c.DecodeEntry == nil || c.FS == nil || c.Now == nil || c.NewID == nil {
		errs = append(errs, errors.New("DecodeEntry, FS, Now and NewID are required"))
	}
	if c.StateDir == "" || c.StateFile == "" {
		errs = append(errs, errors.New("StateDir and StateFile are required"))
	}
	if c.ApplyTimeout <= 0 {
		errs = append(errs, fmt.Errorf("ApplyTimeout %v must be positive", c.ApplyTimeout))
	}
	if c.Shared != nil && c.Shared.Rules == nil {
		errs = append(errs, errors.New("Shared needs a Rules store"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("catalog: config: %w", err)
	}
	return nil
}

// Catalog holds the daemon's configuration and is the one path of every
// change to it: it decides a write against the current tables, makes the
// result durable (the state file; the shared store in a cluster), publishes
// it to readers, and applies it to the Runtime. Restore fills it at start.
//
// Concurrency: readers load the current tables without locks (Rules);
// writes, restores and cluster watch events are serialized by writeMu, so
// the Runtime sees changes in the order they were accepted.
type Catalog struct {
	cfg  Config
	log  zerolog.Logger
	file *StateFile
	m    *catalogMetrics

	// rules is the current rule table; keys the current API keys and
	// tenant limits.
	rules atomic.Pointer[Rules]
	keys  atomic.Pointer[tenant.Table]
	// writeMu serializes writes: decide, persist, publish, apply.
	writeMu sync.Mutex
	// ready opens writes once Restore has finished.
	ready     atomic.Bool
	restoring atomic.Bool
	report    atomic.Pointer[RestoreReport]

	applyMu   sync.Mutex
	applyErrs map[rule.RuleKey]string // guarded by applyMu

	// shared is the cluster-mode state (nil on a single node).
	shared *sharedState
}

// New builds an empty Catalog from cfg; Restore fills it.
func New(cfg Config) (*Catalog, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := &Catalog{
		cfg:       cfg,
		log:       cfg.Logger,
		file:      NewStateFile(cfg.FS, cfg.StateDir, cfg.StateFile, cfg.Now),
		applyErrs: make(map[rule.RuleKey]string),
	}
	c.rules.Store(newRules(nil))
	m, err := newCatalogMetrics(cfg.Metrics, func() int { return c.rules.Load().Len() })
	if err != nil {
		return nil, err
	}
	c.m = m
	if cfg.Shared != nil {
		c.shared = newSharedState(*cfg.Shared)
		c.m.shared(cfg.Metrics, c.shared)
	}
	return c, nil
}

// Rules returns the current rule table.
func (c *Catalog) Rules() *Rules { return c.rules.Load() }

// Report is what Restore found; nil before it finished.
func (c *Catalog) Report() *RestoreReport { return c.report.Load() }

// Restored reports whether Restore has finished.
func (c *Catalog) Restored() bool { return c.ready.Load() }

// WritesAccepted reports whether Restore has finished and writes are open
// (in cluster mode: and the rules were read from the shared store).
func (c *Catalog) WritesAccepted() bool {
	return c.ready.Load() && (c.shared == nil || c.shared.writable() == nil)
}

// Decide is one write to the rule table: from the current table, the next
// one and the changes between them, or an error that leaves everything
// unchanged. In cluster mode it may be called again, on a newer table, when
// another replica changed the same rule first.
type Decide func(*Rules) (*Rules, []Change, error)

// Write runs one configuration change: decide against the current table,
// persist the result, publish it, then hand each change to the Runtime, all
// under writeMu so the Runtime sees changes in the order they were accepted.
// A decide error or a persistence failure leaves everything unchanged. Before
// Restore has finished it fails with ErrMaintenance.
func (c *Catalog) Write(ctx context.Context, decide Decide) ([]Change, error) {
	if !c.ready.Load() {
		return nil, ErrMaintenance
	}
	if c.shared != nil {
		return c.writeShared(ctx, decide)
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	next, changes, err := decide(c.rules.Load())
	if err != nil || len(changes) == 0 {
		return nil, err
	}
	if err := c.file.save(next, c.Keys()); err != nil {
		c.m.stateWriteErrs.Inc()
		return nil, fmt.Errorf("restapi: state write failed, the change was not made: %w", err)
	}
	c.m.stateWrites.Inc()
	c.publish(ctx, next, changes)
	return changes, nil
}

// publish makes next the current table and applies changes (caller holds
// writeMu).
func (c *Catalog) publish(ctx context.Context, next *Rules, changes []Change) {
	c.rules.Store(next)
	for _, ch := range changes {
		c.m.change(ch.Kind)
		c.logChange(ch)
		c.apply(ctx, ch)
	}
}

func (c *Catalog) logChange(ch Change) {
	ev := c.log.Info().Str(logfield.Change, string(ch.Kind)).Str(logfield.Rule, ch.Key.String())
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
// plane half-configured). A failure or panic is recorded for ApplyErr.
func (c *Catalog) apply(ctx context.Context, ch Change) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.ApplyTimeout)
	defer cancel()
	err := func() (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("restapi: runtime panicked: %v", p)
			}
		}()
		if ch.Kind == ChangeDeleted {
			return c.cfg.Runtime.Remove(actx, ch.Key)
		}
		return c.cfg.Runtime.Apply(actx, ch.New.Clone())
	}()
	c.applyMu.Lock()
	if err != nil && ch.Kind != ChangeDeleted {
		c.applyErrs[ch.Key] = err.Error()
	} else {
		delete(c.applyErrs, ch.Key)
	}
	c.applyMu.Unlock()
	if err != nil {
		c.m.applyErrs.Inc()
		c.log.Warn().Err(err).Str(logfield.Rule, ch.Key.String()).Str(logfield.Change, string(ch.Kind)).
			Msg("data plane did not apply the change; the rule stays configured and reports ERROR")
	}
}

// ApplyErr is the error the Runtime gave when rule k was last applied, ""
// when it applied.
func (c *Catalog) ApplyErr(k rule.RuleKey) string {
	c.applyMu.Lock()
	defer c.applyMu.Unlock()
	return c.applyErrs[k]
}
