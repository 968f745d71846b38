package des

import "errors"

// Sentinel errors; every error the package returns wraps one of them (test
// with errors.Is).
var (
	// ErrConfig reports an invalid trace, fleet, strategy or sweep
	// configuration.
	ErrConfig = errors.New("des: invalid configuration")
	// ErrInvariant reports a broken simulation invariant (a request that
	// finished twice or never, a batch over max-num-seqs, a decision that
	// named no worker). It means a bug in the simulator, the engine or the
	// ladder, never a property of the workload.
	ErrInvariant = errors.New("des: invariant violated")
)
