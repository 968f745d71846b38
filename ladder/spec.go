package ladder

import (
	"errors"
	"fmt"
	"time"
)

// MaxEndpoints is the most endpoints one rule may carry (LoxiLB's MAX_PROXY_EP
// and its REST "endpoints-range" limit). Fixed-size scratch arrays in the
// decision path are sized by it.
const MaxEndpoints = 32

// Limits of a rule's values that the ladder's fixed-size state and the rule
// package's validation share. The ladder applies no default to a rule value:
// rule.Compile resolves every one, and a ServiceSpec is taken literally.
const (
	// MaxQueueDepthPerEP is the hard clamp on the per-endpoint parked queue.
	MaxQueueDepthPerEP = 64
	// MaxRuleInflight bounds a rule's own admission caps (the REST fc_*
	// in-flight fields, 0–100000 in LoxiLB's contract). The process-wide
	// LLB_PD_MAX_INFLIGHT_PER_EP keeps LoxiLB's 0–99999.
	MaxRuleInflight = 100000
	// MaxKVBlockSize is the largest kvBlockSize, in tokens: the block-hash
	// chain computes no larger block (inventory.MaxBlockSize, which a
	// lifecycle test holds equal). vLLM's block sizes are 16–256.
	MaxKVBlockSize = 4096
)

// ErrInvalidSpec classifies every rule/endpoint validation problem; test with
// errors.Is. The individual problems are *FieldError values joined with
// errors.Join.
var ErrInvalidSpec = errors.New("ladder: invalid rule")

// FieldError is one validation problem: the field (JSON spelling where there
// is one) and what is wrong with it.
type FieldError struct {
	// Field names the offending field, e.g. "kvExactMode" or "endpoints[3].ep_role".
	Field string
	// Problem is a sentence fragment a person can act on.
	Problem string
}

// Error renders "field: problem".
func (e *FieldError) Error() string { return e.Field + ": " + e.Problem }

// Unwrap makes every FieldError match ErrInvalidSpec.
func (e *FieldError) Unwrap() error { return ErrInvalidSpec }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Role is an endpoint's P/D role (REST ep_role).
type Role uint8

// Endpoint roles.
const (
	// RoleNone is a role-less endpoint: a single-pool member, or a P/D rule's
	// any-healthy rescue endpoint.
	RoleNone Role = 0
	// RolePrefill serves the prefill leg of a P/D rule.
	RolePrefill Role = 1
	// RoleDecode serves the decode leg of a P/D rule.
	RoleDecode Role = 2
)

