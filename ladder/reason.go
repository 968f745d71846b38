package ladder

import "fmt"

// Reason says why a stage fell through (or, for Decision.Unavailable, why
// nothing could serve). Reasons are stable snake_case strings: they appear in
// the X-Llb-Route header, logs and metric labels.
type Reason uint8

// Reasons, grouped by the stage that reports them.
const (
	ReasonNone Reason = iota

	// Admission.
	ReasonAllCapped   // every eligible prefill endpoint is at its in-flight cap
	ReasonQueuesFull  // ... and every parked queue is full too
	ReasonGlobalValve // the total in-flight bound is reached
	ReasonSheddable   // every eligible endpoint is capped and the request is sheddable: refused, not parked
	ReasonDisplaced   // the request was parked, and a request of a higher class, or of a tenant of its class with less service, took its place in a full queue
	// ReasonTTFTObjective: the request is sheddable and no eligible
	// endpoint is predicted to meet its TTFT objective: refused at once.
	ReasonTTFTObjective

	// Tier 0.
	ReasonNoSessionKey            // the request has no stickiness key
	ReasonSessionMiss             // the key has no (live) pin
	ReasonSessionEvictedUnhealthy // the pinned prefill is down/CB-open/masked; evict the key
	ReasonSessionPinAtCap         // the pinned prefill is at its admission cap (pin kept)

	// Tier 1.
	ReasonCacheAwareOff           // pd_cache_aware_mode is off
	ReasonEmptyPrefix             // no prompt bytes to match
	ReasonImbalanceGuard          // max−min active_conns > pd_balance_abs_threshold
	ReasonTrieMiss                // no routed prefix shares the prompt's start
	ReasonMatchRateBelowThreshold // matched span < pd_cache_threshold % of the prompt
	ReasonTrieWinnerExcluded      // the trie's endpoint is not eligible now

	// Tier 1.5 guards (the runtime may report the first six itself).
	ReasonKVOff          // kvExactMode is 0
	ReasonWarmup         // within kvWarmupSec of the rule's start
	ReasonTokenize       // the runtime could not tokenize the prompt
	ReasonHashContract   // the runtime could not hash under the contract
	ReasonEmptyText      // no prompt text to tokenize
	ReasonModelEmpty     // no model name to pick a tokenizer
	ReasonNotReady       // the inventory feeds are not ready
	ReasonEmptyInventory // no candidate holds any block
	ReasonNoOverlap      // every candidate's overlap is 0 (a genuine miss)
	ReasonMinMatch       // best overlap is below LLB_KV_MIN_MATCH_TOKENS
	// ReasonPredictionMismatch: the endpoints whose overlap would have
	// decided are demoted (EndpointView.KVDistrusted) because their engines
	// keep reporting other cached tokens than llb predicted.
	ReasonPredictionMismatch

	// Shared by several stages.
	ReasonNoCandidate // the stage has no endpoint of the right role at all
	ReasonExcluded    // endpoints of the right role exist but none is eligible

	// Decode selection.
	ReasonDecodePinInvalid  // the session's decode pin is unusable; min-load instead
	ReasonDecodeUnavailable // every decode endpoint is excluded or draining

	// Terminal unavailability (HTTP 503 error codes).
	ReasonPDPoolUnavailable // P/D rule: no prefill/decode pair and no rescue endpoint
	ReasonNoHealthyBackend  // single pool: no available endpoint
	// ReasonModelNotServed: no endpoint of the rule serves the request's
	// model (every endpoint's /v1/models is known and none lists it); the
	// client gets vLLM's own 404.
	ReasonModelNotServed

	reasonCount
)

