package ladder

import (
	"strings"
	"testing"
	"time"
)

func TestPredictedCachedTokens_LastTokenIsNeverCached(t *testing.T) {
	tests := []struct {
		name                  string
		overlap, prompt, want uint32
	}{
		{"prompt unknown: whole overlap", 3, 0, 48},
		{"exactly three blocks: the last is recomputed", 3, 48, 32},
		{"one token past three blocks", 3, 49, 48},
		{"overlap shorter than the prompt", 2, 100, 32},
		{"no overlap", 0, 100, 0},
		{"a prompt shorter than a block", 1, 10, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := PredictedCachedTokens(tt.overlap, tt.prompt, 16); got != tt.want {
				t.Fatalf("got %d; want %d", got, tt.want)
			}
		})
	}
}

func TestClassifyPrediction_WithinOneBlockIsAMatch(t *testing.T) {
	tests := []struct {
		pred, actual uint32
		want         PredictionOutcome
		diff         int64
	}{
		{48, 48, PredictionMatch, 0},
		{48, 32, PredictionMatch, -16},
		{32, 48, PredictionMatch, 16},
		{48, 16, PredictionOver, -32},
		{0, 32, PredictionUnder, 32},
		{0, 0, PredictionMatch, 0},
	}
	for _, tt := range tests {
		got, diff := ClassifyPrediction(tt.pred, tt.actual, 16)
		if got != tt.want || diff != tt.diff {
			t.Errorf("Classify(%d, %d) = %s %d; want %s %d", tt.pred, tt.actual, got, diff, tt.want, tt.diff)
		}
	}
}

// feed observes samples one second apart and returns the step of the last
// one and the index (1-based) of the sample that first flipped the verdict
// (0: none).
func feed(tr *TruthTracker, samples []TruthSample) (TruthStep, int) {
	return feedEvery(tr, samples, time.Second)
}

// truthClock is the tests' clock; feedEvery advances it.
var truthClock = time.Unix(1_000_000, 0)

func feedEvery(tr *TruthTracker, samples []TruthSample, every time.Duration) (TruthStep, int) {
	var last TruthStep
	flipped := 0
	for i, s := range samples {
		truthClock = truthClock.Add(every)
		last = tr.Observe(truthClock, s, 16)
		if last.Changed && flipped == 0 {
			flipped = i + 1
		}
	}
	return last, flipped
}

