package des

import (
	"errors"
	"testing"

	"github.com/llbproject/llb/ladder"
)

func TestStrategyByName_BuildsEveryStandardAndSweepStrategy(t *testing.T) {
	for _, tc := range []struct {
		give       string
		wantShape  Shape
		wantSel    ladder.SelectorKind
		wantKV     bool
		wantMode   string
		wantFactor uint32
		wantLambda uint32
	}{
		{give: "rr", wantShape: ShapePool, wantSel: ladder.SelRR, wantFactor: 175, wantLambda: 32},
		{give: "chwbl", wantShape: ShapePool, wantSel: ladder.SelCHWBL, wantFactor: 175, wantLambda: 32},
		{give: "tier1", wantShape: ShapePD, wantFactor: 175, wantLambda: 32},
		{give: "off", wantShape: ShapePool, wantKV: true, wantMode: "off", wantFactor: 175, wantLambda: 32},
		{give: "hard", wantShape: ShapePool, wantKV: true, wantMode: "hard", wantFactor: 175, wantLambda: 32},
		{give: "soft", wantShape: ShapePool, wantKV: true, wantMode: "soft", wantFactor: 175, wantLambda: 32},
		{give: "adaptive", wantShape: ShapePool, wantKV: true, wantMode: "adaptive", wantFactor: 175, wantLambda: 32},
		{give: "adaptive-soft", wantShape: ShapePool, wantKV: true, wantMode: "adaptive-soft", wantFactor: 175, wantLambda: 32},
		{give: "hard+chwbl", wantShape: ShapePool, wantSel: ladder.SelCHWBL, wantKV: true, wantMode: "hard", wantFactor: 175, wantLambda: 32},
		{give: "pd-hard", wantShape: ShapePD, wantKV: true, wantMode: "hard", wantFactor: 175, wantLambda: 32},
		{give: "hard@150", wantShape: ShapePool, wantKV: true, wantMode: "hard", wantFactor: 150, wantLambda: 32},
		{give: "soft@50000", wantShape: ShapePool, wantKV: true, wantMode: "soft", wantFactor: 175, wantLambda: 50000},
	} {
		t.Run(tc.give, func(t *testing.T) {
			s, err := StrategyByName(tc.give)
			if err != nil {
				t.Fatal(err)
			}
			if s.Name != tc.give || s.Shape != tc.wantShape || s.Selector != tc.wantSel || s.KVExact != tc.wantKV || s.Mode() != tc.wantMode ||
				s.Env.MeanLoadFactorPct != tc.wantFactor || s.Env.LoadPenalty != tc.wantLambda {
				t.Fatalf("got %+v", s)
			}
			if err := s.Validate(); err != nil {
				t.Fatal(err)
			}
			svc, eps := s.rule(4)
			if _, err := ladder.NewRouter(svc, eps, s.Env, ladder.RouterConfig{}); err != nil {
				t.Fatalf("the ladder rejects the rule: %v", err)
			}
			wantEps := 4
			if tc.wantShape == ShapePD {
				wantEps = 5 // four prefill workers and the virtual decode endpoint
			}
			if len(eps) != wantEps {
				t.Fatalf("%d endpoints; want %d", len(eps), wantEps)
			}
		})
	}
}

func TestStrategyByName_RejectsUnknownNames(t *testing.T) {
	for _, give := range []string{"", "random", "hard@", "hard@x", "hard@50", "soft@0", "rr@3", "off@200"} {
		t.Run(give, func(t *testing.T) {
			if _, err := StrategyByName(give); !errors.Is(err, ErrConfig) {
				t.Fatalf("got %v; want ErrConfig", err)
			}
		})
	}
}
