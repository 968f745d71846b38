// Package des is llb's discrete-event simulator: a fleet of simulated vLLM
// workers (simulate/engine), llb's real routing core (ladder.Router) and a
// seeded workload (simulate/workload), driven in virtual time. It runs
// thousands of requests per wall second, so whole sweeps — every strategy
// across a load ladder, the ε and λ sweeps — take minutes, and it is
// deterministic: the same trace and config give an identical Result, with
// no goroutines, no wall clock and no global randomness.
//
// # The model
//
// A Trace is a workload generated once (workload.NewTrace, the generator
// the load harness replays too) and pre-hashed: per request the prompt
// tokens and an arrival offset at 1 request/s, plus the engine-side block
// digests, llb's own key chain (an inventory.Hasher under the same
// contract — a test checks they agree) and the routing keys
// gateway/route_input.go would derive from the body. Every run of a
// scenario replays the same trace, scaled to its rate, so strategies are
// compared on identical prompts and arrival patterns.
//
// Run is the event loop. The next event is the earliest of the next
// arrival and every worker's engine.NextEventTime (engine events first on a
// tie, workers by index). On an arrival the simulator builds exactly the
// views llbd builds:
//
//	ActiveConns      requests llb sent to the worker and not yet finished
//	QueuedRequests   the engine's waiting queue (exact; llbd scrapes it)
//	KVCapacityBlocks the engine's num_gpu_blocks
//	InventoryBlocks  the blocks the worker's inventory.Mirror holds
//	Overlap          leading blocks of the prompt's chain in that mirror
//
// calls Router.Decide and submits the request to the chosen engine. Each
// mirror is fed the engine's own KV events (BlockStored/BlockRemoved, as
// TakeEvents returns them after every engine step), so Tier 1.5 sees the
// cache through the same event path and hash-contract self-check as in
// production, delivered without the feed's millisecond lag. Scoring a
// mirror costs one hash-table probe per block, as cheap as peeking at the
// engine's cache, so nothing is gained by bypassing it.
//
// Strategies come from simulate/strategy's catalogue (the harness serves
// the same names): rule shapes plus env knobs — RR, CHWBL, the KV-exact
// laws on a kvExactMode-3 pool, and P/D ladders (Tier 1 trie, kvExactMode
// 1) — from which des builds a ladder rule. A P/D strategy runs in its
// single-pool equivalent: the workers are the rule's prefill endpoints,
// one virtual decode endpoint completes the rule, and the whole request
// runs on the chosen worker. Its session pins and trie lessons are applied
// when the first token is out (the prefill leg's success).
//
// # Invariants
//
// Run checks as it goes and returns ErrInvariant when one breaks: every
// request finishes exactly once and never aborts; no engine runs more
// than max-num-seqs requests; every decision names a worker; no mirror's
// hash contract trips. ErrConfig reports a bad trace, fleet or strategy.
//
// # Sweeps
//
// FindSaturation searches the highest rate at which a strategy keeps the
// engines' queue-wait p90 within a bound. Plan.Execute runs a whole sweep —
// per scenario: the trace, the fleet sized to a cache pressure, the
// reference strategy's saturation rate, a pooled-cache bound, then every
// strategy and the ε/λ sweeps at every load — through an Executor, which
// may run the independent runs in parallel (cmd/llbsim does); results come
// back in plan order whatever the schedule. StandardPlan is what
// `make sim` runs.
//
// Usage:
//
//	tr, _ := des.NewTrace(des.TraceConfig{Name: "sp", Spec: workload.SharedPrefix{}, Requests: 3000, Seed: 1})
//	hard, _ := strategy.ByName("hard")
//	res, _ := des.Run(tr, des.RunConfig{Fleet: des.FleetFor(tr, 8, 2048), Strategy: hard, Rate: 20, Warmup: 600})
//	fmt.Println(res.TTFT.P90, res.HitRate, res.TierMix)
package des
