package ladder

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// ErrInvalidEnv classifies every environment-knob problem; test with errors.Is.
// The individual problems are *EnvError values joined with errors.Join.
var ErrInvalidEnv = errors.New("ladder: invalid environment")

// EnvError is one rejected environment variable.
type EnvError struct {
	// Var is the variable's name, e.g. "LOXILB_KV_MEAN_LOAD_FACTOR".
	Var string
	// Value is the raw value as read.
	Value string
	// Problem says what is accepted.
	Problem string
}

// Error renders `VAR="value": problem`.
func (e *EnvError) Error() string {
	return fmt.Sprintf("%s=%q: %s", e.Var, e.Value, e.Problem)
}

// Unwrap makes every EnvError match ErrInvalidEnv.
func (e *EnvError) Unwrap() error { return ErrInvalidEnv }

// LBMode is the Tier-1.5 selection law (LOXILB_KV_LB_MODE). The zero value
// is LoxiLB's default law, hard; llb's default (DefaultEnv) is headroom.
type LBMode uint8

// Selection laws.
const (
	// LBHard bounds overlap affinity by a capacity-weighted load cap.
	LBHard LBMode = iota
	// LBOff is pure overlap argmax.
	LBOff
	// LBSoft is the continuous cost blend.
	LBSoft
	// LBAdaptive is hard with ε keyed to the observed load.
	LBAdaptive
	// LBAdaptiveSoft is soft with λ keyed to the observed load.
	LBAdaptiveSoft
	// LBHeadroom (an llb extension, the default) is hard with an absolute
	// floor under the cap: an endpoint with headroom is never over it.
	LBHeadroom
	// LBAuto (an llb extension) is headroom with ε tuned online from the
	// engines' scraped queues (AutoFactor) instead of
	// LOXILB_KV_MEAN_LOAD_FACTOR.
	LBAuto
)

var lbModeNames = [...]string{"hard", "off", "soft", "adaptive", "adaptive-soft", "headroom", "auto"}

// HeadroomLaw reports whether m is one of llb's headroom laws (headroom,
// auto): the floor under the cap, held spills, pending placements and
// misses by KV usage.
func (m LBMode) HeadroomLaw() bool { return m == LBHeadroom || m == LBAuto }

// String returns the env spelling ("hard", "adaptive-soft", ...).
func (m LBMode) String() string {
	if int(m) < len(lbModeNames) {
		return lbModeNames[m]
	}
	return fmt.Sprintf("lbmode(%d)", uint8(m))
}

// ParseLBMode maps an env spelling to an LBMode (case-insensitive); false
// (and LBHard) for anything else.
func ParseLBMode(s string) (LBMode, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	for i, n := range lbModeNames {
		if s == n {
			return LBMode(i), true
		}
	}
	return LBHard, false
}

// Tristate is an on/off switch whose unset state means "decide per rule".
type Tristate uint8

// Tristate values. The zero value is TriAuto.
const (
	TriAuto Tristate = iota
	TriOn
	TriOff
)

// String returns "auto", "on" or "off".
func (t Tristate) String() string {
	switch t {
	case TriAuto:
		return "auto"
	case TriOn:
		return "on"
	case TriOff:
		return "off"
	}
	return fmt.Sprintf("tristate(%d)", uint8(t))
}

