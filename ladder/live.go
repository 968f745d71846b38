package ladder

import "time"

// CtrlState is the optional external controller's per-endpoint instruction.
type CtrlState uint8

// Controller states (lockstep with loxilb.aictrl.v1 EpState).
const (
	// CtrlNone: no controller instruction; CtrlWeight is ignored (neutral).
	CtrlNone CtrlState = iota
	// CtrlActive: serve normally; CtrlWeight scales capacity.
	CtrlActive
	// CtrlDraining: no new work; Tier-0 pinned work still goes there.
	CtrlDraining
	// CtrlDisabled: folded into the excluded mask.
	CtrlDisabled
)

// EndpointView is the runtime's live view of one endpoint for one decision.
// Views are indexed like the rule's endpoints. The runtime fills the raw
// signals; Decide folds them:
//
//	excluded = Down || BreakerOpen || Ctrl == CtrlDisabled   (never selected)
//	draining = Draining || Ctrl == CtrlDraining              (Tier-0 pins only)
//
// Excluded wins over draining.
type EndpointView struct {
	// ActiveConns is llb's own in-flight count on the endpoint (requests) —
	// the "load" of every law here.
	ActiveConns uint32
	// QueuedRequests is the engine's queue depth as last scraped (requests);
	// 0 when unknown. The runtime substitutes a neutral value for stale data.
	QueuedRequests uint32
	// SwapPressure is the engine's swapped-request count; 0 when unknown.
	// Only Tier 2's capacity-blend arm (sel:9) reads it.
	SwapPressure uint32
	// Down is the probe state: true after the probe marked it inactive.
	Down bool
	// BreakerOpen is true while the endpoint's circuit breaker is OPEN.
	BreakerOpen bool
	// Draining is a local graceful drain: no new work, pinned work allowed.
	Draining bool
	// Ctrl is the controller's instruction; CtrlNone without a controller.
	Ctrl CtrlState
	// CtrlWeight (0–100, 100 neutral, larger clamps to 100) scales the
	// endpoint's KV capacity when Ctrl is not CtrlNone. 0 leaves the
	// smallest positive share: removal is a state, not a weight.
	CtrlWeight uint8
	// KVCapacityBlocks is the engine's advertised num_gpu_blocks; 0 means
	// unknown and is treated as the mean of the known capacities of the
	// eligible set (so an unknown endpoint is neither favoured nor starved).
	// Clamped to [1, 8e6].
	KVCapacityBlocks uint32
	// InventoryBlocks is how many blocks the endpoint's mirrored inventory
	// holds (cold-start seeding).
	InventoryBlocks uint32
	// Overlap is how many leading blocks of this request's hash chain the
	// endpoint holds in any tier it mirrors (GPU memory, or an offload tier
	// such as CPU memory): the prefix its engine can reuse. Ignored on
	// decode endpoints; clamped to the prompt's block count.
	Overlap uint32
	// OverlapOffloaded is how many of Overlap's blocks the endpoint holds
	// only in an offload tier (vLLM's KV offloading to CPU memory): the
	// engine loads them instead of recomputing them, which costs more than a
	// GPU hit. Tier 1.5 counts each Env.OffloadWeightPct percent of a block
	// (see effectiveOverlap in kv.go). Values above Overlap count as Overlap.
	OverlapOffloaded uint32
	// KVDistrusted is set while the endpoint's cache predictions keep
	// disagreeing with the cached tokens its engine reports (TruthTracker):
	// Tier 1.5 treats its overlap as 0, and reports prediction_mismatch when
	// that leaves it without a candidate. Tiers 0, 1 and 2 are unaffected.
	KVDistrusted bool
	// KVUsedBlocks is llb's estimate of the engine's KV blocks in use by
	// running and waiting requests: vllm:kv_cache_usage_perc ×
	// num_gpu_blocks at the last scrape, plus the blocks of the requests
	// llb sent it since (their uncached prompt blocks and, on a single
	// pool, the blocks their completions will fill: KVInput.DecodeTokens),
	// minus those of the requests whose leg there ended since. Meaningful
	// only with KVUsageKnown; the headroom law reads it.
	KVUsedBlocks uint32
	// KVUsageKnown is true once a scrape reported the engine's KV usage.
	KVUsageKnown bool
	// PrefillBlocks is the uncached prompt blocks (prompt blocks − the
	// overlap at the decision) of the requests llb sent the endpoint that
	// have not answered a first byte yet: the prefill work queued ahead of
	// a new request. The headroom law reads it.
	PrefillBlocks uint32
	// Parked is the length of the endpoint's parked-request queue (admission).
	Parked uint32
}

