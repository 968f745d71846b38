package catalog

import (
	"cmp"
	"context"
	"slices"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/rulestore"
)

// The watch side of cluster mode (see shared.go): every replica applies the
// shared stores' changes, in revision order, to its table and its data
// plane — the one path of every rule change in a cluster, this replica's
// own writes included.

// runShared applies the shared stores' changes until ctx ends.
func (c *Catalog) runShared(ctx context.Context) {
	rules := c.shared.cfg.Rules.Watch(ctx, 0)
	var ctrl, keys <-chan rulestore.Event
	if c.shared.cfg.Controller != nil {
		ctrl = c.shared.cfg.Controller.Watch(ctx, 0)
	}
	if c.shared.cfg.Keys != nil {
		keys = c.shared.cfg.Keys.Watch(ctx, 0)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-rules:
			if !ok {
				return
			}
			c.applyRuleEvent(ctx, ev)
		case ev, ok := <-ctrl:
			if !ok {
				ctrl = nil
				continue
			}
			c.applyCtrlEvent(ev)
		case ev, ok := <-keys:
			if !ok {
				keys = nil
				continue
			}
			c.applyKeyEvent(ev)
		}
	}
}

// applyRuleEvent applies one watch event to the table and the data plane.
func (c *Catalog) applyRuleEvent(ctx context.Context, ev rulestore.Event) {
	c.writeMu.Lock()
	cur := c.rules.Load()
	var next *Rules
	var changes []Change
	switch ev.Kind {
	case rulestore.EventResync:
		next, changes = c.resyncTable(cur, ev.Snapshot)
		c.log.Info().Int64(logfield.Revision, ev.Revision).Int(logfield.Count, len(next.order)).Int("changes", len(changes)).
			Msg("rules read from the shared store")
	case rulestore.EventPut:
		rec, err := c.decodeShared(ev.Record)
		if err != nil {
			c.rejectShared(err)
			break
		}
		next, changes = cur.put(rec)
	case rulestore.EventDelete:
		next, changes = cur.drop(ev.Record.Key)
	}
	if next != nil {
		c.publish(ctx, next, changes)
		if len(changes) > 0 || ev.Kind == rulestore.EventResync {
			if err := c.file.save(next, c.Keys()); err != nil {
				c.log.Warn().Err(err).Msg("could not save the local cache of the shared rules (a restart while the store is down would start without them)")
			}
		}
	}
	c.writeMu.Unlock()
	c.shared.failed(nil)
	for _, ch := range changes {
		if ch.Kind == ChangeCreated {
			c.reapplyController(ch.Key)
		}
	}
	first := c.shared.writable() != nil
	c.shared.advance(kindRules, ev.Revision)
	if first {
		c.log.Info().Int64(logfield.Revision, ev.Revision).Int(logfield.Count, c.rules.Load().Len()).Str("store", c.shared.cfg.Where).
			Msg("shared rules read; configuration writes accepted")
	}
}

// rejectShared reports a stored rule this replica cannot use: it keeps
// what it applied before for that key.
func (c *Catalog) rejectShared(err error) {
	c.shared.mu.Lock()
	c.shared.rejected++
	c.shared.mu.Unlock()
	c.m.rejected.Inc()
	c.log.Error().Err(err).Msg("stored rule does not validate on this replica (written by another version?): ignored; the previous version, if any, keeps serving")
}

// resyncTable rebuilds the table from a snapshot, in creation order, and
// lists the changes against cur (unchanged rules are not re-applied).
func (c *Catalog) resyncTable(cur *Rules, snap *rulestore.Snapshot) (*Rules, []Change) {
	recs := make([]*RuleRecord, 0, len(snap.Records))
	for _, sr := range snap.Records {
		rec, err := c.decodeShared(sr)
		if err != nil {
			c.rejectShared(err)
			if old := cur.byString(sr.Key); old != nil {
				recs = append(recs, old)
			}
			continue
		}
		recs = append(recs, rec)
	}
	slices.SortStableFunc(recs, func(a, b *RuleRecord) int { return cmp.Compare(a.created, b.created) })
	next := newRules(recs)
	var changes []Change
	for _, r := range cur.order {
		if _, ok := next.byKey[r.Rule.Key]; !ok {
			prev := r.Rule
			changes = append(changes, Change{Kind: ChangeDeleted, Key: r.Rule.Key, Old: &prev})
		}
	}
	for _, r := range next.order {
		nr := r.Rule
		old, ok := cur.byKey[r.Rule.Key]
		switch {
		case !ok:
			changes = append(changes, Change{Kind: ChangeCreated, Key: nr.Key, New: &nr})
		case string(old.encoded) != string(r.encoded):
			prev := old.Rule
			changes = append(changes, Change{Kind: ChangeReplaced, Key: nr.Key, Old: &prev, New: &nr})
		}
	}
	return next, changes
}

// byString finds a rule by its key's string form.
func (t *Rules) byString(key string) *RuleRecord {
	for _, r := range t.order {
		if r.Rule.Key.String() == key {
			return r
		}
	}
	return nil
}

// put stores rec: in place of the rule with its key, or appended.
func (t *Rules) put(rec *RuleRecord) (*Rules, []Change) {
	nr := rec.Rule
	old, ok := t.byKey[nr.Key]
	if !ok {
		return newRules(append(slices.Clone(t.order), rec)), []Change{{Kind: ChangeCreated, Key: nr.Key, New: &nr}}
	}
	recs := slices.Clone(t.order)
	recs[slices.Index(recs, old)] = rec
	if string(old.encoded) == string(rec.encoded) {
		return newRules(recs), nil
	}
	prev := old.Rule
	return newRules(recs), []Change{{Kind: ChangeReplaced, Key: nr.Key, Old: &prev, New: &nr}}
}

// drop removes the rule stored under key, if any.
func (t *Rules) drop(key string) (*Rules, []Change) {
	old := t.byString(key)
	if old == nil {
		return t, nil
	}
	nt, ch, err := t.Remove(old.Rule.Key)
	if err != nil {
		return t, nil
	}
	return nt, []Change{ch}
}
