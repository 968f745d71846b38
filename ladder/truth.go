package ladder

import (
	"fmt"
	"strconv"
	"time"
)

// Cache truth. For every request of a Tier-1.5 rule, llb predicts how many
// prompt tokens the engine it picked will find in its prefix cache (the
// endpoint's mirrored overlap with the prompt's block chain), and the engine
// reports how many it did (usage.prompt_tokens_details.cached_tokens). A
// TruthTracker compares the two for one endpoint, keeps a verdict over its
// recent samples and, when predictions stay wrong, names the likely cause
// from the pattern of the errors. Every request counts, whichever tier
// picked the endpoint: a wrong hash seed makes Tier 1.5 see no overlap at
// all, so its own decisions alone would never reveal it.

// PredictionOutcome compares one prediction with what the engine reported.
type PredictionOutcome uint8

// Prediction outcomes.
const (
	// PredictionMatch: the engine's cached tokens are within one block of
	// the prediction.
	PredictionMatch PredictionOutcome = iota
	// PredictionOver: llb predicted more than one block more than the
	// engine reused.
	PredictionOver
	// PredictionUnder: the engine reused more than one block more than llb
	// predicted.
	PredictionUnder
	predictionOutcomes
)

var predictionNames = [predictionOutcomes]string{"match", "over", "under"}