// Env variable names, exactly as operators spell them.
const (
	EnvLBMode             = "LOXILB_KV_LB_MODE"
	EnvUnifiedModeLegacy  = "LOXILB_KV_UNIFIED_MODE"
	EnvMeanLoadFactor     = "LOXILB_KV_MEAN_LOAD_FACTOR"
	EnvLoadPenalty        = "LOXILB_KV_LOAD_PENALTY"
	EnvSpillRelief        = "LOXILB_KV_SPILL_RELIEF"
	EnvColdStartMinBlocks = "LOXILB_KV_COLDSTART_MIN_BLOCKS"
	EnvColdStartSeedN     = "LOXILB_KV_COLDSTART_SEED_N"
	EnvColdStartSeedNth   = "LOXILB_KV_COLDSTART_SEED_Nth"
	EnvMinMatchTokens     = "LLB_KV_MIN_MATCH_TOKENS"
	EnvHeadroomPct        = "LLB_KV_HEADROOM_PCT"
	EnvMaxNumSeqs         = "LLB_KV_MAX_NUM_SEQS"
	EnvMaxInflightPerEP   = "LLB_PD_MAX_INFLIGHT_PER_EP"
	EnvQueueDepthPerEP    = "LLB_PD_QUEUE_DEPTH_PER_EP"
	EnvMaxParkSec         = "LLB_PD_MAX_PARK_SEC"
	EnvMaxTotalInflight   = "LLB_PD_MAX_TOTAL_INFLIGHT"
	EnvOriginErrThreshold = "LLB_PD_ORIGIN_ERR_THRESHOLD"
	EnvOffloadWeightPct   = "LLB_KV_OFFLOAD_WEIGHT_PCT"
	EnvPredictionDemote   = "LLB_KV_PREDICTION_DEMOTE"
	EnvLoRAAffinity       = "LLB_LORA_AFFINITY"
	EnvLoRARuntimeLoad    = "LLB_LORA_RUNTIME_LOAD"
	EnvCriticalHeadroom   = "LLB_FC_CRITICAL_HEADROOM_PCT"
	EnvMissSettle         = "LLB_KV_MISS_SETTLE"
)

