package ladder

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func envFrom(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestParseEnv_EmptyGivesDefaults(t *testing.T) {
	got, warns, err := ParseEnv(envFrom(nil))
	if err != nil || len(warns) != 0 {
		t.Fatalf("ParseEnv(empty) = warns %v, err %v; want none", warns, err)
	}
	if got != DefaultEnv() {
		t.Fatalf("ParseEnv(empty) = %+v; want %+v", got, DefaultEnv())
	}
	want := Env{LBMode: LBHeadroom, MeanLoadFactorPct: 175, LoadPenalty: 32, SpillRelief: TriAuto,
		ColdStartMinBlocks: 16, ColdStartSeedN: 16, MinMatchTokens: 16, HeadroomPct: 100, MaxNumSeqs: 256,
		OriginErrThreshold: 3, OffloadWeightPct: 80, PredictionDemote: true, LoRAAffinity: true, CriticalHeadroomPct: 25, MissSettle: true}
	if got != want {
		t.Fatalf("defaults = %+v; want %+v", got, want)
	}
}

func TestParseEnv_EachVariable(t *testing.T) {
	tests := []struct {
		name string
		give map[string]string
		want func(*Env)
	}{
		{"lb mode soft", map[string]string{EnvLBMode: "soft"}, func(e *Env) { e.LBMode = LBSoft }},
		{"lb mode case and space", map[string]string{EnvLBMode: " Adaptive-Soft "}, func(e *Env) { e.LBMode = LBAdaptiveSoft }},
		{"lb mode off", map[string]string{EnvLBMode: "off"}, func(e *Env) { e.LBMode = LBOff }},
		{"lb mode adaptive", map[string]string{EnvLBMode: "adaptive"}, func(e *Env) { e.LBMode = LBAdaptive }},
		{"lb mode hard, LoxiLB's default", map[string]string{EnvLBMode: "HARD"}, func(e *Env) { e.LBMode = LBHard }},
		{"lb mode headroom", map[string]string{EnvLBMode: "headroom"}, func(e *Env) { e.LBMode = LBHeadroom }},
		{"lb mode auto", map[string]string{EnvLBMode: "auto"}, func(e *Env) { e.LBMode = LBAuto }},
		{"legacy unified off when lb mode unset", map[string]string{EnvUnifiedModeLegacy: "0"}, func(e *Env) { e.LBMode = LBOff }},
		{"legacy unified on keeps the default", map[string]string{EnvUnifiedModeLegacy: "1"}, func(e *Env) {}},
		{"lb mode wins over legacy", map[string]string{EnvLBMode: "soft", EnvUnifiedModeLegacy: "off"}, func(e *Env) { e.LBMode = LBSoft }},
		{"mean load factor low edge", map[string]string{EnvMeanLoadFactor: "100"}, func(e *Env) { e.MeanLoadFactorPct = 100 }},
		{"mean load factor high edge", map[string]string{EnvMeanLoadFactor: "1000"}, func(e *Env) { e.MeanLoadFactorPct = 1000 }},
		{"load penalty", map[string]string{EnvLoadPenalty: "100000"}, func(e *Env) { e.LoadPenalty = 100000 }},
		{"spill relief yes", map[string]string{EnvSpillRelief: "yes"}, func(e *Env) { e.SpillRelief = TriOn }},
		{"spill relief TRUE", map[string]string{EnvSpillRelief: "TRUE"}, func(e *Env) { e.SpillRelief = TriOn }},
		{"spill relief 0", map[string]string{EnvSpillRelief: "0"}, func(e *Env) { e.SpillRelief = TriOff }},
		{"spill relief blank is auto", map[string]string{EnvSpillRelief: "  "}, func(e *Env) {}},
		{"cold min blocks 0", map[string]string{EnvColdStartMinBlocks: "0"}, func(e *Env) { e.ColdStartMinBlocks = 0 }},
		{"seed N", map[string]string{EnvColdStartSeedN: "4"}, func(e *Env) { e.ColdStartSeedN = 4 }},
		{"seed Nth spelling", map[string]string{EnvColdStartSeedNth: "0"}, func(e *Env) { e.ColdStartSeedN = 0 }},
		{"seed both spellings agree", map[string]string{EnvColdStartSeedN: "8", EnvColdStartSeedNth: "8"}, func(e *Env) { e.ColdStartSeedN = 8 }},
		{"min match 0 disables", map[string]string{EnvMinMatchTokens: "0"}, func(e *Env) { e.MinMatchTokens = 0 }},
		{"min match 4096", map[string]string{EnvMinMatchTokens: "4096"}, func(e *Env) { e.MinMatchTokens = 4096 }},
		{"inflight cap", map[string]string{EnvMaxInflightPerEP: "8"}, func(e *Env) { e.MaxInflightPerEP = 8 }},
		{"queue depth", map[string]string{EnvQueueDepthPerEP: "16"}, func(e *Env) { e.QueueDepthPerEP = 16 }},
		{"max park", map[string]string{EnvMaxParkSec: "30"}, func(e *Env) { e.MaxPark = 30 * time.Second }},
		{"total inflight", map[string]string{EnvMaxTotalInflight: "1000"}, func(e *Env) { e.MaxTotalInflight = 1000 }},
		{"origin err 0 disables", map[string]string{EnvOriginErrThreshold: "0"}, func(e *Env) { e.OriginErrThreshold = 0 }},
		{"headroom 0", map[string]string{EnvHeadroomPct: "0"}, func(e *Env) { e.HeadroomPct = 0 }},
		{"headroom 50", map[string]string{EnvHeadroomPct: "50"}, func(e *Env) { e.HeadroomPct = 50 }},
		{"max num seqs 1024", map[string]string{EnvMaxNumSeqs: "1024"}, func(e *Env) { e.MaxNumSeqs = 1024 }},
		{"offload weight 0 ignores cpu blocks", map[string]string{EnvOffloadWeightPct: "0"}, func(e *Env) { e.OffloadWeightPct = 0 }},
		{"offload weight 100 counts them as gpu", map[string]string{EnvOffloadWeightPct: "100"}, func(e *Env) { e.OffloadWeightPct = 100 }},
		{"prediction demote off", map[string]string{EnvPredictionDemote: "off"}, func(e *Env) { e.PredictionDemote = false }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := DefaultEnv()
			tt.want(&want)
			got, warns, err := ParseEnv(envFrom(tt.give))
			if err != nil || len(warns) != 0 {
				t.Fatalf("warns %v, err %v; want none", warns, err)
			}
			if got != want {
				t.Fatalf("got %+v; want %+v", got, want)
			}
			if err := got.Validate(); err != nil {
				t.Fatalf("parsed env does not validate: %v", err)
			}
		})
	}
}

