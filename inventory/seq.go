package inventory

// DefaultGapWindow is the largest gap (in lost batches) after which the
// mirror is kept rather than cleared, as LoxiLB's seed does (64).
const DefaultGapWindow = 64

// SeqAction is what to do with a received batch, given its sequence number.
type SeqAction uint8

// Sequence actions.
const (
	// SeqApply: the first batch, or exactly the next one.
	SeqApply SeqAction = iota
	// SeqDuplicate: the same sequence number again; drop the batch.
	SeqDuplicate
	// SeqGapKeep: batches were lost, few enough to keep the mirror
	// (counted; a missed removal may leave a stale block until the engine
	// stores or removes it again).
	SeqGapKeep
	// SeqGapResync: too many batches were lost; clear the mirror, then apply.
	SeqGapResync
	// SeqGapReplay: batches were lost and a replay endpoint is configured;
	// fetch [From, seq) first.
	SeqGapReplay
	// SeqRestart: the sequence went backwards (or, on the first batch after
	// a disconnection, repeated), so the publisher restarted with an empty
	// cache; clear the mirror, then apply. Missing counts the new
	// publisher's batches [0, seq) that were lost: a PUB socket drops what
	// it sends before the subscription reaches it.
	SeqRestart
)

// String names the action for logs and traces.
func (a SeqAction) String() string {
	switch a {
	case SeqApply:
		return "apply"
	case SeqDuplicate:
		return "duplicate"
	case SeqGapKeep:
		return "gap_keep"
	case SeqGapResync:
		return "gap_resync"
	case SeqGapReplay:
		return "gap_replay"
	case SeqRestart:
		return "restart"
	}
	return "unknown"
}

// SeqDecision is the verdict on one sequence number.
type SeqDecision struct {
	// Action is what to do.
	Action SeqAction
	// Missing is the number of lost batches (gap actions).
	Missing uint64
	// From is the first lost sequence number (gap actions).
	From uint64
}

// SeqTracker is the pure sequence logic of one publisher: no clock, no I/O.
// The zero value has not seen a batch yet; set Window and Replay before use.
type SeqTracker struct {
	// Window is the largest gap that keeps the mirror (DefaultGapWindow
	// when 0).
	Window uint64
	// Replay makes gaps answer SeqGapReplay instead of keep/resync.
	Replay  bool
	last    uint64
	started bool
	// down is set by Disconnected until the next batch.
	down bool
}

// Disconnected records that the connection to the publisher dropped: the
// next batch comes over a new connection, from the same publisher or from
// a restarted one. A PUB socket never sends a batch twice, so a sequence
// number the tracker has already seen then means the publisher started
// over — even one equal to the last, which on a live connection would be
// a duplicate — and, when the new publisher's first batches were lost
// before the subscription reached it, that is the only sign of its restart.
func (t *SeqTracker) Disconnected() { t.down = true }

// Observe classifies seq and advances the tracker (for every action but
// SeqDuplicate the tracker's last sequence becomes seq).
func (t *SeqTracker) Observe(seq uint64) SeqDecision {
	down := t.down
	t.down = false
	switch {
	case !t.started:
		t.started, t.last = true, seq
		return SeqDecision{Action: SeqApply}
	case seq == t.last && !down:
		return SeqDecision{Action: SeqDuplicate}
	case seq <= t.last:
		t.last = seq
		return SeqDecision{Action: SeqRestart, Missing: seq}
	case seq == t.last+1:
		t.last = seq
		return SeqDecision{Action: SeqApply}
	}
	d := SeqDecision{Missing: seq - t.last - 1, From: t.last + 1}
	t.last = seq
	switch {
	case t.Replay:
		d.Action = SeqGapReplay
	case d.Missing <= t.window():
		d.Action = SeqGapKeep
	default:
		d.Action = SeqGapResync
	}
	return d
}

// Fallback is the action for a gap whose replay failed: keep or resync by
// the window, as without replay.
func (t *SeqTracker) Fallback(d SeqDecision) SeqAction {
	if d.Missing <= t.window() {
		return SeqGapKeep
	}
	return SeqGapResync
}

// Last returns the last sequence number accepted, and whether there is one.
func (t *SeqTracker) Last() (uint64, bool) { return t.last, t.started }

func (t *SeqTracker) window() uint64 {
	if t.Window == 0 {
		return DefaultGapWindow
	}
	return t.Window
}

// ResetReason says why an Update asks the mirror to clear first.
type ResetReason uint8

// Reset reasons.
const (
	// ResetNone: apply on top of the current mirror.
	ResetNone ResetReason = iota
	// ResetGap: more batches were lost than the gap window tolerates.
	ResetGap
	// ResetRestart: the publisher restarted (sequence went backwards).
	ResetRestart
	// ResetReplayFailed: a replay could not fill a gap beyond the window.
	ResetReplayFailed
)

// String names the reason for logs and metrics.
func (r ResetReason) String() string {
	switch r {
	case ResetNone:
		return "none"
	case ResetGap:
		return "gap"
	case ResetRestart:
		return "restart"
	case ResetReplayFailed:
		return "replay_failed"
	}
	return "unknown"
}

// UpdateKind distinguishes what a Feed delivers to its sink.
type UpdateKind uint8

// Update kinds.
const (
	// UpdateBatch carries a batch to apply (after Reset, if set).
	UpdateBatch UpdateKind = iota
	// UpdateConnected: the SUB socket (re)connected; a good moment to
	// refresh capacity.
	UpdateConnected
	// UpdateDisconnected: the SUB socket lost its connection.
	UpdateDisconnected
)

// Update is what a Feed hands its sink, in stream order. Ownership of Batch
// passes to the sink: the feed never touches it again.
type Update struct {
	// ID is the feed's endpoint and rank.
	ID EndpointID
	// Kind is what happened.
	Kind UpdateKind
	// Seq is the batch's sequence number (UpdateBatch).
	Seq uint64
	// Reset, when not ResetNone, tells the mirror to clear before applying.
	Reset ResetReason
	// Batch is the decoded batch (UpdateBatch; nil otherwise).
	Batch *Batch
}
