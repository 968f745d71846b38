package des

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/strategy"
)

// Fleet is the simulated worker fleet: Workers identical engines.
type Fleet struct {
	// Workers is the number of workers (1..ladder.MaxEndpoints-1; a P/D
	// strategy adds one virtual decode endpoint).
	Workers int
	// Engine configures every worker. Its BlockSize and Hash must equal
	// the trace's (llb's contract with the engines). KVRole must be KVNone.
	Engine engine.Config
}

// CacheBlocks is the fleet's total KV capacity in blocks.
func (f *Fleet) CacheBlocks() int { return f.Workers * f.Engine.NumBlocks }

// RunConfig is one simulation run: a fleet, a strategy and a rate, over a
// trace given separately.
type RunConfig struct {
	// Fleet is the worker fleet.
	Fleet Fleet
	// Strategy is the routing policy.
	Strategy strategy.Strategy
	// Rate is the offered load in requests per second (> 0) of the
	// open-loop arrival process; ignored when Concurrency is set.
	Rate float64
	// Concurrency, when > 0, replaces the open-loop arrivals by a closed
	// loop of that many clients: the first Concurrency requests arrive at
	// time zero and each completion releases the next request of the
	// trace at once, so exactly Concurrency requests are in flight until
	// the trace runs out (the shape of benchmark tools' --concurrency).
	Concurrency int
	// Warmup is how many leading requests are routed and served but left
	// out of every metric (they warm the caches). Must leave at least one
	// request measured.
	Warmup int
	// ThinkTime, when > 0, turns a multi-turn workload's conversations
	// into sessions: a conversation's next turn arrives this long after
	// its previous turn ended (a user reading the answer and typing), or
	// at its own scheduled time if that is later. Other requests keep their
	// open-loop arrival times. Ignored in a closed loop.
	ThinkTime time.Duration
	// Replicas is the number of router replicas (0 means 1). Requests go
	// to them in turn. Each replica keeps its own state: an llb replica
	// its Tier-1 trie (inserts broadcast to every replica, as llbd's
	// cluster does), pending placements and counters, and it balances on
	// its own in-flight counts plus the others' as of the last gossip
	// (GossipEvery); a peer replica sees only what it routed itself (its
	// trees, in-flight counts and active blocks), as those routers do
	// without their optional sync. Every replica reads every KV-event feed.
	Replicas int
	// GossipEvery is how stale an llb replica's view of the other
	// replicas' in-flight counts is (llbd's cluster gossip, ~100 ms); 0
	// means DefaultGossip.
	GossipEvery time.Duration
	// ScrapeEvery is how often llb reads the engines' queue depth and KV
	// usage (vllm:num_requests_waiting, vllm:kv_cache_usage_perc) from
	// their /metrics, as llbd's endpoint actors do (DefaultScrape): the
	// views' QueuedRequests is the value of the last scrape, and
	// KVUsedBlocks the last scrape's plus what llb charged since (each
	// request's uncached prompt blocks and its completion's) minus the
	// charges of the requests that ended since. 0 means
	// every decision sees the engines exactly.
	ScrapeEvery time.Duration
	// TTFTSLO is the time-to-first-token objective goodput counts against;
	// 0 means DefaultTTFTSLO. A strategy with Objective puts it on every
	// request as its TTFT objective.
	TTFTSLO time.Duration
	// RecordRoutes keeps every request's route (Result.Routes): the
	// decision trace llbd would put in X-Llb-Route, for tests and
	// debugging. Off in sweeps (it allocates a string per request).
	RecordRoutes bool
	// NoLoRAAffinity turns llb's LoRA policy off (LLB_LORA_AFFINITY=0):
	// adapter requests are routed like any other.
	NoLoRAAffinity bool
}

// DefaultGossip is RunConfig.GossipEvery's default: llbd's cluster
// gossip interval.
const DefaultGossip = 100 * time.Millisecond

// DefaultScrape is llbd's engine-metrics scrape interval
// (actors.DefaultScrapeInterval), which StandardPlan's runs model.
const DefaultScrape = 250 * time.Millisecond

// DefaultTTFTSLO is the goodput objective when RunConfig.TTFTSLO is 0.
const DefaultTTFTSLO = 2 * time.Second

// slo is the run's goodput objective, which a strategy with Objective
// also puts on every request.
func (c *RunConfig) slo() time.Duration {
	if c.TTFTSLO == 0 {
		return DefaultTTFTSLO
	}
	return c.TTFTSLO
}

// validate reports every problem of c against trace t at once.
func (c *RunConfig) validate(t *Trace) error {
	var errs []error
	if c.Fleet.Workers < 1 || c.Fleet.Workers >= ladder.MaxEndpoints {
		errs = append(errs, fmt.Errorf("workers %d (want 1..%d)", c.Fleet.Workers, ladder.MaxEndpoints-1))
	}
	if err := c.Fleet.Engine.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Fleet.Engine.KVRole != engine.KVNone {
		errs = append(errs, fmt.Errorf("engine kv role %s (the simulator runs whole requests on one worker; want none)", c.Fleet.Engine.KVRole))
	}
	if t != nil {
		tc := t.Config
		if c.Fleet.Engine.BlockSize != tc.BlockSize {
			errs = append(errs, fmt.Errorf("engine block size %d differs from the trace's %d", c.Fleet.Engine.BlockSize, tc.BlockSize))
		}
		if c.Fleet.Engine.Hash.Algo != tc.Hash.Algo || c.Fleet.Engine.Hash.Seed != tc.Hash.Seed || c.Fleet.Engine.Hash.NoneHash != nil {
			errs = append(errs, errors.New("engine hash contract differs from the trace's"))
		}
		if c.Warmup < 0 || c.Warmup >= len(t.Requests) {
			errs = append(errs, fmt.Errorf("warmup %d of %d requests (want 0..%d)", c.Warmup, len(t.Requests), len(t.Requests)-1))
		}
	}
	switch {
	case c.Concurrency < 0:
		errs = append(errs, fmt.Errorf("concurrency %d (want >= 0)", c.Concurrency))
	case c.Concurrency == 0 && (!(c.Rate > 0) || math.IsInf(c.Rate, 0)):
		errs = append(errs, fmt.Errorf("rate %v requests/s (want > 0)", c.Rate))
	}
	if c.ThinkTime < 0 {
		errs = append(errs, fmt.Errorf("think time %v (want >= 0)", c.ThinkTime))
	}
	if c.Replicas < 0 || c.Replicas >= 64 {
		errs = append(errs, fmt.Errorf("replicas %d (want 0..63)", c.Replicas))
	}
	if c.GossipEvery < 0 {
		errs = append(errs, fmt.Errorf("gossip interval %v (want >= 0)", c.GossipEvery))
	}
	if c.ScrapeEvery < 0 {
		errs = append(errs, fmt.Errorf("scrape interval %v (want >= 0)", c.ScrapeEvery))
	}
	if c.TTFTSLO < 0 {
		errs = append(errs, fmt.Errorf("ttft slo %v (want >= 0)", c.TTFTSLO))
	}
	if err := validateStrategy(&c.Strategy); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("run config: %w: %w", ErrConfig, errors.Join(errs...))
}

// FleetFor returns a fleet of n workers with engine defaults, the trace's
// block size and hash contract, and numBlocks blocks of cache each.
func FleetFor(t *Trace, n, numBlocks int) Fleet {
	c := engine.DefaultConfig()
	c.BlockSize = t.Config.BlockSize
	c.Hash = t.Config.Hash
	c.NumBlocks = numBlocks
	return Fleet{Workers: n, Engine: c}
}