func TestParseEnv_GarbageLBModeWarnsAndMeansTheDefault(t *testing.T) {
	got, warns, err := ParseEnv(envFrom(map[string]string{EnvLBMode: "turbo"}))
	if err != nil {
		t.Fatalf("err %v; want nil", err)
	}
	if got.LBMode != DefaultEnv().LBMode {
		t.Fatalf("LBMode = %v; want the default %v", got.LBMode, DefaultEnv().LBMode)
	}
	if len(warns) != 1 || !strings.Contains(warns[0], EnvLBMode) || !strings.Contains(warns[0], "turbo") {
		t.Fatalf("warns = %q; want one naming %s and the value", warns, EnvLBMode)
	}
}

func TestParseEnv_QueueDepthAbove64IsClampedWithWarning(t *testing.T) {
	got, warns, err := ParseEnv(envFrom(map[string]string{EnvQueueDepthPerEP: "500"}))
	if err != nil || got.QueueDepthPerEP != 64 || len(warns) != 1 {
		t.Fatalf("depth %d, warns %q, err %v; want 64, one warning, nil", got.QueueDepthPerEP, warns, err)
	}
}

func TestParseEnv_RejectsOutOfRangeNamingTheVariable(t *testing.T) {
	tests := []struct {
		name, key, value string
	}{
		{"factor below", EnvMeanLoadFactor, "99"},
		{"factor above", EnvMeanLoadFactor, "1001"},
		{"factor garbage", EnvMeanLoadFactor, "1.75"},
		{"penalty zero", EnvLoadPenalty, "0"},
		{"penalty above", EnvLoadPenalty, "100001"},
		{"relief garbage", EnvSpillRelief, "maybe"},
		{"cold blocks negative", EnvColdStartMinBlocks, "-1"},
		{"seed N garbage", EnvColdStartSeedN, "sixteen"},
		{"seed Nth negative", EnvColdStartSeedNth, "-2"},
		{"min match above", EnvMinMatchTokens, "4097"},
		{"inflight above", EnvMaxInflightPerEP, "100000"},
		{"queue negative", EnvQueueDepthPerEP, "-1"},
		{"park above", EnvMaxParkSec, "100000"},
		{"total garbage", EnvMaxTotalInflight, "lots"},
		{"total above", EnvMaxTotalInflight, "2000000000"},
		{"origin above", EnvOriginErrThreshold, "1001"},
		{"headroom above", EnvHeadroomPct, "101"},
		{"headroom garbage", EnvHeadroomPct, "half"},
		{"max num seqs zero", EnvMaxNumSeqs, "0"},
		{"max num seqs above", EnvMaxNumSeqs, "65536"},
		{"offload weight above", EnvOffloadWeightPct, "101"},
		{"prediction demote garbage", EnvPredictionDemote, "sometimes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ParseEnv(envFrom(map[string]string{tt.key: tt.value}))
			if !errors.Is(err, ErrInvalidEnv) {
				t.Fatalf("err = %v; want ErrInvalidEnv", err)
			}
			var ee *EnvError
			if !errors.As(err, &ee) || ee.Var != tt.key || ee.Value != tt.value {
				t.Fatalf("err = %v; want an *EnvError naming %s=%q", err, tt.key, tt.value)
			}
		})
	}
}

