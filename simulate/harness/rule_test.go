package harness

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/strategy"
)

func TestRuleJSON_CarriesEachStrategysRESTKeys(t *testing.T) {
	tests := []struct {
		give       string
		wantSel    int
		wantKV     int // kvExactMode; 0 when absent
		wantPD     bool
		wantAware  bool
		wantEps    int
		wantWarmup bool
	}{
		{give: "rr", wantSel: 0, wantEps: 2},
		{give: "chwbl", wantSel: 8, wantEps: 2},
		{give: "hard", wantSel: 0, wantKV: 3, wantEps: 2, wantWarmup: true},
		{give: "hard+chwbl", wantSel: 8, wantKV: 3, wantEps: 2, wantWarmup: true},
		{give: "tier1", wantSel: 0, wantPD: true, wantAware: true, wantEps: 4},
		{give: "pd-hard", wantSel: 0, wantKV: 1, wantPD: true, wantEps: 4, wantWarmup: true},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			s, err := strategy.ByName(tt.give)
			if err != nil {
				t.Fatal(err)
			}
			fc := FleetConfig{Workers: 2, BaseIP: "127.0.9.2", Engine: smallEngine(64, 4)}
			fl, err := startFleet(&fc, s.Shape)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = stopFleet(fl, 10*time.Second) }()
			b, err := RuleJSON(&s, fl, "127.0.0.1", 2020)
			if err != nil {
				t.Fatal(err)
			}
			var rule struct {
				ServiceArguments struct {
					Sel         int  `json:"sel"`
					KVExactMode int  `json:"kvExactMode"`
					PD          bool `json:"pd_disagg_mode"`
					Aware       bool `json:"pd_cache_aware_mode"`
					KVWarmupSec *int `json:"kvWarmupSec"`
				} `json:"serviceArguments"`
				Endpoints []json.RawMessage `json:"endpoints"`
			}
			if err := json.Unmarshal(b, &rule); err != nil {
				t.Fatal(err)
			}
			sa := rule.ServiceArguments
			if sa.Sel != tt.wantSel || sa.KVExactMode != tt.wantKV || sa.PD != tt.wantPD || sa.Aware != tt.wantAware ||
				len(rule.Endpoints) != tt.wantEps || (sa.KVWarmupSec != nil) != tt.wantWarmup {
				t.Fatalf("rule %s; want sel %d kvExactMode %d pd %v cache-aware %v, %d endpoints", b, tt.wantSel, tt.wantKV, tt.wantPD, tt.wantAware, tt.wantEps)
			}
		})
	}
}
