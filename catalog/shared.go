package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/rulestore"
)

// Cluster mode: the rules (and the external controller's instructions, see
// shared_controller.go) live in a store every replica shares — etcd —
// instead of the local rules.json. One path applies them on every replica,
// this one included:
//
//	POST/DELETE on any replica → decide against the table as of the
//	  applied revision (LoxiLB's semantics: 400, 404, 409, 422 as on one
//	  node) → commit with preconditions (create only if absent; replace or
//	  delete only if unchanged since the revision decided on) → the
//	  acknowledgement is etcd's → wait (≤ ReadYourWrites) until this
//	  replica's watch applied it → 200.
//	the watch (every replica) → table → Runtime.Apply/Remove, in revision
//	  order; a resync (start, compaction, long outage) is diffed against the
//	  applied table.
//
// A commit whose precondition fails (another replica changed the rule in
// between) is decided again on the newer table, twice at most; then 409.
// The store unreachable: writes answer 503 with the store named, and the
// replica goes on serving the rules it applied last (it also keeps them in
// a local cache file, so a restart during an outage serves them too).

// DefaultReadYourWrites is SharedConfig.ReadYourWrites's default.
const DefaultReadYourWrites = time.Second

// sharedAttempts bounds how often a write is decided again after another
// replica changed the same rule first.
const sharedAttempts = 3

// sharedChunk bounds the operations of one commit (etcd's default limit is
// 128 per transaction): deleting more rules at once takes several commits.
const sharedChunk = 100

// SharedConfig puts the configuration in a store the replicas of a cluster
// share (Config.Shared): one rulestore.Store per kind of record, each
// watched on its own. A kind joins with its own store here, its own
// revision (kind) and its own watch handler in runShared.
type SharedConfig struct {
	// Rules holds the rules. Required.
	Rules rulestore.Store
	// Controller holds the external controller's instructions; nil keeps
	// them local to each replica, as on one node.
	Controller rulestore.Store
	// Keys holds the API keys and tenant limits (keys.go); nil keeps them
	// in each replica's state file, as on one node.
	Keys rulestore.Store
	// Where names the store in messages, e.g. "etcd at http://10.0.0.5:2379".
	Where string
	// ReadYourWrites bounds how long a write waits, after the store
	// acknowledged it, for this replica to apply it (0 →
	// DefaultReadYourWrites). The write is durable either way.
	ReadYourWrites time.Duration
}

// kind is a kind of record the shared stores hold: each lives in its own
// store (SharedConfig) and is applied in its own revision order.
type kind int

// Kinds of records in a cluster.
const (
	kindRules      kind = iota // the rules (SharedConfig.Rules)
	kindController             // controller instructions (SharedConfig.Controller)
	kindKeys                   // API keys and tenant limits (SharedConfig.Keys)
	numKinds
)

// sharedState is a Catalog's cluster-mode state.
type sharedState struct {
	cfg SharedConfig

	mu sync.Mutex
	// Guarded by mu: the applied revision of each kind's store, whether
	// the rules were read at least once, a channel closed (and replaced)
	// whenever a revision moves, the last store failure, and the
	// controller records by store key.
	rev       [numKinds]int64
	synced    bool
	advanced  chan struct{}
	lastErr   error
	failSince time.Time
	ctrl      map[string]ctrlRecord
	keys      keysShared
	events    uint64
	rejected  uint64
}

func newSharedState(cfg SharedConfig) *sharedState {
	if cfg.ReadYourWrites <= 0 {
		cfg.ReadYourWrites = DefaultReadYourWrites
	}
	if cfg.Where == "" {
		cfg.Where = "the shared store"
	}
	return &sharedState{cfg: cfg, advanced: make(chan struct{}), ctrl: map[string]ctrlRecord{},
		keys: keysShared{keys: map[string]storedKey{}, limits: map[string]storedLimit{}}}
}

// advance moves kind k's revision forward and wakes the waiters.
func (sh *sharedState) advance(k kind, rev int64) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.rev[k] = max(sh.rev[k], rev)
	if k == kindRules {
		sh.synced = true
	}
	sh.events++
	close(sh.advanced)
	sh.advanced = make(chan struct{})
}

