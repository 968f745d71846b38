package strategy

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/peers"
)

// Strategy names.
const (
	NameRR           = "rr"
	NameCHWBL        = "chwbl"
	NameTier1        = "tier1"
	NameOff          = "off"
	NameHard         = "hard"
	NameSoft         = "soft"
	NameAdaptive     = "adaptive"
	NameAdaptiveSoft = "adaptive-soft"
	NameHardCHWBL    = "hard+chwbl"
	NamePDHard       = "pd-hard"
	NameHeadroom     = "headroom"
	NameAuto         = "auto"
)

// kvPool is a kvExactMode-3 strategy with round robin behind a Tier-1.5
// miss (sel 0, the REST default).
func kvPool(name string, law ladder.LBMode) Strategy {
	return Strategy{Name: name, Shape: ShapePool, Selector: ladder.SelRR, KVExact: true, Law: law}
}

// All returns every named strategy, in report order: RR (sel 0), CHWBL
// (sel 8), Tier 1 only (P/D with pd_cache_aware_mode, no KV), KV-exact
// mode 3 with the off, hard, soft, adaptive and adaptive-soft laws and
// llb's default, headroom (RR behind a miss, default ε 175 and λ 32,
// headroom 100 %), auto (headroom with a self-tuned ε), hard with CHWBL
// behind a miss
// ("hard+chwbl": the same law, only the rule's sel differs), and P/D
// kvExactMode 1 with hard (no trie; Tier 2 behind a miss; spill relief
// off, its P/D default).
func All() []Strategy {
	hardCHWBL := kvPool(NameHardCHWBL, ladder.LBHard)
	hardCHWBL.Selector = ladder.SelCHWBL
	return []Strategy{
		{Name: NameRR, Shape: ShapePool, Selector: ladder.SelRR},
		{Name: NameCHWBL, Shape: ShapePool, Selector: ladder.SelCHWBL},
		{Name: NameTier1, Shape: ShapePD, Selector: ladder.SelRR, CacheAware: true},
		kvPool(NameOff, ladder.LBOff),
		kvPool(NameHard, ladder.LBHard),
		kvPool(NameSoft, ladder.LBSoft),
		kvPool(NameAdaptive, ladder.LBAdaptive),
		kvPool(NameAdaptiveSoft, ladder.LBAdaptiveSoft),
		kvPool(NameHeadroom, ladder.LBHeadroom),
		kvPool(NameAuto, ladder.LBAuto),
		hardCHWBL,
		{Name: NamePDHard, Shape: ShapePD, Selector: ladder.SelRR, KVExact: true, Law: ladder.LBHard},
	}
}

// Peers returns the other routers' policies (simulate/peers), in report
// order, named by their kind ("dynamo", "llm-d", "sglang", "aibrix",
// "kubeai").
func Peers() []Strategy {
	var out []Strategy
	for _, k := range peers.Kinds() {
		out = append(out, Strategy{Name: string(k), Shape: ShapePool, Peer: k})
	}
	return out
}

// HardWithFactor is the mode-3 hard law with a static
// LOXILB_KV_MEAN_LOAD_FACTOR of factorPct ((1+ε)·100), named
// "hard@<pct>". Validate reports a factor outside 100–1000.
func HardWithFactor(factorPct uint32) Strategy {
	s := kvPool(NameHard+"@"+strconv.FormatUint(uint64(factorPct), 10), ladder.LBHard)
	s.FactorPct = factorPct
	return s
}

// SoftWithLambda is the mode-3 soft law with a static
// LOXILB_KV_LOAD_PENALTY of lambda, named "soft@<λ>". Validate reports a
// λ outside 1–100000.
func SoftWithLambda(lambda uint32) Strategy {
	s := kvPool(NameSoft+"@"+strconv.FormatUint(uint64(lambda), 10), ladder.LBSoft)
	s.Lambda = lambda
	return s
}