// Env holds the process-wide routing knobs, parsed once at start by ParseEnv
// and then passed by value to every Router. Every field states its unit,
// default, accepted range and interactions.
type Env struct {
	// LBMode is LOXILB_KV_LB_MODE: the Tier-1.5 law. Default headroom (an
	// llb extension; LoxiLB's default, hard, stays selectable by name).
	// Unset falls back to the legacy LOXILB_KV_UNIFIED_MODE (0/false/off/no
	// → off, anything else → the default); garbage warns and means the
	// default.
	LBMode LBMode
	// MeanLoadFactorPct is LOXILB_KV_MEAN_LOAD_FACTOR = (1+ε)·100, percent.
	// Default 175 (ε 0.75), range 100–1000. Used by hard mode and by spill
	// relief's fleet-wide cap; adaptive mode replaces it with ε(L).
	MeanLoadFactorPct uint32
	// LoadPenalty is LOXILB_KV_LOAD_PENALTY, soft mode's λ in milli-blocks per
	// in-flight request on a mean-capacity endpoint. Default 32, range
	// 1–100000. Adaptive-soft replaces it with λ(L).
	LoadPenalty uint32
	// SpillRelief is LOXILB_KV_SPILL_RELIEF. Unset (auto) means on for
	// kvExactMode 3 and off for P/D kvExactMode 1; 1/true/on/yes and
	// 0/false/off/no override every service. Never applies in mode off.
	SpillRelief Tristate
	// ColdStartMinBlocks is LOXILB_KV_COLDSTART_MIN_BLOCKS: an eligible
	// endpoint holding fewer inventory blocks is cold. Default 16; 0 means
	// "strictly empty" (the floor is raised to 1). Range 0–2^31-1.
	ColdStartMinBlocks uint32
	// ColdStartSeedN is LOXILB_KV_COLDSTART_SEED_N (also accepted as
	// LOXILB_KV_COLDSTART_SEED_Nth): every Nth Tier-1.5 hit of a service is
	// diverted to the lowest-index cold endpoint. Default 16, 0 disables.
	// Range 0–2^31-1.
	ColdStartSeedN uint32
	// MinMatchTokens is LLB_KV_MIN_MATCH_TOKENS: Tier 1.5 misses (min_match)
	// unless the best overlap covers this many tokens, rounded up to whole
	// blocks and capped at the prompt's own block count. Default 16, range
	// 0–4096, 0 disables.
	MinMatchTokens uint32
	// HeadroomPct is LLB_KV_HEADROOM_PCT: the headroom law's floor as a
	// percentage of an endpoint's concurrency estimate (see HeadroomFor).
	// Default 100, range 0–100; 0 makes headroom behave as hard.
	HeadroomPct uint32
	// MaxNumSeqs is LLB_KV_MAX_NUM_SEQS: the engines' running-batch limit
	// (vLLM's --max-num-seqs), the upper bound of the headroom law's
	// concurrency estimate. Default 256 (vLLM's default), range 1–65535.
	MaxNumSeqs uint32
	// MaxInflightPerEP is LLB_PD_MAX_INFLIGHT_PER_EP: per-prefill-endpoint
	// in-flight cap (requests). Default 0 = admission off. Range 0–99999.
	MaxInflightPerEP uint32
	// QueueDepthPerEP is LLB_PD_QUEUE_DEPTH_PER_EP: parked-queue depth per
	// prefill endpoint. Default 0 = no parking (all capped → shed 429).
	// Values above 64 are clamped to 64. Only meaningful with
	// MaxInflightPerEP > 0.
	QueueDepthPerEP uint32
	// MaxPark is LLB_PD_MAX_PARK_SEC: a parked request older than this is
	// reaped by the runtime (504). Default 0 = wait until capacity frees.
	// Range 0–99999 s.
	MaxPark time.Duration
	// MaxTotalInflight is LLB_PD_MAX_TOTAL_INFLIGHT: the global valve refuses
	// new requests once the runtime's total in-flight+parked count reaches
	// it. Default 0 = off. Range 0–1999999999.
	MaxTotalInflight uint64
	// OriginErrThreshold is LLB_PD_ORIGIN_ERR_THRESHOLD: consecutive origin
	// 5xx responses that open an enabled breaker. Default 3, 0 disables,
	// range 0–1000. Consumed by the breaker actor, not by Decide.
	OriginErrThreshold uint32
	// OffloadWeightPct is LLB_KV_OFFLOAD_WEIGHT_PCT: what a prefix block held
	// only in an offload tier (CPU memory) is worth to Tier 1.5, in percent
	// of a block in GPU memory (EndpointView.OverlapOffloaded). Default 80
	// (llm-d's "cpu" backend weight 0.8), range 0–100; 100 counts offloaded
	// blocks as GPU blocks, 0 ignores them.
	OffloadWeightPct uint32
	// PredictionDemote is LLB_KV_PREDICTION_DEMOTE: when on (the default), an
	// endpoint whose cache predictions keep disagreeing with the cached
	// tokens its engine reports is demoted from Tier 1.5
	// (EndpointView.KVDistrusted) until they agree again. Off keeps the
	// metrics and the warning but never demotes. Consumed by the router
	// actor, not by Decide.
	PredictionDemote bool
	// LoRAAffinity is LLB_LORA_AFFINITY: when on (the default), a request
	// for a LoRA adapter is kept to the endpoints LoRAChoice names (its idle
	// holders, or endpoints with room for one more adapter). Consumed by
	// the router actor, not by Decide.
	LoRAAffinity bool
	// LoRARuntimeLoad is LLB_LORA_RUNTIME_LOAD: when on (default off), an
	// endpoint that does not serve an adapter another endpoint serves may
	// still be picked for it, and llb loads the adapter there first
	// (POST /v1/load_lora_adapter, which needs the engine started with
	// VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; an endpoint that refuses is
	// not asked again).
	LoRARuntimeLoad bool
	// CriticalHeadroomPct is LLB_FC_CRITICAL_HEADROOM_PCT: how far above
	// the per-endpoint in-flight cap a critical request may still be
	// admitted, in percent of the cap (at least one request): the slots
	// between the cap and cap + headroom are the critical class's alone,
	// so it does not wait for lower classes' requests to finish when the
	// fleet is saturated (Router.CapFor). Default 25, range 0–100; 0 holds
	// every class to the cap.
	CriticalHeadroomPct uint32
	// MissSettle is LLB_KV_MISS_SETTLE: when on (the default), the
	// headroom law places a Tier-1.5 miss on a light fleet by the prompt's
	// home and frequency-weighted footprints (settleMiss) instead of by KV
	// use; 0 places every miss by KV use, the law before
	// (docs/performance.md, why the 50 % cells lose).
	MissSettle bool
}

// DefaultEnv returns the out-of-box knob values (what an empty environment
// parses to).
func DefaultEnv() Env {
	return Env{
		LBMode:             LBHeadroom,
		MeanLoadFactorPct:  175,
		LoadPenalty:        32,
		SpillRelief:        TriAuto,
		ColdStartMinBlocks: 16,
		ColdStartSeedN:     16,
		MinMatchTokens:     16,
		HeadroomPct:        100,
		MaxNumSeqs:         256,
		OriginErrThreshold: 3,
		OffloadWeightPct:   80,
		PredictionDemote:   true,
		LoRAAffinity:       true,
		MissSettle:         true,

		CriticalHeadroomPct: 25,
	}
}

