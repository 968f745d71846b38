package rule

// LLMArguments are the inference gateway's AI/LLM serviceArguments keys
// (loxilb-compat.md §1.3 "IGW-only, AI / LLM"). Every one of them needs
// mode 4 (fullproxy). The mix of snake_case and camelCase is LoxiLB's and is
// deliberate: a mis-cased key is silently dropped by encoding/json, exactly
// as LoxiLB drops it.
type LLMArguments struct {
	// SSEMode suppresses the idle timeout while a text/event-stream response
	// is active and detects [DONE].
	SSEMode bool `json:"sse_mode,omitempty"`
	// MaxStreamDurationSec caps a stream's wall-clock time in seconds (0 → 86400).
	MaxStreamDurationSec int64 `json:"max_stream_duration_sec,omitempty"`
	// BackendKeepaliveIntervalSec sets TCP keepalive idle on backend sockets in
	// seconds (0 = off).
	BackendKeepaliveIntervalSec int64 `json:"backend_keepalive_interval_sec,omitempty"`
	// CBEnable turns on the per-endpoint circuit breaker (P/D rules arm it
	// regardless; see Effective.BreakerEnabled).
	CBEnable bool `json:"cb_enable,omitempty"`

	// ChwblPrefixHashLevel is 1, 2 or 3 (absent → 1); sel 8, 9 or 10 only.
	ChwblPrefixHashLevel *int64 `json:"chwbl_prefix_hash_level,omitempty"`
	// ChwblPrefixHashFlags is a 0–255 bitmask (0 = auto); sel 8, 9 or 10 only.
	ChwblPrefixHashFlags *int64 `json:"chwbl_prefix_hash_flags,omitempty"`
	// ChwblMeanLoadFactor is the bounded-load factor in percent of the mean,
	// 100–300 (absent → 175, LoxiLB's effective value); sel 8 or 10 only.
	ChwblMeanLoadFactor int64 `json:"chwbl_mean_load_factor,omitempty"`
	// ChwblReplication is virtual nodes per endpoint, 1–1024 (absent → 100);
	// sel 8 or 10 only.
	ChwblReplication int64 `json:"chwbl_replication,omitempty"`
	// ChwblEnableCacheSalt requires cache_salt in requests; sel 8, 9 or 10 only.
	ChwblEnableCacheSalt *bool `json:"chwbl_enable_cache_salt,omitempty"`

	// PDDisaggMode turns on prefill/decode disaggregation; needs ≥1 ep_role:1
	// and ≥1 ep_role:2 endpoint.
	PDDisaggMode bool `json:"pd_disagg_mode,omitempty"`
	// PDCacheAwareMode turns on the Tier-1 radix trie; needs PDDisaggMode.
	PDCacheAwareMode bool `json:"pd_cache_aware_mode,omitempty"`
	// PDSessionTTLSec is the Tier-0 session pin lifetime in seconds (0 → 300).
	PDSessionTTLSec int64 `json:"pd_session_ttl_sec,omitempty"`
	// PDCacheThreshold is the Tier-1 minimum match rate in percent, 0–100 (0 → 20).
	PDCacheThreshold int64 `json:"pd_cache_threshold,omitempty"`
	// PDBalanceAbsThreshold is the Tier-1 imbalance guard, max−min active
	// connections, 0–255 (0 → 3). LoxiLB stores it as uint8 and wraps larger
	// values; llb rejects them.
	PDBalanceAbsThreshold int64 `json:"pd_balance_abs_threshold,omitempty"`
	// PDBootstrapPort is SGLang's disaggregation bootstrap port (0 → 8998);
	// only valid with P/D and kvEngineType "sglang".
	PDBootstrapPort int64 `json:"pdBootstrapPort,omitempty"`

	// KVExactMode is Tier 1.5: 0 off, 1 ZMQ over a P/D pool, 2 NATS (reserved),
	// 3 ZMQ over a single role-less pool.
	KVExactMode int64 `json:"kvExactMode,omitempty"`
	// KVBlockSize is tokens per KV block (0 → 16); must equal vLLM --block-size.
	KVBlockSize int64 `json:"kvBlockSize,omitempty"`
	// KVHashAlgo is the block-hash contract; best omitted (derived from the
	// engine). vLLM: sha256_cbor or xxhash_cbor; SGLang: sha256_sglang;
	// TRT-LLM: blockhash_trtllm.
	KVHashAlgo string `json:"kvHashAlgo,omitempty"`
	// KVZmqPort is the engines' KV-event ZMQ PUB port, 1–65535 (0 → 5557);
	// DP rank N publishes at KVZmqPort+N.
	KVZmqPort int64 `json:"kvZmqPort,omitempty"`
	// KVWarmupSec is the Tier-1.5 warm-up window after a feed connects, in
	// seconds (0 → 30).
	KVWarmupSec int64 `json:"kvWarmupSec,omitempty"`
	// KVEngineType is vllm, sglang, trtllm or llamacpp (empty = vllm).
	// Immutable once the rule exists.
	KVEngineType string `json:"kvEngineType,omitempty"`
	// KVDpRankCount is the engine's data-parallel rank count, 1–8 (0 → 1).
	KVDpRankCount int64 `json:"kvDpRankCount,omitempty"`
}

