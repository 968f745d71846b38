package actors

import (
	"strings"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
)

// The router's side of the LoRA policy (ladder.LoRAChoice): each endpoint's
// vllm:lora_requests_info as last scraped, plus the adapters of the
// requests this router sent there since, which the gauge may not show yet.

// loraEP is one endpoint's adapter state.
type loraEP struct {
	known   bool
	max     int
	running []string // the gauge's running adapters
	waiting []string // the gauge's waiting adapters
	own     map[string]int
}

// loraGauge records endpoint ep's scraped gauge.
func (c *routerCore) loraGauge(ep int, l inventory.LoRAInfo) {
	if c.lora == nil {
		if !l.Known {
			return
		}
		c.lora = make([]loraEP, len(c.views))
	}
	e := &c.lora[ep]
	e.known, e.max = l.Known, l.MaxLoRA
	e.running, e.waiting = splitAdapters(l.Running), splitAdapters(l.Waiting)
}

func splitAdapters(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// adapterOf returns the LoRA adapter a model name is ("" for a base model).
func (c *routerCore) adapterOf(model string) string {
	if model == "" {
		return ""
	}
	if _, ok := c.servedModels().Adapter(model); ok {
		return model
	}
	return ""
}

// loadable is the endpoints that could load adapter model at runtime
// (LLB_LORA_RUNTIME_LOAD), as a mask.
func (c *routerCore) loadable(model string) uint32 {
	if !c.cfg.Env.LoRARuntimeLoad {
		return 0
	}
	return uint32(c.servedModels().Loadable(model, len(c.views)))
}

// loraMask returns the endpoints the LoRA policy keeps a request for an
// adapter from (beyond excl, what is excluded already), and records the
// policy's outcome on m.
func (c *routerCore) loraMask(m *routeMsg, excl uint32) uint32 {
	a := c.adapterOf(m.rr.Model)
	if a == "" || !c.cfg.Env.LoRAAffinity || c.lora == nil {
		return 0
	}
	loadable := c.loadable(a)
	cands := make([]ladder.LoRACandidate, len(c.views))
	for i := range cands {
		e := &c.lora[i]
		cd := &cands[i]
		cd.Eligible = !c.unusable(i, excl)
		cd.Known, cd.MaxLoRA, cd.Queued = e.known, e.max, c.views[i].QueuedRequests
		cd.Loadable = loadable&(1<<uint(i)) != 0
		seen := map[string]bool{}
		for _, s := range e.running {
			seen[s] = true
			cd.Resident = cd.Resident || s == a
		}
		for _, s := range e.waiting {
			seen[s] = true
			if s == a {
				cd.Resident, cd.Waiting = true, true
			}
		}
		for s, n := range e.own {
			if n > 0 {
				seen[s] = true
				cd.Resident = cd.Resident || s == a
			}
		}
		cd.Adapters = len(seen)
	}
	set, why := ladder.LoRAChoice(cands)
	m.lora = why
	return ^uint32(set)
}

// loraAdmitted counts an admitted request's adapter on its endpoint.
func (c *routerCore) loraAdmitted(tk *ticket, model string) {
	a := c.adapterOf(model)
	if a == "" || c.lora == nil {
		return
	}
	ep := tk.t.Prefill
	if tk.t.Decode >= 0 {
		ep = tk.t.Decode
	}
	e := &c.lora[ep]
	if e.own == nil {
		e.own = map[string]int{}
	}
	e.own[a]++
	tk.adapter, tk.adapterEP = a, ep
}

// loraFinished uncounts a finished request's adapter.
func (c *routerCore) loraFinished(tk *ticket) {
	if tk.adapter == "" || c.lora == nil {
		return
	}
	e := &c.lora[tk.adapterEP]
	if e.own[tk.adapter]--; e.own[tk.adapter] <= 0 {
		delete(e.own, tk.adapter)
	}
}
