package catalog

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
	// APIKeys is how many API keys were restored; RejectedKeys how many
	// stored keys and tenant limits no longer checked (logged, left out).
	APIKeys      int `json:"apiKeys,omitempty"`
	RejectedKeys int `json:"rejectedKeys,omitempty"`
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
// the Runtime, and then opens writes. It runs once; call it after the API
// is listening (reads are served meanwhile; writes fail with ErrMaintenance).
//
// A corrupt or unreadable rules file is moved aside and reported, and the
// daemon starts with what it could restore; rules that no longer validate are
// saved verbatim to rules.json.rejected-<timestamp> and reported. Nothing is
// dropped silently. Restore fails only when the state cannot be handled
// safely (the state dir is unusable, or a bad file cannot be moved aside):
// the caller should then refuse to start.
func (c *Catalog) Restore(ctx context.Context) (RestoreReport, error) {
	if !c.restoring.CompareAndSwap(false, true) {
		return RestoreReport{}, errors.New("restapi: Restore called twice")
	}
	c.writeMu.Lock()
	defer c.writeMu.Unlock()

	ld, err := c.file.load()
	if err != nil {
		return RestoreReport{}, err
	}
	rep := RestoreReport{File: c.file.Path(), CorruptMovedTo: ld.movedTo, Problem: ld.problem, StaleTempsRemoved: ld.staleTemps}
	if ld.movedTo != "" {
		c.m.corrupt.Inc()
		c.log.Error().Str(logfield.File, rep.File).Str(logfield.MovedTo, ld.movedTo).Str(logfield.Reason, ld.problem).
			Msg("state file unusable: moved aside, starting without its rules")
	}
	if ld.staleTemps > 0 {
		c.log.Info().Int(logfield.Count, ld.staleTemps).Msg("removed temporary state files left by an interrupted save")
	}

	rejKeys := c.restoreKeys(ld)
	rep.RejectedKeys = len(rejKeys.Errs)
	rep.APIKeys = c.Keys().Len()
	t := newRules(nil)
	var rejected []storedRule
	for i, sr := range ld.rules {
		if err := ctx.Err(); err != nil {
			return rep, fmt.Errorf("restapi: restore interrupted: %w", err)
		}
		next, err := c.restoreOne(t, sr)
		if err != nil {
			rejected = append(rejected, sr)
			rep.RejectedRules = append(rep.RejectedRules, RejectedRule{Index: i, Error: err.Error()})
			continue
		}
		t = next
	}
	if len(rejected) > 0 || rep.RejectedKeys > 0 {
		path, err := c.file.saveRejected(rejected, rejKeys.Keys, rejKeys.Limits)
		if err != nil {
			return rep, fmt.Errorf("restapi: %d stored rules no longer validate and could not be saved aside: %w", len(rejected), err)
		}
		rep.RejectedFile = path
		c.m.rejected.Add(len(rejected))
		for _, r := range rep.RejectedRules {
			c.log.Error().Int(logfield.Index, r.Index).Str(logfield.Reason, r.Error).Str(logfield.File, path).
				Msg("stored rule no longer validates: not restored, kept in the rejected file")
		}
	}
	if len(rejected) > 0 || ld.movedTo != "" || rep.RejectedKeys > 0 {
		if err := c.file.save(t, c.Keys()); err != nil {
			return rep, err
		}
	}
	c.rules.Store(t)
	for _, r := range t.order {
		nr := r.Rule
		c.apply(ctx, Change{Kind: ChangeCreated, Key: nr.Key, New: &nr})
	}
	rep.RestoredRules = len(t.order)
	rep.At = c.cfg.Now().UTC()
	c.m.restored.Set(uint64(rep.RestoredRules))
	c.report.Store(&rep)
	c.ready.Store(true)
	if c.shared != nil {
		// Cluster mode: what was just applied is the local cache; the
		// shared store's content replaces it (diffed) as soon as it is
		// read, and every later change arrives by the watch.
		go c.runShared(ctx)
		c.log.Info().Int(logfield.Count, rep.RestoredRules).Str(logfield.File, rep.File).Str("store", c.shared.cfg.Where).
			Msg("cached rules restored; reading the shared rule store")
		return rep, nil
	}
	c.log.Info().Int(logfield.Count, rep.RestoredRules).Str(logfield.File, rep.File).Msg("state restored; configuration writes accepted")
	return rep, nil
}

// restoreOne adds one stored rule to t through the same decode, validate and
// normalize path as a POST.
func (c *Catalog) restoreOne(t *Rules, sr storedRule) (*Rules, error) {
	e, err := c.cfg.DecodeEntry(sr.Entry)
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
	next, _, err := t.Upsert(nr, 0, sr.LastUpdated, c.cfg.NewID)
	return next, err
}