// revision returns kind k's applied revision.
func (sh *sharedState) revision(k kind) int64 {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return sh.rev[k]
}

// await waits until cond holds for kind k's applied revision (read under
// mu), up to d or ctx's end.
func (sh *sharedState) await(ctx context.Context, d time.Duration, k kind, cond func(rev int64) bool) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		sh.mu.Lock()
		ok, ch := cond(sh.rev[k]), sh.advanced
		sh.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// failed records a store failure (nil: the store answered).
func (sh *sharedState) failed(err error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	switch {
	case err == nil:
		sh.lastErr, sh.failSince = nil, time.Time{}
	case errors.Is(err, rulestore.ErrUnavailable):
		if sh.failSince.IsZero() {
			sh.failSince = time.Now()
		}
		sh.lastErr = err
	}
}

// writable says whether writes may be tried: the rules were read once.
func (sh *sharedState) writable() error {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.synced {
		return nil
	}
	why := "it has not answered since this replica started"
	if sh.lastErr != nil {
		why = sh.lastErr.Error()
	}
	return fmt.Errorf("%w (%s): this replica has not read the rules yet, so it cannot decide a change; the change was not made: %s",
		ErrStoreUnavailable, sh.cfg.Where, why)
}

// StoreView is the shared store as one replica sees it (part of
// GET /config/ai/cluster).
type StoreView struct {
	// Where names the store.
	Where string `json:"where"`
	// Revision is the store revision of the rules applied here;
	// ControllerRevision that of the controller instructions.
	Revision           int64 `json:"revision"`
	ControllerRevision int64 `json:"controllerRevision"`
	// KeysRevision is that of the API keys and tenant limits.
	KeysRevision int64 `json:"keysRevision"`
	// Synced is true once the rules were read from the store.
	Synced bool `json:"synced"`
	// OK is false while the last store call failed; Error says why and
	// FailingSince since when.
	OK           bool      `json:"ok"`
	Error        string    `json:"error,omitempty"`
	FailingSince time.Time `json:"failingSince,omitzero"`
	// Events counts watch events applied; Rejected stored rules that did
	// not validate here (kept out, the previous version kept serving).
	Events   uint64 `json:"events"`
	Rejected uint64 `json:"rejected"`
}

func (sh *sharedState) view() *StoreView {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	v := &StoreView{Where: sh.cfg.Where, Revision: sh.rev[kindRules], ControllerRevision: sh.rev[kindController], KeysRevision: sh.rev[kindKeys], Synced: sh.synced,
		OK: sh.lastErr == nil, FailingSince: sh.failSince, Events: sh.events, Rejected: sh.rejected}
	if sh.lastErr != nil {
		v.Error = sh.lastErr.Error()
	}
	return v
}

// ---- writes -----------------------------------------------------------------

