package worker

// Log field names this package writes, defined once (shared names come from
// internal/logfield).
const (
	logWorker     = "worker"
	logRole       = "role"
	logKVEndpoint = "kv_endpoint"
	logNIXLAddr   = "nixl_addr"
	logCrashed    = "crashed"
	logFaults     = "faults"
	logEvents     = "events"
	logRemoteReq  = "remote_request_id"
	logType       = "type"
)