// Validate reports out-of-range fields of an Env built by hand (ParseEnv
// never returns one). Problems are *EnvError values joined together.
func (e *Env) Validate() error {
	var errs []error
	bad := func(name string, v any, problem string) {
		errs = append(errs, &EnvError{Var: name, Value: fmt.Sprint(v), Problem: problem})
	}
	if e.LBMode > LBAuto {
		bad(EnvLBMode, e.LBMode, "unknown mode")
	}
	if e.MeanLoadFactorPct < 100 || e.MeanLoadFactorPct > 1000 {
		bad(EnvMeanLoadFactor, e.MeanLoadFactorPct, "want an integer 100–1000")
	}
	if e.LoadPenalty < 1 || e.LoadPenalty > 100000 {
		bad(EnvLoadPenalty, e.LoadPenalty, "want an integer 1–100000")
	}
	if e.SpillRelief > TriOff {
		bad(EnvSpillRelief, e.SpillRelief, "unknown tri-state")
	}
	if e.MinMatchTokens > 4096 {
		bad(EnvMinMatchTokens, e.MinMatchTokens, "want an integer 0–4096")
	}
	if e.HeadroomPct > 100 {
		bad(EnvHeadroomPct, e.HeadroomPct, "want an integer 0–100")
	}
	if e.MaxNumSeqs < 1 || e.MaxNumSeqs > 65535 {
		bad(EnvMaxNumSeqs, e.MaxNumSeqs, "want an integer 1–65535")
	}
	if e.MaxInflightPerEP > 99999 {
		bad(EnvMaxInflightPerEP, e.MaxInflightPerEP, "want an integer 0–99999")
	}
	if e.QueueDepthPerEP > MaxQueueDepthPerEP {
		bad(EnvQueueDepthPerEP, e.QueueDepthPerEP, "want an integer 0–64")
	}
	if e.MaxPark < 0 || e.MaxPark > 99999*time.Second {
		bad(EnvMaxParkSec, e.MaxPark, "want 0–99999 s")
	}
	if e.MaxTotalInflight > 1999999999 {
		bad(EnvMaxTotalInflight, e.MaxTotalInflight, "want an integer 0–1999999999")
	}
	if e.OriginErrThreshold > 1000 {
		bad(EnvOriginErrThreshold, e.OriginErrThreshold, "want an integer 0–1000")
	}
	if e.OffloadWeightPct > 100 {
		bad(EnvOffloadWeightPct, e.OffloadWeightPct, "want an integer 0–100")
	}
	if e.CriticalHeadroomPct > 100 {
		bad(EnvCriticalHeadroom, e.CriticalHeadroomPct, "want an integer 0–100")
	}
	return errors.Join(errs...)
}