var reasonNames = [reasonCount]string{
	ReasonNone:                    "none",
	ReasonAllCapped:               "all_capped",
	ReasonQueuesFull:              "queues_full",
	ReasonGlobalValve:             "global_valve",
	ReasonSheddable:               "sheddable",
	ReasonDisplaced:               "displaced",
	ReasonTTFTObjective:           "ttft_objective",
	ReasonNoSessionKey:            "no_session_key",
	ReasonSessionMiss:             "session_miss",
	ReasonSessionEvictedUnhealthy: "session_evicted_unhealthy",
	ReasonSessionPinAtCap:         "session_pin_at_cap",
	ReasonCacheAwareOff:           "cache_aware_off",
	ReasonEmptyPrefix:             "empty_prefix",
	ReasonImbalanceGuard:          "imbalance_guard",
	ReasonTrieMiss:                "trie_miss",
	ReasonMatchRateBelowThreshold: "match_rate_below_threshold",
	ReasonTrieWinnerExcluded:      "trie_winner_excluded",
	ReasonKVOff:                   "kv_off",
	ReasonWarmup:                  "warmup",
	ReasonTokenize:                "tokenize",
	ReasonHashContract:            "hash_contract",
	ReasonEmptyText:               "empty_text",
	ReasonModelEmpty:              "model_empty",
	ReasonNotReady:                "not_ready",
	ReasonEmptyInventory:          "empty_inventory",
	ReasonNoOverlap:               "no_overlap",
	ReasonMinMatch:                "min_match",
	ReasonPredictionMismatch:      "prediction_mismatch",
	ReasonNoCandidate:             "no_candidate",
	ReasonExcluded:                "excluded",
	ReasonDecodePinInvalid:        "decode_pin_invalid",
	ReasonDecodeUnavailable:       "decode_unavailable",
	ReasonPDPoolUnavailable:       "pd_pool_unavailable",
	ReasonNoHealthyBackend:        "no_healthy_backend",
	ReasonModelNotServed:          "model_not_served",
}

