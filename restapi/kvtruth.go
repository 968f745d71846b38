package restapi

import (
	"strconv"
	"strings"
)

// The cache-truth extras of the status and inventory views: what the KV
// feeds and mirrors of an endpoint did not apply (by reason), and how llb's
// cached-token predictions for it compare with what its engine reports.

// KVIgnored is one reason's tally of KV events or blocks an endpoint's feed
// and mirror did not apply (every DP rank together).
type KVIgnored struct {
	// Reason is "medium", "group", "spec_kind", "block_size",
	// "token_count", "extra_keys", "orphan_parent", "unknown_block",
	// "invalid" or "unknown_tag" (docs/metrics.md,
	// llb_kv_events_ignored_total).
	Reason string `json:"reason"`
	// Events and Blocks count what was not applied.
	Events uint64 `json:"events"`
	Blocks uint64 `json:"blocks"`
	// Cause is the latest occurrence's cause, one sentence.
	Cause string `json:"cause,omitempty"`
}

// KVPrediction is an endpoint's cache-truth record: llb's predicted cached
// tokens against the engine's usage.prompt_tokens_details.cached_tokens.
type KVPrediction struct {
	// Match, Over and Under count the compared requests by outcome
	// (within one block is a match).
	Match uint64 `json:"match"`
	Over  uint64 `json:"over"`
	Under uint64 `json:"under"`
	// Late counts the unders and overs the mirror confirmed within 250 ms
	// of the engine's answer: their KV events were still on the way when
	// llb decided (a concurrent or just-placed request of the same prefix
	// stored the blocks; the engine had evicted one). Included in Under and
	// Over; they never count against the endpoint.
	Late uint64 `json:"late,omitempty"`
	// LastPredicted and LastActual are the latest comparison (absent
	// before the first).
	LastPredicted *uint32 `json:"lastPredicted,omitempty"`
	LastActual    *uint32 `json:"lastActual,omitempty"`
	// State is "ok" or "mismatch" (predictions keep disagreeing).
	State string `json:"state"`
	// Demoted is true while Tier 1.5 ignores the endpoint's overlap.
	Demoted bool `json:"demoted,omitempty"`
	// Cause ("hash_seed", "block_size", "extra_keys", "tokenizer",
	// "stale_mirror", "mirror_behind", "unknown") and Detail say what the
	// samples show and what to check, while State is "mismatch".
	Cause  string `json:"cause,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// Prediction states (KVPrediction.State).
const (
	PredictionOK       = "ok"
	PredictionMismatch = "mismatch"
)

// FormatKVIgnored renders tallies compactly for a table cell:
// "medium=32 unknown_block=4b" (events, or blocks with a "b" suffix when
// only blocks were refused); "-" when empty.
func FormatKVIgnored(vs []KVIgnored) string {
	if len(vs) == 0 {
		return "-"
	}
	var b strings.Builder
	for i, v := range vs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(v.Reason)
		b.WriteByte('=')
		if v.Events == 0 {
			b.WriteString(strconv.FormatUint(v.Blocks, 10))
			b.WriteByte('b')
		} else {
			b.WriteString(strconv.FormatUint(v.Events, 10))
		}
	}
	return b.String()
}

// FormatKVPrediction renders a record compactly: "12/1/0" (match, over,
// under), then "mismatch:hash_seed" and "demoted" when so; "-" for none.
func FormatKVPrediction(p *KVPrediction) string {
	if p == nil || p.Match+p.Over+p.Under == 0 && p.State != PredictionMismatch {
		return "-"
	}
	s := strconv.FormatUint(p.Match, 10) + "/" + strconv.FormatUint(p.Over, 10) + "/" + strconv.FormatUint(p.Under, 10)
	if p.State == PredictionMismatch {
		s += " mismatch:" + p.Cause
		if p.Demoted {
			s += " demoted"
		}
	}
	return s
}

// TTFTPrediction is an endpoint's TTFT prediction record: llb's predicted
// time to first token against the measured one (docs/routing.md, TTFT
// predictions).
type TTFTPrediction struct {
	// Compared counts the requests whose measured TTFT was compared with
	// the prediction; Wrong those off by more than half of it.
	Compared uint64 `json:"compared"`
	Wrong    uint64 `json:"wrong"`
	// State is "ok", "learning" (fewer than 16 samples since the model
	// last started) or "drifting" (predictions keep missing: decisions do
	// not rely on them).
	State string `json:"state"`
	// BiasPct is the median relative error of the last 16 comparisons, in
	// percent (positive: llb predicted later first tokens than came).
	BiasPct float64 `json:"biasPct"`
	// OverheadMs, UncachedMsPer1kBlocks and QueuedMsPer1kBlocks are the
	// endpoint's learned model at an empty batch: its fixed cost, and the
	// cost of 1000 uncached prompt blocks of the request and of 1000 blocks
	// of prefill work queued ahead of it.
	OverheadMs            float64 `json:"overheadMs"`
	UncachedMsPer1kBlocks float64 `json:"uncachedMsPer1kBlocks"`
	QueuedMsPer1kBlocks   float64 `json:"queuedMsPer1kBlocks"`
	// FullCacheMs, LackingMsPer1kBlocks, QueueingMs and PerWaitingMs are
	// its learned wait for room on the engine: what a request waits when
	// its blocks do not fit in the engine's free ones, and per 1000 blocks
	// lacking; when the engine reported waiting requests at the last
	// scrape, and per waiting request. The wait is in the prediction that
	// is checked and not in the one decisions read.
	FullCacheMs          float64 `json:"fullCacheMs"`
	LackingMsPer1kBlocks float64 `json:"lackingMsPer1kBlocks"`
	QueueingMs           float64 `json:"queueingMs"`
	PerWaitingMs         float64 `json:"perWaitingMs"`
}

// TTFT prediction states (TTFTPrediction.State).
const (
	TTFTPredictionOK       = "ok"
	TTFTPredictionLearning = "learning"
	TTFTPredictionDrifting = "drifting"
)
