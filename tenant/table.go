package tenant

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/llbproject/llb/ladder"
)

// Table is an immutable snapshot of the keys and tenant limits. The
// decide functions return a new Table and leave the receiver as it was,
// so readers on the request path hold a Table without locks.
type Table struct {
	keys   map[string]*Key   // by key id
	byHash map[string]*Key   // by Key.Hash
	limits map[string]*Limit // by tenant id
}

// EmptyTable has no keys and no limits.
func EmptyTable() *Table {
	return &Table{keys: map[string]*Key{}, byHash: map[string]*Key{}, limits: map[string]*Limit{}}
}

// Rejected are stored records NewTable left out, with the reasons.
type Rejected struct {
	Keys   []Key
	Limits []Limit
	Errs   []error
}

// NewTable builds a table from stored records, checking them as a write
// would; a record that does not check, or repeats an id or hash, is
// returned in rej with the reason.
func NewTable(keys []Key, limits []Limit) (t *Table, rej Rejected) {
	t = EmptyTable()
	for i := range keys {
		k := keys[i]
		k.AllowedModels = slices.Clone(k.AllowedModels)
		err := checkKey(&k)
		if err == nil && (k.ID == "" || k.Hash == "" || t.keys[k.ID] != nil || t.byHash[k.Hash] != nil) {
			err = invalid("missing or repeated key_id or key_hash")
		}
		if err != nil {
			rej.Keys, rej.Errs = append(rej.Keys, keys[i]), append(rej.Errs, fmt.Errorf("key %q: %w", k.ID, err))
			continue
		}
		t.keys[k.ID], t.byHash[k.Hash] = &k, &k
	}
	for i := range limits {
		l := limits[i]
		err := checkLimit(&l)
		if err == nil && t.limits[l.TenantID] != nil {
			err = invalid("repeated tenant")
		}
		if err != nil {
			rej.Limits, rej.Errs = append(rej.Limits, l), append(rej.Errs, fmt.Errorf("tenant limit %q: %w", l.TenantID, err))
			continue
		}
		t.limits[l.TenantID] = &l
	}
	return t, rej
}

// clone copies the maps (the records are shared: they are never changed
// in place).
func (t *Table) clone() *Table {
	n := &Table{keys: make(map[string]*Key, len(t.keys)+1), byHash: make(map[string]*Key, len(t.byHash)+1),
		limits: make(map[string]*Limit, len(t.limits)+1)}
	for k, v := range t.keys {
		n.keys[k] = v
	}
	for k, v := range t.byHash {
		n.byHash[k] = v
	}
	for k, v := range t.limits {
		n.limits[k] = v
	}
	return n
}

// Len is the number of keys.
func (t *Table) Len() int { return len(t.keys) }

// Key returns key id, or nil.
func (t *Table) Key(id string) *Key { return t.keys[id] }

// ByRaw returns the key whose raw form is raw, or nil.
func (t *Table) ByRaw(raw string) *Key {
	if !strings.HasPrefix(raw, RawKeyPrefix) {
		return nil
	}
	return t.byHash[HashRaw(raw)]
}

// Limit returns tenant's limit, or nil.
func (t *Table) Limit(tenant string) *Limit { return t.limits[tenant] }

