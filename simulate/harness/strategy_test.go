package harness

import (
	"errors"
	"slices"
	"testing"
)

func TestStrategyByName_KnowsTheIssueSetAndKnobVariants(t *testing.T) {
	tests := []struct {
		give      string
		wantShape Shape
		wantSel   int
		wantMode  string
		wantEnv   []string
		wantAware bool
	}{
		{give: "rr", wantShape: ShapePool, wantSel: SelRR},
		{give: "chwbl", wantShape: ShapePool, wantSel: SelCHWBL},
		{give: "tier1", wantShape: ShapePD, wantSel: SelRR, wantAware: true},
		{give: "off", wantShape: ShapePool, wantMode: "off", wantEnv: []string{"LOXILB_KV_LB_MODE=off"}},
		{give: "hard", wantShape: ShapePool, wantMode: "hard", wantEnv: []string{"LOXILB_KV_LB_MODE=hard"}},
		{give: "adaptive-soft", wantShape: ShapePool, wantMode: "adaptive-soft", wantEnv: []string{"LOXILB_KV_LB_MODE=adaptive-soft"}},
		{give: "hard+chwbl", wantShape: ShapePool, wantSel: SelCHWBL, wantMode: "hard", wantEnv: []string{"LOXILB_KV_LB_MODE=hard"}},
		{give: "pd-hard", wantShape: ShapePD, wantMode: "hard", wantEnv: []string{"LOXILB_KV_LB_MODE=hard"}},
		{give: "hard@150", wantShape: ShapePool, wantMode: "hard", wantEnv: []string{"LOXILB_KV_LB_MODE=hard", "LOXILB_KV_MEAN_LOAD_FACTOR=150"}},
		{give: "soft@50000", wantShape: ShapePool, wantMode: "soft", wantEnv: []string{"LOXILB_KV_LB_MODE=soft", "LOXILB_KV_LOAD_PENALTY=50000"}},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			s, err := StrategyByName(tt.give)
			if err != nil {
				t.Fatal(err)
			}
			if s.Name != tt.give || s.Shape != tt.wantShape || s.Selector != tt.wantSel || s.Mode() != tt.wantMode || s.CacheAware != tt.wantAware {
				t.Fatalf("got %+v (mode %q); want shape %v sel %d mode %q cache-aware %v", s, s.Mode(), tt.wantShape, tt.wantSel, tt.wantMode, tt.wantAware)
			}
			if got := s.EnvList(); !slices.Equal(got, tt.wantEnv) {
				t.Fatalf("env %q; want %q", got, tt.wantEnv)
			}
		})
	}
}

func TestStrategyByName_RefusesUnknownNamesAndOutOfRangeKnobs(t *testing.T) {
	for _, give := range []string{"", "random", "hard@99", "hard@1001", "soft@0", "off@150", "hard@x"} {
		if _, err := StrategyByName(give); !errors.Is(err, ErrConfig) {
			t.Errorf("StrategyByName(%q) err %v; want ErrConfig", give, err)
		}
	}
	if _, err := StrategiesByName([]string{"rr", "hard", "rr"}); !errors.Is(err, ErrConfig) {
		t.Errorf("repeated name: err %v; want ErrConfig", err)
	}
}

func TestDefaultStrategyNames_AreTheIssueSevenSet(t *testing.T) {
	got := DefaultStrategyNames()
	want := []string{"rr", "chwbl", "tier1", "off", "hard", "soft", "adaptive", "adaptive-soft"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q; want %q", got, want)
	}
	if _, err := StrategiesByName(got); err != nil {
		t.Fatal(err)
	}
}
