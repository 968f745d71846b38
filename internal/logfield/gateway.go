package logfield

// Field names used by the data plane (gateway/): the access log and the
// decision traces.
const (
	// API is the request's API: "completion", "chat", "responses", "messages", "embeddings", …, "models", "passthrough", "unknown" (gateway/apis.go).
	API = "api"
	// Model is the request's model field.
	Model = "model"
	// Stream is the request's stream flag.
	Stream = "stream"
	// Tier is the routing tier that chose the endpoint ("0", "1.5", "sel", ...).
	Tier = "tier"
	// LLBRoute is the full X-Llb-Route value (decision, trace, endpoints).
	LLBRoute = "llb_route"
	// PrefillAddr is the prefill (or single-pool) endpoint, ip:port.
	PrefillAddr = "prefill_addr"
	// DecodeAddr is the decode endpoint, ip:port.
	DecodeAddr = "decode_addr"
	// Retries is how many times a request was re-routed before its first byte.
	Retries = "retries"
	// Code is llb's client error code when llb itself answered.
	Code = "code"
	// Bytes is the response body bytes written to the client.
	Bytes = "bytes"
	// TTFB is the time from request start to the serving backend's response headers.
	TTFB = "ttfb"
	// TTFT is the time from request start to the first response byte sent to the client.
	TTFT = "ttft"
	// PrefillDuration is the P/D prefill leg's duration.
	PrefillDuration = "prefill_duration"
	// KVParams says what the prefill returned: found, missing, oversize, invalid.
	KVParams = "kv_params"
	// Engine names a P/D pair's engine dialect when it is not vLLM's
	// (sglang, trtllm).
	Engine = "engine"
	// KVGuard is the Tier-1.5 guard the gateway set (tokenize, hash_contract, ...).
	KVGuard = "kv_guard"
	// KVPredicted is the cached tokens llb predicted for the answering
	// endpoint; KVCached the cached tokens its engine reported
	// (usage.prompt_tokens_details.cached_tokens).
	KVPredicted = "kv_predicted"
	KVCached    = "kv_cached"
	// TTFTPredicted is the time to first token llb predicted on the
	// prefill (single-pool) endpoint, from sending the leg.
	TTFTPredicted = "ttft_predicted"
	// TTFTInput is what the prediction was made from, "u/q/n/w/d": the
	// request's uncached prompt blocks there, the prefill blocks queued
	// ahead of it, llb's requests in flight there, the requests its
	// engine reported waiting at the last scrape and the blocks it lacks
	// beyond the engine's free ones (a full-cache wait).
	TTFTInput = "ttft_input"
	// TTFTObjective is the request's TTFT objective (X-Llb-Ttft-Objective-Ms).
	TTFTObjective = "ttft_objective"
	// Failure is a leg's failure class (connect, reset, timeout, client_gone).
	Failure = "failure"
	// Aborted is true when a response was cut after bytes went out.
	Aborted = "aborted"
	// Migrations is how many times a request moved to another endpoint
	// after its worker failed (a stream continued, or an answer that had
	// sent nothing sent again); MigrationCut why a broken stream was not
	// continued (n, logprobs, structured_output, tool_call, limit, failed,
	// ...).
	Migrations   = "migrations"
	MigrationCut = "migration_cut"
	// Parked is how long admission held the request.
	Parked = "parked"
	// RequestID is the X-Request-Id sent upstream.
	RequestID = "request_id"
	// Ticket is the router's ticket id.
	Ticket = "ticket"
	// Panic is the value a recovered panic carried; Stack its goroutine's
	// stack.
	Panic = "panic"
	Stack = "stack"
)
