package inventory

import (
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"
)

// No silent drops: every KV event or block llb does not apply is counted by
// reason (llb_kv_events_ignored_total, llb_kv_blocks_ignored_total), shown
// in the inventory views, and logged — the first time at once, then at most
// once per interval per reason with the count held back — with the cause.

// IgnoreReason says why llb did not apply a KV event or block.
type IgnoreReason uint8

// Ignore reasons. The feed reports the first two (the event never reached a
// mirror); the mirror reports the rest.
const (
	// IgnoreInvalid: the event had bad fields (a hash that is neither an
	// int nor 8+ bytes, a negative token, a missing tag, ...). Feed.
	IgnoreInvalid IgnoreReason = iota
	// IgnoreUnknownTag: the event's tag is not one llb knows. Feed.
	IgnoreUnknownTag
	// IgnoreMedium: the event names a medium llb does not mirror (the GPU
	// and CPU tiers are mirrored; STORAGE and connector media are not).
	IgnoreMedium
	// IgnoreGroup: the event is for a KV-cache group other than 0 (a hybrid
	// model's sliding-window or Mamba group; Tier 1.5 routes on group 0).
	IgnoreGroup
	// IgnoreSpecKind: the event's kv_cache_spec_kind is not full_attention.
	IgnoreSpecKind
	// IgnoreBlockSize: the run's block_size differs from kvBlockSize and its
	// blocks cannot be keyed (token-keyed mode, or an offload tier whose
	// blocks are larger than the GPU's).
	IgnoreBlockSize
	// IgnoreTokenCount: token-keyed mode needs token_ids covering every
	// block (a tokenless offload run needs its blocks' GPU twins).
	IgnoreTokenCount
	// IgnoreExtraKeys: token-keyed mode cannot hash the run's extra_keys.
	IgnoreExtraKeys
	// IgnoreOrphanParent: token-keyed mode does not know the run's parent
	// block (it cannot extend a cached prefix, so nothing is lost).
	IgnoreOrphanParent
	// IgnoreUnknownBlock: a BlockRemoved names a block the mirror does not
	// hold (normal after a resync, an eviction at the cap, or a late join).
	// Blocks only.
	IgnoreUnknownBlock
	// IgnoreCacheSalt: SGLang cached the run for salted requests, which it
	// keeps apart from unsalted ones although their page keys are equal;
	// mirroring it would promise unsalted prompts a cache they cannot use.
	IgnoreCacheSalt
	// IgnoreMultimodal: a TensorRT-LLM block holds multimodal tokens
	// (token_extra_id, mm_keys) that llb's prompt-side chain cannot
	// reproduce.
	IgnoreMultimodal
	// IgnoreWindow: a TensorRT-LLM event for an attention window other than
	// the one llb mirrors (a variable sliding-window model publishes one
	// stream per window size).
	IgnoreWindow
	// IgnoreCacheLevel: a TensorRT-LLM "updated" event (a block moved
	// between cache levels, or its priority changed); llb mirrors
	// TensorRT-LLM's blocks in one tier.
	IgnoreCacheLevel
	// NumIgnoreReasons is the number of reasons.
	NumIgnoreReasons
)

var ignoreNames = [NumIgnoreReasons]string{
	"invalid", "unknown_tag", "medium", "group", "spec_kind", "block_size", "token_count", "extra_keys", "orphan_parent", "unknown_block",
	"cache_salt", "multimodal", "window", "cache_level",
}

// String returns the reason's snake_case name (the metric label).
func (r IgnoreReason) String() string {
	if r < NumIgnoreReasons {
		return ignoreNames[r]
	}
	return "unknown"
}

// expected reports reasons that are normal operation rather than a
// misconfiguration (logged at Info instead of Warn).
func (r IgnoreReason) expected() bool {
	return r == IgnoreUnknownBlock || r == IgnoreGroup || r == IgnoreSpecKind || r == IgnoreOrphanParent ||
		r == IgnoreCacheSalt || r == IgnoreMultimodal || r == IgnoreWindow || r == IgnoreCacheLevel
}

