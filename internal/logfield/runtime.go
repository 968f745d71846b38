package logfield

// Field names used by the routing runtime (actors/).
const (
	// Service is a running service's key (the rule key).
	Service = "service"
	// EndpointIndex is an endpoint's index in its rule.
	EndpointIndex = "ep_idx"
	// Role is an endpoint's P/D role ("prefill", "decode", "none").
	Role = "role"
	// State is a state machine's new state ("open", "down", ...).
	State = "state"
	// MsgType is the Go type of an unexpected actor message.
	MsgType = "msg_type"
	// Actor names an actor ("router", "breaker", ...).
	Actor = "actor"
	// Error is an error's text.
	Error = "error"
	// Failures is a consecutive-failure count.
	Failures = "failures"
	// Rank is a KV feed's data-parallel rank.
	Rank = "rank"
	// Blocks is a number of KV blocks.
	Blocks = "blocks"
)
