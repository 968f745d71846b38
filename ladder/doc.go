// Package ladder is llb's routing-decision core: LoxiLB's routing hierarchy
// (spec/routing-hierarchy.txt) as pure, synchronous Go. Given a rule, the
// live state of its endpoints and one request, it decides which endpoint(s)
// serve the request and records why. It has no goroutines, channels, clock,
// randomness, I/O or logging: time comes in as an argument, and every
// decision is a value the caller acts on.
//
// # The ladder
//
// A P/D rule (pd_disagg_mode) runs, in order:
//
//	excluded mask     down | CB-open | controller DISABLED: never selected
//	controller fold   DRAINING endpoints serve Tier-0 pinned work only
//	admission         per-endpoint in-flight caps → admit, park, shed (429);
//	                  the global valve → refuse. Off by default (a no-op).
//	Tier 0            session pin (prefill, decode); a bad pin is evicted
//	Tier 1            radix trie of routed prompt bytes (pd_cache_aware_mode)
//	Tier 1.5          KV-exact overlap through the unified law
//	                  (hard | soft | adaptive | adaptive-soft | off), spill
//	                  relief, cold-start seeding (kvExactMode 1)
//	Tier 2            min-load (active_conns + queued), RR on genuine ties;
//	                  capacity-blend arm when the rule's sel is 9
//	decode selection  the pinned decode if usable, else min-load + RR
//	rescue            least-loaded role-0 endpoint, else 503
//	                  pd_pool_unavailable
//
// A single-pool rule has no Tier 0, Tier 1 or admission: with kvExactMode 3,
// Tier 1.5 scores every available endpoint (spill relief on by default) and a
// miss falls to the rule's selector — round robin (0), hash (1),
// priority/WRR (2), persist (3), least-conn (4), CHWBL (8), modulo (9) or
// weighted CHWBL (10). Backup endpoints serve only when no primary is
// available; nothing available is 503 no_healthy_backend.
//
// Decision.Trace lists each stage that fell through with its Reason
// (session_miss, imbalance_guard, match_rate_below_threshold, warmup,
// empty_inventory, no_overlap, min_match, ...); Decision.Flags records the
// deliberate trade-offs (spill, relief, cold_seed, rescue, rr_tie, ...).
// Decision.String is the X-Llb-Route header form:
//
//	tier=1.5 prefill=2 decode=4 via=session_miss,match_rate_below_threshold spill
//
// # Who owns what
//
// Everything here that changes is a plain struct with exactly one owner
// goroutine; nothing locks.
//
//   - Router (one per rule) — owned by the service's router actor. It holds
//     the Tier-2 and decode round-robin counters, the cold-start tick, the
//     Tier-1 Trie, the single-pool selector's state (WRR weights, persist
//     table, CHWBL ring) and scratch space. Decide, Resume, Learn and
//     RemoveEndpoint are called by that actor only. A rule change builds a
//     new Router.
//   - SessionShard (SessionTable splits one service's pins into shards) —
//     each shard owned by its session-shard actor. Decide never reads it:
//     the runtime looks the key up first and passes the answer in
//     Request.Session, then applies Decision.EvictSession and, once the
//     request succeeded, Decision.PinSession.
//   - Ring is immutable after NewRing; Env, ServiceSpec and EndpointSpec
//     are values built once (ParseEnv in cmd/, the specs by rule.Compile).
//
// # Choices the spec leaves open, and where llb differs from LoxiLB
//
//   - totalLoad in the hard cap is Σ active_conns as it stands, without the
//     request being placed, and every cap is floored at 1 — exactly LoxiLB's
//     kvCapFor. An idle set therefore has every cap at 1 and routes by
//     affinity. (CHWBL for sel 8/10 counts the incoming request instead:
//     ceil(1.75·(L+1)·share), the classic bound.)
//   - The primary Tier-1.5 candidates are the positive-overlap eligible
//     prefill endpoints (the spec's "primary selector"); when none has
//     overlap, Tier 1.5 falls through with no_overlap. Relief considers the
//     whole eligible set.
//   - Soft mode's capacity_i is read as a weight relative to the
//     candidates' mean capacity (LoxiLB divides by raw num_gpu_blocks, which
//     rounds the load term to 0); see SoftCost.
//   - An unknown capacity (0) counts as the mean of the known ones, not as
//     the smallest share.
//   - Spill means the pick holds fewer overlapping blocks than the overlap
//     winner; moving between equally-overlapping endpoints is not a spill.
//   - Cold-start seeding ticks only on Tier-1.5 hits that passed every
//     guard, including min-match.
//   - A pinned prefill at its admission cap falls through without being
//     evicted (capacity is not health); an unhealthy one is evicted.
//   - Parking needs a queue depth (LLB_PD_QUEUE_DEPTH_PER_EP or the rule's
//     override); LLB_PD_MAX_PARK_SEC bounds the wait (ParkDeadline).
//   - The capacity-blend arm is gated on the configured selector (sel 9),
//     never on a mutable cursor.
//
// # Usage
//
// The router actor, per request:
//
//	lookup := shard.Get(now, key)                 // session-shard actor
//	req := ladder.Request{SessionKey: key, Session: lookup, Prompt: prompt,
//		KV: ladder.KVInput{PromptBlocks: uint32(len(chain))}}
//	for i := range views {                         // fill the live views
//		views[i].Overlap = overlaps[i]             // from the inventory actors
//	}
//	d, err := router.Decide(now, &req, &ladder.Snapshot{Endpoints: views})
//	switch {
//	case err != nil:                               // a runtime bug: 503
//	case d.EvictSession:
//		shard.Evict(key)                           // and carry on with d
//	}
//	switch d.Admission {
//	case ladder.Park:   // hold on d.ParkOn's queue until d.ParkDeadline;
//	                    // on capacity: router.Resume(now, &req, snap, d.ParkOn)
//	case ladder.Shed:   // 429 pd_overloaded
//	case ladder.Refuse: // global valve closed
//	}
//	if d.Available() {
//		router.Learn(prompt, d.Prefill)            // Tier-1 trie: what llb routed
//		// proxy to d.Prefill (and d.Decode); on success:
//		if d.PinSession { shard.Put(now, key, ladder.Pin{Prefill: d.Prefill, Decode: d.Decode}) }
//	} else if d.Unavailable != ladder.ReasonNone {
//		// 503 with d.Unavailable.String() as the error code
//	}
//	w.Header().Set("X-Llb-Route", d.String())
package ladder