// Keys lists the keys of tenant ("" for every key), oldest first (ties:
// by id). The records are shared; do not change them.
func (t *Table) Keys(tenant string) []*Key {
	out := make([]*Key, 0, len(t.keys))
	for _, k := range t.keys {
		if tenant == "" || k.TenantID == tenant {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b *Key) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// Limits lists every tenant limit, by tenant id.
func (t *Table) Limits() []*Limit {
	out := make([]*Limit, 0, len(t.limits))
	for _, l := range t.limits {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *Limit) int { return strings.Compare(a.TenantID, b.TenantID) })
	return out
}

// NewKey is a create request: the operator's fields of a key.
type NewKey struct {
	TenantID      string
	Name          string
	AllowedModels []string
	RateLimitRPS  int64
	BurstSize     int64
	TokensPerMin  int64
	ExpiresAt     *time.Time
	// Enabled nil means enabled.
	Enabled *bool
	Class   string
}

// Create adds a key built from req with raw key raw (NewRawKey) and id,
// created at now. It returns the next table and the stored key.
func (t *Table) Create(req NewKey, raw, id string, now time.Time) (*Table, *Key, error) {
	k := &Key{ID: id, Hash: HashRaw(raw), TenantID: req.TenantID, Name: req.Name,
		AllowedModels: slices.Clone(req.AllowedModels), RateLimitRPS: req.RateLimitRPS, BurstSize: req.BurstSize,
		TokensPerMin: req.TokensPerMin, CreatedAt: now.UTC(), Enabled: req.Enabled == nil || *req.Enabled, Class: req.Class}
	if req.ExpiresAt != nil {
		e := req.ExpiresAt.UTC()
		k.ExpiresAt = &e
	}
	if err := checkKey(k); err != nil {
		return t, nil, err
	}
	if k.Class != "" {
		c, _ := ladder.ParseClass(k.Class)
		k.Class = c.String()
	}
	if len(t.keys) >= MaxKeys {
		return t, nil, fmt.Errorf("%w: llbd holds %d API keys, its maximum; delete one first", ErrFull, MaxKeys)
	}
	if t.keys[id] != nil || t.byHash[k.Hash] != nil {
		return t, nil, fmt.Errorf("%w: key id %s is taken; retry", ErrInvalid, id)
	}
	n := t.clone()
	n.keys[id], n.byHash[k.Hash] = k, k
	return n, k, nil
}

// Patch is an update of a key: nil fields keep their value.
type Patch struct {
	AllowedModels *[]string
	Enabled       *bool
	RateLimitRPS  *int64
	BurstSize     *int64
	TokensPerMin  *int64
	Class         *string
}

// Patch applies p to key id.
func (t *Table) Patch(id string, p Patch) (*Table, *Key, error) {
	old := t.keys[id]
	if old == nil {
		return t, nil, fmt.Errorf("%w: API key %s not found", ErrNotFound, id)
	}
	k := *old
	if p.AllowedModels != nil {
		k.AllowedModels = slices.Clone(*p.AllowedModels)
	}
	if p.Enabled != nil {
		k.Enabled = *p.Enabled
	}
	if p.RateLimitRPS != nil {
		k.RateLimitRPS = *p.RateLimitRPS
	}
	if p.BurstSize != nil {
		k.BurstSize = *p.BurstSize
	}
	if p.TokensPerMin != nil {
		k.TokensPerMin = *p.TokensPerMin
	}
	if p.Class != nil {
		k.Class = *p.Class
	}
	if err := checkKey(&k); err != nil {
		return t, nil, err
	}
	if k.Class != "" {
		c, _ := ladder.ParseClass(k.Class)
		k.Class = c.String()
	}
	n := t.clone()
	n.keys[id], n.byHash[k.Hash] = &k, &k
	return n, &k, nil
}

// Delete removes key id.
func (t *Table) Delete(id string) (*Table, error) {
	k := t.keys[id]
	if k == nil {
		return t, fmt.Errorf("%w: API key %s not found", ErrNotFound, id)
	}
	n := t.clone()
	delete(n.keys, id)
	delete(n.byHash, k.Hash)
	return n, nil
}

// SetLimit creates or replaces tenant's limit (LoxiLB's upsert), stamped
// now.
func (t *Table) SetLimit(l Limit, now time.Time) (*Table, *Limit, error) {
	l.UpdatedAt = now.UTC()
	if err := checkLimit(&l); err != nil {
		return t, nil, err
	}
	if t.limits[l.TenantID] == nil && len(t.limits) >= MaxLimits {
		return t, nil, fmt.Errorf("%w: llbd holds %d tenant limits, its maximum", ErrFull, MaxLimits)
	}
	n := t.clone()
	n.limits[l.TenantID] = &l
	return n, &l, nil
}

func checkLimit(l *Limit) error {
	switch {
	case strings.TrimSpace(l.TenantID) == "":
		return invalid("tenant_id is required")
	case !ValidTenant(l.TenantID):
		return invalid("tenant_id %q: want 1 to %d printable characters without spaces", l.TenantID, MaxTenantLen)
	}
	if err := checkRate("rps", l.RPS, MaxRate); err != nil {
		return err
	}
	return checkRate("tokens_per_min", l.TokensPerMin, MaxTokensPerMin)
}
