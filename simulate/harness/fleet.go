package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/strategy"
	"github.com/llbproject/llb/simulate/worker"
)

// FleetConfig describes the simulated fleet every run starts afresh.
type FleetConfig struct {
	// Workers is the number of serving workers: the single pool, or the
	// prefill endpoints of a P/D strategy (1..31).
	Workers int
	// DecodeWorkers is the number of decode workers a P/D strategy adds
	// to the Workers prefill workers; 0 means Workers. They get
	// engine.DefaultConfig's cache and batch (31250 blocks, max-num-seqs
	// 256) with Engine's latency model, so the decode side never queues: a
	// P/D strategy's prefill placement runs on the same caches as the
	// single-pool strategies, but it has more hardware in all, and its
	// prefill workers hold requests only for the prefill leg.
	DecodeWorkers int
	// PDSameWorkers runs P/D strategies on the serving workers themselves
	// instead: every worker is a kv_both engine listed twice in the rule,
	// once as a prefill and once as a decode endpoint, so P/D gets exactly
	// the single-pool strategies' hardware — and its decode legs hold
	// pulled, unshared copies of the prompt's blocks in those same caches.
	// DecodeWorkers is ignored.
	PDSameWorkers bool
	// BaseIP is the first worker's loopback address. Default 127.0.7.2.
	BaseIP string
	// HTTPPort is every worker's API port (each worker has its own
	// address, so one port serves all); 0 gives each a free port. A fixed
	// port keeps the endpoints' ip:port — which seed the CHWBL ring — the
	// same from run to run.
	HTTPPort int
	// Engine configures every serving worker: cache size, batch limit,
	// latency model (Latency.TimeScale is the run's time scale), block size
	// and hash contract. KVRole is set by the harness. Engine.MaxLoRAs is
	// --max-loras when LoRAs are served.
	Engine engine.Config
	// LoRAs are LoRA adapters every serving worker serves (--lora-modules).
	LoRAs []string
	// Dialect is the engine every worker speaks as (worker.Dialect: vllm,
	// the default, sglang or trtllm): its block hash, how its KV events
	// reach llbd, its P/D protocol and its strictness. The rules name it
	// (kvEngineType). SGLang and TensorRT-LLM fleets run P/D on separate
	// prefill and decode workers only (no PDSameWorkers).
	Dialect worker.Dialect
}

// DefaultBaseIP is FleetConfig.BaseIP's default.
const DefaultBaseIP = "127.0.7.2"

// Validate reports every problem at once.
func (c *FleetConfig) Validate() error {
	var errs []error
	if c.Workers < 1 || c.Workers > 31 {
		errs = append(errs, fmt.Errorf("workers %d (want 1..31)", c.Workers))
	}
	if c.HTTPPort < 0 || c.HTTPPort > 65535 {
		errs = append(errs, fmt.Errorf("http port %d (want 0..65535)", c.HTTPPort))
	}
	if !c.PDSameWorkers && (c.DecodeWorkers < 0 || c.Workers+c.decodeWorkers() > 32) {
		errs = append(errs, fmt.Errorf("decode workers %d (want 0..%d: a rule holds at most 32 endpoints)", c.DecodeWorkers, 32-c.Workers))
	}
	if c.PDSameWorkers && 2*c.Workers > 32 {
		errs = append(errs, fmt.Errorf("%d workers listed as prefill and decode exceed a rule's 32 endpoints", c.Workers))
	}
	d, err := worker.ParseDialect(string(c.Dialect))
	if err != nil {
		errs = append(errs, err)
	}
	if c.PDSameWorkers && d != worker.DialectVLLM {
		errs = append(errs, fmt.Errorf("P/D on the serving workers themselves needs vLLM's kv_both workers, not %s's", d))
	}
	e := c.Engine
	e.KVRole = engine.KVNone
	if err := e.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("fleet: %w: %w", ErrConfig, errors.Join(errs...))
}

// serves reports why the fleet's workers cannot serve strategy s (nil when
// they can): the peers that read KV events read vLLM's.
func (c *FleetConfig) serves(s *strategy.Strategy) error {
	if s.IsPeer() && s.Peer.UsesKVEvents() && c.Dialect != "" && c.Dialect != worker.DialectVLLM {
		return fmt.Errorf("peer %s reads vLLM's KV events; the fleet speaks %s", s.Name, c.Dialect)
	}
	return nil
}

// TimeScale is the workers' latency-model time scale.
func (c *FleetConfig) TimeScale() float64 { return c.Engine.Latency.TimeScale }

func (c *FleetConfig) decodeWorkers() int {
	if c.DecodeWorkers > 0 {
		return c.DecodeWorkers
	}
	return c.Workers
}

// startFleet starts a fresh fleet for a rule shape: Workers role-less
// workers for strategy.ShapePool; for ShapePD Workers prefill and decodeWorkers()
// decode workers, or Workers kv_both workers (PDSameWorkers). Every serving
// worker publishes KV events.
func startFleet(c *FleetConfig, shape strategy.Shape) (*fleet.Fleet, error) {
	tmpl := worker.DefaultConfig()
	tmpl.Engine = c.Engine
	tmpl.Engine.KVRole = engine.KVNone
	tmpl.KVEvents = true
	tmpl.ReportQueueWait = true // each request's queue wait, for saturation.Criterion
	tmpl.LoRAs = c.LoRAs
	if c.Dialect != "" {
		tmpl.Dialect = c.Dialect
	}
	fc := fleet.Config{BaseIP: c.BaseIP, HTTPPort: c.HTTPPort, Template: &tmpl}
	if fc.BaseIP == "" {
		fc.BaseIP = DefaultBaseIP
	}
	switch {
	case shape == strategy.ShapePD && c.PDSameWorkers:
		fc.Single = c.Workers
		fc.Customize = func(_ int, _ ladder.Role, wc *worker.Config) { wc.Engine.KVRole = engine.KVBoth }
	case shape == strategy.ShapePD:
		fc.Prefill, fc.Decode = c.Workers, c.decodeWorkers()
		fc.Customize = func(_ int, role ladder.Role, wc *worker.Config) {
			if role == ladder.RoleDecode {
				def := engine.DefaultConfig()
				wc.Engine.NumBlocks = max(def.NumBlocks, wc.Engine.NumBlocks)
				wc.Engine.MaxNumSeqs = max(def.MaxNumSeqs, wc.Engine.MaxNumSeqs)
			}
		}
	default:
		fc.Single = c.Workers
	}
	f, err := fleet.Start(fc)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFleet, err)
	}
	return f, nil
}

// stopFleet stops a fleet, crashing what does not stop within timeout.
func stopFleet(f *fleet.Fleet, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := f.Stop(ctx)
	if err != nil {
		for _, w := range f.Workers() {
			w.Crash()
		}
	}
	return err
}

// servingWorkers are the workers requests are routed to first: the pool,
// or the prefill workers (the fleet lays them out first).
func servingWorkers(f *fleet.Fleet, n int) []*worker.Worker {
	return f.Workers()[:n]
}
