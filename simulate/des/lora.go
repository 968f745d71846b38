package des

import (
	"strings"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/peers"
	"github.com/llbproject/llb/simulate/workload"
)

// LoRA adapters in the simulation. Every worker serves every adapter of
// the trace (vLLM's --lora-modules), batching at most its engine's
// MaxLoRAs at once. llb keeps a request for an adapter to the workers
// ladder.LoRAChoice names, from each engine's vllm:lora_requests_info as
// last scraped (RunConfig.ScrapeEvery) and the adapters of the requests
// the replica sent since, exactly as the router actor does; the peers see
// what their own scrapers would.

// loraIDs numbers the trace's adapters from 1 (lora_id), in order of
// first use.
func loraIDs(t *Trace) map[string]int {
	ids := map[string]int{}
	for i := range t.Requests {
		if n := t.Requests[i].LoRA; n != "" && ids[n] == 0 {
			ids[n] = len(ids) + 1
		}
	}
	return ids
}

// loraScrape is a worker's gauge as llb last read it.
type loraScrape struct {
	running, waiting []string
	at               time.Duration
	has              bool
	// stale is the newest gauge naming some adapter (llm-d's view).
	stale peers.LoRAGauge
}

// loraGauge returns worker wi's gauge as read at now: exact without
// ScrapeEvery, else as of the last scrape on its grid.
func (s *sim) loraGauge(wi int, now time.Duration) *loraScrape {
	w := &s.workers[wi]
	g := &w.lora
	if grid, due := scrapeDue(now, s.cfg.ScrapeEvery, g.at, g.has); due {
		st := w.eng.Stats()
		g.running, g.waiting = split(st.RunningLoRAs), split(st.WaitingLoRAs)
		g.at, g.has = grid, true
		if len(g.running)+len(g.waiting) > 0 {
			g.stale = peers.LoRAGauge{Running: g.running, Waiting: g.waiting, Max: s.cfg.Fleet.Engine.MaxLoRAs}
		} else if g.stale.Max == 0 {
			g.stale.Max = s.cfg.Fleet.Engine.MaxLoRAs
		}
	}
	return g
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// loraMask marks Down, in s.views, the workers LoRAChoice keeps adapter
// from, for llb replica ri at now; it returns the outcome and which views
// it changed (to restore after the decision).
func (s *sim) loraMask(ri int, adapter string, now time.Duration) (ladder.LoRAOutcome, uint64) {
	if adapter == "" || s.cfg.NoLoRAAffinity || s.cfg.Fleet.Engine.MaxLoRAs <= 0 {
		return 0, 0
	}
	n := len(s.workers)
	cands := make([]ladder.LoRACandidate, n)
	own := s.replicas[ri].lora
	for wi := range cands {
		g := s.loraGauge(wi, now)
		c := &cands[wi]
		c.Eligible, c.Known, c.MaxLoRA, c.Queued = true, true, s.cfg.Fleet.Engine.MaxLoRAs, s.views[wi].QueuedRequests
		seen := map[string]bool{}
		for _, a := range g.running {
			seen[a] = true
			c.Resident = c.Resident || a == adapter
		}
		for _, a := range g.waiting {
			seen[a] = true
			if a == adapter {
				c.Resident, c.Waiting = true, true
			}
		}
		var mine map[string]int
		if own != nil {
			mine = own[wi]
		}
		for a, k := range mine {
			if k > 0 {
				seen[a] = true
				c.Resident = c.Resident || a == adapter
			}
		}
		c.Adapters = len(seen)
	}
	set, why := ladder.LoRAChoice(cands)
	var changed uint64
	for wi := range n {
		if !set.Has(wi) && !s.views[wi].Down {
			s.views[wi].Down = true
			changed |= 1 << uint(wi)
		}
	}
	return why, changed
}

// ScenarioLoRA names the LoRA scenario (LoRAScenarios).
const ScenarioLoRA = "lora"

// LoRAScenarios are the LoRA workload, run on demand
// (llbsim sweep --scenarios lora): 32 adapters of one base model with
// Zipf(1.1) popularity (a few hot, a long cold tail), a 256-token task
// preamble per adapter and a 64-token question, on 8 workers that batch at
// most 4 adapters at once (--max-loras 4, 64 sequences) and pay 20 ms to
// swap an adapter into a GPU slot.
func LoRAScenarios(requests int, seed uint64) []Scenario {
	return []Scenario{{
		Name:        ScenarioLoRA,
		Description: "32 LoRA adapters, Zipf(1.1) popularity, 8 workers batching at most 4 adapters each (20 ms swap-in).",
		Trace: TraceConfig{Spec: workload.LoRAAdapters{Options: workload.Options{Stream: true}, Adapters: 32, ZipfAlpha: 1.1,
			PrefixTokens: 256, SuffixTokens: 64, OutputTokens: 128}, Requests: requests, Seed: seed},
		Workers: 8,
		Engine:  &EngineOverrides{NumBlocks: 8192, MaxNumSeqs: 64, MaxLoRAs: 4, LoRASwapIn: 20 * time.Millisecond},
	}}
}
