package tokenizer

import (
	"errors"
	"fmt"
)

// Sentinel errors. Classify with errors.Is; every error this package
// returns wraps one of these (Tokenize's errors inside a *GuardError).
var (
	// ErrUnsupported: the tokenizer uses a component this package does not
	// implement (a Unigram/WordPiece model, a Precompiled normalizer...),
	// or a request needs what only the engine can do. Such a model or
	// request keeps the engine's /tokenize.
	ErrUnsupported = errors.New("tokenizer: unsupported")
	// ErrMalformed: tokenizer files that are not what tokenizers writes,
	// or a request or /tokenize answer without the documented shape.
	ErrMalformed = errors.New("tokenizer: malformed")
	// ErrConfig reports an invalid constructor argument.
	ErrConfig = errors.New("tokenizer: invalid configuration")
	// ErrTimeout reports a /tokenize call that ran out of time.
	ErrTimeout = errors.New("tokenizer: deadline exceeded")
	// ErrUpstream reports an engine that answered /tokenize with an error
	// status or could not be reached.
	ErrUpstream = errors.New("tokenizer: upstream error")
)

// GuardReason names why Tier 1.5 must fall through for a request. The
// values are the trace reasons of the routing ladder.
type GuardReason string

// GuardTokenize: the prompt could not be tokenized in time (or at all).
const GuardTokenize GuardReason = "tokenize"

// GuardError is a Tokenize failure, which the router treats as a Tier-1.5
// guard miss, never as a client error. Use errors.As to get the Reason.
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
