package harness

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Shape is the rule shape a strategy is served with.
type Shape uint8

// Rule shapes.
const (
	// ShapePool is a role-less single pool (mode:4 without pd_disagg_mode)
	// over the fleet's workers.
	ShapePool Shape = iota
	// ShapePD is a P/D rule: the fleet's workers are its prefill endpoints
	// (ep_role 1) and separate decode workers its decode endpoints
	// (ep_role 2); llbd runs the two-leg NIXL protocol.
	ShapePD
)

// String returns "pool" or "pd".
func (s Shape) String() string {
	if s == ShapePD {
		return "pd"
	}
	return "pool"
}

// REST selector numbers (serviceArguments.sel).
const (
	// SelRR is round robin, the REST default.
	SelRR = 0
	// SelCHWBL is consistent hashing with bounded loads over the prefix
	// hash.
	SelCHWBL = 8
)

// Strategy is one routing policy under test, in the terms llbd is
// configured with: the rule's shape and keys, and the process environment.
// Names follow simulate/des, so a harness run and a simulated run of the
// same name are the same configuration.
type Strategy struct {
	// Name identifies the strategy in results ("rr", "hard", "hard@150").
	Name string
	// Shape is the rule shape.
	Shape Shape
	// Selector is serviceArguments.sel.
	Selector int
	// KVExact turns Tier 1.5 on: kvExactMode 3 for ShapePool, 1 for
	// ShapePD.
	KVExact bool
	// CacheAware is pd_cache_aware_mode (the Tier-1 radix trie); ShapePD
	// only.
	CacheAware bool
	// Env is the llbd process environment the strategy needs
	// (LOXILB_KV_LB_MODE, LOXILB_KV_MEAN_LOAD_FACTOR, ...). Every other
	// routing variable is left unset, so llbd's defaults apply.
	Env map[string]string
}

// Mode returns the Tier-1.5 law ("" when Tier 1.5 is off).
func (s *Strategy) Mode() string {
	if !s.KVExact {
		return ""
	}
	if m := s.Env[EnvLBMode]; m != "" {
		return m
	}
	return "hard"
}

// FactorPct returns the static LOXILB_KV_MEAN_LOAD_FACTOR the strategy sets
// (0 when it leaves the default).
func (s *Strategy) FactorPct() uint32 { return envUint(s.Env[EnvMeanLoadFactor]) }

// Lambda returns the static LOXILB_KV_LOAD_PENALTY the strategy sets (0
// when it leaves the default).
func (s *Strategy) Lambda() uint32 { return envUint(s.Env[EnvLoadPenalty]) }

func envUint(v string) uint32 {
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return 0
	}
	return uint32(n)
}

// EnvList returns Env as sorted KEY=value strings.
func (s *Strategy) EnvList() []string {
	out := make([]string, 0, len(s.Env))
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		out = append(out, k+"="+s.Env[k])
	}
	return out
}

// Routing environment variables the harness sets or scrubs.
const (
	// EnvLBMode is the Tier-1.5 law.
	EnvLBMode = "LOXILB_KV_LB_MODE"
	// EnvMeanLoadFactor is hard mode's (1+ε)·100.
	EnvMeanLoadFactor = "LOXILB_KV_MEAN_LOAD_FACTOR"
	// EnvLoadPenalty is soft mode's λ.
	EnvLoadPenalty = "LOXILB_KV_LOAD_PENALTY"
)

// Standard strategy names (the same as simulate/des's).
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
)

// kvPool is a kvExactMode-3 strategy with round robin behind a Tier-1.5
// miss.
func kvPool(name, mode string) Strategy {
	return Strategy{Name: name, Shape: ShapePool, Selector: SelRR, KVExact: true, Env: map[string]string{EnvLBMode: mode}}
}

// AllStrategies returns every named strategy, in report order: RR (sel 0),
// CHWBL (sel 8), Tier 1 only (P/D with pd_cache_aware_mode, no KV), KV-exact
// mode 3 with the off, hard, soft, adaptive and adaptive-soft laws (RR
// behind a miss, default ε and λ), hard with CHWBL behind a miss, and P/D
// kvExactMode 1 with hard.
func AllStrategies() []Strategy {
	hardCHWBL := kvPool(NameHardCHWBL, "hard")
	hardCHWBL.Selector = SelCHWBL
	return []Strategy{
		{Name: NameRR, Shape: ShapePool, Selector: SelRR},
		{Name: NameCHWBL, Shape: ShapePool, Selector: SelCHWBL},
		{Name: NameTier1, Shape: ShapePD, Selector: SelRR, CacheAware: true},
		kvPool(NameOff, "off"),
		kvPool(NameHard, "hard"),
		kvPool(NameSoft, "soft"),
		kvPool(NameAdaptive, "adaptive"),
		kvPool(NameAdaptiveSoft, "adaptive-soft"),
		hardCHWBL,
		{Name: NamePDHard, Shape: ShapePD, Selector: SelRR, KVExact: true, Env: map[string]string{EnvLBMode: "hard"}},
	}
}

// DefaultStrategyNames is issue 7's side-by-side set.
func DefaultStrategyNames() []string {
	return []string{NameRR, NameCHWBL, NameTier1, NameOff, NameHard, NameSoft, NameAdaptive, NameAdaptiveSoft}
}

// StrategyByName returns a named strategy, "hard@<pct>" (hard with a static
// LOXILB_KV_MEAN_LOAD_FACTOR) or "soft@<λ>" (soft with a static
// LOXILB_KV_LOAD_PENALTY).
func StrategyByName(name string) (Strategy, error) {
	for _, s := range AllStrategies() {
		if s.Name == name {
			return s, nil
		}
	}
	base, arg, ok := strings.Cut(name, "@")
	if ok {
		n, err := strconv.ParseUint(arg, 10, 32)
		switch {
		case err != nil:
		case base == NameHard && n >= 100 && n <= 1000:
			s := kvPool(name, "hard")
			s.Env[EnvMeanLoadFactor] = arg
			return s, nil
		case base == NameSoft && n >= 1 && n <= 100000:
			s := kvPool(name, "soft")
			s.Env[EnvLoadPenalty] = arg
			return s, nil
		}
	}
	return Strategy{}, fmt.Errorf("strategy %q (want rr, chwbl, tier1, off, hard, soft, adaptive, adaptive-soft, hard+chwbl, pd-hard, hard@<100..1000>, soft@<1..100000>): %w", name, ErrConfig)
}

// StrategiesByName resolves a list of names, reporting every unknown one.
func StrategiesByName(names []string) ([]Strategy, error) {
	var out []Strategy
	var bad []string
	seen := map[string]bool{}
	for _, n := range names {
		s, err := StrategyByName(n)
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
