package inventory

// Log field names. They follow internal/logfield's snake_case vocabulary
// (the brief keeps inventory free of imports from this module, so the few
// names it needs are repeated here).
const (
	logService   = "service"
	logEpIdx     = "ep_idx"
	logRank      = "rank"
	logAddr      = "addr"
	logReason    = "reason"
	logCount     = "count"
	logSeq       = "seq"
	logLastSeq   = "last_seq"
	logMissing   = "missing"
	logErr       = "error"
	logBlocks    = "blocks"
	logEndpoint  = "endpoint"
	logBlockSize = "block_size"
	logCounted   = "counted"
	logMaxMsg    = "max_msg_bytes"
	logMedium    = "medium"
	// logIgnoredEvents and logIgnoredBlocks are a reason's running totals.
	logIgnoredEvents = "ignored_events"
	logIgnoredBlocks = "ignored_blocks"
)
