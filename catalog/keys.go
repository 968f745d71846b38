package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/rulestore"
	"github.com/llbproject/llb/tenant"
)

// API keys and tenant limits, the catalog's second kind of operator
// record (package tenant holds the records and their decide functions).
// They live where rules live: in the state file's "apiKeys" and
// "tenantLimits" sections on one node; in a cluster in their own shared
// store (SharedConfig.Keys: one record per key, "key/<key id>", and per
// tenant limit, "limit/<tenant id>"), applied by every replica from its
// watch and cached in the local state file. Every accepted table is
// handed to Config.Keys (the data plane's tenant.Gate).

// KeysSetter receives every new key table (tenant.Gate).
type KeysSetter interface {
	SetTable(*tenant.Table)
}

// DecideKeys is one write to the keys and limits: from the current table,
// the next one and the records it changed ("key/<id>", "limit/<tenant>"),
// or an error that leaves everything unchanged. In a cluster it may run
// again on a newer table.
type DecideKeys func(*tenant.Table) (next *tenant.Table, changed []string, err error)

// KeyRecord and LimitRecord name a key's and a tenant limit's record.
func KeyRecord(id string) string       { return "key/" + id }
func LimitRecord(tenant string) string { return "limit/" + tenant }

// Keys returns the current table of keys and limits.
func (c *Catalog) Keys() *tenant.Table {
	if t := c.keys.Load(); t != nil {
		return t
	}
	return tenant.EmptyTable()
}

// publishKeys makes t current and hands it to the data plane.
func (c *Catalog) publishKeys(t *tenant.Table) {
	c.keys.Store(t)
	if c.cfg.Keys != nil {
		c.cfg.Keys.SetTable(t)
	}
}

