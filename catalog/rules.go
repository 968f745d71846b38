package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/llbproject/llb/rule"
)

// RuleRecord is a stored rule and when its configuration last changed.
// Immutable once in a table: read its fields, never write them.
type RuleRecord struct {
	// Rule is the validated, normalized rule.
	Rule rule.Rule
	// Updated is when the rule's configuration last changed (GET …/status
	// shows it as lastUpdated; the state file keeps it).
	Updated time.Time
	// encoded is Rule.Entry as compact JSON, computed once for every save.
	encoded json.RawMessage
	// rev and created are the shared store's ModRevision and
	// CreateRevision of the rule (cluster mode; 0 otherwise, and for rules
	// read from the local cache before the first sync).
	rev, created int64
}

// Size is the rule's size as stored, in bytes of compact JSON.
func (r *RuleRecord) Size() int { return len(r.encoded) }

func newRecord(r rule.Rule, updated time.Time) (*RuleRecord, error) {
	b, err := json.Marshal(&r.Entry)
	if err != nil {
		return nil, fmt.Errorf("restapi: encode rule %s: %w", r.Key, err)
	}
	return &RuleRecord{Rule: r, Updated: updated, encoded: b}, nil
}

// Rules is an immutable snapshot of every rule, in creation order: the rule
// table. Writers derive a new table from the current one (Upsert, Remove)
// and publish it; readers use whichever snapshot they loaded, without locks.
//
// Invariant: byKey and byID index exactly the records of order; ids are unique.
type Rules struct {
	order []*RuleRecord
	byKey map[rule.RuleKey]*RuleRecord
	byID  map[string]*RuleRecord
}

func newRules(recs []*RuleRecord) *Rules {
	t := &Rules{order: recs, byKey: make(map[rule.RuleKey]*RuleRecord, len(recs)), byID: make(map[string]*RuleRecord, len(recs))}
	for _, r := range recs {
		t.byKey[r.Rule.Key] = r
		t.byID[r.Rule.ID()] = r
	}
	return t
}

// All returns every rule in creation order. The slice is the table's own:
// read it, never modify it.
func (t *Rules) All() []*RuleRecord { return t.order }

// Len is the number of rules.
func (t *Rules) Len() int { return len(t.order) }

// ByKey returns the rule with key k.
func (t *Rules) ByKey(k rule.RuleKey) (*RuleRecord, bool) {
	r, ok := t.byKey[k]
	return r, ok
}

// ByID returns the rule with id id (serviceArguments.id).
func (t *Rules) ByID(id string) (*RuleRecord, bool) {
	r, ok := t.byID[id]
	return r, ok
}

// ChangeKind says what an accepted write did to one rule.
type ChangeKind string

// Change kinds.
const (
	ChangeCreated  ChangeKind = "created"
	ChangeReplaced ChangeKind = "replaced"
	ChangeAttached ChangeKind = "attached"
	ChangeDetached ChangeKind = "detached"
	ChangeDeleted  ChangeKind = "deleted"
)

// Change is the decision of one write to one rule, as a value: what happened,
// the rule before and after, and a trace of the merge choices made.
type Change struct {
	// Kind is what happened.
	Kind ChangeKind
	// Key is the rule's key.
	Key rule.RuleKey
	// Old is the rule before the write; nil for ChangeCreated.
	Old *rule.Rule
	// New is the rule after the write; nil for ChangeDeleted.
	New *rule.Rule
	// Trace lists the merge decisions, e.g. "kept id from the stored rule".
	Trace []string
}

