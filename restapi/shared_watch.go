package restapi

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
func (s *Server) runShared(ctx context.Context) {
	rules := s.shared.cfg.Rules.Watch(ctx, 0)
	var ctrl <-chan rulestore.Event
	if s.shared.cfg.Controller != nil {
		ctrl = s.shared.cfg.Controller.Watch(ctx, 0)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-rules:
			if !ok {
				return
			}
			s.applyRuleEvent(ctx, ev)
		case ev, ok := <-ctrl:
			if !ok {
				ctrl = nil
				continue
			}
			s.applyCtrlEvent(ev)
		}
	}
}

// applyRuleEvent applies one watch event to the table and the data plane.
func (s *Server) applyRuleEvent(ctx context.Context, ev rulestore.Event) {
	s.writeMu.Lock()
	cur := s.tbl.Load()
	var next *table
	var changes []Change
	switch ev.Kind {
	case rulestore.EventResync:
		next, changes = s.resyncTable(cur, ev.Snapshot)
		s.log.Info().Int64(logfield.Revision, ev.Revision).Int(logfield.Count, len(next.order)).Int("changes", len(changes)).
			Msg("rules read from the shared store")
	case rulestore.EventPut:
		rec, err := decodeShared(ev.Record, s.cfg.NewID)
		if err != nil {
			s.rejectShared(err)
			break
		}
		next, changes = cur.put(rec)
	case rulestore.EventDelete:
		next, changes = cur.drop(ev.Record.Key)
	}
	if next != nil {
		s.tbl.Store(next)
		for _, ch := range changes {
			s.metrics.change(ch.Kind)
			s.logChange(ch)
			s.apply(ctx, ch)
		}
		if len(changes) > 0 || ev.Kind == rulestore.EventResync {
			if err := s.store.save(next.order); err != nil {
				s.log.Warn().Err(err).Msg("could not save the local cache of the shared rules (a restart while the store is down would start without them)")
			}
		}
	}
	s.writeMu.Unlock()
	s.shared.failed(nil)
	for _, ch := range changes {
		if ch.Kind == ChangeCreated {
			s.reapplyController(ch.Key)
		}
	}
	first := s.shared.writable() != nil
	s.shared.advance(false, ev.Revision)
	if first {
		s.log.Info().Int64(logfield.Revision, ev.Revision).Int(logfield.Count, len(s.tbl.Load().order)).Str("store", s.shared.cfg.Where).
			Msg("shared rules read; configuration writes accepted")
	}
}

// rejectShared reports a stored rule this replica cannot use: it keeps
// what it applied before for that key.
func (s *Server) rejectShared(err error) {
	s.shared.mu.Lock()
	s.shared.rejected++
	s.shared.mu.Unlock()
	s.metrics.rejected.Inc()
	s.log.Error().Err(err).Msg("stored rule does not validate on this replica (written by another version?): ignored; the previous version, if any, keeps serving")
}

// resyncTable rebuilds the table from a snapshot, in creation order, and
// lists the changes against cur (unchanged rules are not re-applied).
func (s *Server) resyncTable(cur *table, snap *rulestore.Snapshot) (*table, []Change) {
	recs := make([]*record, 0, len(snap.Records))
	for _, sr := range snap.Records {
		rec, err := decodeShared(sr, s.cfg.NewID)
		if err != nil {
			s.rejectShared(err)
			if old := cur.byString(sr.Key); old != nil {
				recs = append(recs, old)
			}
			continue
		}
		recs = append(recs, rec)
	}
	slices.SortStableFunc(recs, func(a, b *record) int { return cmp.Compare(a.created, b.created) })
	next := newTable(recs)
	var changes []Change
	for _, r := range cur.order {
		if _, ok := next.byKey[r.rule.Key]; !ok {
			prev := r.rule
			changes = append(changes, Change{Kind: ChangeDeleted, Key: r.rule.Key, Old: &prev})
		}
	}
	for _, r := range next.order {
		nr := r.rule
		old, ok := cur.byKey[r.rule.Key]
		switch {
		case !ok:
			changes = append(changes, Change{Kind: ChangeCreated, Key: nr.Key, New: &nr})
		case string(old.encoded) != string(r.encoded):
			prev := old.rule
			changes = append(changes, Change{Kind: ChangeReplaced, Key: nr.Key, Old: &prev, New: &nr})
		}
	}
	return next, changes
}

// byString finds a rule by its key's string form.
func (t *table) byString(key string) *record {
	for _, r := range t.order {
		if r.rule.Key.String() == key {
			return r
		}
	}
	return nil
}

// put stores rec: in place of the rule with its key, or appended.
func (t *table) put(rec *record) (*table, []Change) {
	nr := rec.rule
	old, ok := t.byKey[nr.Key]
	if !ok {
		return newTable(append(slices.Clone(t.order), rec)), []Change{{Kind: ChangeCreated, Key: nr.Key, New: &nr}}
	}
	recs := slices.Clone(t.order)
	recs[slices.Index(recs, old)] = rec
	if string(old.encoded) == string(rec.encoded) {
		return newTable(recs), nil
	}
	prev := old.rule
	return newTable(recs), []Change{{Kind: ChangeReplaced, Key: nr.Key, Old: &prev, New: &nr}}
}

// drop removes the rule stored under key, if any.
func (t *table) drop(key string) (*table, []Change) {
	old := t.byString(key)
	if old == nil {
		return t, nil
	}
	nt, ch, err := t.remove(old.rule.Key)
	if err != nil {
		return t, nil
	}
	return nt, []Change{ch}
}
