package catalog

import "errors"

// Sentinel errors, classified with errors.Is. Their text is LoxiLB's wire
// vocabulary (clients match on "lbrule-exists error", "no-rule error", ...),
// which is why they are not prefixed with the package name; restapi answers
// each with its HTTP status.
var (
	// ErrRuleExists: a write that would change nothing (LoxiLB's 409 for a
	// byte-identical re-POST), or an id already used by another rule. 409.
	ErrRuleExists = errors.New("lbrule-exists error")
	// ErrNoRule: no rule has the given key. 404.
	ErrNoRule = errors.New("no-rule error")
	// ErrNoEndpoint: a detach names an endpoint the rule does not have. 404.
	ErrNoEndpoint = errors.New("ep-host-notfound error")
	// ErrMaintenance: writes are refused until the boot restore finishes. 503.
	ErrMaintenance = errors.New("maintenance: configuration writes are rejected until the boot config replay settles")
	// ErrStoreUnavailable: the shared store (etcd) cannot be reached, or
	// this replica has not read it yet; the change was not made. 503.
	ErrStoreUnavailable = errors.New("rule store unavailable")
	// ErrStaleEpoch: a controller instruction whose epoch is older than the
	// one stored or applied. 409.
	ErrStaleEpoch = errors.New("controller epoch is stale")
)
