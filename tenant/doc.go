// Package tenant is llb's model of API keys and tenants, and their
// enforcement in the data plane: LoxiLB's AI-gateway keys (raw "lxb_…"
// keys shown once, only their SHA-256 stored; per-key allowed models,
// request rate, burst and tokens per minute; an enabled flag) and tenant
// rate limits (requests per second and tokens per minute across a
// tenant's keys).
//
// Shape:
//   - Key and Limit are the records; Table is an immutable snapshot of them
//     with pure decide functions (create, patch, delete a key; set a
//     limit) that the catalog runs, persists (the state file; etcd in a
//     cluster) and publishes.
//   - Gate is what the data plane asks: which key a raw key is (401
//     invalid_api_key), whether it may use a model (403
//     model_not_allowed), whether a request fits the key's and its
//     tenant's limits now (429 with a Retry-After), and what a finished
//     request cost in tokens. Its limits are token buckets whose level may
//     go into debt: a request is admitted while a bucket holds a token
//     (rates) or is above zero (tokens per minute, charged when the engine
//     reported the usage).
//   - In a cluster the replicas share each bucket: every replica refills
//     at the full rate and debits its own consumption at once and its
//     peers' as their gossip reports it (Usage, ApplyPeers); a bucket's
//     burst is split evenly between the replicas. See Gate for the error
//     bound this gives.
//
// Nothing here does I/O; time comes in as arguments.
package tenant
