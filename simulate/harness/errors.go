package harness

import "errors"

// Sentinel errors; every error the package returns wraps one of them (or a
// context error).
var (
	// ErrConfig reports an invalid configuration.
	ErrConfig = errors.New("harness: invalid configuration")
	// ErrDaemon reports an llbd that could not be built, started, reached
	// or configured.
	ErrDaemon = errors.New("harness: llbd failed")
	// ErrFleet reports a simulated fleet that could not start.
	ErrFleet = errors.New("harness: fleet failed")
	// ErrRun reports a run that could not be measured (no request
	// completed, the drain timed out).
	ErrRun = errors.New("harness: run failed")
)