// String returns "none", "prefill", "decode" or "role(N)".
func (r Role) String() string {
	switch r {
	case RoleNone:
		return "none"
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// SelectorKind is the rule's REST "sel" enum.
type SelectorKind uint8

// Selector kinds. 5 (n2), 6 (n3) and 7 (reserved) exist in LoxiLB's enum but
// are L4-only and rejected here.
const (
	SelRR            SelectorKind = 0
	SelHash          SelectorKind = 1
	SelPriority      SelectorKind = 2
	SelPersist       SelectorKind = 3
	SelLeastConn     SelectorKind = 4
	SelN2            SelectorKind = 5
	SelN3            SelectorKind = 6
	SelReserved      SelectorKind = 7
	SelCHWBL         SelectorKind = 8
	SelGPUAware      SelectorKind = 9
	SelWeightedCHWBL SelectorKind = 10
)

var selectorNames = [...]string{"rr", "hash", "priority", "persist", "lc", "n2", "n3", "reserved", "chwbl", "gpuaware", "wrr-hash"}

// String returns loxicmd's name for the selector ("rr", "chwbl", ...).
func (s SelectorKind) String() string {
	if int(s) < len(selectorNames) {
		return selectorNames[s]
	}
	return fmt.Sprintf("sel(%d)", uint8(s))
}

// KVExactMode is the rule's REST kvExactMode.
type KVExactMode uint8

// KV-exact modes.
const (
	// KVOff disables Tier 1.5.
	KVOff KVExactMode = 0
	// KVPrefill scores the eligible prefill endpoints of a P/D rule.
	KVPrefill KVExactMode = 1
	// KVNATS is reserved by LoxiLB and rejected.
	KVNATS KVExactMode = 2
	// KVSinglePool scores every endpoint of a role-less rule, then falls back
	// to the rule's selector.
	KVSinglePool KVExactMode = 3
)

// AdmissionSpec holds per-rule admission overrides. A zero field inherits the
// process-wide Env value (LLB_PD_*); admission as a whole stays off unless the
// resolved per-endpoint cap or global valve is non-zero.
type AdmissionSpec struct {
	// MaxInflightPerEP is the per-prefill-endpoint in-flight cap (requests).
	// 0 inherits Env.MaxInflightPerEP. Range 0–MaxRuleInflight.
	MaxInflightPerEP int
	// QueueDepthPerEP is the parked-queue depth per prefill endpoint. 0
	// inherits Env.QueueDepthPerEP. Range 0–64 (MaxQueueDepthPerEP).
	QueueDepthPerEP int
	// MaxPark bounds how long a parked request may wait; 0 inherits
	// Env.MaxPark. The runtime reaps at Decision.ParkDeadline.
	MaxPark time.Duration
	// MaxTotalInflight is the global valve; 0 inherits Env.MaxTotalInflight.
	MaxTotalInflight int64
}

// ServiceSpec is one mode:4 rule's routing configuration, built once per rule
// (on create or replace) and read-only afterwards.
type ServiceSpec struct {
	// Name identifies the rule in traces and errors. Free text.
	Name string
	// Selector is the REST "sel": the single-pool selector, and for P/D rules
	// the gate of Tier 2's capacity-blend arm (SelGPUAware).
	Selector SelectorKind
	// PDDisagg is pd_disagg_mode: run the P/D ladder. Needs at least one
	// RolePrefill and one RoleDecode endpoint.
	PDDisagg bool
	// CacheAware is pd_cache_aware_mode: enables Tier 1 (the radix trie).
	// Needs PDDisagg.
	CacheAware bool
	// SessionTTL is pd_session_ttl_sec as a duration: the Tier-0 pin
	// lifetime. Must not be negative. The session table, not Decide,
	// applies it (SessionConfig.TTL).
	SessionTTL time.Duration
	// CacheThresholdPct is pd_cache_threshold: the Tier-1 matched span must
	// cover at least this percent of the prompt (rule.Compile maps LoxiLB's
	// 0 to 20, as LoxiLB's data plane does). Range 0–100.
	CacheThresholdPct int
	// BalanceAbsThreshold is pd_balance_abs_threshold: Tier 1 is bypassed when
	// max(active_conns) − min(active_conns) over the eligible prefill endpoints
	// exceeds it. 0 bypasses Tier 1 on any imbalance. Range 0–255 (LoxiLB
	// stores a uint8; llb rejects rather than wraps).
	BalanceAbsThreshold int
	// KVExactMode selects Tier 1.5's shape: KVPrefill for P/D rules,
	// KVSinglePool for role-less rules.
	KVExactMode KVExactMode
	// KVBlockSize is tokens per KV block (kvBlockSize): the unit of
	// prompt lengths and of the LLB_KV_MIN_MATCH_TOKENS guard. Range
	// 1–MaxKVBlockSize when KVExactMode is on; a rule without Tier 1.5
	// may leave it 0 (its prompts then count no blocks).
	KVBlockSize int
	// KVWarmup is kvWarmupSec: Tier 1.5 is skipped (reason warmup) until
	// StartedAt+KVWarmup. 0 disables the guard. Must not be negative.
	KVWarmup time.Duration
	// StartedAt is when the rule (and its inventory feeds) started; the zero
	// time disables the warmup guard.
	StartedAt time.Time
	// Admission holds per-rule overrides of the LLB_PD_* admission knobs.
	Admission AdmissionSpec
	// PersistTTL is the persist selector's (sel:3) sliding pin lifetime;
	// 0 keeps a pin until the table's LRU cap evicts it. Must not be
	// negative.
	PersistTTL time.Duration
}

// Validate reports every service-level problem at once (errors.Join of
// *FieldError, each matching ErrInvalidSpec). Cross-checks that need the
// endpoint list live in ValidateRule.
func (s *ServiceSpec) Validate() error {
	var errs []error
	switch s.Selector {
	case SelRR, SelHash, SelPriority, SelPersist, SelLeastConn, SelCHWBL, SelGPUAware, SelWeightedCHWBL:
	case SelN2, SelN3, SelReserved:
		errs = append(errs, fieldErr("sel", "%d (%s) is an L4-only selector; llb rules use 0–4 or 8–10", s.Selector, s.Selector))
	default:
		errs = append(errs, fieldErr("sel", "%d is out of range 0–10", s.Selector))
	}
	switch s.KVExactMode {
	case KVOff:
	case KVPrefill:
		if !s.PDDisagg {
			errs = append(errs, fieldErr("kvExactMode", "1 needs pd_disagg_mode=true (use kvExactMode=3 for a single pool)"))
		}
	case KVSinglePool:
		if s.PDDisagg {
			errs = append(errs, fieldErr("kvExactMode", "3 is for a role-less single pool and forbids pd_disagg_mode"))
		}
	case KVNATS:
		errs = append(errs, fieldErr("kvExactMode", "2 (NATS) is reserved and not supported"))
	default:
		errs = append(errs, fieldErr("kvExactMode", "%d is out of range 0–3", s.KVExactMode))
	}
	if s.CacheAware && !s.PDDisagg {
		errs = append(errs, fieldErr("pd_cache_aware_mode", "needs pd_disagg_mode=true"))
	}
	if s.SessionTTL < 0 {
		errs = append(errs, fieldErr("pd_session_ttl_sec", "must not be negative"))
	}
	if s.CacheThresholdPct < 0 || s.CacheThresholdPct > 100 {
		errs = append(errs, fieldErr("pd_cache_threshold", "%d is out of range 0–100", s.CacheThresholdPct))
	}
	if s.BalanceAbsThreshold < 0 || s.BalanceAbsThreshold > 255 {
		errs = append(errs, fieldErr("pd_balance_abs_threshold", "%d is out of range 0–255", s.BalanceAbsThreshold))
	}
	if lo := blockSizeMin(s.KVExactMode); s.KVBlockSize < lo || s.KVBlockSize > MaxKVBlockSize {
		errs = append(errs, fieldErr("kvBlockSize", "%d is out of range %d–%d", s.KVBlockSize, lo, MaxKVBlockSize))
	}
	if s.KVWarmup < 0 {
		errs = append(errs, fieldErr("kvWarmupSec", "must not be negative"))
	}
	if s.PersistTTL < 0 {
		errs = append(errs, fieldErr("persistTimeout", "must not be negative"))
	}
	a := s.Admission
	if a.MaxInflightPerEP < 0 || a.MaxInflightPerEP > MaxRuleInflight {
		errs = append(errs, fieldErr("admission.max_inflight_per_ep", "%d is out of range 0–%d", a.MaxInflightPerEP, MaxRuleInflight))
	}
	if a.QueueDepthPerEP < 0 || a.QueueDepthPerEP > MaxQueueDepthPerEP {
		errs = append(errs, fieldErr("admission.queue_depth_per_ep", "%d is out of range 0–%d", a.QueueDepthPerEP, MaxQueueDepthPerEP))
	}
	if a.MaxPark < 0 {
		errs = append(errs, fieldErr("admission.max_park", "must not be negative"))
	}
	if a.MaxTotalInflight < 0 {
		errs = append(errs, fieldErr("admission.max_total_inflight", "must not be negative"))
	}
	return errors.Join(errs...)
}

// blockSizeMin is the smallest valid KVBlockSize: Tier 1.5 counts in
// blocks, a rule without it has none.
func blockSizeMin(m KVExactMode) int {
	if m == KVOff {
		return 0
	}
	return 1
}

// EndpointSpec is one endpoint of a rule as configured (not its live state).
// Its index in the rule's endpoint slice is its identity everywhere in this
// package (views, pins, trie leaves, decisions).
type EndpointSpec struct {
	// Addr is "ip:port". It seeds the endpoint's CHWBL virtual nodes, so a
	// ring survives endpoint reordering; when empty the index is used.
	Addr string
	// Role is ep_role: 0 none, 1 prefill, 2 decode.
	Role Role
	// Weight is the REST weight, 0–255 (LoxiLB stores a uint8). Used by
	// priority/WRR (sel:2, weights are traffic shares) and weighted CHWBL
	// (sel:10). 0 is treated as 1, as LoxiLB's WRR init does.
	Weight uint8
	// Backup marks an endpoint used only when every primary endpoint of a
	// single pool is unavailable. P/D ladders ignore it.
	Backup bool
}

// Validate reports the endpoint's own problems (the role enum).
func (e *EndpointSpec) Validate() error {
	if e.Role > RoleDecode {
		return fieldErr("ep_role", "%d is out of range 0–2", e.Role)
	}
	return nil
}

func (e *EndpointSpec) weight() uint64 {
	if e.Weight == 0 {
		return 1
	}
	return uint64(e.Weight)
}

// ValidateRule validates a whole rule: the service, every endpoint, and the
// cross-checks (1–32 endpoints; P/D needs a prefill and a decode endpoint;
// a single pool's endpoints must be role-less). All problems are reported at
// once, joined; each matches ErrInvalidSpec.
func ValidateRule(svc *ServiceSpec, eps []EndpointSpec) error {
	var errs []error
	if err := svc.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(eps) == 0 || len(eps) > MaxEndpoints {
		errs = append(errs, fieldErr("endpoints", "%d endpoints; a rule needs 1–%d", len(eps), MaxEndpoints))
	}
	var prefill, decode int
	for i := range eps {
		if err := eps[i].Validate(); err != nil {
			var fe *FieldError
			if errors.As(err, &fe) {
				fe.Field = fmt.Sprintf("endpoints[%d].%s", i, fe.Field)
			}
			errs = append(errs, err)
			continue
		}
		switch eps[i].Role {
		case RolePrefill:
			prefill++
		case RoleDecode:
			decode++
		}
		if !svc.PDDisagg && eps[i].Role != RoleNone {
			errs = append(errs, fieldErr(fmt.Sprintf("endpoints[%d].ep_role", i), "%s role needs pd_disagg_mode=true", eps[i].Role))
		}
	}
	if svc.PDDisagg && (prefill == 0 || decode == 0) {
		errs = append(errs, fieldErr("endpoints", "pd_disagg_mode needs at least 1 prefill (ep_role=1) and 1 decode (ep_role=2) endpoint; have %d and %d", prefill, decode))
	}
	return errors.Join(errs...)
}