// HeadroomWithPct is the mode-3 headroom law with a static
// LLB_KV_HEADROOM_PCT of pct, named "headroom@<pct>". Validate reports a
// pct above 100.
func HeadroomWithPct(pct uint32) Strategy {
	s := kvPool(NameHeadroom+"@"+strconv.FormatUint(uint64(pct), 10), ladder.LBHeadroom)
	s.HeadroomPct = pct
	return s
}

// ObjectiveSuffix names a strategy whose requests carry the run's TTFT
// objective (Strategy.Objective): "headroom+objective".
const ObjectiveSuffix = "+objective"

// WithObjective is s with its requests carrying the run's TTFT objective,
// named "<name>+objective".
func WithObjective(s Strategy) Strategy {
	s.Name += ObjectiveSuffix
	s.Objective = true
	return s
}

// NoSettleSuffix names a headroom-law strategy whose misses go by KV use
// on a light fleet too (Strategy.NoSettle): "headroom+nosettle".
const NoSettleSuffix = "+nosettle"

// ByName returns a named strategy (see All), "hard@<pct>", "soft@<λ>" or
// "headroom@<pct>", any llb one of them followed by "+objective"
// (WithObjective), or a headroom-law one followed by "+nosettle".
func ByName(name string) (Strategy, error) {
	if base, ok := strings.CutSuffix(name, NoSettleSuffix); ok {
		s, err := ByName(base)
		if err == nil && !s.IsPeer() && s.KVExact && s.Law.HeadroomLaw() && !s.NoSettle && !s.Objective {
			s.Name += NoSettleSuffix
			s.NoSettle = true
			return s, nil
		}
		return Strategy{}, fmt.Errorf("strategy %q (want a headroom-law strategy followed by %s): %w", name, NoSettleSuffix, ErrConfig)
	}
	if base, ok := strings.CutSuffix(name, ObjectiveSuffix); ok {
		s, err := ByName(base)
		if err == nil && !s.IsPeer() && !s.Objective {
			return WithObjective(s), nil
		}
		return Strategy{}, fmt.Errorf("strategy %q (want an llb strategy followed by %s): %w", name, ObjectiveSuffix, ErrConfig)
	}
	all := append(All(), Peers()...)
	for _, k := range peers.LoRAKinds() {
		all = append(all, Strategy{Name: string(k), Shape: ShapePool, Peer: k})
	}
	for _, s := range all {
		if s.Name == name {
			return s, nil
		}
	}
	base, arg, ok := strings.Cut(name, "@")
	// A knob of 0 would mean "llbd's default": no valid static value.
	if n, err := strconv.ParseUint(arg, 10, 32); ok && err == nil && n > 0 {
		var s Strategy
		switch base {
		case NameHard:
			s = HardWithFactor(uint32(n))
		case NameSoft:
			s = SoftWithLambda(uint32(n))
		case NameHeadroom:
			s = HeadroomWithPct(uint32(n))
		}
		if s.Name != "" && s.Validate() == nil {
			return s, nil
		}
	}
	return Strategy{}, fmt.Errorf("strategy %q (want rr, chwbl, tier1, off, hard, soft, adaptive, adaptive-soft, headroom, auto, hard+chwbl, pd-hard, hard@<100..1000>, soft@<1..100000>, headroom@<1..100>, any of those followed by +objective, headroom or auto followed by +nosettle, or a peer: dynamo, llm-d, sglang, aibrix, kubeai, llm-d-lora, aibrix-lora): %w", name, ErrConfig)
}

// ByNames resolves a list of names, reporting every unknown or repeated
// one at once.
func ByNames(names []string) ([]Strategy, error) {
	var out []Strategy
	var bad []string
	seen := map[string]bool{}
	for _, n := range names {
		s, err := ByName(n)
		if err != nil || seen[n] {
			bad = append(bad, n)
			continue
		}
		seen[n] = true
		out = append(out, s)
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("strategies %q unknown or repeated: %w", bad, ErrConfig)
	}
	return out, nil
}
