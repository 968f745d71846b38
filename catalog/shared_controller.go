package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/rulestore"
)

// External controller instructions in cluster mode: one record per
// endpoint, under "<rule key>/<endpoint index>", written by compare-and-set
// so that epochs only move forward across replicas (an update older than
// the stored epoch is refused with 409, as on one node). Every replica
// applies the records by watching; a record names the endpoint's address
// too, and is applied only while the rule's endpoint at that index still
// has it.

// ControllerUpdate is one complete controller instruction for one endpoint.
type ControllerUpdate struct {
	// State is ACTIVE, DRAINING, DISABLED or NONE (NONE releases the
	// endpoint from the controller: neutral weight, no state).
	State string
	// Weight is 0–100; 100 is neutral. It scales the endpoint's KV capacity
	// in the Tier-1.5 law and Tier 2.
	Weight int
	// Epoch orders updates: an epoch older than the highest one applied to
	// the endpoint (a NONE release included) is refused, an equal one
	// re-applies. Epochs only move forward.
	Epoch uint64
}

// ControllerSetter applies a controller instruction to the data plane
// (restapi.ControllerRuntime). Errors wrap ErrStaleEpoch when u.Epoch is
// older than the applied one.
type ControllerSetter interface {
	SetController(k rule.RuleKey, ep int, u ControllerUpdate) error
}

// SharesControllers reports whether the replicas share controller
// instructions through a store (SharedConfig.Controller); when they do, an
// instruction is set with SetController, which every replica applies.
func (c *Catalog) SharesControllers() bool {
	return c.shared != nil && c.shared.cfg.Controller != nil
}

// ctrlRecord is one stored controller instruction.
type ctrlRecord struct {
	State   string    `json:"state"`
	Weight  int       `json:"weight"`
	Epoch   uint64    `json:"epoch"`
	Addr    string    `json:"addr"`
	Updated time.Time `json:"updated"`
	rev     int64
}

// ctrlKey names endpoint ep of rule k's record.
func ctrlKey(k rule.RuleKey, ep int) string { return k.String() + "/" + strconv.Itoa(ep) }

// splitCtrlKey parses a record key.
func splitCtrlKey(key string) (ruleKey string, ep int, ok bool) {
	i := strings.LastIndexByte(key, '/')
	if i < 0 {
		return "", 0, false
	}
	ep, err := strconv.Atoi(key[i+1:])
	if err != nil || ep < 0 {
		return "", 0, false
	}
	return key[:i], ep, true
}

// SetController stores u for endpoint ep of r in the shared store
// (SharesControllers must hold) and waits until this replica applied it.
// The caller serializes updates of one endpoint.
func (c *Catalog) SetController(ctx context.Context, r *rule.Rule, ep int, u ControllerUpdate) error {
	sh := c.shared
	key := ctrlKey(r.Key, ep)
	value, err := json.Marshal(ctrlRecord{State: u.State, Weight: u.Weight, Epoch: u.Epoch,
		Addr: r.Effective.Endpoints[ep].Addr.String(), Updated: c.cfg.Now().UTC()})
	if err != nil {
		return err
	}
	for attempt := 1; ; attempt++ {
		if err := sh.writable(); err != nil {
			return err
		}
		sh.mu.Lock()
		cur, have := sh.ctrl[key]
		seen := sh.rev[kindController]
		sh.mu.Unlock()
		if have && u.Epoch < cur.Epoch {
			return fmt.Errorf("%w: epoch %d is older than the stored %d", ErrStaleEpoch, u.Epoch, cur.Epoch)
		}
		op := rulestore.Create(key, value)
		if have {
			op = rulestore.Update(key, value, cur.rev)
		}
		rev, err := c.commitShared(ctx, sh.cfg.Controller, []rulestore.Op{op})
		var ce *rulestore.ConflictError
		switch {
		case err == nil:
			if !sh.await(ctx, sh.cfg.ReadYourWrites, kindController, func(r int64) bool { return r >= rev }) {
				c.log.Warn().Int64(logfield.Revision, rev).Msg("controller instruction stored; this replica's watch has not applied it yet")
			}
			return nil
		case errors.As(err, &ce) && attempt < sharedAttempts:
			sh.await(ctx, sh.cfg.ReadYourWrites, kindController, func(r int64) bool { return r > seen })
		case errors.As(err, &ce):
			return fmt.Errorf("%w: another replica kept changing this endpoint's instruction (%v); retry", ErrStaleEpoch, ce)
		case errors.Is(err, rulestore.ErrUnavailable):
			return fmt.Errorf("%w (%s): the instruction was not stored; retry when the store is back: %v", ErrStoreUnavailable, sh.cfg.Where, err)
		default:
			return fmt.Errorf("restapi: controller store write failed: %w", err)
		}
	}
}