func TestParseEnv_ConflictingSeedSpellingsAreRejected(t *testing.T) {
	_, _, err := ParseEnv(envFrom(map[string]string{EnvColdStartSeedN: "4", EnvColdStartSeedNth: "8"}))
	if !errors.Is(err, ErrInvalidEnv) || !strings.Contains(err.Error(), EnvColdStartSeedNth) {
		t.Fatalf("err = %v; want a conflict naming both spellings", err)
	}
}

func TestParseEnv_ReportsEveryProblemAtOnce(t *testing.T) {
	_, _, err := ParseEnv(envFrom(map[string]string{
		EnvMeanLoadFactor: "5", EnvLoadPenalty: "x", EnvMinMatchTokens: "9999",
	}))
	for _, name := range []string{EnvMeanLoadFactor, EnvLoadPenalty, EnvMinMatchTokens} {
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("err = %v; want it to name %s", err, name)
		}
	}
}

func TestEnvValidate_RejectsHandBuiltOutOfRange(t *testing.T) {
	e := DefaultEnv()
	e.MeanLoadFactorPct = 50
	e.LoadPenalty = 0
	err := e.Validate()
	if !errors.Is(err, ErrInvalidEnv) || !strings.Contains(err.Error(), EnvMeanLoadFactor) || !strings.Contains(err.Error(), EnvLoadPenalty) {
		t.Fatalf("Validate = %v; want both variables named", err)
	}
	var zero Env
	if zero.Validate() == nil {
		t.Fatal("the zero Env validates; want an error (use DefaultEnv)")
	}
}
