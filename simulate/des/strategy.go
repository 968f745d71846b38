package des

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/llbproject/llb/ladder"
)

// Shape is the rule shape a strategy routes with.
type Shape uint8

// Rule shapes.
const (
	// ShapePool is a role-less single pool (mode:4 without pd_disagg_mode):
	// the rule's selector, with Tier 1.5 first when kvExactMode is 3.
	ShapePool Shape = iota
	// ShapePD is the P/D ladder (Tier 0 → Tier 1 → Tier 1.5 → Tier 2),
	// simulated in its single-pool equivalent: every worker is a prefill
	// endpoint, one virtual decode endpoint completes the rule, and the
	// whole request (prefill and decode) runs on the chosen prefill worker.
	ShapePD
)

// String returns "pool" or "pd".
func (s Shape) String() string {
	if s == ShapePD {
		return "pd"
	}
	return "pool"
}

// Strategy is one routing policy under test: a rule shape, the rule's knobs
// and the process env, exactly what llbd would be configured with. The
// simulator builds a real ladder.Router from it.
type Strategy struct {
	// Name identifies the strategy in results ("rr", "hard", "hard@150").
	Name string
	// Shape is the rule shape.
	Shape Shape
	// Selector is the rule's sel: the single-pool selector, and the
	// fallback after a Tier-1.5 miss with kvExactMode 3.
	Selector ladder.SelectorKind
	// KVExact turns Tier 1.5 on: kvExactMode 3 for ShapePool, 1 for
	// ShapePD.
	KVExact bool
	// CacheAware turns Tier 1 (the radix trie) on; ShapePD only.
	CacheAware bool
	// Env holds the process knobs (LOXILB_KV_*): law, ε, λ, spill relief,
	// cold-start seeding, minimum match.
	Env ladder.Env
}

// Mode returns the Tier-1.5 law the strategy runs, or "" when Tier 1.5 is
// off.
func (s *Strategy) Mode() string {
	if !s.KVExact {
		return ""
	}
	return s.Env.LBMode.String()
}

// Validate checks the strategy by building its rule for two workers.
func (s *Strategy) Validate() error {
	if s.Name == "" {
		return fmt.Errorf("strategy without a name: %w", ErrConfig)
	}
	svc, eps := s.rule(2)
	if err := ladder.ValidateRule(&svc, eps); err != nil {
		return fmt.Errorf("strategy %q: %w: %w", s.Name, ErrConfig, err)
	}
	if err := s.Env.Validate(); err != nil {
		return fmt.Errorf("strategy %q: %w: %w", s.Name, ErrConfig, err)
	}
	return nil
}

// rule builds the rule for n workers. A P/D rule gets n prefill endpoints
// (indexes 0..n-1, the workers) and one decode endpoint (index n).
func (s *Strategy) rule(n int) (ladder.ServiceSpec, []ladder.EndpointSpec) {
	svc := ladder.ServiceSpec{
		Name:                s.Name,
		Selector:            s.Selector,
		BalanceAbsThreshold: ladder.DefaultBalanceAbsThreshold,
	}
	eps := make([]ladder.EndpointSpec, 0, n+1)
	for i := range n {
		eps = append(eps, ladder.EndpointSpec{Addr: workerAddr(i), Weight: 1})
	}
	switch s.Shape {
	case ShapePD:
		svc.PDDisagg = true
		svc.CacheAware = s.CacheAware
		if s.KVExact {
			svc.KVExactMode = ladder.KVPrefill
		}
		for i := range eps {
			eps[i].Role = ladder.RolePrefill
		}
		eps = append(eps, ladder.EndpointSpec{Addr: workerAddr(n), Role: ladder.RoleDecode, Weight: 1})
	default:
		if s.KVExact {
			svc.KVExactMode = ladder.KVSinglePool
		}
	}
	return svc, eps
}

// workerAddr is worker i's address: it seeds the CHWBL ring's virtual
// nodes, as the endpoint's ip:port does in llbd.
func workerAddr(i int) string { return "10.0.0." + strconv.Itoa(i+1) + ":8000" }