func repeat(s TruthSample, n int) []TruthSample {
	out := make([]TruthSample, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestTruthTracker_DemotesAfterSixWrongAndNamesTheCause(t *testing.T) {
	tests := []struct {
		name      string
		give      []TruthSample
		wantCause TruthCause
		wantIn    string
	}{
		{
			name: "wrong seed: llb sees nothing, the engine reuses whole blocks",
			give: []TruthSample{
				{Predicted: 0, Actual: 48}, {Predicted: 0, Actual: 80}, {Predicted: 0, Actual: 32},
				{Predicted: 0, Actual: 112}, {Predicted: 0, Actual: 48}, {Predicted: 0, Actual: 64},
			},
			wantCause: CauseHashSeed, wantIn: "PYTHONHASHSEED",
		},
		{
			name: "engine blocks of 32 under a kvBlockSize of 16",
			give: []TruthSample{
				{Actual: 64}, {Actual: 96}, {Actual: 32}, {Actual: 64}, {Actual: 160}, {Actual: 96},
			},
			wantCause: CauseBlockSize, wantIn: "likely 32",
		},
		{
			name: "engine blocks of 8 under a kvBlockSize of 16",
			give: []TruthSample{
				{Actual: 40}, {Actual: 24}, {Actual: 56}, {Actual: 40}, {Actual: 24}, {Actual: 72},
			},
			wantCause: CauseBlockSize, wantIn: "greatest common divisor 8",
		},
		{
			name:      "restart llb did not see: the engine reuses nothing",
			give:      repeat(TruthSample{Predicted: 64, Actual: 0}, 6),
			wantCause: CauseStaleMirror, wantIn: "restart",
		},
		{
			name:      "tokenizer: prompt counts differ",
			give:      repeat(TruthSample{Predicted: 32, Actual: 96, PromptTokens: 120, EnginePromptTokens: 124}, 6),
			wantCause: CauseTokenizer, wantIn: "124",
		},
		{
			name: "only LoRA requests disagree",
			give: append([]TruthSample{{Predicted: 64, Actual: 64}, {Predicted: 32, Actual: 32}},
				repeat(TruthSample{Predicted: 0, Actual: 64, ExtraKeys: true}, 6)...),
			wantCause: CauseExtraKeys, wantIn: "LoRA",
		},
		{
			name: "only chat requests disagree",
			give: append([]TruthSample{{Predicted: 64, Actual: 64}},
				repeat(TruthSample{Predicted: 16, Actual: 96, Chat: true}, 6)...),
			wantCause: CauseTokenizer, wantIn: "chat template",
		},
		{
			name:      "consistently half",
			give:      []TruthSample{{Predicted: 64, Actual: 128}, {Predicted: 32, Actual: 64}, {Predicted: 96, Actual: 192}, {Predicted: 64, Actual: 128}, {Predicted: 48, Actual: 96}, {Predicted: 64, Actual: 128}},
			wantCause: CauseBlockSize, wantIn: "2×",
		},
		{
			name: "mirror misses blocks mid-prompt",
			give: []TruthSample{{Predicted: 32, Actual: 128}, {Predicted: 64, Actual: 96}, {Predicted: 16, Actual: 160},
				{Predicted: 48, Actual: 96}, {Predicted: 32, Actual: 112}, {Predicted: 16, Actual: 64}},
			wantCause: CauseMirrorBehind, wantIn: "KV events lost",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var tr TruthTracker
			// One sample a second: the 6th wrong one is at least
			// TruthMinBad after the window first held 6... it is the first
			// to hold them, so the verdict waits for one more sample.
			step, flipped := feed(&tr, append(tt.give, tt.give[len(tt.give)-1], tt.give[len(tt.give)-1]))
			if want := len(tt.give) + 2; flipped != want {
				t.Fatalf("verdict flipped at sample %d; want at %d (the window holds 6 wrong samples for %s)", flipped, want, TruthMinBad)
			}
			v := step.Verdict
			if !v.Distrusted || v.Cause != tt.wantCause || !strings.Contains(v.Detail, tt.wantIn) {
				t.Fatalf("verdict %+v; want distrusted, cause %s, detail naming %q", v, tt.wantCause, tt.wantIn)
			}
		})
	}
}

func TestTruthTracker_HealthyNoiseAndColdPromptsNeverDemote(t *testing.T) {
	var tr TruthTracker
	// Cold prompts (nothing predicted, nothing cached) are not informative;
	// one wrong sample in four stays under the bar forever.
	var samples []TruthSample
	for i := 0; i < 400; i++ {
		switch i % 4 {
		case 0:
			samples = append(samples, TruthSample{Predicted: 0, Actual: 0})
		case 1:
			samples = append(samples, TruthSample{Predicted: 64, Actual: 0})
		default:
			samples = append(samples, TruthSample{Predicted: 64, Actual: 64})
		}
	}
	step, flipped := feed(&tr, samples)
	if flipped != 0 || step.Verdict.Distrusted {
		t.Fatalf("flipped at %d, verdict %+v; want trusted throughout", flipped, step.Verdict)
	}
	if tot := tr.Totals(); tot.Match != 300 || tot.Over != 100 || tot.Under != 0 {
		t.Fatalf("totals %+v; want 300 match, 100 over", tot)
	}
}

func TestTruthTracker_RestoresWhenAFullWindowAgreesAgain(t *testing.T) {
	var tr TruthTracker
	feed(&tr, repeat(TruthSample{Predicted: 0, Actual: 64}, 8))
	if !tr.Verdict().Distrusted {
		t.Fatal("not distrusted after eight wrong samples")
	}
	// Seven matches leave one wrong sample in the window of eight.
	step, flipped := feed(&tr, repeat(TruthSample{Predicted: 64, Actual: 64}, 7))
	if flipped != 7 || step.Verdict.Distrusted || step.Verdict.Cause != CauseNone || step.Verdict.Wrong != 1 {
		t.Fatalf("flipped at %d, verdict %+v; want trusted again at the 7th match", flipped, step.Verdict)
	}
}

func TestTruthTracker_ConfirmedUnderPredictionsAreTheMirrorsLagNotAnError(t *testing.T) {
	var tr TruthTracker
	// A busy fleet: a request follows another of its prefix before the
	// first one's BlockStored events arrived; the mirror holds them a
	// moment later.
	step, flipped := feed(&tr, repeat(TruthSample{Predicted: 0, Actual: 96, Confirmed: true}, 50))
	if flipped != 0 || step.Verdict.Distrusted || step.Informative || tr.Totals().Under != 50 || tr.Totals().Late != 50 {
		t.Fatalf("step %+v totals %+v; want 50 unders counted, none in the verdict", step, tr.Totals())
	}
}

func TestTruthTracker_ABurstShorterThanTruthMinBadNeverDemotes(t *testing.T) {
	var tr TruthTracker
	// Eight wrong samples within 80 ms (concurrent requests that raced one
	// eviction), then the fleet agrees again.
	burst := repeat(TruthSample{Predicted: 64, Actual: 0}, 8)
	if step, flipped := feedEvery(&tr, burst, 10*time.Millisecond); flipped != 0 || step.Verdict.Distrusted {
		t.Fatalf("a burst demoted: %+v", step.Verdict)
	}
	feedEvery(&tr, repeat(TruthSample{Predicted: 64, Actual: 64}, 3), 10*time.Millisecond)
	// Spread over seconds, the same errors do.
	if _, flipped := feedEvery(&tr, burst, time.Second); flipped == 0 {
		t.Fatal("persistent errors never demoted")
	}
}
