package des

import (
	"fmt"
	"strings"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/saturation"
	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/workload"
)

// Standard scenario names (report.DefaultTargets reads the first and the
// last).
const (
	ScenarioSharedPrefix = "shared-prefix"
	ScenarioZipf         = "shared-prefix-zipf"
	ScenarioContended    = "shared-prefix-contended"
	ScenarioHotPrefix    = "hot-prefix"
	// ScenarioLightLoad is the light-load shape the other light-load
	// scenarios vary.
	ScenarioLightLoad = "light-load"
)

// LightLoadConcurrency is the client ladder of the light-load scenarios:
// from one request in flight to past the fleets' saturation (a worker of
// 170 blocks holds about six of their requests at once).
var LightLoadConcurrency = []int{1, 2, 4, 8, 12, 16, 24, 32, 48}

// LightLoadScenarios are the closed-loop scenarios: small fleets
// whose caches hold a fraction of the working set, driven by a fixed
// number of clients from 1 to past saturation. The first is the reference
// measurement (4 workers of 170 blocks, 24 groups of a ~400-token system
// prompt × 8 questions, working set ≈ 1.4× the fleet's cache); the others
// change one dimension each — more groups, longer prefixes, roomier caches,
// a larger fleet — so a law is not tuned to one shape.
func LightLoadScenarios(requests int, seed uint64) []Scenario {
	base := workload.SharedPrefix{Groups: 24, PromptsPerGroup: 8, SystemTokens: 400, QuestionTokens: 40, OutputTokens: 64}
	many := base
	many.Groups = 48
	long := base
	long.SystemTokens = 1000
	sc := func(name, desc string, spec workload.SharedPrefix, workers, blocks int) Scenario {
		return Scenario{
			Name: name, Description: desc,
			Trace:   TraceConfig{Spec: spec, Requests: requests, Seed: seed},
			Workers: workers, Engine: &EngineOverrides{NumBlocks: blocks},
			Concurrency: LightLoadConcurrency,
		}
	}
	return []Scenario{
		sc(ScenarioLightLoad, "Issue 18's measurement: a few requests in flight on workers whose small caches hold two thirds of the working set.", base, 4, 170),
		sc("light-load-many-groups", "As light-load with twice the groups: the working set is 2.8× the fleet's cache.", many, 4, 170),
		sc("light-load-long-prefix", "As light-load with 1000-token system prompts on 400-block caches.", long, 4, 400),
		sc("light-load-roomy", "As light-load on 300-block caches: the whole working set fits.", base, 4, 300),
		sc("light-load-8-workers", "As light-load-many-groups on 8 workers: the working set is 1.4× the fleet's cache.", many, 8, 170),
	}
}