// Standard strategy names.
const (
	NameRR           = "rr"
	NameCHWBL        = "chwbl"
	NameTier1        = "tier1"
	NameOff          = "off"
	NameHard         = "hard"
	NameSoft         = "soft"
	NameAdaptive     = "adaptive"
	NameAdaptiveSoft = "adaptive-soft"
	NamePDHard       = "pd-hard"
	NameHardCHWBL    = "hard+chwbl"
)

// kvPool is a kvExactMode-3 strategy with round robin behind a Tier-1.5
// miss (sel 0, the REST default).
func kvPool(name string, mode ladder.LBMode) Strategy {
	env := ladder.DefaultEnv()
	env.LBMode = mode
	return Strategy{Name: name, Shape: ShapePool, Selector: ladder.SelRR, KVExact: true, Env: env}
}

// StandardStrategies returns the side-by-side set, in report order: RR
// (sel 0), CHWBL (sel 8), Tier 1 only (P/D cache-aware trie, no KV),
// KV-exact mode 3 with off, hard, soft, adaptive and adaptive-soft (default
// ε 175, λ 32, RR behind a miss), hard with CHWBL behind a miss
// ("hard+chwbl": the same law, only the rule's sel differs), and P/D
// kvExactMode 1 with hard (no trie; Tier 2 behind a miss; spill relief
// off, its P/D default).
func StandardStrategies() []Strategy {
	def := ladder.DefaultEnv()
	hardCHWBL := kvPool(NameHardCHWBL, ladder.LBHard)
	hardCHWBL.Selector = ladder.SelCHWBL
	return []Strategy{
		{Name: NameRR, Shape: ShapePool, Selector: ladder.SelRR, Env: def},
		{Name: NameCHWBL, Shape: ShapePool, Selector: ladder.SelCHWBL, Env: def},
		{Name: NameTier1, Shape: ShapePD, CacheAware: true, Env: def},
		kvPool(NameOff, ladder.LBOff),
		kvPool(NameHard, ladder.LBHard),
		kvPool(NameSoft, ladder.LBSoft),
		kvPool(NameAdaptive, ladder.LBAdaptive),
		kvPool(NameAdaptiveSoft, ladder.LBAdaptiveSoft),
		hardCHWBL,
		{Name: NamePDHard, Shape: ShapePD, KVExact: true, Env: def},
	}
}

// HardWithFactor is the mode-3 hard law with a static
// LOXILB_KV_MEAN_LOAD_FACTOR of factorPct ((1+ε)·100), named "hard@<pct>".
func HardWithFactor(factorPct uint32) Strategy {
	s := kvPool(NameHard+"@"+strconv.Itoa(int(factorPct)), ladder.LBHard)
	s.Env.MeanLoadFactorPct = factorPct
	return s
}

// SoftWithLambda is the mode-3 soft law with a static
// LOXILB_KV_LOAD_PENALTY of lambda, named "soft@<λ>".
func SoftWithLambda(lambda uint32) Strategy {
	s := kvPool(NameSoft+"@"+strconv.Itoa(int(lambda)), ladder.LBSoft)
	s.Env.LoadPenalty = lambda
	return s
}

// StrategyByName returns a standard strategy, "hard@<pct>" or
// "soft@<λ>".
func StrategyByName(name string) (Strategy, error) {
	for _, s := range StandardStrategies() {
		if s.Name == name {
			return s, nil
		}
	}
	base, arg, ok := strings.Cut(name, "@")
	if ok {
		n, err := strconv.ParseUint(arg, 10, 32)
		if err == nil {
			var s Strategy
			switch base {
			case NameHard:
				s = HardWithFactor(uint32(n))
			case NameSoft:
				s = SoftWithLambda(uint32(n))
			default:
				return Strategy{}, fmt.Errorf("strategy %q: only hard@<pct> and soft@<lambda> take a value: %w", name, ErrConfig)
			}
			if err := s.Validate(); err != nil {
				return Strategy{}, err
			}
			return s, nil
		}
	}
	return Strategy{}, fmt.Errorf("strategy %q (want rr, chwbl, tier1, off, hard, soft, adaptive, adaptive-soft, hard+chwbl, pd-hard, hard@<pct>, soft@<lambda>): %w", name, ErrConfig)
}
