package harness

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/fleet"
	"github.com/llbproject/llb/simulate/worker"
)

// FleetConfig describes the simulated fleet every run starts afresh.
type FleetConfig struct {
	// Workers is the number of serving workers: the single pool, or the
	// prefill endpoints of a P/D strategy (1..31).
	Workers int
	// DecodeWorkers is the number of separate decode workers a P/D
	// strategy adds. 0 (the default) runs P/D on the same fleet: every
	// serving worker is a kv_both engine listed twice in the rule, as a
	// prefill and as a decode endpoint, so a P/D strategy gets exactly the
	// hardware the single-pool ones get (its decode legs hold pulled,
	// unshared copies of the prompt's blocks in those same caches). With
	// N > 0 the workers are prefill-only and N decode workers join them,
	// each with engine.DefaultConfig's cache and batch (31250 blocks,
	// max-num-seqs 256) so the decode side never queues — more hardware
	// than the single-pool strategies get.
	DecodeWorkers int
	// BaseIP is the first worker's loopback address. Default 127.0.7.2.
	BaseIP string
	// Engine configures every serving worker: cache size, batch limit,
	// latency model (Latency.TimeScale is the run's time scale), block size
	// and hash contract. Role is set by the harness.
	Engine engine.Config
}

// DefaultBaseIP is FleetConfig.BaseIP's default.
const DefaultBaseIP = "127.0.7.2"

// Validate reports every problem at once.
func (c *FleetConfig) Validate() error {
	var errs []error
	if c.Workers < 1 || c.Workers > 31 {
		errs = append(errs, fmt.Errorf("workers %d (want 1..31)", c.Workers))
	}
	if c.DecodeWorkers < 0 || c.Workers+c.DecodeWorkers > 32 {
		errs = append(errs, fmt.Errorf("decode workers %d (want 0..%d: a rule holds at most 32 endpoints)", c.DecodeWorkers, 32-c.Workers))
	}
	e := c.Engine
	e.Role = engine.RoleNone
	if err := e.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("fleet: %w: %w", ErrConfig, errors.Join(errs...))
}

// TimeScale is the workers' latency-model time scale.
func (c *FleetConfig) TimeScale() float64 { return c.Engine.Latency.TimeScale }

// startFleet starts a fresh fleet for a rule shape: Workers role-less
// workers for ShapePool; for ShapePD Workers kv_both workers (DecodeWorkers
// 0), or Workers prefill and DecodeWorkers decode workers. Every serving
// worker publishes KV events.
func startFleet(c *FleetConfig, shape Shape) (*fleet.Fleet, error) {
	tmpl := worker.DefaultConfig()
	tmpl.Engine = c.Engine
	tmpl.Engine.Role = engine.RoleNone
	tmpl.KVEvents = true
	fc := fleet.Config{BaseIP: c.BaseIP, Template: &tmpl}
	if fc.BaseIP == "" {
		fc.BaseIP = DefaultBaseIP
	}
	switch {
	case shape == ShapePD && c.DecodeWorkers == 0:
		fc.Single = c.Workers
		fc.Customize = func(_ int, _ engine.Role, wc *worker.Config) { wc.Engine.Role = engine.RoleBoth }
	case shape == ShapePD:
		fc.Prefill, fc.Decode = c.Workers, c.DecodeWorkers
		fc.Customize = func(_ int, role engine.Role, wc *worker.Config) {
			if role == engine.RoleDecode {
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
