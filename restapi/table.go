package restapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/llbproject/llb/rule"
)

// record is a stored rule and when it last changed. Immutable once in a table.
type record struct {
	rule    rule.Rule
	updated time.Time
	// encoded is rule.Entry as compact JSON, computed once for every save.
	encoded json.RawMessage
	// rev and created are the shared store's ModRevision and
	// CreateRevision of the rule (cluster mode; 0 otherwise, and for rules
	// read from the local cache before the first sync).
	rev, created int64
}

func newRecord(r rule.Rule, updated time.Time) (*record, error) {
	b, err := json.Marshal(&r.Entry)
	if err != nil {
		return nil, fmt.Errorf("restapi: encode rule %s: %w", r.Key, err)
	}
	return &record{rule: r, updated: updated, encoded: b}, nil
}

// table is an immutable snapshot of every rule, in creation order. Writers
// derive a new table from the current one (upsert, remove) and publish it;
// readers use whichever snapshot they loaded, without locks.
//
// Invariant: byKey and byID index exactly the records of order; ids are unique.
type table struct {
	order []*record
	byKey map[rule.RuleKey]*record
	byID  map[string]*record
}

func newTable(recs []*record) *table {
	t := &table{order: recs, byKey: make(map[rule.RuleKey]*record, len(recs)), byID: make(map[string]*record, len(recs))}
	for _, r := range recs {
		t.byKey[r.rule.Key] = r
		t.byID[r.rule.ID()] = r
	}
	return t
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

// upsert decides what POSTing req (normalized, with the request's oper) does
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
func (t *table) upsert(req rule.Rule, oper int64, now time.Time, newID func() string) (*table, Change, error) {
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
		merged.Endpoints, trace = keepOrder(old.rule.Entry.Endpoints, req.Entry.Endpoints)
		trace = append(trace, keepAdmission(merged.ServiceArguments, old.rule.Entry.ServiceArguments)...)
	case oper == 1:
		merged = rule.CloneEntry(&old.rule.Entry)
		merged.Endpoints, trace = attach(old.rule.Entry.Endpoints, req.Entry.Endpoints)
	default:
		merged = rule.CloneEntry(&old.rule.Entry)
		var err error
		merged.Endpoints, trace, err = detach(old.rule.Entry.Endpoints, req.Entry.Endpoints, req.Key)
		if err != nil {
			return nil, Change{}, err
		}
		if len(merged.Endpoints) == 0 {
			nt, ch, err := t.remove(req.Key)
			ch.Trace = append(trace, "no endpoint left: rule deleted")
			return nt, ch, err
		}
	}
	sa := merged.ServiceArguments
	if sa.ID == "" && old != nil {
		sa.ID = old.rule.ID()
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
	if other, ok := t.byID[nr.ID()]; ok && other.rule.Key != nr.Key {
		return nil, Change{}, fmt.Errorf("%w: id %q is already used by rule %s", ErrRuleExists, nr.ID(), other.rule.Key)
	}
	rec, err := newRecord(nr, now)
	if err != nil {
		return nil, Change{}, err
	}
	if old == nil {
		recs := append(slices.Clone(t.order), rec)
		return newTable(recs), Change{Kind: ChangeCreated, Key: nr.Key, New: &nr, Trace: trace}, nil
	}
	if err := rule.ProblemsErr(immutableChanges(&old.rule, &nr)); err != nil {
		return nil, Change{}, err
	}
	if bytes.Equal(rec.encoded, old.encoded) {
		return nil, Change{}, fmt.Errorf("%w: rule %s already has this configuration", ErrRuleExists, nr.Key)
	}
	recs := slices.Clone(t.order)
	recs[slices.Index(recs, old)] = rec
	kind := [...]ChangeKind{ChangeReplaced, ChangeAttached, ChangeDetached}[oper]
	prev := old.rule
	return newTable(recs), Change{Kind: kind, Key: nr.Key, Old: &prev, New: &nr, Trace: trace}, nil
}

// remove deletes the rule with key k, or fails with ErrNoRule.
func (t *table) remove(k rule.RuleKey) (*table, Change, error) {
	old, ok := t.byKey[k]
	if !ok {
		return nil, Change{}, fmt.Errorf("%w: no rule %s%s", ErrNoRule, k, t.hostHint(k))
	}
	recs := slices.DeleteFunc(slices.Clone(t.order), func(r *record) bool { return r == old })
	prev := old.rule
	return newTable(recs), Change{Kind: ChangeDeleted, Key: k, Old: &prev}, nil
}

// removeWhere deletes every rule match selects (possibly none).
func (t *table) removeWhere(match func(*rule.Rule) bool) (*table, []Change) {
	var changes []Change
	var keep []*record
	for _, r := range t.order {
		if match(&r.rule) {
			prev := r.rule
			changes = append(changes, Change{Kind: ChangeDeleted, Key: r.rule.Key, Old: &prev})
			continue
		}
		keep = append(keep, r)
	}
	return newTable(keep), changes
}

// hostHint explains a miss that a different host or range would have hit:
// LoxiLB keys L7 rules by host, and its DELETE without /hosturl/ means host "".
func (t *table) hostHint(k rule.RuleKey) string {
	for _, r := range t.order {
		o := r.rule.Key
		if o.VIP == k.VIP && o.Port == k.Port && o.Protocol == k.Protocol && o != k {
			return fmt.Sprintf(" (rule %s exists: its host, block or portmax differ; delete it with "+
				"/hosturl/{host}/externalipaddress/... and ?block= as needed, hosturl \"any\" meaning no host)", o)
		}
	}
	return ""
}

// lookup finds the first rule, in creation order, on VIP:port/proto,
// whatever its host, block or range, as LoxiLB's GET-by-key does.
func (t *table) lookup(vip netip.Addr, port uint16, proto string) (*record, bool) {
	for _, r := range t.order {
		k := r.rule.Key
		if k.VIP == vip && k.Port == port && k.Protocol == proto {
			return r, true
		}
	}
	return nil, false
}

// keepOrder is LoxiLB's replace of the endpoint list: stored endpoints that
// stay keep their positions (their stable indexes), taking the new attributes;
// new ones are appended in request order; the rest are dropped. Endpoints
// are matched by ip:port, duplicates pairwise in order.
func keepOrder(stored, req []rule.Endpoint) ([]rule.Endpoint, []string) {
	used := make([]bool, len(req))
	var out []rule.Endpoint
	kept, dropped := 0, 0
	for i := range stored {
		j := -1
		for k := range req {
			if !used[k] && req[k].Identity() == stored[i].Identity() {
				j = k
				break
			}
		}
		if j < 0 {
			dropped++
			continue
		}
		used[j] = true
		out = append(out, req[j])
		kept++
	}
	added := 0
	for k := range req {
		if !used[k] {
			out = append(out, req[k])
			added++
		}
	}
	return out, []string{fmt.Sprintf("endpoint order kept: %d kept in place, %d appended, %d dropped", kept, added, dropped)}
}

// attach adds req's endpoints to stored, updating in place an endpoint with
// the same ip:port.
func attach(stored, req []rule.Endpoint) ([]rule.Endpoint, []string) {
	out := slices.Clone(stored)
	updated, added := 0, 0
	for _, ep := range req {
		i := slices.IndexFunc(out, func(s rule.Endpoint) bool { return s.Identity() == ep.Identity() })
		if i >= 0 {
			out[i] = ep
			updated++
			continue
		}
		out = append(out, ep)
		added++
	}
	return out, []string{fmt.Sprintf("attach: %d updated in place, %d appended", updated, added)}
}

// detach removes one stored endpoint per requested ip:port, or fails with
// ErrNoEndpoint naming every requested endpoint the rule lacks.
func detach(stored, req []rule.Endpoint, k rule.RuleKey) ([]rule.Endpoint, []string, error) {
	out := slices.Clone(stored)
	var missing []string
	for _, ep := range req {
		i := slices.IndexFunc(out, func(s rule.Endpoint) bool { return s.Identity() == ep.Identity() })
		if i < 0 {
			missing = append(missing, ep.Identity())
			continue
		}
		out = slices.Delete(out, i, i+1)
	}
	if len(missing) > 0 {
		return nil, nil, fmt.Errorf("%w: rule %s has no endpoint %v to detach", ErrNoEndpoint, k, missing)
	}
	return out, []string{fmt.Sprintf("detach: %d removed", len(req))}, nil
}

// keepAdmission gives every fc_* field the request omitted its stored value.
func keepAdmission(dst, stored *rule.ServiceArguments) []string {
	var trace []string
	keepInt := func(name string, d **int64, s *int64) {
		if *d == nil && s != nil {
			*d = new(*s)
			trace = append(trace, "kept "+name+" from the stored rule")
		}
	}
	keepStr := func(name string, d **string, s *string) {
		if *d == nil && s != nil {
			*d = new(*s)
			trace = append(trace, "kept "+name+" from the stored rule")
		}
	}
	a, s := &dst.AdmissionArguments, &stored.AdmissionArguments
	keepStr("fc_mode", &a.FCMode, s.FCMode)
	keepInt("fc_max_outstanding", &a.FCMaxOutstanding, s.FCMaxOutstanding)
	keepInt("fc_ep_max_inflight", &a.FCEpMaxInflight, s.FCEpMaxInflight)
	keepInt("fc_prefill_max_inflight", &a.FCPrefillMaxInflight, s.FCPrefillMaxInflight)
	keepInt("fc_decode_max_inflight", &a.FCDecodeMaxInflight, s.FCDecodeMaxInflight)
	keepInt("fc_max_queue_depth", &a.FCMaxQueueDepth, s.FCMaxQueueDepth)
	keepInt("fc_max_queue_wait_ms", &a.FCMaxQueueWaitMs, s.FCMaxQueueWaitMs)
	keepInt("fc_telemetry_stale_ms", &a.FCTelemetryStaleMs, s.FCTelemetryStaleMs)
	keepStr("fc_adaptive", &a.FCAdaptive, s.FCAdaptive)
	keepInt("fc_warmup_ms", &a.FCWarmupMs, s.FCWarmupMs)
	keepInt("fc_ttft_target_ms", &a.FCTTFTTargetMs, s.FCTTFTTargetMs)
	keepInt("fc_tenant_max_share_pct", &a.FCTenantMaxSharePct, s.FCTenantMaxSharePct)
	keepStr("fc_expose_headers", &a.FCExposeHeaders, s.FCExposeHeaders)
	return trace
}

// immutableChanges lists the fields a replace may not change (409).
func immutableChanges(old, nw *rule.Rule) []rule.Problem {
	o, n := old.Entry.ServiceArguments, nw.Entry.ServiceArguments
	var ps []rule.Problem
	if rule.EngineOf(o) != rule.EngineOf(n) {
		ps = append(ps, rule.ConflictProblem(rule.SAField("kvEngineType"), "lbrule-exist error: cant modify rule kv engine type (stored %q, got %q); delete and recreate the rule", rule.EngineOf(o), rule.EngineOf(n)))
	}
	if (o.Mode == rule.ModeFullProxy) != (n.Mode == rule.ModeFullProxy) {
		ps = append(ps, rule.ConflictProblem(rule.SAField("mode"), "lbrule-exist error: cant modify rule fullproxy mode (stored mode %d, got mode %d); delete and recreate the rule", o.Mode, n.Mode))
	}
	if o.Security != n.Security {
		ps = append(ps, rule.ConflictProblem(rule.SAField("security"), "lbrule-exist error: cant modify rule security (stored %d, got %d)", o.Security, n.Security))
	}
	if o.Egress != n.Egress {
		ps = append(ps, rule.ConflictProblem(rule.SAField("egress"), "lbrule-exist error: cant modify rule egress (stored %t, got %t)", o.Egress, n.Egress))
	}
	if !slices.Equal(old.Entry.SecondaryIPs, nw.Entry.SecondaryIPs) {
		ps = append(ps, rule.ConflictProblem("secondaryIPs", "lbrule-exist error: cant modify rule secondary IPs (secIP modify error)"))
	}
	return ps
}
