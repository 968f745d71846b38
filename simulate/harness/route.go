package harness

import (
	"strconv"
	"strings"
)

// Route is what X-Llb-Route says about one request, e.g.
//
//	tier=1.5 prefill=2 decode=-1 via=no_overlap spill relief prefill_addr=127.0.7.4:8000 retries=0
type Route struct {
	// Tier is the deciding stage ("0", "1", "1.5", "2", "rescue", or
	// "sel:<selector>" for a single-pool selector, as simulate/des keys
	// its tier mix); "none" when llb answered without a decision.
	Tier string
	// Prefill and Decode are the endpoint indexes in the rule's endpoint
	// list (-1 when none).
	Prefill, Decode int
	// Via is the fall-through trace ("session_miss,no_overlap").
	Via string
	// Spill, Relief, ColdSeed, Saturated and BoundWalk are the decision's
	// flags.
	Spill, Relief, ColdSeed, Saturated, BoundWalk bool
	// Retries is how often llbd retried before the first byte.
	Retries int
	// Engine is the rule's engine when it is not vLLM ("sglang",
	// "trtllm"); "" otherwise.
	Engine string
	// Error is llb's error code when it answered itself ("tier=none
	// error=...").
	Error string
	// OK is false when the header was absent or did not parse.
	OK bool
}

// ParseRoute parses an X-Llb-Route value; unknown words are ignored (the
// header may grow).
func ParseRoute(v string) Route {
	r := Route{Prefill: -1, Decode: -1}
	if v == "" {
		return r
	}
	sel := ""
	for _, f := range strings.Fields(v) {
		k, val, kv := strings.Cut(f, "=")
		if !kv {
			switch f {
			case "spill":
				r.Spill = true
			case "relief":
				r.Relief = true
			case "cold_seed":
				r.ColdSeed = true
			case "saturated":
				r.Saturated = true
			case "bound_walk":
				r.BoundWalk = true
			}
			continue
		}
		switch k {
		case "tier":
			r.Tier, r.OK = val, true
		case "sel":
			sel = val
		case "prefill":
			r.Prefill = atoiOr(val, -1)
		case "decode":
			r.Decode = atoiOr(val, -1)
		case "via":
			r.Via = val
		case "retries":
			r.Retries = atoiOr(val, 0)
		case "engine":
			r.Engine = val
		case "error":
			r.Error = val
		}
	}
	if r.Tier == "sel" && sel != "" {
		r.Tier = "sel:" + sel
	}
	return r
}

func atoiOr(s string, def int) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return def
	}
	return n
}