// Metric names of the ignore counters.
const (
	// MetricEventsIgnored counts events llb did not apply, by reason.
	MetricEventsIgnored = "llb_kv_events_ignored_total"
	// MetricBlocksIgnored counts the blocks those events named, plus
	// removals of blocks the mirror did not hold, by reason.
	MetricBlocksIgnored = "llb_kv_blocks_ignored_total"
)

// DefaultIgnoreLogEvery is how often a reason is logged again after its
// first line (with the number of occurrences held back).
const DefaultIgnoreLogEvery = time.Minute

// IgnoreCount is one reason's tally.
type IgnoreCount struct {
	// Events and Blocks count what was not applied.
	Events, Blocks uint64
	// Cause is the most recent occurrence's cause, one sentence.
	Cause string
}

// IgnoreTally is one owner's tallies, indexed by IgnoreReason.
type IgnoreTally [NumIgnoreReasons]IgnoreCount

// Total is the number of events ignored for every reason.
func (t *IgnoreTally) Total() uint64 {
	var n uint64
	for i := range t {
		n += t[i].Events
	}
	return n
}

// IgnoredView is one reason's tally for the operator views.
type IgnoredView struct {
	// Reason is the IgnoreReason's name.
	Reason string `json:"reason"`
	// Events and Blocks count what was not applied.
	Events uint64 `json:"events"`
	Blocks uint64 `json:"blocks"`
	// Cause is the latest occurrence's cause.
	Cause string `json:"cause,omitempty"`
}

// IgnoredViews merges tallies (a feed's and its mirror's, several ranks')
// into the non-zero reasons, in reason order.
func IgnoredViews(tallies ...IgnoreTally) []IgnoredView {
	var sum IgnoreTally
	for _, t := range tallies {
		for i := range t {
			sum[i].Events += t[i].Events
			sum[i].Blocks += t[i].Blocks
			if t[i].Cause != "" {
				sum[i].Cause = t[i].Cause
			}
		}
	}
	var out []IgnoredView
	for i := range sum {
		if sum[i].Events == 0 && sum[i].Blocks == 0 {
			continue
		}
		out = append(out, IgnoredView{Reason: IgnoreReason(i).String(), Events: sum[i].Events, Blocks: sum[i].Blocks, Cause: sum[i].Cause})
	}
	return out
}

// ignoreLog counts and logs ignored input for one owner (a feed or a
// mirror). Single owner; time is passed in.
type ignoreLog struct {
	log     zerolog.Logger
	g       *metricGroup
	every   time.Duration
	tally   IgnoreTally
	events  [NumIgnoreReasons]*metrics.Counter
	blocks  [NumIgnoreReasons]*metrics.Counter
	limiter [NumIgnoreReasons]logLimiter
}

func newIgnoreLog(log zerolog.Logger, g *metricGroup, every time.Duration) *ignoreLog {
	if every <= 0 {
		every = DefaultIgnoreLogEvery
	}
	l := &ignoreLog{log: log, g: g, every: every}
	for i := range l.limiter {
		l.limiter[i].every = every
	}
	return l
}

// count records events and blocks ignored for r at now; cause is built only
// when the line is written or the tally's cause is empty (it is called on
// the hot path of a misconfigured feed).
func (l *ignoreLog) count(now time.Time, r IgnoreReason, events, blocks int, cause func() string) {
	c := &l.tally[r]
	if l.events[r] == nil {
		// Series appear with the first occurrence: a healthy feed exports none.
		l.events[r] = l.g.counterLabeled(MetricEventsIgnored, `reason="`+r.String()+`"`)
		l.blocks[r] = l.g.counterLabeled(MetricBlocksIgnored, `reason="`+r.String()+`"`)
	}
	c.Events += uint64(events)
	c.Blocks += uint64(blocks)
	if events > 0 {
		l.events[r].Add(events)
	}
	if blocks > 0 {
		l.blocks[r].Add(blocks)
	}
	ok, suppressed := l.limiter[r].allow(now)
	if !ok && c.Cause != "" {
		return
	}
	c.Cause = cause()
	if !ok {
		return
	}
	e := l.log.Warn()
	if r.expected() {
		e = l.log.Info()
	}
	e.Str(logReason, r.String()).Int(logCount, suppressed).Uint64(logIgnoredEvents, c.Events).Uint64(logIgnoredBlocks, c.Blocks).
		Msg("kv events not applied: " + c.Cause)
}