// LLBArguments are llb extensions that LoxiLB does not have. They are few,
// camelCase like LoxiLB's own kv* keys, ignored by LoxiLB if a rule is
// replayed there, and each exists because a LoxiLB process-global setting
// does not fit a multi-fleet daemon:
//
//   - kvNoneHashSeed: LoxiLB reads vLLM's NONE_HASH seed (PYTHONHASHSEED) from
//     the process-wide LLB_KV_NONE_HASH_SEED; fleets behind one llbd may run
//     with different seeds, and a wrong seed makes every Tier-1.5 hash miss.
//   - kvReplayPort: vLLM's KV-event ROUTER replay socket, used to fill
//     sequence gaps instead of clearing the mirror (LoxiLB has only a
//     process-wide LLB_KV_REPLAY_PORT_OFFSET).
//   - kvBlockKey: how mirrored blocks are keyed. "hash" (default) recomputes
//     vLLM's block hashes and needs seed and algorithm parity; "tokens" keys
//     blocks by llb's own hash of the token ids carried in BlockStored events
//     (the llm-d design), which works without that parity.
//   - kvTokenizerDir: the Hugging Face tokenizer directory of the rule's
//     model, so Tier 1.5 tokenizes in process instead of calling the
//     engine's /tokenize (LoxiLB always calls /tokenize); overrides the
//     daemon's --tokenizer-dir / LLB_TOKENIZER_DIR.
//
// Those four need kvExactMode 1 or 3. One more is not about the KV side:
//
//   - migrationLimit: how many times one request may move to another
//     endpoint when its worker dies, freezes or drops the connection
//     mid-answer (request migration, gateway/migrate.go); LoxiLB cuts such
//     a stream. Absent → the daemon's LLB_MIGRATION_LIMIT (3).
type LLBArguments struct {
	// KVNoneHashSeed is the PYTHONHASHSEED value the rule's vLLM workers run
	// with. A pointer because "" is a valid seed distinct from "not set";
	// absent → the daemon default (env LLB_KV_NONE_HASH_SEED).
	KVNoneHashSeed *string `json:"kvNoneHashSeed,omitempty"`
	// KVReplayPort is the workers' KV-event replay (ROUTER) port, 1–65535;
	// 0 = no replay. DP rank N is at KVReplayPort+N.
	KVReplayPort int64 `json:"kvReplayPort,omitempty"`
	// KVBlockKey is "hash" (default) or "tokens"; see the type comment.
	KVBlockKey string `json:"kvBlockKey,omitempty"`
	// KVTokenizerDir is an absolute path on the llbd host: a directory
	// holding the model's tokenizer.json (+ tokenizer_config.json), or a
	// root of such directories named by served model name. Absent → the
	// daemon default; neither → the engine's /tokenize.
	KVTokenizerDir string `json:"kvTokenizerDir,omitempty"`
	// MigrationLimit is how many times one request may be sent on to
	// another endpoint after its stream broke (or, before any byte reached
	// the client, after its worker died), 0–MaxMigrationLimit; 0 turns
	// migration off. A pointer because 0 is distinct from "not set";
	// absent → the daemon default (env LLB_MIGRATION_LIMIT, 3).
	MigrationLimit *int64 `json:"migrationLimit,omitempty"`
	// PriorityScheduling says the rule's engines run vLLM's
	// --scheduling-policy priority: llb then sets each request's
	// "priority" field from its class (critical -1, standard 0, sheddable
	// 1; a lower value is served first). Off: the body's priority is left
	// as the client sent it (vLLM refuses a non-zero one without the
	// policy).
	PriorityScheduling bool `json:"priority_scheduling,omitempty"`
}