// StandardPlan is the sweep `make sim` runs: requests per trace, one seed.
//
//   - shared-prefix: SGLang's generated-shared-prefix defaults (64 groups ×
//     16 questions, 2048-token system prompt, 128-token question, 256
//     output tokens, uniform popularity) on 8 workers whose caches hold
//     two thirds of the trace's working set (pressure 1.5), with the ε and
//     λ sweeps. Issue 7's shared-prefix targets are read here.
//   - shared-prefix-zipf: the same with Zipf(1.2) group popularity, so a
//     few groups are hot; with the sweeps.
//   - shared-prefix-contended: shared-prefix on compute-contended workers
//     (batch limit 16, 4× slower at a full batch), so load raises latency
//     continuously rather than only when the cache is full; with the
//     sweeps. It checks whether the findings depend on the worker model.
//   - hot-prefix: one 2048-token preamble shared by 50 clients, 64-token
//     suffixes, 128 output tokens, on 8 workers with a batch limit of 32
//     (so the fleet saturates within a few thousand requests) and 4096
//     cache blocks each. Issue 7's hot-prefix target is read here.
//
// Loads run from 30 % to 110 % of the saturation rate of `hard` (LoxiLB's
// default law, the reference since the first report); 20 % of each trace
// is warm-up. The light-load scenarios (LightLoadScenarios) follow.
func StandardPlan(requests int, seed uint64) Plan {
	sp := workload.SharedPrefix{Groups: 64, PromptsPerGroup: 16, SystemTokens: 2048, QuestionTokens: 128, OutputTokens: 256}
	zipf := sp
	zipf.ZipfAlpha = 1.2
	p := Plan{
		Scenarios: []Scenario{
			{
				Name:          ScenarioSharedPrefix,
				Description:   "SGLang generated-shared-prefix defaults under cache pressure: the working set is 1.5× the fleet's KV cache.",
				Trace:         TraceConfig{Spec: sp, Requests: requests, Seed: seed},
				Workers:       8,
				CachePressure: 1.5,
				Sweeps:        true,
			},
			{
				Name:          ScenarioZipf,
				Description:   "As shared-prefix, with Zipf(1.2) group popularity: a few system prompts carry most of the traffic.",
				Trace:         TraceConfig{Spec: zipf, Requests: requests, Seed: seed},
				Workers:       8,
				CachePressure: 1.5,
				Sweeps:        true,
			},
			{
				Name:          ScenarioContended,
				Description:   "As shared-prefix, on compute-contended workers (batch limit 16, 4× slower at a full batch): load raises latency continuously.",
				Trace:         TraceConfig{Spec: sp, Requests: requests, Seed: seed},
				Workers:       8,
				CachePressure: 1.5,
				Engine:        &EngineOverrides{MaxNumSeqs: 16, TimeFactorUnderLoad: 4},
				Sweeps:        true,
			},
			{
				Name:        ScenarioHotPrefix,
				Description: "One hot preamble shared by every client: pure affinity herds everything onto one worker.",
				Trace:       TraceConfig{Spec: workload.HotPrefix{Clients: 50, PrefixTokens: 2048, SuffixTokens: 64, OutputTokens: 128}, Requests: requests, Seed: seed},
				Workers:     8,
				Engine:      &EngineOverrides{NumBlocks: 4096, MaxNumSeqs: 32},
			},
		},
		Strategies: strategy.All(),
		Loads:      []float64{0.3, 0.5, 0.7, 0.9, 1.0, 1.1},
		Reference:  strategy.NameHard,
		Factors:    []uint32{100, 125, 150, 175, 200, 250, 300},
		Lambdas:    []uint32{32, 10000, 50000, 100000},
		Warmup:     0.2,
		// llbd's scrape: the queue and KV usage llb reads are this stale.
		ScrapeEvery: DefaultScrape,
	}
	p.Scenarios = append(p.Scenarios, PeerScenarios(requests, seed)...)
	var step []Scenario
	for _, sc := range p.Scenarios {
		step = append(step, StepVariant(sc))
	}
	p.Scenarios = append(p.Scenarios, step...)
	p.Scenarios = append(p.Scenarios, LightLoadScenarios(requests, seed)...)
	p.Strategies = append(p.Strategies, strategy.Peers()...)
	return p
}

// Scenario names of the peer comparison.
const (
	ScenarioMultiTurn = "multi-turn"
	ScenarioLongDoc   = "long-doc-qa"
	ScenarioReplicas  = "shared-prefix-replicas"
	// StepSuffix names a scenario's run on the step model (StepVariant).
	StepSuffix = "-step"
)

// PeerScenarios are the peer comparison's workloads beyond the four of the first
// report:
//
//   - multi-turn: chat sessions in the shape of vLLM production-stack's
//     multi-round-qa benchmark (a 1000-token system prompt, a 2000-token
//     per-user document, 100-token questions and answers; 256 active
//     conversations × 6 turns), where a conversation's next turn arrives
//     2 s after its previous answer ends: the context grows by a turn at a
//     time and lives on the worker that served the last one. Cache
//     pressure 1.5 on 8 workers.
//   - long-doc-qa: 8 documents of 8k–32k tokens, 32 questions each, Zipf
//     popularity 0.6, on 4 workers whose caches hold the documents once
//     (pressure 1.0, max-model-len 40960): a document's prefill costs a
//     second, so a miss is expensive and so is a queue. 1500 requests.
//   - shared-prefix-replicas: shared-prefix routed by 4 router replicas,
//     requests spread over them in turn: what each peer's replicas lose by
//     learning only their own traffic.
func PeerScenarios(requests int, seed uint64) []Scenario {
	sp := workload.SharedPrefix{Groups: 64, PromptsPerGroup: 16, SystemTokens: 2048, QuestionTokens: 128, OutputTokens: 256}
	mt := workload.MultiTurn{Conversations: 1024, Turns: 5, SystemTokens: 1000, HistoryTokens: 2000, QuestionTokens: 100, AnswerTokens: 100}
	ld := workload.LongDocQA{Documents: 8, QuestionsPerDoc: 32, DocMinTokens: 8192, DocMaxTokens: 32768, QuestionTokens: 64, OutputTokens: 128, ZipfAlpha: 0.6}
	return []Scenario{
		{
			Name:        ScenarioMultiTurn,
			Description: "Chat sessions (production-stack multi-round-qa shape): each conversation's next turn arrives 2 s after its previous answer, with the whole history; the working set is 1.5× the fleet's cache.",
			Trace:       TraceConfig{Spec: mt, Requests: 2 * requests, Seed: seed},
			Workers:     8, CachePressure: 1.5, ThinkTime: time.Second,
			Engine: &EngineOverrides{MaxNumSeqs: 64},
		},
		{
			Name:        ScenarioLongDoc,
			Description: "Long-document Q&A: 8 documents of 8k–32k tokens, many questions each, on 4 workers whose caches hold every document once.",
			Trace:       TraceConfig{Spec: ld, Requests: min(requests, 1500), Seed: seed},
			Workers:     4, CachePressure: 1.0, Engine: &EngineOverrides{MaxModelLen: 40960},
			TTFTSLO: 5 * time.Second,
		},
		{
			Name:        ScenarioReplicas,
			Description: "shared-prefix routed by 4 router replicas in turn: llb's replicas share their trie inserts and gossip their loads; a peer's replicas see only their own traffic.",
			Trace:       TraceConfig{Spec: sp, Requests: requests, Seed: seed},
			Workers:     8, CachePressure: 1.5, Replicas: 4,
		},
	}
}

