package restapi

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/rule"
)

// RestoreReport says what Restore found in the state directory. It is shown
// by GET /netlox/v1/version as "state".
type RestoreReport struct {
	// File is the rules file.
	File string `json:"file"`
	// RestoredRules is how many rules were restored and applied.
	RestoredRules int `json:"restoredRules"`
	// RejectedRules are stored rules that no longer validate.
	RejectedRules []RejectedRule `json:"rejectedRules,omitempty"`
	// RejectedFile holds the rejected rules, verbatim.
	RejectedFile string `json:"rejectedFile,omitempty"`
	// CorruptMovedTo is where an unreadable or unparsable rules file was moved.
	CorruptMovedTo string `json:"corruptMovedTo,omitempty"`
	// Problem is why the rules file was moved aside.
	Problem string `json:"problem,omitempty"`
	// StaleTempsRemoved counts temporary files left by a crash mid-save.
	StaleTempsRemoved int `json:"staleTempsRemoved,omitempty"`
	// At is when the restore finished.
	At time.Time `json:"at"`
}

// RejectedRule is a stored rule that failed to restore.
type RejectedRule struct {
	// Index is the rule's position in the rules file.
	Index int `json:"index"`
	// Error says why.
	Error string `json:"error"`
}

// Restore loads the state file, rebuilds the rule table, hands every rule to
// the Runtime, and then opens writes. It runs once; call it after the server
// is listening (GETs are served meanwhile; writes get 503 + Retry-After).
//
// A corrupt or unreadable rules file is moved aside and reported, and the
// daemon starts with what it could restore; rules that no longer validate are
// saved verbatim to rules.json.rejected-<timestamp> and reported. Nothing is
// dropped silently. Restore fails only when the state cannot be handled
// safely (the state dir is unusable, or a bad file cannot be moved aside):
// the caller should then refuse to start.
func (s *Server) Restore(ctx context.Context) (RestoreReport, error) {
	if !s.restoring.CompareAndSwap(false, true) {
		return RestoreReport{}, errors.New("restapi: Restore called twice")
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()

	ld, err := s.store.load()
	if err != nil {
		return RestoreReport{}, err
	}
	rep := RestoreReport{File: s.store.Path(), CorruptMovedTo: ld.movedTo, Problem: ld.problem, StaleTempsRemoved: ld.staleTemps}
	if ld.movedTo != "" {
		s.metrics.corrupt.Inc()
		s.log.Error().Str(logfield.File, rep.File).Str(logfield.MovedTo, ld.movedTo).Str(logfield.Reason, ld.problem).
			Msg("state file unusable: moved aside, starting without its rules")
	}
	if ld.staleTemps > 0 {
		s.log.Info().Int(logfield.Count, ld.staleTemps).Msg("removed temporary state files left by an interrupted save")
	}

	t := newTable(nil)
	var rejected []storedRule
	for i, sr := range ld.rules {
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("restapi: restore interrupted: %w", err)
		}
		next, err := restoreOne(t, sr, s.cfg.NewID)
		if err != nil {
			rejected = append(rejected, sr)
			rep.RejectedRules = append(rep.RejectedRules, RejectedRule{Index: i, Error: err.Error()})
			continue
		}
		t = next
	}
	if len(rejected) > 0 {
		path, err := s.store.saveRejected(rejected)
		if err != nil {
			return rep, fmt.Errorf("restapi: %d stored rules no longer validate and could not be saved aside: %w", len(rejected), err)
		}
		rep.RejectedFile = path
		s.metrics.rejected.Add(len(rejected))
		for _, r := range rep.RejectedRules {
			s.log.Error().Int(logfield.Index, r.Index).Str(logfield.Reason, r.Error).Str(logfield.File, path).
				Msg("stored rule no longer validates: not restored, kept in the rejected file")
		}
	}
	if len(rejected) > 0 || ld.movedTo != "" {
		if err := s.store.save(t.order); err != nil {
			return rep, err
		}
	}
	s.tbl.Store(t)
	for _, r := range t.order {
		nr := r.rule
		s.apply(ctx, Change{Kind: ChangeCreated, Key: nr.Key, New: &nr})
	}
	rep.RestoredRules = len(t.order)
	rep.At = s.cfg.Now().UTC()
	s.metrics.restored.Set(uint64(rep.RestoredRules))
	s.report.Store(&rep)
	s.ready.Store(true)
	if s.shared != nil {
		// Cluster mode: what was just applied is the local cache; the
		// shared store's content replaces it (diffed) as soon as it is
		// read, and every later change arrives by the watch.
		go s.runShared(ctx)
		s.log.Info().Int(logfield.Count, rep.RestoredRules).Str(logfield.File, rep.File).Str("store", s.shared.cfg.Where).
			Msg("cached rules restored; reading the shared rule store")
		return rep, nil
	}
	s.log.Info().Int(logfield.Count, rep.RestoredRules).Str(logfield.File, rep.File).Msg("state restored; configuration writes accepted")
	return rep, nil
}

// restoreOne adds one stored rule to t through the same decode, validate and
// normalize path as a POST.
func restoreOne(t *table, sr storedRule, newID func() string) (*table, error) {
	e, err := DecodeEntry(sr.Entry)
	if err != nil {
		return nil, err
	}
	if err := rule.Validate(e); err != nil {
		return nil, err
	}
	nr, err := rule.NormalizeEntry(e)
	if err != nil {
		return nil, err
	}
	if _, dup := t.byKey[nr.Key]; dup {
		return nil, fmt.Errorf("%w: a second stored rule has key %s", ErrRuleExists, nr.Key)
	}
	next, _, err := t.upsert(nr, 0, sr.LastUpdated, newID)
	return next, err
}