// WriteKeys runs one change to the keys and limits: decide, persist (the
// state file; the shared store in a cluster), publish. Before Restore has
// finished it fails with ErrMaintenance.
func (c *Catalog) WriteKeys(ctx context.Context, decide DecideKeys) error {
	if !c.ready.Load() {
		return ErrMaintenance
	}
	if c.shared != nil && c.shared.cfg.Keys != nil {
		return c.writeKeysShared(ctx, decide)
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	next, changed, err := decide(c.Keys())
	if err != nil || len(changed) == 0 {
		return err
	}
	if err := c.file.save(c.rules.Load(), next); err != nil {
		c.m.stateWriteErrs.Inc()
		return fmt.Errorf("restapi: state write failed, the change was not made: %w", err)
	}
	c.m.stateWrites.Inc()
	c.publishKeys(next)
	c.log.Info().Strs(logfield.Key, changed).Int(logfield.Count, next.Len()).Msg("API keys or tenant limits changed")
	return nil
}

// restoreKeys builds the key table from what load found; records that no
// longer check are logged, left out and returned (Restore saves them to
// the rejected file, with the rules that no longer validate).
func (c *Catalog) restoreKeys(ld loaded) tenant.Rejected {
	t, rej := tenant.NewTable(ld.keys, ld.limits)
	for _, err := range rej.Errs {
		c.log.Error().Err(err).Msg("stored API key or tenant limit does not check: not restored, kept in the rejected file")
	}
	c.publishKeys(t)
	return rej
}

// ---- cluster ------------------------------------------------------------

// keysShared is the cluster-mode state of the keys kind: the stored
// records by record key, with their revisions. Guarded by sharedState.mu.
type keysShared struct {
	synced bool
	keys   map[string]storedKey
	limits map[string]storedLimit
}

type storedKey struct {
	k   tenant.Key
	rev int64
}

type storedLimit struct {
	l   tenant.Limit
	rev int64
}

// writeKeysShared is WriteKeys in cluster mode: decide on the table as of
// the applied revision, commit every changed record with a precondition
// on its revision, wait until this replica's watch applied it. A conflict
// (another replica changed a record first) is decided again, twice at
// most.
func (c *Catalog) writeKeysShared(ctx context.Context, decide DecideKeys) error {
	sh := c.shared
	for attempt := 1; ; attempt++ {
		sh.mu.Lock()
		synced, seen := sh.keys.synced, sh.rev[kindKeys]
		sh.mu.Unlock()
		if !synced {
			return fmt.Errorf("%w (%s): this replica has not read the API keys yet; the change was not made", ErrStoreUnavailable, sh.cfg.Where)
		}
		c.writeMu.Lock()
		next, changed, err := decide(c.Keys())
		if err != nil || len(changed) == 0 {
			c.writeMu.Unlock()
			return err
		}
		ops, err := c.keyOps(next, changed)
		var rev int64
		if err == nil {
			rev, err = c.commitShared(ctx, sh.cfg.Keys, ops)
		}
		c.writeMu.Unlock()
		var ce *rulestore.ConflictError
		switch {
		case err == nil:
			c.m.stateWrites.Inc()
			if !sh.await(ctx, sh.cfg.ReadYourWrites, kindKeys, func(r int64) bool { return r >= rev }) {
				c.log.Warn().Int64(logfield.Revision, rev).Msg("key store acknowledged a write that this replica's watch has not applied yet; it will")
			}
			return nil
		case errors.As(err, &ce) && attempt < sharedAttempts:
			sh.await(ctx, sh.cfg.ReadYourWrites, kindKeys, func(r int64) bool { return r > seen })
		case errors.As(err, &ce):
			return fmt.Errorf("%w: %s was changed by another replica while this write was being decided; nothing was written: retry", ErrRuleExists, ce.Key)
		case errors.Is(err, rulestore.ErrUnavailable):
			c.m.stateWriteErrs.Inc()
			return fmt.Errorf("%w (%s): the change was not acknowledged, so it was not made; retry when it is back: %v", ErrStoreUnavailable, sh.cfg.Where, err)
		default:
			c.m.stateWriteErrs.Inc()
			return fmt.Errorf("restapi: key store write failed, the change was not made: %w", err)
		}
	}
}

// keyOps turns the changed records of next into store operations with
// their preconditions (caller holds writeMu).
func (c *Catalog) keyOps(next *tenant.Table, changed []string) ([]rulestore.Op, error) {
	sh := c.shared
	sh.mu.Lock()
	defer sh.mu.Unlock()
	ops := make([]rulestore.Op, 0, len(changed))
	for _, name := range changed {
		kind, id, _ := strings.Cut(name, "/")
		var value []byte
		var present bool
		var rev int64
		var err error
		switch kind {
		case "key":
			if k := next.Key(id); k != nil {
				value, present = marshal(k), true
			}
			if old, ok := sh.keys.keys[name]; ok {
				rev = old.rev
			}
		case "limit":
			if l := next.Limit(id); l != nil {
				value, present = marshal(l), true
			}
			if old, ok := sh.keys.limits[name]; ok {
				rev = old.rev
			}
		default:
			err = fmt.Errorf("restapi: unknown key record %q", name)
		}
		switch {
		case err != nil:
			return nil, err
		case !present && rev == 0:
			// Deleting what the store does not hold: nothing to do.
		case !present:
			ops = append(ops, rulestore.DeleteIf(name, rev))
		case rev == 0:
			ops = append(ops, rulestore.Create(name, value))
		default:
			ops = append(ops, rulestore.Update(name, value, rev))
		}
	}
	return ops, nil
}

func marshal(v any) []byte {
	b, _ := json.Marshal(v) // records of plain fields always encode
	return b
}

// applyKeyEvent applies one watch event of the key store.
func (c *Catalog) applyKeyEvent(ev rulestore.Event) {
	sh := c.shared
	sh.mu.Lock()
	put := func(r rulestore.Record) {
		kind, _, _ := strings.Cut(r.Key, "/")
		switch kind {
		case "key":
			var k tenant.Key
			if err := json.Unmarshal(r.Value, &k); err == nil {
				sh.keys.keys[r.Key] = storedKey{k: k, rev: r.ModRevision}
				return
			}
		case "limit":
			var l tenant.Limit
			if err := json.Unmarshal(r.Value, &l); err == nil {
				sh.keys.limits[r.Key] = storedLimit{l: l, rev: r.ModRevision}
				return
			}
		}
		c.log.Warn().Str(logfield.Key, r.Key).Msg("unreadable record in the shared key store: ignored")
	}
	switch ev.Kind {
	case rulestore.EventResync:
		sh.keys.keys, sh.keys.limits = map[string]storedKey{}, map[string]storedLimit{}
		for _, r := range ev.Snapshot.Records {
			put(r)
		}
	case rulestore.EventPut:
		put(ev.Record)
	case rulestore.EventDelete:
		delete(sh.keys.keys, ev.Record.Key)
		delete(sh.keys.limits, ev.Record.Key)
	}
	sh.keys.synced = true
	keys := make([]tenant.Key, 0, len(sh.keys.keys))
	for _, k := range sh.keys.keys {
		keys = append(keys, k.k)
	}
	limits := make([]tenant.Limit, 0, len(sh.keys.limits))
	for _, l := range sh.keys.limits {
		limits = append(limits, l.l)
	}
	sh.mu.Unlock()
	t, rej := tenant.NewTable(keys, limits)
	for _, err := range rej.Errs {
		c.log.Error().Err(err).Msg("stored API key or tenant limit does not check on this replica: ignored")
	}
	c.writeMu.Lock()
	c.publishKeys(t)
	if err := c.file.save(c.rules.Load(), t); err != nil {
		c.log.Warn().Err(err).Msg("could not save the local cache of the shared keys")
	}
	c.writeMu.Unlock()
	sh.advance(kindKeys, ev.Revision)
}