// StepVariant is sc on the step model (engine.SchedStep), named
// sc.Name+StepSuffix. Its TTFT objective is a fifth of sc's (the step
// model's prefills are about that much faster than the load-factor
// model's defaults) unless the scenario sets none.
func StepVariant(sc Scenario) Scenario {
	sc.Name += StepSuffix
	sc.Model = engine.SchedStep
	sc.Description += " On the step model (vLLM V1's scheduler, Llama-3.1-8B on an H100)."
	if sc.Engine != nil && sc.Engine.TimeFactorUnderLoad > 0 {
		sc.Description += " The load-factor slowdown does not apply: the step model's batch shares its compute."
	}
	if sc.TTFTSLO > 0 {
		sc.TTFTSLO /= 5
	} else {
		sc.TTFTSLO = DefaultTTFTSLO / 5
	}
	return sc
}

// DescribeWorkload renders a workload spec in one line for the report.
func DescribeWorkload(s workload.Spec) string {
	switch w := s.(type) {
	case workload.SharedPrefix:
		return fmt.Sprintf("shared prefix: %d groups × %d questions, system %d + question %d tokens, %d output tokens, Zipf α %g",
			w.Groups, w.PromptsPerGroup, w.SystemTokens, w.QuestionTokens, w.OutputTokens, w.ZipfAlpha)
	case workload.HotPrefix:
		return fmt.Sprintf("hot prefix: %d clients share a %d-token preamble, %d-token suffixes, %d output tokens",
			w.Clients, w.PrefixTokens, w.SuffixTokens, w.OutputTokens)
	case workload.MultiTurn:
		return fmt.Sprintf("multi-turn: %d conversations × %d turns, system %d + history %d tokens, %d-token questions, %d-token answers",
			w.Conversations, w.Turns, w.SystemTokens, w.HistoryTokens, w.QuestionTokens, w.AnswerTokens)
	case workload.LongDocQA:
		return fmt.Sprintf("long-document Q&A: %d documents of %d–%d tokens × %d questions of %d tokens, %d output tokens, Zipf α %g",
			w.Documents, w.DocMinTokens, w.DocMaxTokens, w.QuestionsPerDoc, w.QuestionTokens, w.OutputTokens, w.ZipfAlpha)
	case workload.Mooncake:
		return describeMooncake(w.Trace)
	case workload.Mix:
		parts := make([]string, len(w.Parts))
		for i, p := range w.Parts {
			parts[i] = fmt.Sprintf("%g× (%s)", p.Weight, DescribeWorkload(p.Spec))
		}
		return "mix: " + strings.Join(parts, " + ")
	}
	return fmt.Sprintf("%T", s)
}

// DescribeWorker renders an engine configuration in one line.
func DescribeWorker(c engine.Config) string {
	if c.Scheduler == engine.SchedStep {
		l := c.Step
		return fmt.Sprintf("step model: %d cache blocks of %d tokens (LRU), max-num-seqs %d, max-num-batched-tokens %d, step %.0f µs + %.2f µs/prefill token + %.2f µs/decode + %.3f µs/context token + %.5f µs/attention pair, hash %s",
			c.NumBlocks, c.BlockSize, c.MaxNumSeqs, c.MaxNumBatchedTokens, l.FixedUs, l.PrefillTokenUs, l.DecodeTokenUs, l.ContextTokenUs, l.AttentionPairUs, c.Hash.Algo)
	}
	l := c.Latency
	return fmt.Sprintf("%d cache blocks of %d tokens (LRU), max-num-seqs %d, prefill %v + %v/uncached token, ITL %v, ×%g at a full batch, hash %s",
		c.NumBlocks, c.BlockSize, c.MaxNumSeqs, l.PrefillOverhead, l.PrefillPerToken, l.InterTokenLatency, l.TimeFactorUnderLoad, c.Hash.Algo)
}