func (v *EndpointView) excluded() bool {
	return v.Down || v.BreakerOpen || v.Ctrl == CtrlDisabled
}

func (v *EndpointView) draining() bool {
	return v.Draining || v.Ctrl == CtrlDraining
}

// Snapshot is the live state Decide reads: one view per rule endpoint, plus
// the service-wide counters.
type Snapshot struct {
	// Endpoints holds one view per rule endpoint, same order and length.
	Endpoints []EndpointView
	// TotalInflight is the in-flight plus parked requests the global valve
	// (LLB_PD_MAX_TOTAL_INFLIGHT) compares against.
	TotalInflight uint64
	// ParkedByClass counts the parked requests by class (Class.Index): a
	// request that finds every queue full displaces one of a lower class.
	ParkedByClass [NumClasses]uint32
}

// parkedBelow reports whether a request of a class lower than c is parked.
func (s *Snapshot) parkedBelow(c Class) bool {
	for i := c.Index() + 1; i < NumClasses; i++ {
		if s.ParkedByClass[i] > 0 {
			return true
		}
	}
	return false
}

// Pin is a Tier-0 session's pinned endpoint pair. Decode is -1 when none.
type Pin struct {
	// Prefill is the pinned prefill endpoint.
	Prefill int
	// Decode is the pinned decode endpoint, or -1.
	Decode int
}

// SessionLookup is the session shard's answer for the request's key.
type SessionLookup struct {
	// Found is true when the shard holds a live (unexpired) pin.
	Found bool
	// Pin is the pinned pair when Found.
	Pin Pin
}

// KVInput is what the runtime computed for Tier 1.5 before deciding.
type KVInput struct {
	// PromptBlocks is the prompt's full-block count (the hash chain length).
	// When 0 it is derived from PromptTokens / block size; when still 0 the
	// best overlap stands in.
	PromptBlocks uint32
	// PromptTokens is the prompt's token count.
	PromptTokens uint32
	// DecodeTokens is the most tokens the completion may produce (the
	// request's max_tokens); 0 when unbounded or unknown. The blocks they
	// fill count in the endpoint's KV usage estimate from the decision on
	// (Router.DecodeBlocks).
	DecodeTokens uint32
	// Guard is set when the runtime could not produce a chain (a reason for
	// which IsRuntimeGuard is true); Tier 1.5 then falls through with it.
	// ReasonNone when the chain and overlaps are valid.
	Guard Reason
}

// Request is one request's routing input, built by the gateway.
type Request struct {
	// SessionKey is the Tier-0 key (see SessionKeyFor); "" when none.
	SessionKey string
	// Session is the session shard's lookup result for SessionKey.
	Session SessionLookup
	// Prompt is the prompt text the Tier-1 trie matches (bytes, no
	// tokenization). Not retained by Decide.
	Prompt []byte
	// PrefixHash is the request's prefix hash (PrefixHash helper), the
	// first key of the CHWBL and modulo selectors; valid when HasPrefixHash.
	PrefixHash uint64
	// HasPrefixHash says whether PrefixHash was computed.
	HasPrefixHash bool
	// ConvHash is the hash of the conversation ID (e.g. XXH64String), the
	// second CHWBL/modulo key; valid when HasConvHash.
	ConvHash uint64
	// HasConvHash says whether ConvHash was computed.
	HasConvHash bool
	// ClientHash is the hash selector's (sel:1) key, e.g. of the 5-tuple or
	// client address.
	ClientHash uint64
	// ClientKey is the persist selector's (sel:3) key: the client address or
	// the session_header_name value. "" disables pinning for the request.
	ClientKey string
	// KV holds the Tier-1.5 inputs.
	KV KVInput
	// Class is the request's priority class: admission refuses a
	// sheddable request instead of parking it, and a request that finds
	// every queue full displaces a parked one of a lower class (or of its
	// own class, see OutranksParked).
	Class Class
	// UnderShare is set when the request's tenant holds less than its fair
	// share of its class's slots (FlowQueue.UnderShare): the request may
	// use the headroom above the cap (Router.CapFor).
	UnderShare bool
	// OutranksParked is set when a parked request of its own class would
	// leave the queue after this one (FlowQueue.Outranks: the youngest of
	// the tenant with the most service): when every queue is full the
	// request displaces it rather than being shed, so a flooding tenant's
	// backlog cannot keep a fair tenant out of the queues.
	OutranksParked bool
	// TTFTObjective is the time left, at the decision, for the request's
	// first token (its TTFT objective minus the time it already spent);
	// 0: none. The ladder prefers an endpoint predicted to meet it and
	// sheds a sheddable request no endpoint is predicted to meet
	// (objective.go).
	TTFTObjective time.Duration
}
