package strategy

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/llbproject/llb/ladder"
)

func TestByName_KnowsTheCatalogueAndKnobVariants(t *testing.T) {
	tests := []struct {
		give       string
		wantShape  Shape
		wantSel    ladder.SelectorKind
		wantKV     ladder.KVExactMode
		wantAware  bool
		wantMode   string
		wantFactor uint32 // of Env: llbd's default unless set
		wantLambda uint32
		wantEnv    []string
		// wantObjective: the requests carry the run's TTFT objective.
		wantObjective bool
		// wantNoSettle: LLB_KV_MISS_SETTLE is off (on by default).
		wantNoSettle bool
	}{
		{give: "rr", wantShape: ShapePool, wantSel: ladder.SelRR, wantFactor: 175, wantLambda: 32},
		{give: "chwbl", wantShape: ShapePool, wantSel: ladder.SelCHWBL, wantFactor: 175, wantLambda: 32},
		{give: "tier1", wantShape: ShapePD, wantSel: ladder.SelRR, wantAware: true, wantFactor: 175, wantLambda: 32},
		{give: "off", wantShape: ShapePool, wantKV: ladder.KVSinglePool, wantMode: "off", wantFactor: 175, wantLambda: 32,
			wantEnv: []string{"LOXILB_KV_LB_MODE=off"}},
		{give: "hard", wantShape: ShapePool, wantKV: ladder.KVSinglePool, wantMode: "hard", wantFactor: 175, wantLambda: 32,
			wantEnv: []string{"LOXILB_KV_LB_MODE=hard"}},
		{give: "soft", wantShape: ShapePool, wantKV: ladder.KVSinglePool, wantMode: "soft", wantFactor: 175, wantLambda: 32,
			wantEnv: []string{"LOXILB_KV_LB_MODE=soft"}},
		{give: "adaptive", wantShape: ShapePool, wantKV: ladder.KVSinglePool, wantMode: "adaptive", wantFactor: 175, wantLambda: 32,
			wantEnv: []string{"LOXILB_KV_LB_MODE=adaptive"}},
		{give: "adaptive-soft", wantShape: ShapePool, wantKV: ladder.KVSinglePool, wantMode: "adaptive-soft", wantFactor: 175, wantLambda: 32,
			wantEnv: []string{"LOXILB_KV_LB_MODE=adaptive-soft"}},
		{give: "headroom", wantShape: ShapePool, wantKV: ladder.KVSinglePool, wantMode: "headroom", wantFactor: 175, wantLambda: 32,
			wantEnv: []string{"LOXILB_KV_LB_MODE=headroom"}},
		{give: "headroom@50", wantShape: ShapePool, wantKV: ladder.KVSinglePool, wantMode: "headroom", wantFactor: 175, wantLambda: 32,
			wantEnv: []string{"LLB_KV_HEADROOM_PCT=50", "LOXILB_KV_LB_MODE=headroom"}},
		{give: "hard+chwbl", wantShape: ShapePool, wantSel: ladder.SelCHWBL, wantKV: ladder.KVSinglePool, wantMode: "hard", wantFactor: 175, wantLambda: 32,
			wantEnv: []string{"LOXILB_KV_LB_MODE=hard"}},
		{give: "pd-hard", wantShape: ShapePD, wantKV: ladder.KVPrefill, wantMode: "hard", wantFactor: 175, wantLambda: 32,
			wantEnv: []string{"LOXILB_KV_LB_MODE=hard"}},
		{give: "hard@150", wantShape: ShapePool, wantKV: ladder.KVSinglePool, wantMode: "hard", wantFactor: 150, wantLambda: 32,
			wantEnv: []string{"LOXILB_KV_LB_MODE=hard", "LOXILB_KV_MEAN_LOAD_FACTOR=150"}},
		{give: "soft@50000", wantShape: ShapePool, wantKV: ladder.KVSinglePool, wantMode: "soft", wantFactor: 175, wantLambda: 50000,
			wantEnv: []string{"LOXILB_KV_LB_MODE=soft", "LOXILB_KV_LOAD_PENALTY=50000"}},
		{give: "headroom+objective", wantShape: ShapePool, wantKV: ladder.KVSinglePool, wantMode: "headroom", wantFactor: 175, wantLambda: 32,
			wantEnv: []string{"LOXILB_KV_LB_MODE=headroom"}, wantObjective: true},
		{give: "hard@150+objective", wantShape: ShapePool, wantKV: ladder.KVSinglePool, wantMode: "hard", wantFactor: 150, wantLambda: 32,
			wantEnv: []string{"LOXILB_KV_LB_MODE=hard", "LOXILB_KV_MEAN_LOAD_FACTOR=150"}, wantObjective: true},
		{give: "rr+objective", wantShape: ShapePool, wantSel: ladder.SelRR, wantFactor: 175, wantLambda: 32, wantObjective: true},
		{give: "headroom+nosettle", wantShape: ShapePool, wantKV: ladder.KVSinglePool, wantMode: "headroom", wantFactor: 175, wantLambda: 32,
			wantEnv: []string{"LLB_KV_MISS_SETTLE=0", "LOXILB_KV_LB_MODE=headroom"}, wantNoSettle: true},
		{give: "auto+nosettle+objective", wantShape: ShapePool, wantKV: ladder.KVSinglePool, wantMode: "auto", wantFactor: 175, wantLambda: 32,
			wantEnv: []string{"LLB_KV_MISS_SETTLE=0", "LOXILB_KV_LB_MODE=auto"}, wantObjective: true, wantNoSettle: true},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			s, err := ByName(tt.give)
			if err != nil {
				t.Fatal(err)
			}
			if s.Name != tt.give || s.Shape != tt.wantShape || s.Selector != tt.wantSel || s.KVMode() != tt.wantKV ||
				s.KVExact != (tt.wantKV != ladder.KVOff) || s.CacheAware != tt.wantAware || s.Mode() != tt.wantMode || s.Objective != tt.wantObjective {
				t.Fatalf("got %+v (mode %q, kvExactMode %d); want shape %v sel %v kvExactMode %d cache-aware %v mode %q",
					s, s.Mode(), s.KVMode(), tt.wantShape, tt.wantSel, tt.wantKV, tt.wantAware, tt.wantMode)
			}
			if env := s.Env(); env.MeanLoadFactorPct != tt.wantFactor || env.LoadPenalty != tt.wantLambda || env.MissSettle == tt.wantNoSettle {
				t.Fatalf("env factor %d λ %d settle %v; want %d, %d and %v", env.MeanLoadFactorPct, env.LoadPenalty, env.MissSettle, tt.wantFactor, tt.wantLambda, !tt.wantNoSettle)
			}
			if got := s.EnvList(); !slices.Equal(got, tt.wantEnv) {
				t.Fatalf("env list %q; want %q", got, tt.wantEnv)
			}
			if err := s.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestAll_IsEveryNameOnceInReportOrder(t *testing.T) {
	var got []string
	for _, s := range All() {
		got = append(got, s.Name)
	}
	want := []string{NameRR, NameCHWBL, NameTier1, NameOff, NameHard, NameSoft, NameAdaptive, NameAdaptiveSoft, NameHeadroom, NameAuto, NameHardCHWBL, NamePDHard}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q; want %q", got, want)
	}
}

func TestByName_RefusesUnknownNamesAndOutOfRangeKnobs(t *testing.T) {
	for _, give := range []string{"", "random", "hard@", "hard@x", "hard@0", "hard@50", "hard@99", "hard@1001", "soft@0", "soft@100001", "rr@3", "off@150", "hard@-1", "headroom@0", "headroom@101",
		"+objective", "llm-d+objective", "headroom+objective+objective", "nope+objective",
		"+nosettle", "hard+nosettle", "rr+nosettle", "llm-d+nosettle", "headroom+nosettle+nosettle", "headroom+objective+nosettle"} {
		if _, err := ByName(give); !errors.Is(err, ErrConfig) {
			t.Errorf("ByName(%q) err %v; want ErrConfig", give, err)
		}
	}
}

func TestByNames_ReportsEveryUnknownOrRepeatedName(t *testing.T) {
	got, err := ByNames([]string{"rr", "hard@150"})
	if err != nil || len(got) != 2 || got[1].FactorPct != 150 {
		t.Fatalf("got %+v, %v", got, err)
	}
	for _, give := range [][]string{{"rr", "hard", "rr"}, {"rr", "nope"}} {
		if _, err := ByNames(give); !errors.Is(err, ErrConfig) {
			t.Errorf("ByNames(%q) err %v; want ErrConfig", give, err)
		}
	}
}

func TestValidate_ReportsEveryProblem(t *testing.T) {
	s := Strategy{Shape: 7, KVExact: true, FactorPct: 50, Lambda: 200000}
	err := s.Validate()
	if !errors.Is(err, ErrConfig) || !errors.Is(err, ladder.ErrInvalidEnv) {
		t.Fatalf("err %v; want ErrConfig wrapping ladder.ErrInvalidEnv", err)
	}
	for _, want := range []string{"no name", "shape 7", ladder.EnvMeanLoadFactor, ladder.EnvLoadPenalty} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}
