package inventory

import "errors"

// Sentinel errors. Classify with errors.Is; every error this package returns
// wraps one of these.
var (
	// ErrConfig reports an invalid constructor argument.
	ErrConfig = errors.New("inventory: invalid configuration")
	// ErrMalformed reports a wire payload (frame, msgpack batch, metrics text,
	// HTTP body) that does not have the documented shape.
	ErrMalformed = errors.New("inventory: malformed input")
	// ErrUnsupported reports a value the hash contract cannot encode (for
	// example an extra key of a type vLLM never puts in a block hash).
	ErrUnsupported = errors.New("inventory: unsupported value")
	// ErrTimeout reports a deadline that expired (replay, scrape).
	ErrTimeout = errors.New("inventory: deadline exceeded")
	// ErrUpstream reports an engine that answered with an error status.
	ErrUpstream = errors.New("inventory: upstream error")
	// ErrReplay reports a replay that could not fill a sequence gap.
	ErrReplay = errors.New("inventory: replay failed")
)
