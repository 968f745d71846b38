package inventory

import (
	"errors"
	"fmt"
)

// Sentinel errors. Classify with errors.Is; every error this package returns
// wraps one of these (or a *GuardError, which wraps one of these).
var (
	// ErrConfig reports an invalid constructor argument.
	ErrConfig = errors.New("inventory: invalid configuration")
	// ErrMalformed reports a wire payload (frame, msgpack batch, metrics text,
	// HTTP body) that does not have the documented shape.
	ErrMalformed = errors.New("inventory: malformed input")
	// ErrUnsupported reports a value the hash contract cannot encode (for
	// example an extra key of a type vLLM never puts in a block hash).
	ErrUnsupported = errors.New("inventory: unsupported value")
	// ErrTimeout reports a deadline that expired (tokenize, replay, scrape).
	ErrTimeout = errors.New("inventory: deadline exceeded")
	// ErrUpstream reports an engine that answered with an error status.
	ErrUpstream = errors.New("inventory: upstream error")
	// ErrReplay reports a replay that could not fill a sequence gap.
	ErrReplay = errors.New("inventory: replay failed")
)

// GuardReason names why Tier 1.5 must fall through for a request. The values
// are the trace reasons of the routing ladder.
type GuardReason string

// Guard reasons produced by this package.
const (
	// GuardTokenize: the prompt could not be tokenized in time (or at all).
	GuardTokenize GuardReason = "tokenize"
	// GuardHashContract: llb's block keys are known not to match the engine's
	// (block size differs, or stored runs re-hash to different keys).
	GuardHashContract GuardReason = "hash_contract"
)

// GuardError is a failure that the router treats as a Tier-1.5 guard miss,
// never as a client error. Use errors.As to get the Reason.
type GuardError struct {
	// Reason is the ladder trace reason.
	Reason GuardReason
	// Err is the underlying cause; it wraps one of the package sentinels.
	Err error
}

// Error implements error.
func (e *GuardError) Error() string {
	return fmt.Sprintf("guard %s: %v", e.Reason, e.Err)
}

// Unwrap returns the cause so errors.Is sees the sentinel.
func (e *GuardError) Unwrap() error { return e.Err }