// writeShared is Write in cluster mode; see the top of the file.
func (c *Catalog) writeShared(ctx context.Context, decide Decide) ([]Change, error) {
	sh := c.shared
	for attempt := 1; ; attempt++ {
		if err := sh.writable(); err != nil {
			return nil, err
		}
		c.writeMu.Lock()
		prev := c.rules.Load()
		seen := sh.revision(kindRules)
		next, changes, err := decide(prev)
		if err != nil || len(changes) == 0 {
			c.writeMu.Unlock()
			return nil, err
		}
		var rev int64
		ops, err := sharedOps(prev, next, changes)
		if err == nil {
			rev, err = c.commitShared(ctx, sh.cfg.Rules, ops)
		}
		c.writeMu.Unlock()

		var ce *rulestore.ConflictError
		switch {
		case err == nil:
			c.m.stateWrites.Inc()
			if !sh.await(ctx, sh.cfg.ReadYourWrites, kindRules, func(r int64) bool { return r >= rev }) {
				c.log.Warn().Int64(logfield.Revision, rev).Msg("rule store acknowledged a write that this replica's watch has not applied yet; it will")
			}
			c.dropControllerRecords(ctx, changes)
			return changes, nil
		case errors.As(err, &ce) && attempt < sharedAttempts:
			// Another replica changed the rule first: decide again on the
			// table that includes its change.
			sh.await(ctx, sh.cfg.ReadYourWrites, kindRules, func(r int64) bool { return r > seen })
			continue
		case errors.As(err, &ce):
			return nil, fmt.Errorf("%w: rule %s was changed by another replica while this write was being decided, %d times; nothing was written: re-read and retry (%v)",
				ErrRuleExists, ce.Key, attempt, ce)
		case errors.Is(err, rulestore.ErrUnavailable):
			c.m.stateWriteErrs.Inc()
			return nil, fmt.Errorf("%w (%s): the change was not acknowledged, so it was not made, unless the store received it just before it stopped answering (GET shows the outcome once it is back); retry when it is back: %v",
				ErrStoreUnavailable, sh.cfg.Where, err)
		default:
			c.m.stateWriteErrs.Inc()
			return nil, fmt.Errorf("restapi: rule store write failed, the change was not made: %w", err)
		}
	}
}

// commitShared commits ops in chunks; the revision of the last one.
func (c *Catalog) commitShared(ctx context.Context, st rulestore.Store, ops []rulestore.Op) (int64, error) {
	var rev int64
	for len(ops) > 0 {
		n := min(len(ops), sharedChunk)
		r, err := st.Commit(ctx, ops[:n]...)
		c.shared.failed(err)
		if err != nil {
			return 0, err
		}
		rev, ops = r, ops[n:]
	}
	return rev, nil
}

// sharedOps turns changes into store operations with their preconditions.
func sharedOps(prev, next *Rules, changes []Change) ([]rulestore.Op, error) {
	ops := make([]rulestore.Op, 0, len(changes))
	for _, ch := range changes {
		key := ch.Key.String()
		old := prev.byKey[ch.Key]
		if old != nil && old.rev == 0 {
			return nil, fmt.Errorf("%w: rule %s has not been read from the store yet", ErrStoreUnavailable, key)
		}
		if ch.Kind == ChangeDeleted {
			ops = append(ops, rulestore.DeleteIf(key, old.rev))
			continue
		}
		value, err := encodeShared(next.byKey[ch.Key])
		if err != nil {
			return nil, err
		}
		if old == nil {
			ops = append(ops, rulestore.Create(key, value))
		} else {
			ops = append(ops, rulestore.Update(key, value, old.rev))
		}
	}
	return ops, nil
}

// encodeShared is a rule as stored: the rules.json entry shape.
func encodeShared(r *RuleRecord) ([]byte, error) {
	b, err := json.Marshal(storedRule{LastUpdated: r.Updated.UTC(), Entry: r.encoded})
	if err != nil {
		return nil, fmt.Errorf("restapi: encode rule %s: %w", r.Rule.Key, err)
	}
	return b, nil
}

// decodeShared reads a stored rule through the same decode, validate and
// normalize path as a POST; the key it is stored under must be its own.
func (c *Catalog) decodeShared(rec rulestore.Record) (*RuleRecord, error) {
	var sr storedRule
	if err := json.Unmarshal(rec.Value, &sr); err != nil {
		return nil, fmt.Errorf("stored rule %s: not a stored rule: %w", rec.Key, err)
	}
	t, err := c.restoreOne(newRules(nil), sr)
	if err != nil {
		return nil, fmt.Errorf("stored rule %s: %w", rec.Key, err)
	}
	r := t.order[0]
	if got := r.Rule.Key.String(); got != rec.Key {
		return nil, fmt.Errorf("stored rule %s: its entry is rule %s", rec.Key, got)
	}
	out := *r
	out.rev, out.created = rec.ModRevision, rec.CreateRevision
	return &out, nil
}

// StoreView is the shared store as this replica sees it; nil on a single
// node.
func (c *Catalog) StoreView() *StoreView {
	if c.shared == nil {
		return nil
	}
	return c.shared.view()
}
