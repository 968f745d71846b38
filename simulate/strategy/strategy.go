// Package strategy is the catalogue of routing strategies llb is measured
// with. A name ("rr", "hard", "hard@150", ...) stands for a rule shape, the
// rule's selector, whether Tier 1 and Tier 1.5 are on, and the Tier-1.5
// law with its static knobs: exactly what llbd is configured with. The
// discrete-event simulator (simulate/des) derives a ladder rule and a
// ladder.Env from a Strategy, the load harness (simulate/harness) the REST
// rule and llbd's process environment, so a name means the same
// configuration in both.
package strategy

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/peers"
)

// ErrConfig reports an unknown strategy name or an invalid strategy.
var ErrConfig = errors.New("strategy: invalid strategy")

// Shape is the rule shape a strategy routes with.
type Shape uint8

// Rule shapes.
const (
	// ShapePool is a role-less single pool (mode:4 without
	// pd_disagg_mode): the rule's selector, with Tier 1.5 first when
	// KVExact (kvExactMode 3).
	ShapePool Shape = iota
	// ShapePD is a P/D rule (Tier 0 → Tier 1 → Tier 1.5 → Tier 2): the
	// workers are its prefill endpoints. The harness adds decode workers;
	// the simulator runs the rule's single-pool equivalent.
	ShapePD
)

// String returns "pool" or "pd".
func (s Shape) String() string {
	if s == ShapePD {
		return "pd"
	}
	return "pool"
}

// Strategy is one routing policy under test.
type Strategy struct {
	// Name identifies the strategy in results ("rr", "hard", "hard@150").
	Name string
	// Shape is the rule shape.
	Shape Shape
	// Selector is the rule's sel (its REST number): the single-pool
	// selector, and the fallback after a Tier-1.5 miss with kvExactMode 3.
	Selector ladder.SelectorKind
	// KVExact turns Tier 1.5 on (see KVMode).
	KVExact bool
	// CacheAware turns Tier 1 (pd_cache_aware_mode, the radix trie) on;
	// ShapePD only.
	CacheAware bool
	// Law is the Tier-1.5 law, LOXILB_KV_LB_MODE; it matters only with
	// KVExact.
	Law ladder.LBMode
	// FactorPct is a static LOXILB_KV_MEAN_LOAD_FACTOR ((1+ε)·100, hard
	// law); 0 leaves llbd's default.
	FactorPct uint32
	// Lambda is a static LOXILB_KV_LOAD_PENALTY (λ, soft law); 0 leaves
	// llbd's default.
	Lambda uint32
	// HeadroomPct is a static LLB_KV_HEADROOM_PCT (headroom law); 0
	// leaves llbd's default (100).
	HeadroomPct uint32
	// Peer, when set, makes this another router's policy (simulate/peers)
	// instead of an llb configuration: every llb field above is ignored.
	Peer peers.Kind
	// Objective makes every request carry the run's TTFT objective (its
	// goodput objective) as llbd's X-Llb-Ttft-Objective-Ms: llb prefers an
	// endpoint predicted to meet it (ladder/objective.go). Named
	// "<name>+objective"; not for a peer.
	Objective bool
	// NoSettle sets LLB_KV_MISS_SETTLE=0 (headroom law): a miss on a light
	// fleet goes by KV use, as near saturation, instead of to its prompt's
	// home or the smallest frequency-weighted footprint (ladder/settle.go;
	// the default law before settling). Named "<name>+nosettle"; not for a
	// peer.
	NoSettle bool
}

// IsPeer reports whether the strategy is another router's policy.
func (s *Strategy) IsPeer() bool { return s.Peer != "" }

// Mode returns the Tier-1.5 law the strategy runs, or "" when Tier 1.5 is
// off (and for a peer).
func (s *Strategy) Mode() string {
	if !s.KVExact || s.IsPeer() {
		return ""
	}
	return s.Law.String()
}

// KVMode returns the rule's kvExactMode: off without KVExact, 3 (single
// pool) for ShapePool, 1 (prefill endpoints) for ShapePD.
func (s *Strategy) KVMode() ladder.KVExactMode {
	switch {
	case !s.KVExact:
		return ladder.KVOff
	case s.Shape == ShapePD:
		return ladder.KVPrefill
	}
	return ladder.KVSinglePool
}

// Env returns the routing knobs llbd runs the strategy with: llbd's
// defaults with the law and the static knobs applied.
func (s *Strategy) Env() ladder.Env {
	env := ladder.DefaultEnv()
	env.LBMode = s.Law
	if s.FactorPct != 0 {
		env.MeanLoadFactorPct = s.FactorPct
	}
	if s.Lambda != 0 {
		env.LoadPenalty = s.Lambda
	}
	if s.HeadroomPct != 0 {
		env.HeadroomPct = s.HeadroomPct
	}
	if s.NoSettle {
		env.MissSettle = false
	}
	return env
}

// EnvList returns the process environment llbd needs for the strategy, as
// sorted KEY=value strings: the law when Tier 1.5 is on and the static
// knobs set. Every other routing variable is left out, so llbd's defaults
// apply.
func (s *Strategy) EnvList() []string {
	var out []string
	if s.KVExact {
		out = append(out, ladder.EnvLBMode+"="+s.Law.String())
	}
	if s.FactorPct != 0 {
		out = append(out, ladder.EnvMeanLoadFactor+"="+strconv.FormatUint(uint64(s.FactorPct), 10))
	}
	if s.Lambda != 0 {
		out = append(out, ladder.EnvLoadPenalty+"="+strconv.FormatUint(uint64(s.Lambda), 10))
	}
	if s.HeadroomPct != 0 {
		out = append(out, ladder.EnvHeadroomPct+"="+strconv.FormatUint(uint64(s.HeadroomPct), 10))
	}
	if s.NoSettle {
		out = append(out, ladder.EnvMissSettle+"=0")
	}
	slices.Sort(out)
	return out
}

// Validate reports every problem of the strategy at once: a missing name,
// an unknown shape, and the knobs ladder.Env rejects.
func (s *Strategy) Validate() error {
	var errs []error
	if s.Name == "" {
		errs = append(errs, errors.New("no name"))
	}
	if s.Shape > ShapePD {
		errs = append(errs, fmt.Errorf("shape %d", s.Shape))
	}
	if s.IsPeer() {
		if _, err := peers.New(s.Peer, 1, 0, nil); err != nil {
			errs = append(errs, err)
		}
		if s.Shape != ShapePool || s.KVExact || s.CacheAware {
			errs = append(errs, errors.New("a peer policy runs on a plain pool, without llb's tiers"))
		}
		if s.Objective {
			errs = append(errs, errors.New("a peer policy reads no TTFT objective"))
		}
	}
	env := s.Env()
	if err := env.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("strategy %q: %w: %w", s.Name, ErrConfig, errors.Join(errs...))
}