// applyCtrlEvent applies one controller watch event.
func (c *Catalog) applyCtrlEvent(ev rulestore.Event) {
	sh := c.shared
	var apply []string
	sh.mu.Lock()
	switch ev.Kind {
	case rulestore.EventResync:
		sh.ctrl = make(map[string]ctrlRecord, len(ev.Snapshot.Records))
		for _, r := range ev.Snapshot.Records {
			if cr, ok := decodeCtrl(r); ok {
				sh.ctrl[r.Key] = cr
				apply = append(apply, r.Key)
			}
		}
	case rulestore.EventPut:
		if cr, ok := decodeCtrl(ev.Record); ok {
			sh.ctrl[ev.Record.Key] = cr
			apply = append(apply, ev.Record.Key)
		} else {
			c.log.Warn().Str(logfield.Key, ev.Record.Key).Msg("unreadable controller instruction in the shared store: ignored")
		}
	case rulestore.EventDelete:
		delete(sh.ctrl, ev.Record.Key)
	}
	sh.mu.Unlock()
	for _, k := range apply {
		c.applyCtrlRecord(k)
	}
	sh.advance(kindController, ev.Revision)
}

func decodeCtrl(r rulestore.Record) (ctrlRecord, bool) {
	var cr ctrlRecord
	if err := json.Unmarshal(r.Value, &cr); err != nil {
		return ctrlRecord{}, false
	}
	cr.rev = r.ModRevision
	return cr, true
}

// applyCtrlRecord hands the stored instruction under key to the data
// plane, if its rule runs here with the same endpoint at that index.
func (c *Catalog) applyCtrlRecord(key string) {
	ctl := c.cfg.Controllers
	if ctl == nil {
		return
	}
	c.shared.mu.Lock()
	cr, have := c.shared.ctrl[key]
	c.shared.mu.Unlock()
	rk, ep, ok := splitCtrlKey(key)
	if !have || !ok {
		return
	}
	rec := c.rules.Load().byString(rk)
	if rec == nil || ep >= len(rec.Rule.Effective.Endpoints) || rec.Rule.Effective.Endpoints[ep].Addr.String() != cr.Addr {
		return
	}
	err := ctl.SetController(rec.Rule.Key, ep, ControllerUpdate{State: cr.State, Weight: cr.Weight, Epoch: cr.Epoch})
	switch {
	case err == nil:
		c.log.Info().Str(logfield.Rule, rk).Int(logfield.EndpointIndex, ep).Str(logfield.State, cr.State).
			Int(logfield.Weight, cr.Weight).Uint64(logfield.Epoch, cr.Epoch).Msg("controller instruction applied from the shared store")
	case errors.Is(err, ErrStaleEpoch):
		// Already applied (this replica's own write, or a newer one).
	default:
		c.log.Warn().Err(err).Str(logfield.Rule, rk).Int(logfield.EndpointIndex, ep).Msg("controller instruction from the shared store not applied")
	}
}

// reapplyController applies the stored instructions of a rule this
// replica just started.
func (c *Catalog) reapplyController(k rule.RuleKey) {
	if c.shared == nil || c.shared.cfg.Controller == nil {
		return
	}
	prefix := k.String() + "/"
	c.shared.mu.Lock()
	var keys []string
	for key := range c.shared.ctrl {
		if strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
		}
	}
	c.shared.mu.Unlock()
	for _, key := range keys {
		c.applyCtrlRecord(key)
	}
}

// dropControllerRecords deletes the stored instructions of deleted rules
// (best effort: a leftover is never applied to another rule's endpoint).
func (c *Catalog) dropControllerRecords(ctx context.Context, changes []Change) {
	if c.shared.cfg.Controller == nil {
		return
	}
	var ops []rulestore.Op
	c.shared.mu.Lock()
	for _, ch := range changes {
		if ch.Kind != ChangeDeleted {
			continue
		}
		prefix := ch.Key.String() + "/"
		for key, cr := range c.shared.ctrl {
			if strings.HasPrefix(key, prefix) {
				ops = append(ops, rulestore.DeleteIf(key, cr.rev))
			}
		}
	}
	c.shared.mu.Unlock()
	if len(ops) == 0 {
		return
	}
	if _, err := c.commitShared(ctx, c.shared.cfg.Controller, ops); err != nil {
		c.log.Warn().Err(err).Msg("could not delete the controller instructions of a deleted rule (harmless: they are never applied to another rule)")
	}
}