// ParseEnv reads every knob through getenv (pass os.Getenv in cmd/, a map
// lookup in tests) and returns the parsed Env, warnings for values that were
// tolerated (an unrecognised LOXILB_KV_LB_MODE, a clamped queue depth), and an
// error joining one *EnvError per rejected variable. On error the returned Env
// still holds defaults for the rejected fields, but callers should refuse to
// start. Empty and whitespace-only values count as unset.
func ParseEnv(getenv func(string) string) (Env, []string, error) {
	env := DefaultEnv()
	var warns []string
	var errs []error
	get := func(name string) string { return strings.TrimSpace(getenv(name)) }

	// LOXILB_KV_LB_MODE, with the legacy LOXILB_KV_UNIFIED_MODE fallback.
	if v := get(EnvLBMode); v != "" {
		if m, ok := ParseLBMode(v); ok {
			env.LBMode = m
		} else {
			warns = append(warns, fmt.Sprintf("%s=%q is not one of off|hard|soft|adaptive|adaptive-soft|headroom; using the default, %s", EnvLBMode, v, env.LBMode))
		}
	} else if v := get(EnvUnifiedModeLegacy); v != "" {
		if on, ok := parseBool(v); ok && !on {
			env.LBMode = LBOff
		}
	}

	uintVar := func(name string, lo, hi uint64, dst *uint64) {
		v := get(name)
		if v == "" {
			return
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n < lo || n > hi {
			errs = append(errs, &EnvError{Var: name, Value: v, Problem: fmt.Sprintf("want an integer %d–%d", lo, hi)})
			return
		}
		*dst = n
	}
	u32 := func(name string, lo, hi uint64, dst *uint32) {
		x := uint64(*dst)
		uintVar(name, lo, hi, &x)
		*dst = uint32(x)
	}

	u32(EnvMeanLoadFactor, 100, 1000, &env.MeanLoadFactorPct)
	u32(EnvLoadPenalty, 1, 100000, &env.LoadPenalty)

	if v := get(EnvSpillRelief); v != "" {
		on, ok := parseBool(v)
		switch {
		case !ok:
			errs = append(errs, &EnvError{Var: EnvSpillRelief, Value: v, Problem: "want 1/true/on/yes, 0/false/off/no, or unset for auto"})
		case on:
			env.SpillRelief = TriOn
		default:
			env.SpillRelief = TriOff
		}
	}

	u32(EnvColdStartMinBlocks, 0, math.MaxInt32, &env.ColdStartMinBlocks)
	seedN, seedNth := get(EnvColdStartSeedN), get(EnvColdStartSeedNth)
	switch {
	case seedN != "" && seedNth != "" && seedN != seedNth:
		errs = append(errs, &EnvError{Var: EnvColdStartSeedN, Value: seedN,
			Problem: fmt.Sprintf("conflicts with %s=%q; set one of them", EnvColdStartSeedNth, seedNth)})
	case seedN != "":
		u32(EnvColdStartSeedN, 0, math.MaxInt32, &env.ColdStartSeedN)
	default:
		u32(EnvColdStartSeedNth, 0, math.MaxInt32, &env.ColdStartSeedN)
	}
	u32(EnvMinMatchTokens, 0, 4096, &env.MinMatchTokens)
	u32(EnvHeadroomPct, 0, 100, &env.HeadroomPct)
	u32(EnvMaxNumSeqs, 1, 65535, &env.MaxNumSeqs)
	u32(EnvMaxInflightPerEP, 0, 99999, &env.MaxInflightPerEP)

	if v := get(EnvQueueDepthPerEP); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		switch {
		case err != nil:
			errs = append(errs, &EnvError{Var: EnvQueueDepthPerEP, Value: v, Problem: "want a non-negative integer (values above 64 are clamped to 64)"})
		case n > MaxQueueDepthPerEP:
			warns = append(warns, fmt.Sprintf("%s=%s is above the parked-queue capacity; clamped to %d", EnvQueueDepthPerEP, v, MaxQueueDepthPerEP))
			env.QueueDepthPerEP = MaxQueueDepthPerEP
		default:
			env.QueueDepthPerEP = uint32(n)
		}
	}

	var parkSec uint64
	uintVar(EnvMaxParkSec, 0, 99999, &parkSec)
	env.MaxPark = time.Duration(parkSec) * time.Second
	uintVar(EnvMaxTotalInflight, 0, 1999999999, &env.MaxTotalInflight)
	u32(EnvOriginErrThreshold, 0, 1000, &env.OriginErrThreshold)
	u32(EnvOffloadWeightPct, 0, 100, &env.OffloadWeightPct)
	u32(EnvCriticalHeadroom, 0, 100, &env.CriticalHeadroomPct)
	for _, b := range []struct {
		name string
		dst  *bool
	}{{EnvPredictionDemote, &env.PredictionDemote}, {EnvLoRAAffinity, &env.LoRAAffinity}, {EnvLoRARuntimeLoad, &env.LoRARuntimeLoad}, {EnvMissSettle, &env.MissSettle}} {
		if v := get(b.name); v != "" {
			on, ok := parseBool(v)
			if !ok {
				errs = append(errs, &EnvError{Var: b.name, Value: v, Problem: "want 1/true/on/yes or 0/false/off/no"})
			} else {
				*b.dst = on
			}
		}
	}

	return env, warns, errors.Join(errs...)
}

// parseBool accepts LoxiLB's spellings: 1/true/on/yes and 0/false/off/no, in
// any case.
func parseBool(v string) (on, ok bool) {
	switch strings.ToLower(v) {
	case "1", "true", "on", "yes":
		return true, true
	case "0", "false", "off", "no":
		return false, true
	}
	return false, false
}
