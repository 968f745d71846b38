package engine

import "errors"

// Sentinel errors; every error the package returns wraps one of them.
var (
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("engine: invalid configuration")
	// ErrInvalidRequest reports a request the engine can never serve (empty
	// prompt, too long for max_model_len or for the whole cache, bad block
	// digests). The HTTP layer answers 400.
	ErrInvalidRequest = errors.New("engine: invalid request")
	// ErrQueueFull reports a full waiting queue. The HTTP layer answers 503.
	ErrQueueFull = errors.New("engine: waiting queue full")
	// ErrUnknownRequest reports a ticket or remote request id the engine
	// does not hold (finished, expired, never existed).
	ErrUnknownRequest = errors.New("engine: unknown request")
	// ErrBlocksInUse reports a prefix-cache reset refused because blocks are
	// still held by running requests or leases (vLLM refuses too).
	ErrBlocksInUse = errors.New("engine: blocks in use")
)
