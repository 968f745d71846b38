// Package harness is the load harness that measures routing quality through
// the real daemon: it starts (or attaches to) an llbd process built from
// ./cmd/llbd, starts a fresh in-process simulated fleet
// (simulate/fleet) of vLLM, SGLang or TensorRT-LLM workers
// (FleetConfig.Dialect) on loopback addresses for every strategy, posts one rule
// per strategy through the REST API, drives an open-loop Poisson workload
// (simulate/workload) at the rule's VIP over HTTP and measures what a client
// and the workers can observe:
//
//   - per request: time to first token (the first SSE event carrying a
//     token), end-to-end latency, status, and the route llbd reports in
//     X-Llb-Route (deciding tier, endpoint, spill / relief / cold-seed
//     flags);
//   - per run: throughput, TTFT and E2E percentiles (HdrHistogram), errors
//     by status, the fleet's prefix-cache hit rate (the workers' own
//     vllm:prefix_cache_hits / queries counters, as deltas over the
//     measured window), per-worker load and TTFT, and the harness's own
//     health (dispatch lag, CPU seconds of the harness and of llbd).
//
// Every strategy of a comparison replays the same trace (same prompts, same
// arrival pattern) on an identically configured fresh fleet, so the runs
// differ only in routing. Strategies are simulate/strategy's catalogue,
// the names simulate/des runs: RuleJSON turns one into the REST rule, and
// its EnvList into llbd's environment. The Tier-1.5 law is a process
// setting (LOXILB_KV_LB_MODE), so every strategy gets its own llbd process.
//
// # Time
//
// The workers' latency model runs at TimeScale × real time (engine
// Latency.TimeScale). Rates are given and reported in model time (requests
// per model second) and latencies are reported in model seconds: wall
// durations divided by TimeScale. A time scale only changes how long a run
// takes in wall time (and how much CPU per wall second it needs), not the
// modelled figures — except for llbd's and the harness's own overheads,
// which are real wall time and so are divided by TimeScale too.
//
// # Traces
//
// A trace is workload.NewTrace's, the generator simulate/des uses too
// (content and arrival gaps from two separate PCG streams of the seed), so
// a harness run and a discrete-event run of the same seed replay the same
// requests at the same moments: the two can be compared number for number.
package harness