// Upsert decides what POSTing req (normalized, with the request's oper) does
// to t. It returns the new table and the Change, or an error: ErrNoRule (detach
// from a missing rule), ErrNoEndpoint (detach of an endpoint the rule lacks),
// ErrRuleExists (nothing would change, or the id is taken), or a
// *ValidationError (the merged rule is invalid: 400; an immutable field
// changes: 409).
//
// Semantics (LoxiLB §1.7): oper 0 creates or replaces; on replace the stored
// endpoint order is kept for endpoints that stay (matched by ip:port, in
// order) and new ones are appended, an omitted id is kept, and an omitted fc_*
// field keeps its stored value. oper 1 attaches the request's endpoints to the
// stored rule (updating ones with the same ip:port) and oper 2 detaches them;
// both keep the stored serviceArguments. A detach that leaves no endpoint
// deletes the rule. newID mints an id for a rule that has none.
func (t *Rules) Upsert(req rule.Rule, oper int64, now time.Time, newID func() string) (*Rules, Change, error) {
	old := t.byKey[req.Key]
	var merged rule.LoadbalanceEntry
	var trace []string
	switch {
	case old == nil && oper == 2:
		return nil, Change{}, fmt.Errorf("%w: rule %s does not exist, nothing to detach", ErrNoRule, req.Key)
	case old == nil:
		merged = rule.CloneEntry(&req.Entry)
	case oper == 0:
		merged = rule.CloneEntry(&req.Entry)
		merged.Endpoints, trace = keepOrder(old.Rule.Entry.Endpoints, req.Entry.Endpoints)
		trace = append(trace, keepAdmission(merged.ServiceArguments, old.Rule.Entry.ServiceArguments)...)
	case oper == 1:
		merged = rule.CloneEntry(&old.Rule.Entry)
		merged.Endpoints, trace = attach(old.Rule.Entry.Endpoints, req.Entry.Endpoints)
	default:
		merged = rule.CloneEntry(&old.Rule.Entry)
		var err error
		merged.Endpoints, trace, err = detach(old.Rule.Entry.Endpoints, req.Entry.Endpoints, req.Key)
		if err != nil {
			return nil, Change{}, err
		}
		if len(merged.Endpoints) == 0 {
			nt, ch, err := t.Remove(req.Key)
			ch.Trace = append(trace, "no endpoint left: rule deleted")
			return nt, ch, err
		}
	}
	sa := merged.ServiceArguments
	if sa.ID == "" && old != nil {
		sa.ID = old.Rule.ID()
		trace = append(trace, "kept id from the stored rule")
	}
	if sa.ID == "" {
		sa.ID = newID()
		trace = append(trace, "minted id")
	}
	if err := rule.Validate(&merged); err != nil {
		return nil, Change{}, err
	}
	nr, err := rule.NormalizeEntry(&merged)
	if err != nil {
		return nil, Change{}, err
	}
	if other, ok := t.byID[nr.ID()]; ok && other.Rule.Key != nr.Key {
		return nil, Change{}, fmt.Errorf("%w: id %q is already used by rule %s", ErrRuleExists, nr.ID(), other.Rule.Key)
	}
	rec, err := newRecord(nr, now)
	if err != nil {
		return nil, Change{}, err
	}
	if old == nil {
		recs := append(slices.Clone(t.order), rec)
		return newRules(recs), Change{Kind: ChangeCreated, Key: nr.Key, New: &nr, Trace: trace}, nil
	}
	if err := rule.ProblemsErr(immutableChanges(&old.Rule, &nr)); err != nil {
		return nil, Change{}, err
	}
	if bytes.Equal(rec.encoded, old.encoded) {
		return nil, Change{}, fmt.Errorf("%w: rule %s already has this configuration", ErrRuleExists, nr.Key)
	}
	recs := slices.Clone(t.order)
	recs[slices.Index(recs, old)] = rec
	kind := [...]ChangeKind{ChangeReplaced, ChangeAttached, ChangeDetached}[oper]
	prev := old.Rule
	return newRules(recs), Change{Kind: kind, Key: nr.Key, Old: &prev, New: &nr, Trace: trace}, nil
}

// Remove deletes the rule with key k, or fails with ErrNoRule.
func (t *Rules) Remove(k rule.RuleKey) (*Rules, Change, error) {
	old, ok := t.byKey[k]
	if !ok {
		return nil, Change{}, fmt.Errorf("%w: no rule %s%s", ErrNoRule, k, t.hostHint(k))
	}
	recs := slices.DeleteFunc(slices.Clone(t.order), func(r *RuleRecord) bool { return r == old })
	prev := old.Rule
	return newRules(recs), Change{Kind: ChangeDeleted, Key: k, Old: &prev}, nil
}

// RemoveWhere deletes every rule match selects (possibly none).
func (t *Rules) RemoveWhere(match func(*rule.Rule) bool) (*Rules, []Change) {
	var changes []Change
	var keep []*RuleRecord
	for _, r := range t.order {
		if match(&r.Rule) {
			prev := r.Rule
			changes = append(changes, Change{Kind: ChangeDeleted, Key: r.Rule.Key, Old: &prev})
			continue
		}
		keep = append(keep, r)
	}
	return newRules(keep), changes
}

// hostHint explains a miss that a different host or range would have hit:
// LoxiLB keys L7 rules by host, and its DELETE without /hosturl/ means host "".
func (t *Rules) hostHint(k rule.RuleKey) string {
	for _, r := range t.order {
		o := r.Rule.Key
		if o.VIP == k.VIP && o.Port == k.Port && o.Protocol == k.Protocol && o != k {
			return fmt.Sprintf(" (rule %s exists: its host, block, portmax, path or model differ; delete it with "+
				"/hosturl/{host}/externalipaddress/... and ?block=, ?path_prefix=&path_match_mode=&model_name= as needed, hosturl \"any\" meaning no host)", o)
		}
	}
	return ""
}

// Lookup finds the first rule, in creation order, on VIP:port/proto,
// whatever its host, block or range, as LoxiLB's GET-by-key does.
func (t *Rules) Lookup(vip netip.Addr, port uint16, proto string) (*RuleRecord, bool) {
	for _, r := range t.order {
		k := r.Rule.Key
		if k.VIP == vip && k.Port == port && k.Protocol == proto {
			return r, true
		}
	}
	return nil, false
}
