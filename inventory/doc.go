// Package inventory is the engine side of llb. It mirrors each prefill
// endpoint's prefix cache from its KV events — vLLM's and SGLang's ZMQ
// streams, TensorRT-LLM's HTTP drain — and recomputes the block keys the
// engine would compute for a prompt, so Tier 1.5 can score endpoints by the
// cached prefix they really hold. The contracts follow each engine's own
// source and are pinned by vectors the engines' functions made
// (testdata/); docs/vllm.md says how vLLM workers must run for them. It
// imports nothing else of llb.
//
// # Pieces
//
//   - Hash contract (Hasher, TokenHasher, ChainHasher, ExtraKeys, Digest):
//     sha256_cbor and xxhash_cbor exactly as vLLM computes them (canonical
//     CBOR of [parent digest, tokens, extra keys], chained on the full
//     digest, NONE_HASH from the seed string, event key = last 8 digest
//     bytes big-endian), and a token-keyed mode whose keys are llb's own
//     chain over token ids (independent of the engine's algorithm and seed).
//   - SGLangHasher: SGLang's page hash (sha256_sglang: SHA-256 over the
//     parent page's raw digest and the page's little-endian token ids, no
//     root, key = first 8 digest bytes), an exact-mode contract like
//     Hasher's. TensorRT-LLM's hashes are no stable format: its rules
//     (blockhash_trtllm) run token-keyed.
//   - Codec (DecodeBatch, Batch.Decode, ParseFrame, AppendBatch): vLLM's
//     msgpack EventBatch in both event layouts (legacy tagged arrays,
//     current tagged maps), array or map envelope, int or bin hashes, and
//     SGLang's (tagged arrays, signed int64 hashes, a trailing cache_salt
//     metadata map); and an encoder that writes what msgspec writes, for
//     tests and the simulator.
//   - Mirror: one rank's block-key multiset (reference counts; vLLM does
//     not deduplicate), capped with counted CLOCK evictions, with the
//     hash-contract self-check (ContractState) that raises the
//     hash_contract guard.
//   - SeqTracker: the pure sequence rules (duplicate, small gap kept, big
//     gap or restart cleared, replay when configured).
//   - Feed: the ZMQ SUB subscriber of one endpoint rank (vLLM, SGLang),
//     with replay over a DEALER socket, producing Updates for a sink.
//   - DrainFeed: TensorRT-LLM's destructive POST /kv_cache_events, polled
//     one request at a time; event_id is the sequence per attention-DP
//     rank, created clears, stored runs carry tokens for token-keyed
//     mirrors. It produces the same Updates.
//   - ScrapeCacheConfig / ParseCacheConfig: num_gpu_blocks and the waiting
//     queue from an engine's /metrics (the endpoint actor scrapes on its
//     own schedule).
//   - Views: HashAlgoName, IgnoredViews, and the metric names.
//
// # Ownership
//
// A Feed's sockets belong to the goroutine running Feed.Run: it polls with
// a timeout, checks its context, and closes them itself (closing a pebbe/zmq4
// socket from another goroutine while it is blocked crashes the process).
// A Mirror has exactly one owner and takes no locks. Hasher and TokenHasher
// are safe for concurrent use. Feed's Stats is safe
// from any goroutine; Mirror's belongs to its owner. A Batch handed to a sink belongs to the sink.
//
// # Runtime wiring
//
//	vLLM PUB ──ZMQ──▶ Feed.Run (one goroutine per endpoint × DP rank)
//	                    decode, sequence rules, replay
//	                    │ Sink(Update)   (non-blocking send to a mailbox)
//	                    ▼
//	                 inventory actor (one per endpoint; owns its Mirrors)
//	                    Mirror.ApplyUpdate; on UpdateConnected: capacity refresh
//	                    ▲ Score{chain} / ▼ overlap, Contract(), Len()
//	                 router actor ◀── gateway (per request, in its own goroutine:
//	                                   tokenizer.Tokenizer, then
//	                                   ChainHasher.AppendBlockKeys)
//
// The request path never touches a Mirror directly: it computes the chain
// in parallel across requests and asks the inventory actors, which answer
// Mirror.Score (the number of leading chain blocks held) and the contract
// state; a tripped contract or a tokenize error makes Tier 1.5 fall through
// with reason hash_contract or tokenize.
//
// # Metrics
//
// Feeds and mirrors register their series in the *metrics.Set they are
// given (nil keeps them private) with labels service, ep_idx and rank, and
// unregister them when the feed stops or the mirror is closed: LoxiLB's
// loxilb_kv_subscriber_connected, loxilb_kv_subscriber_reconnect_total,
// loxilb_kv_subscriber_recv_error_total, loxilb_kv_inv_cap_evictions_total,
// loxilb_pd_kv_blocks, and llb's llb_kv_* additions (gaps, resyncs,
// restarts, replays, contract mismatches and guard).
package inventory