// Method is the report's method paragraph.
func Method() string {
	return strings.Join([]string{
		"Every number here comes from `simulate/des`, a deterministic discrete-event simulator: virtual time, seeded workloads, no goroutines, no wall clock.",
		"Each worker is a `simulate/engine` instance (vLLM's prefix cache with an LRU free queue and vLLM's hash contract, a batch limit with a FIFO waiting queue) on one of two engine models: llm-d-inference-sim's load-factor model (each request its own clock; scenarios without a suffix) or vLLM V1's step loop with chunked prefill, calibrated to Llama-3.1-8B on an H100 (scenarios ending in `-step`; `engine.StepLatency` cites the figures).",
		"Each llb strategy is llb's real `ladder.Router`, fed per request the views llbd would build: active_conns = requests llb sent and not yet finished; queued_requests and KV usage as llbd's 250 ms scrape last read them (the usage plus the blocks llb charged since — each request's uncached prompt blocks and its completion's — minus the charges of the requests that ended since); the uncached prompt blocks of llb's requests without a first token; KV capacity = the engine's block count; and Tier-1.5 overlap = the leading blocks of the prompt's hash chain present in an `inventory.Mirror` kept from the engine's own KV events (the ZMQ path, delivered without delay).",
		"Each peer (`simulate/peers`: Dynamo's KV router, llm-d's precise-prefix-cache profile, SGLang's cache_aware, AIBrix's prefix-cache, KubeAI's CHWBL) is that project's placement policy written from its public docs and code with its shipped defaults, fed what that router sees: the KV-event routers the same mirrors, llm-d the engines' queue and KV usage as its picker's 50 ms refresh last read them, every router its own in-flight counts.",
		"Routing keys (prefix hash, session key, trie bytes) are derived from the request body as `gateway/route_input.go` derives them.",
		fmt.Sprintf("All strategies of a scenario replay the same trace (same prompts, same arrival pattern scaled to the rate). Load 100%% is the highest Poisson rate at which `hard` keeps the engines' queue-wait p90 within %v (simulate/saturation.Criterion, which the load harness judges by too), found by a bracketing search; the ladder runs 30%%–110%% of it.", saturation.DefaultMaxWaitP90),
		"TTFT is first token − arrival; hit rate is the engines' cached prompt tokens / prompt tokens (vllm:prefix_cache_hits / queries); the oracle hit rate counts every reusable prefix as hit (an unbounded cache and perfect routing). Warm-up requests are routed and served but not measured.",
	}, " ")
}

// Caveats are the model's known limitations, for the report.
func Caveats() []string {
	return []string{
		"The load-factor model has no shared prefill compute: a cache miss costs its own request prefill time (×1–2 with the batch size) but does not slow other requests, and load hurts latency mainly through KV memory. The step model shares each step's compute across the batch, as vLLM does; it allocates a request's output blocks at admission (no preemption) and leaves out the API server's per-request overheads, which add the same to every strategy.",
		"KV events reach the mirrors at once. On the load-factor model blocks are published when a request is admitted (vLLM publishes them as prefill completes); the step model publishes them at the end of the step that computes them.",
		"The P/D strategies (tier1, pd-hard) run the P/D ladder in its single-pool equivalent: every worker is a prefill endpoint, one virtual decode endpoint completes the rule, and the whole request runs on the chosen worker. Sessions are pinned and the trie is taught when the first token is out (the prefill leg's success).",
		"The kvWarmupSec guard is off (the simulated mirrors are exact from the start). The peers see exact engine state where they read it (llm-d's 50 ms scrape is close to that); llb sees its 250 ms scrape. With several router replicas, llb's replicas share one scrape and one count of blocks sent since.",
		"The engine models' TTFT by prompt length and ITL by batch size, against the published figures the step model is calibrated from, are in ENGINE.md.",
		"TTFT p90 on these shared-prefix workloads sits on the boundary between cache hits and full misses (about one request in ten misses), so a hit-rate difference of 0.01 can move it by a prefill's length; read the p50, goodput and hit-rate tables with it.",
	}
}