// String returns the reason's snake_case name, or "reason(N)" for a value
// outside the enum.
func (r Reason) String() string {
	if r < reasonCount {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// IsRuntimeGuard reports whether the runtime may pass r in KVInput.Guard.
func (r Reason) IsRuntimeGuard() bool {
	switch r {
	case ReasonWarmup, ReasonTokenize, ReasonHashContract, ReasonEmptyText, ReasonModelEmpty, ReasonNotReady:
		return true
	}
	return false
}

// Tier names the stage that decided, or that a trace step belongs to.
type Tier uint8

// Stages in ladder order.
const (
	TierNone      Tier = iota // nothing decided (admission refused, or 503)
	TierAdmission             // the admission gate (trace steps; parked/shed decisions)
	Tier0                     // session stickiness
	Tier1                     // radix-trie prefix affinity
	Tier15                    // KV-exact block-hash routing
	Tier2                     // min-load fallback
	TierDecode                // decode selection (trace steps only)
	TierRescue                // any-healthy rescue over role-0 endpoints
	TierSelector              // a single pool's rule selector
	TierResume                // a parked request resumed on its queue's endpoint
	tierCount
)

var tierNames = [tierCount]string{"none", "admission", "0", "1", "1.5", "2", "decode", "rescue", "sel", "resume"}

// String returns "0", "1", "1.5", "2", "rescue", "sel", ... .
func (t Tier) String() string {
	if t < tierCount {
		return tierNames[t]
	}
	return fmt.Sprintf("tier(%d)", uint8(t))
}

// Flags are the deliberate trade-offs a decision made, for metrics and the
// route header.
type Flags uint32

// Decision flags.
const (
	// FlagSpill: the load law (or relief) moved the pick to an endpoint
	// holding fewer overlapping blocks than the overlap winner.
	FlagSpill Flags = 1 << iota
	// FlagRelief: fleet-wide pressure relief moved an over-cap pick to the
	// least-loaded under-cap eligible endpoint (usually a zero-overlap one,
	// so FlagSpill is usually set too).
	FlagRelief
	// FlagColdSeed: the Tier-1.5 hit was diverted to a cold endpoint.
	FlagColdSeed
	// FlagRescue: no P/D pair; a role-0 endpoint serves the request.
	FlagRescue
	// FlagRRTie: the prefill (or single-pool) pick was a genuine tie broken
	// by the round-robin counter.
	FlagRRTie
	// FlagDecodeRRTie: the decode pick was a genuine tie broken by the
	// decode round-robin counter.
	FlagDecodeRRTie
	// FlagExcludedWinner: an excluded endpoint had a strictly higher overlap
	// than the Tier-1.5 pick (the excluded_mask did its job).
	FlagExcludedWinner
	// FlagBackup: a single pool fell back to its backup endpoints.
	FlagBackup
	// FlagBoundWalk: a CHWBL selector walked past its home endpoint because
	// that endpoint was at its load bound or unavailable.
	FlagBoundWalk
	// FlagSaturated: hard mode found every candidate over its cap.
	FlagSaturated
	// FlagPending: a Tier-1.5 miss followed the endpoint its prefix key was
	// sent to moments ago, whose blocks the inventory does not show yet
	// (headroom law).
	FlagPending
	// FlagLeastKV: a Tier-1.5 miss with no recent placement went to the
	// endpoint with the fewest KV blocks in use (headroom law).
	FlagLeastKV
	// FlagHeld: the headroom law kept the overlap winner although the cap
	// said spill: it had room, and spilling would not have saved enough
	// prefill work (HoldWinner).
	FlagHeld
	// FlagRefit: the headroom law moved the pick off an endpoint whose
	// recent prefixes need more blocks than its cache holds (it had evicted
	// part of this prompt) to one where the prompt fits (refit).
	FlagRefit
	// FlagBalance: the headroom law moved the pick to an endpoint where
	// the request joins more than BalanceMarginBlocks less prefill work
	// (rebalance).
	FlagBalance
	// FlagObjective: the pick was predicted to miss the request's TTFT
	// objective; it moved to an endpoint that runs the request at once and
	// is predicted to meet it.
	FlagObjective
	// FlagObjectiveMiss: no eligible endpoint was predicted to meet the
	// request's TTFT objective; it kept the ladder's pick.
	FlagObjectiveMiss
	// FlagFanoutLate: some inventory or session replies the router asked
	// for missed the decision timeout and counted as misses (overlap 0,
	// no pin), so a no_overlap or session_miss beside it may be a late
	// reply, not a genuine miss. The router sets it; the ladder never does.
	FlagFanoutLate
	// FlagPanic: no endpoint was up, so the decision was made among the
	// endpoints down by timeouts alone (slow, not dead: panic routing). The
	// router sets it; the ladder never does.
	FlagPanic
)

var flagNames = [...]string{"spill", "relief", "cold_seed", "rescue", "rr_tie", "decode_rr_tie", "excluded_winner", "backup", "bound_walk", "saturated", "pending", "least_kv", "held", "refit", "balance", "objective", "objective_miss", "fanout_late", "panic"}

// Has reports whether every flag in f2 is set.
func (f Flags) Has(f2 Flags) bool { return f&f2 == f2 }

// Admission is the admission gate's outcome.
type Admission uint8

// Admission outcomes.
const (
	// Admit: the gate is off or let the request through (the only outcome
	// that also selects endpoints).
	Admit Admission = iota
	// Park: hold the request on Decision.ParkOn's queue (hold-don't-drop);
	// resume it with Router.Resume when that endpoint frees capacity.
	Park
	// Shed: answer a retriable 429 (pd_overloaded).
	Shed
	// Refuse: the global valve is closed; refuse the new request.
	Refuse
)

var admissionNames = [...]string{"admit", "park", "shed", "refuse"}

// String returns "admit", "park", "shed" or "refuse".
func (a Admission) String() string {
	if int(a) < len(admissionNames) {
		return admissionNames[a]
	}
	return fmt.Sprintf("admission(%d)", uint8(a))
}
