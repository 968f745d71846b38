package ladder

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Errors Decide returns for inputs it cannot route at all (a runtime bug,
// not a client error). Test with errors.Is.
var (
	// ErrNilInput: the request or the snapshot is nil.
	ErrNilInput = errors.New("ladder: nil request or snapshot")
	// ErrViewMismatch: the snapshot does not hold one view per endpoint.
	ErrViewMismatch = errors.New("ladder: snapshot views do not match the rule's endpoints")
)

// DefaultPersistMaxEntries caps the persist selector's table.
const DefaultPersistMaxEntries = 65536

// RouterConfig sizes a Router's own tables. Zero fields take defaults.
type RouterConfig struct {
	// Trie bounds the Tier-1 trie (only built for cache-aware rules).
	Trie TrieConfig
	// PersistMaxEntries caps the persist selector's (sel:3) table; 0 means
	// DefaultPersistMaxEntries.
	PersistMaxEntries int
}

// Router is one rule's decision core: its immutable spec, the resolved env
// knobs, and the little state the ladder keeps between requests (the Tier-2
// and decode round-robin counters, the cold-start tick, the Tier-1 trie, the
// single-pool selector's state) plus fixed scratch space.
//
// Ownership: a Router is not safe for concurrent use. Exactly one goroutine
// — the service's router actor — calls Decide, Resume, Learn and
// RemoveEndpoint; every field below is mutated by that owner only. A rule
// change builds a new Router (state restarts, as it does in LoxiLB when a
// rule is re-added).
type Router struct {
	svc ServiceSpec
	eps []EndpointSpec
	env Env
	cfg RouterConfig

	// Resolved knobs (immutable after NewRouter).
	law            LawParams
	relief         bool
	seedN          uint64
	coldFloor      uint32
	minMatchTokens uint32
	headroomPct    uint32
	maxNumSeqs     uint32
	offloadPct     uint32
	maxInflight    uint32
	headroomCap    uint32 // maxInflight plus the headroom (Env.CriticalHeadroomPct)
	queueDepth     uint32
	maxPark        time.Duration
	maxTotal       uint64

	// Role sets and fixed lists (immutable).
	prefill, decode, role0 EndpointSet
	primaries, backups     EndpointSet
	primaryList            []int
	backupList             []int

	// Mutable decision state, owned by the router actor.
	prefillRR uint64 // Tier-2 tie-break counter
	decodeRR  uint64 // decode tie-break counter
	coldTick  uint64 // Tier-1.5 hits seen, for cold-start seeding
	missTick  uint64 // Tier-1.5 misses placed by KV usage, for turns among ties
	// settleFill is the fleet's in-flight fill at Tier-1.5 misses, averaged
	// over SettleFillWindow (settle.go).
	settleFill fillAverage
	// autoFactor is the auto law's current (1+ε)·100 (AutoFactor).
	autoFactor uint32
	trie       *Trie
	sel        Selector
	// pending remembers recent placements by prefix key (headroom law
	// with Tier 1.5 on only; nil otherwise).
	pending *pendingTable
	// foot remembers which prefix keys each endpoint served lately and
	// their sizes (headroom law with Tier 1.5 on only; nil otherwise).
	foot *footprintTable
	// ttft is each endpoint's TTFT model and its check (ttft.go).
	ttft []ttftEndpoint
	// ttftFleet learns every endpoint's TTFTs: an endpoint predicts with
	// it until its own model is trained.
	ttftFleet TTFTModel

	// Scratch, overwritten by every decision.
	cands [MaxEndpoints]Candidate
	fleet [MaxEndpoints]Candidate
	caps  [MaxEndpoints]uint64
	room  [MaxEndpoints]uint32
	fp    [MaxEndpoints]uint64
	pool  Pool
}

// NewRouter validates the rule and the env and builds its Router.
func NewRouter(svc ServiceSpec, eps []EndpointSpec, env Env, cfg RouterConfig) (*Router, error) {
	if err := errors.Join(ValidateRule(&svc, eps), env.Validate()); err != nil {
		return nil, fmt.Errorf("ladder: rule %q: %w", svc.Name, err)
	}
	return build(svc, append([]EndpointSpec(nil), eps...), env, cfg), nil
}

// Fresh returns a new Router for r's rule, env and config with none of r's
// decision state, as NewRouter would build it, without validating again:
// what a restarted owner starts from.
func (r *Router) Fresh() *Router { return build(r.svc, slices.Clone(r.eps), r.env, r.cfg) }

// build resolves a validated rule's knobs into a Router with fresh state;
// the Router owns eps.
func build(svc ServiceSpec, eps []EndpointSpec, env Env, cfg RouterConfig) *Router {
	r := &Router{
		svc: svc,
		eps: eps,
		env: env,
		cfg: cfg,
		law: LawParams{Mode: env.LBMode, FactorPct: env.MeanLoadFactorPct, Lambda: env.LoadPenalty},

		autoFactor: AutoFactorMax,
		ttft:       make([]ttftEndpoint, len(eps)),
	}
	switch env.SpillRelief {
	case TriOn:
		r.relief = true
	case TriAuto:
		r.relief = svc.KVExactMode == KVSinglePool
	}
	r.seedN = uint64(env.ColdStartSeedN)
	r.coldFloor = max(env.ColdStartMinBlocks, 1)
	r.minMatchTokens = env.MinMatchTokens
	r.headroomPct, r.maxNumSeqs = env.HeadroomPct, env.MaxNumSeqs
	r.offloadPct = env.OffloadWeightPct
	r.maxInflight = env.MaxInflightPerEP
	if a := svc.Admission.MaxInflightPerEP; a > 0 {
		r.maxInflight = uint32(a)
	}
	if r.maxInflight > 0 {
		r.headroomCap = r.maxInflight + max(1, r.maxInflight*env.CriticalHeadroomPct/100)
		if env.CriticalHeadroomPct == 0 {
			r.headroomCap = r.maxInflight
		}
	}
	r.queueDepth = env.QueueDepthPerEP
	if a := svc.Admission.QueueDepthPerEP; a > 0 {
		r.queueDepth = uint32(a)
	}
	r.maxPark = env.MaxPark
	if a := svc.Admission.MaxPark; a > 0 {
		r.maxPark = a
	}
	r.maxTotal = env.MaxTotalInflight
	if a := svc.Admission.MaxTotalInflight; a > 0 {
		r.maxTotal = uint64(a)
	}
	for i := range r.eps {
		switch r.eps[i].Role {
		case RolePrefill:
			r.prefill = r.prefill.With(i)
		case RoleDecode:
			r.decode = r.decode.With(i)
		default:
			r.role0 = r.role0.With(i)
		}
		if r.eps[i].Backup {
			r.backups = r.backups.With(i)
			r.backupList = append(r.backupList, i)
		} else {
			r.primaries = r.primaries.With(i)
			r.primaryList = append(r.primaryList, i)
		}
	}
	if svc.CacheAware {
		r.trie = NewTrie(cfg.Trie)
	}
	if env.LBMode.HeadroomLaw() && svc.KVExactMode != KVOff {
		r.pending = new(pendingTable)
		r.foot = new(footprintTable)
	}
	if !svc.PDDisagg {
		pc := cfg.PersistMaxEntries
		if pc <= 0 {
			pc = DefaultPersistMaxEntries
		}
		r.sel = newSelector(&r.svc, r.eps, pc)
	}
	return r
}

// Spec returns the rule's service spec.
func (r *Router) Spec() ServiceSpec { return r.svc }

// NumEndpoints returns the rule's endpoint count (the snapshot length
// Decide expects).
func (r *Router) NumEndpoints() int { return len(r.eps) }

// Endpoint returns endpoint i's spec.
func (r *Router) Endpoint(i int) EndpointSpec { return r.eps[i] }

// MaxInflightPerEP is the per-endpoint admission cap in force: the rule's
// Admission.MaxInflightPerEP, else the env's; 0 = no cap.
func (r *Router) MaxInflightPerEP() uint32 { return r.maxInflight }

// CapFor is the per-endpoint in-flight cap a request is held to (0:
// admission is off): the cap, or the cap plus the headroom
// (Env.CriticalHeadroomPct of it, at least one more) for a critical
// request and for a non-sheddable request whose tenant holds less than
// its fair share of the class's slots (underShare, FlowQueue.UnderShare
// over Slots). The headroom keeps the critical class and the tenants that
// do not flood from waiting for a flooding tenant's requests to finish.
// A slot freed on an endpoint goes to a parked request only while the
// endpoint is under that request's cap.
func (r *Router) CapFor(c Class, underShare bool) uint32 {
	if c.Index() == 0 || underShare && !c.Sheddable() {
		return r.headroomCap
	}
	return r.maxInflight
}

// Slots is the in-flight capacity admission shares out: the cap times the
// prefill endpoints (0 when admission is off).
func (r *Router) Slots() uint32 {
	return r.maxInflight * uint32(r.prefill.Count())
}

// Env returns the env the router resolved its knobs from.
func (r *Router) Env() Env { return r.env }

// Trie returns the Tier-1 trie, or nil when the rule is not cache-aware.
func (r *Router) Trie() *Trie { return r.trie }

// Decide runs the ladder for one request: the P/D ladder for a P/D rule,
// the single-pool path otherwise. now is the decision time (warmup guard,
// park deadline, persist TTL); req and snap are read, never retained. The
// error is non-nil only for unusable input (nil pointers, a snapshot whose
// length differs from the rule's endpoint count); the Decision is then
// unavailable with ReasonNoHealthyBackend. Steady-state calls do not
// allocate.
func (r *Router) Decide(now time.Time, req *Request, snap *Snapshot) (Decision, error) {
	if err := r.checkInput(req, snap); err != nil {
		d := newDecision()
		d.Unavailable = ReasonNoHealthyBackend
		return d, err
	}
	var d Decision
	if r.svc.PDDisagg {
		d = r.decidePD(now, req, snap)
	} else {
		d = r.decidePool(now, req, snap)
	}
	if d.Available() {
		d.TTFT = r.predictFor(snap.Endpoints, d.Prefill, r.PromptBlocks(req))
	}
	if r.pending != nil && req.HasPrefixHash && d.Available() {
		r.pending.note(now, req.PrefixHash, d.Prefill)
		r.foot.note(now, req.PrefixHash, d.Prefill, r.PromptBlocks(req))
	}
	return d, nil
}

// Resume decides for a request that admission parked on endpoint ep, now
// that ep has capacity: the prefill is ep (Tier "resume") and the decode is
// selected as usual. If ep can no longer serve (not a prefill endpoint, or
// excluded) the full ladder runs again instead, so the request may park
// again, be shed, or go elsewhere.
func (r *Router) Resume(now time.Time, req *Request, snap *Snapshot, ep int) (Decision, error) {
	d, err := r.resume(now, req, snap, ep)
	if err == nil && d.Available() {
		d.TTFT = r.predictFor(snap.Endpoints, d.Prefill, r.PromptBlocks(req))
	}
	return d, err
}

// Learn teaches the Tier-1 trie that prompt was routed to prefill endpoint
// ep — the trie tracks what llb routed, not what vLLM holds. LoxiLB inserts
// after Tier-1 hits and Tier-2 picks; llb's runtime inserts every admitted
// request (whatever tier chose it) while it still owns the prompt bytes.
// No-op for rules without pd_cache_aware_mode. It copies what it keeps of
// prompt.
func (r *Router) Learn(prompt []byte, ep int) {
	if r.trie == nil || ep < 0 || ep >= len(r.eps) || r.eps[ep].Role != RolePrefill {
		return
	}
	r.trie.Insert(prompt, ep)
}

// RemoveEndpoint forgets everything the router learned about endpoint ep
// (trie entries, persist pins, its footprint) — call it when ep's breaker
// trips. Session pins live in the session shards: evict them there
// (EvictEndpoint).
func (r *Router) RemoveEndpoint(ep int) {
	if r.trie != nil {
		r.trie.RemoveEndpoint(ep)
	}
	if r.foot != nil {
		r.foot.removeEndpoint(ep)
	}
	if ps, ok := r.sel.(*persistSelector); ok {
		ps.removeEndpoint(ep)
	}
}

func (r *Router) checkInput(req *Request, snap *Snapshot) error {
	if req == nil || snap == nil {
		return ErrNilInput
	}
	if len(snap.Endpoints) != len(r.eps) {
		return fmt.Errorf("%w: %d views for %d endpoints", ErrViewMismatch, len(snap.Endpoints), len(r.eps))
	}
	return nil
}

// effectiveCapacities fills r.caps for every member of set: num_gpu_blocks
// clamped to [1, CapacityClampMax]; an unknown (0) capacity takes the mean
// of the set's known capacities (1 when none is known); then, when a
// controller instruction is present, × min(CtrlWeight,100)/100, floored at 1.
func (r *Router) effectiveCapacities(views []EndpointView, set EndpointSet) {
	var sum, known uint64
	for i := set.next(0); i >= 0; i = set.next(i + 1) {
		if c := views[i].KVCapacityBlocks; c > 0 {
			sum += uint64(min(c, CapacityClampMax))
			known++
		}
	}
	unknown := uint64(1)
	if known > 0 {
		unknown = max(sum/known, 1)
	}
	for i := set.next(0); i >= 0; i = set.next(i + 1) {
		c := unknown
		if v := views[i].KVCapacityBlocks; v > 0 {
			c = uint64(min(v, CapacityClampMax))
		}
		if views[i].Ctrl != CtrlNone {
			w := uint64(min(views[i].CtrlWeight, 100))
			c = max(c*w/100, 1)
		}
		r.caps[i] = c
	}
}

// foldMasks computes the excluded and draining sets from the views.
func foldMasks(views []EndpointView) (excl, drain EndpointSet) {
	for i := range views {
		switch {
		case views[i].excluded():
			excl = excl.With(i)
		case views[i].draining():
			drain = drain.With(i)
		}
	}
	return excl, drain
}

// PromptBlocks is req's prompt length in the rule's KV blocks: its
// KV.PromptBlocks, else its token count over the block size; 0 when the
// request carries neither or the rule has no block size (Tier 1.5 off).
func (r *Router) PromptBlocks(req *Request) uint32 {
	if req.KV.PromptBlocks > 0 || r.svc.KVBlockSize <= 0 {
		return req.KV.PromptBlocks
	}
	return req.KV.PromptTokens / uint32(r.svc.KVBlockSize)
}

// DecodeBlocks is the KV blocks req's completion fills at most:
// ⌈DecodeTokens / block size⌉, 0 when either is unknown.
func (r *Router) DecodeBlocks(req *Request) uint32 {
	bs := uint32(max(r.svc.KVBlockSize, 0))
	if bs == 0 {
		return 0
	}
	return req.KV.DecodeTokens/bs + min(req.KV.DecodeTokens%bs, 1)
}