// String returns "match", "over" or "under".
func (o PredictionOutcome) String() string {
	if o < predictionOutcomes {
		return predictionNames[o]
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// PredictedCachedTokens is how many prompt tokens an engine holding overlap
// leading blocks of the prompt reports as cached:
//
//	min(overlap, ⌊(promptTokens − 1) / B⌋) · B     promptTokens > 0
//	overlap · B                                    promptTokens unknown (0)
//
// vLLM always computes the last prompt token (it needs its logits), so a
// prompt of exactly k full blocks reuses at most k − 1 of them.
func PredictedCachedTokens(overlap, promptTokens uint32, blockSize int) uint32 {
	bs := uint64(max(blockSize, 1))
	blocks := uint64(overlap)
	if promptTokens > 0 {
		blocks = min(blocks, (uint64(promptTokens)-1)/bs)
	}
	return uint32(min(blocks*bs, 1<<32-1))
}

// ClassifyPrediction compares predicted and actual cached tokens: diff is
// actual − predicted; |diff| ≤ B is a match, diff < −B over, diff > B under.
func ClassifyPrediction(predicted, actual uint32, blockSize int) (PredictionOutcome, int64) {
	diff := int64(actual) - int64(predicted)
	bs := int64(max(blockSize, 1))
	switch {
	case diff < -bs:
		return PredictionOver, diff
	case diff > bs:
		return PredictionUnder, diff
	}
	return PredictionMatch, diff
}

// TruthSample is one request's prediction and the engine's report, on the
// endpoint that served it.
type TruthSample struct {
	// Predicted is PredictedCachedTokens for the endpoint, in tokens.
	Predicted uint32
	// Actual is the engine's usage.prompt_tokens_details.cached_tokens.
	Actual uint32
	// PromptTokens is llb's token count of the prompt (0 unknown).
	PromptTokens uint32
	// EnginePromptTokens is the engine's usage.prompt_tokens (0 unknown).
	EnginePromptTokens uint32
	// Chat is set for a chat completion (llb applied a chat template).
	Chat bool
	// ExtraKeys is set when the prompt's blocks carry extra keys (a LoRA
	// adapter or a cache_salt).
	ExtraKeys bool
	// Confirmed marks a wrong prediction that the mirror explained once
	// the engine had answered: for an under, it then held the blocks the
	// engine reused (their BlockStored events were still on the way when
	// llb decided: a concurrent or just-placed request of the same prefix);
	// for an over, it had since removed a block the engine did not reuse
	// (the engine had evicted it; its BlockRemoved was on the way). The
	// mirror was late, not wrong. Counted, but kept out of the verdict.
	Confirmed bool
}

// TruthCause is the likely reason predictions disagree with an engine.
type TruthCause uint8

// Causes, each a stable snake_case name for logs and views.
const (
	// CauseNone: predictions agree.
	CauseNone TruthCause = iota
	// CauseHashSeed: llb never finds blocks the engine reuses — the hash
	// seed (PYTHONHASHSEED vs kvNoneHashSeed) or algorithm differs.
	CauseHashSeed
	// CauseBlockSize: the engine's block size differs from kvBlockSize.
	CauseBlockSize
	// CauseExtraKeys: only requests with a LoRA adapter or a cache_salt
	// disagree — llb hashes their extra keys differently from the engine.
	CauseExtraKeys
	// CauseTokenizer: llb's prompt tokens differ from the engine's (its
	// tokenizer or chat template), or only chat requests disagree.
	CauseTokenizer
	// CauseStaleMirror: the engine reuses nothing llb predicted — it lost
	// its cache without llb seeing it (a restart or reset whose events
	// never arrived), or runs without prefix caching.
	CauseStaleMirror
	// CauseMirrorBehind: the engine reuses more than llb's mirror holds —
	// KV events lost, or the mirror's block cap evicting.
	CauseMirrorBehind
	// CauseUnknown: predictions disagree without a recognisable pattern.
	CauseUnknown
	truthCauses
)

var truthCauseNames = [truthCauses]string{"none", "hash_seed", "block_size", "extra_keys", "tokenizer", "stale_mirror", "mirror_behind", "unknown"}

// String returns the cause's snake_case name.
func (c TruthCause) String() string {
	if c < truthCauses {
		return truthCauseNames[c]
	}
	return fmt.Sprintf("cause(%d)", uint8(c))
}

// Truth-check tuning. A sample is informative when the prediction or the
// engine's answer involves at least one block (a cold prompt that nobody
// cached says nothing about the mirror).
const (
	// TruthWindow is how many recent informative samples the verdict reads.
	TruthWindow = 8
	// TruthDemoteWrong: an endpoint is distrusted once this many of its last
	// TruthWindow informative samples were wrong (over or under).
	TruthDemoteWrong = 6
	// TruthRestoreWrong: a distrusted endpoint is trusted again once its
	// window is full and holds at most this many wrong samples.
	TruthRestoreWrong = 1
	// TruthMinBad is how long the window must keep TruthDemoteWrong wrong
	// samples before the endpoint is distrusted: a burst of concurrent
	// requests that all raced the same eviction passes in well under a
	// second; a misconfiguration does not pass.
	TruthMinBad = 2 * time.Second
)

// truthEntry is one informative sample with its outcome.
type truthEntry struct {
	s       TruthSample
	outcome PredictionOutcome
}

// TruthVerdict is an endpoint's standing.
type TruthVerdict struct {
	// Distrusted is true while predictions stay wrong.
	Distrusted bool
	// Cause is the likely cause while distrusted (CauseNone otherwise).
	Cause TruthCause
	// Detail says, for an operator, what the samples show and what to check.
	Detail string
	// Wrong and Samples are the window's wrong and total informative counts.
	Wrong, Samples int
}

// TruthStep is what one Observe did.
type TruthStep struct {
	// Outcome and Diff (actual − predicted, tokens) classify the sample.
	Outcome PredictionOutcome
	Diff    int64
	// Informative is false for a sample that involved no block at all.
	Informative bool
	// Changed is true when the sample flipped the verdict.
	Changed bool
	// Verdict is the standing after the sample.
	Verdict TruthVerdict
}

// TruthTotals are an endpoint's lifetime counts and its last sample.
type TruthTotals struct {
	// Match, Over and Under count every sample by outcome; Late counts the
	// unders and overs the mirror confirmed afterwards (Confirmed; included
	// in Under and Over).
	Match, Over, Under, Late uint64
	// Last is the most recent sample; LastOutcome its outcome. HaveLast is
	// false before the first.
	Last        TruthSample
	LastOutcome PredictionOutcome
	HaveLast    bool
}

// TruthTracker keeps one endpoint's prediction record. The zero value is
// ready. Single owner (the service's router actor); no clocks, no I/O.
//
// Invariant: n ≤ TruthWindow; ring[(next−n+i) mod TruthWindow], i < n, are
// the window's samples, oldest first.
type TruthTracker struct {
	ring    [TruthWindow]truthEntry
	n, next int
	verdict TruthVerdict
	totals  TruthTotals
	// badSince is when the window last came to hold TruthDemoteWrong wrong
	// samples (zero while it does not).
	badSince time.Time
	// seq numbers informative samples; plainMatch and completionMatch are
	// the seq of the last match without extra keys and of the last
	// non-chat match (0: none), the evidence that only one class of
	// requests disagrees.
	seq, plainMatch, completionMatch uint64
}

// truthClassMemory is how many informative samples a class's last match
// stays evidence for the diagnosis.
const truthClassMemory = 4 * TruthWindow

// Observe records one sample, taken at now, of an endpoint whose blocks hold
// blockSize tokens and returns its classification and the (possibly new)
// verdict. A sample that involves no block, or a Confirmed wrong
// prediction, is counted but not informative.
//
// The verdict turns distrusted when TruthDemoteWrong of the last
// TruthWindow informative samples are wrong and have been for TruthMinBad
// (observed at an informative sample), and trusted again when a full window
// holds at most TruthRestoreWrong.
func (t *TruthTracker) Observe(now time.Time, s TruthSample, blockSize int) TruthStep {
	out, diff := ClassifyPrediction(s.Predicted, s.Actual, blockSize)
	switch out {
	case PredictionMatch:
		t.totals.Match++
	case PredictionOver:
		t.totals.Over++
	default:
		t.totals.Under++
	}
	if s.Confirmed && out != PredictionMatch {
		t.totals.Late++
	}
	t.totals.Last, t.totals.LastOutcome, t.totals.HaveLast = s, out, true
	step := TruthStep{Outcome: out, Diff: diff}
	if uint64(max(s.Predicted, s.Actual)) < uint64(max(blockSize, 1)) || (s.Confirmed && out != PredictionMatch) {
		step.Verdict = t.verdict
		return step
	}
	step.Informative = true
	t.seq++
	if out == PredictionMatch {
		if !s.ExtraKeys {
			t.plainMatch = t.seq
		}
		if !s.Chat {
			t.completionMatch = t.seq
		}
	}
	t.ring[t.next] = truthEntry{s: s, outcome: out}
	t.next = (t.next + 1) % TruthWindow
	t.n = min(t.n+1, TruthWindow)
	wrong := 0
	for i := 0; i < t.n; i++ {
		if t.at(i).outcome != PredictionMatch {
			wrong++
		}
	}
	switch {
	case wrong < TruthDemoteWrong:
		t.badSince = time.Time{}
	case t.badSince.IsZero():
		t.badSince = now
	}
	was := t.verdict.Distrusted
	switch {
	case !was && wrong >= TruthDemoteWrong && now.Sub(t.badSince) >= TruthMinBad:
		t.verdict.Distrusted = true
		t.verdict.Cause, t.verdict.Detail = t.diagnose(blockSize)
	case was && t.n == TruthWindow && wrong <= TruthRestoreWrong:
		t.verdict.Distrusted = false
		t.verdict.Cause, t.verdict.Detail = CauseNone, ""
	}
	t.verdict.Wrong, t.verdict.Samples = wrong, t.n
	step.Changed = was != t.verdict.Distrusted
	step.Verdict = t.verdict
	return step
}

// Verdict returns the current standing.
func (t *TruthTracker) Verdict() TruthVerdict { return t.verdict }

// Totals returns the lifetime counts and the last sample.
func (t *TruthTracker) Totals() TruthTotals { return t.totals }

// at returns the window's i-th sample, oldest first.
func (t *TruthTracker) at(i int) *truthEntry {
	return &t.ring[(t.next-t.n+i+2*TruthWindow)%TruthWindow]
}

// diagnose names the likely cause from the window's samples.
func (t *TruthTracker) diagnose(blockSize int) (TruthCause, string) {
	w := make([]truthEntry, t.n)
	for i := range w {
		w[i] = *t.at(i)
	}
	recent := func(at uint64) bool { return at > 0 && t.seq-at <= truthClassMemory }
	return diagnoseTruth(w, blockSize, recent(t.plainMatch), recent(t.completionMatch))
}

// diagnoseTruth infers the likely cause from informative samples and their
// outcomes, trying in order:
//
//  1. prompt tokens: most samples whose both counts are known have llb's
//     count ≠ the engine's → tokenizer;
//  2. only chat requests are wrong while a completion matched (in the
//     window or among the last truthClassMemory samples) → tokenizer (chat
//     template); only LoRA/cache_salt requests are wrong while a plain one
//     matched → extra_keys;
//  3. every wrong sample predicted 0 while the engine reused blocks: the
//     gcd g of the engine's cached tokens is not a multiple of B, or (over
//     at least 4 distinct values) a multiple larger than B → block_size;
//     else hash_seed;
//  4. every wrong sample had the engine reuse nothing → stale_mirror;
//  5. every wrong sample is off by one factor k (actual/predicted within
//     10 % of k, k ∉ [0.9, 1.1]) → block_size;
//  6. ≥ ⅔ of the wrong samples over → stale_mirror, ≥ ⅔ under →
//     mirror_behind; else unknown.
func diagnoseTruth(samples []truthEntry, blockSize int, plainMatch, completionMatch bool) (TruthCause, string) {
	bs := uint64(max(blockSize, 1))
	var wrong []TruthSample
	var over, under int
	var known, mism int
	var lastLLB, lastEngine uint32
	chatWrong, extraWrong := 0, 0
	for _, e := range samples {
		s := e.s
		if s.PromptTokens > 0 && s.EnginePromptTokens > 0 {
			known++
			if s.PromptTokens != s.EnginePromptTokens {
				mism++
				lastLLB, lastEngine = s.PromptTokens, s.EnginePromptTokens
			}
		}
		if e.outcome == PredictionMatch {
			plainMatch = plainMatch || !s.ExtraKeys
			completionMatch = completionMatch || !s.Chat
			continue
		}
		wrong = append(wrong, s)
		if e.outcome == PredictionOver {
			over++
		} else {
			under++
		}
		if s.Chat {
			chatWrong++
		}
		if s.ExtraKeys {
			extraWrong++
		}
	}
	n := len(wrong)
	if n == 0 {
		return CauseNone, ""
	}
	if known >= 2 && 2*mism > known {
		return CauseTokenizer, fmt.Sprintf(
			"llb counted %d prompt tokens where the engine counted %d (%d of %d requests differ): llb's tokenizer or chat template is not the engine's; "+
				"point llb at the engine's tokenizer (LLB_TOKENIZER_DIR) or let the engine's /tokenize count",
			lastLLB, lastEngine, mism, known)
	}
	if chatWrong == n && completionMatch {
		return CauseTokenizer, fmt.Sprintf(
			"only chat requests disagree (%d of %d wrong) while completions match: llb renders the chat template differently from the engine", chatWrong, n)
	}
	if extraWrong == n && plainMatch {
		return CauseExtraKeys, fmt.Sprintf(
			"only requests with a LoRA adapter or a cache_salt disagree (%d of %d wrong) while plain ones match: "+
				"llb hashes their extra keys (lora_name, cache_salt) differently from the engine", extraWrong, n)
	}
	zeroPred, zeroActual := 0, 0
	var g uint64
	distinct := map[uint32]bool{}
	for _, s := range wrong {
		if s.Predicted == 0 && s.Actual > 0 {
			zeroPred++
			g = gcd(g, uint64(s.Actual))
			distinct[s.Actual] = true
		}
		if s.Actual == 0 {
			zeroActual++
		}
	}
	if zeroPred == n {
		// Cached tokens are whole engine blocks: a gcd that is not a
		// multiple of B, or one larger than B over at least four distinct
		// values, says the engine's blocks are not B tokens.
		switch {
		case g%bs != 0:
			return CauseBlockSize, fmt.Sprintf(
				"the engine reused cached prefixes on %d requests where llb's mirror held none of the prompt's blocks, and the cached_tokens it reported (greatest common divisor %d) "+
					"are not whole blocks of kvBlockSize %d: set kvBlockSize to the engine's --block-size", n, g, bs)
		case len(distinct) >= 4 && g > bs:
			return CauseBlockSize, fmt.Sprintf(
				"the engine reused cached prefixes on %d requests where llb's mirror held none of the prompt's blocks, and every cached_tokens it reported is a multiple of %d: "+
					"the engine's --block-size is likely %d, not kvBlockSize %d", n, g, g, bs)
		}
		return CauseHashSeed, fmt.Sprintf(
			"the engine reused cached prefixes on %d requests where llb's mirror held none of the prompt's blocks: llb and the engine hash blocks differently; "+
				"check the engines' PYTHONHASHSEED against kvNoneHashSeed (LLB_KV_NONE_HASH_SEED) and --prefix-caching-hash-algo against kvHashAlgo "+
				"(an engine --block-size other than kvBlockSize does the same; the contract check then says block_size)", n)
	}
	if zeroActual == n {
		return CauseStaleMirror, fmt.Sprintf(
			"the engine reported no cached tokens on %d requests where llb's mirror predicted a hit: it lost its cache without llb seeing it "+
				"(a restart or reset whose KV events never arrived), runs without prefix caching, or the requests carry keys llb does not hash", n)
	}
	if k, ok := commonFactor(wrong); ok {
		return CauseBlockSize, fmt.Sprintf(
			"the engine's cached tokens are consistently %s× llb's prediction on %d requests: the engine's --block-size and kvBlockSize %d likely differ", k, n, bs)
	}
	switch {
	case 3*over >= 2*n:
		return CauseStaleMirror, fmt.Sprintf(
			"llb predicted more cached tokens than the engine reused on %d of %d wrong requests: the mirror holds blocks the engine dropped (BlockRemoved events lost, or a reset llb did not see)", over, n)
	case 3*under >= 2*n:
		return CauseMirrorBehind, fmt.Sprintf(
			"the engine reused more than llb predicted on %d of %d wrong requests: the mirror misses blocks the engine holds (KV events lost — see the feed's gaps — or LOXILB_KV_MAX_BLOCKS evicting), or llb's tokens diverge mid-prompt", under, n)
	}
	return CauseUnknown, fmt.Sprintf("%d of the last %d predictions were wrong (%d over, %d under) without a recognisable pattern", n, len(samples), over, under)
}

// commonFactor reports whether every sample's actual/predicted ratio lies
// within 10 % of one factor outside [0.9, 1.1], and that factor rounded.
func commonFactor(ws []TruthSample) (string, bool) {
	var lo, hi float64
	for i, s := range ws {
		if s.Predicted == 0 || s.Actual == 0 {
			return "", false
		}
		r := float64(s.Actual) / float64(s.Predicted)
		if i == 0 || r < lo {
			lo = r
		}
		if i == 0 || r > hi {
			hi = r
		}
	}
	mid := (lo + hi) / 2
	if hi > mid*1.1 || lo < mid*0.9 || (mid >= 0.9 && mid <= 1.1) {
		return "", false
	}
	return strconv.FormatFloat(mid, 'g', 2, 64), true
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
