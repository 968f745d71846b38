package worker

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/tokenizer"
)

// Config configures one simulated vLLM, SGLang or TensorRT-LLM worker.
// Start from DefaultConfig.
type Config struct {
	// Name labels the worker in logs and /_sim/debug ("prefill-0").
	Name string
	// Dialect is the engine the worker speaks as (see Dialect): vllm (the
	// default), sglang or trtllm. It overrides Engine.Hash.Algo.
	Dialect Dialect
	// BootstrapPort is an SGLang prefill worker's disaggregation bootstrap
	// port (LoxiLB's pdBootstrapPort; SGLang's default is 8998); 0 picks a
	// free one. SGLang dialect, roles that serve remote decode.
	BootstrapPort int
	// BootstrapTimeout bounds how long an SGLang prefill leg waits for its
	// decode to join the room, and a decode leg for the prefill's KV.
	// Default 30s.
	BootstrapTimeout time.Duration
	// EventBuffer is TensorRT-LLM's kv_cache_config.event_buffer_max_size:
	// the ring POST /kv_cache_events drains; when it is full the oldest
	// events are dropped. Default 4096. TensorRT-LLM dialect.
	EventBuffer int
	// DPRank is the data-parallel rank this worker's KV events name
	// (SGLang's attn_dp_rank, vLLM's data_parallel_rank).
	DPRank int
	// DPRoute lists the base URLs (http://ip:port) of this worker's other
	// data-parallel ranks, each a worker of its own with its own engine and
	// KV publisher (rank r on the KV port + r). The worker is then rank 0,
	// the server's front: it spreads generation requests over itself and
	// them in turn, as SGLang's DP controller does by default
	// (load_balance_method round_robin). Everything else it answers itself.
	DPRoute []string
	// Model is the served model name. Default "sim-model".
	Model string
	// LoRAs are LoRA adapter names also served; a request whose "model" is
	// one of them hashes with that lora_name (and lora_id = index+1).
	LoRAs []string
	// Aliases are more names the base model is served under
	// (--served-model-name with several names: each is a card of
	// /v1/models, and a request may name any of them).
	Aliases []string
	// MaxLoRAs is vLLM's --max-loras: at most this many adapters in one
	// batch; a request whose adapter would exceed it waits. 0 means 1 when
	// LoRAs are served (vLLM's default), no limit otherwise.
	MaxLoRAs int
	// RuntimeLoRA allows POST /v1/load_lora_adapter and
	// /v1/unload_lora_adapter (VLLM_ALLOW_RUNTIME_LORA_UPDATING=True);
	// without it both answer 404 as vLLM does.
	RuntimeLoRA bool
	// NoResponseStore turns the Responses API's store off
	// (VLLM_ENABLE_RESPONSES_API_STORE unset): responses are not kept, a
	// previous_response_id is never found. The simulator stores by
	// default, to play multi-turn Responses conversations.
	NoResponseStore bool
	// IP is the address every socket of the worker binds (HTTP, ZMQ, NIXL);
	// each worker of a fleet gets its own 127.0.0.x. Default 127.0.0.1.
	IP string
	// HTTPPort is the OpenAI API port; 0 picks a free one.
	HTTPPort int
	// KVEvents turns the ZMQ KV-event publisher on.
	KVEvents bool
	// KVPort is the PUB port (0 picks a free one). Used when KVEvents.
	KVPort int
	// Replay turns the ROUTER replay socket on (needs KVEvents).
	Replay bool
	// ReplayPort is the ROUTER port (0 picks a free one).
	ReplayPort int
	// Topic is frame 0 of every KV message. Default "kv@<ip>:<http port>@<model>"
	// (the llm-d convention); set it to "-" for vLLM's default empty topic.
	Topic string
	// Layout is the KV-event encoding: map (default) or legacy array.
	Layout inventory.Layout
	// DigestHashes publishes raw digests instead of uint64 keys
	// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0).
	DigestHashes bool
	// EventInterval coalesces KV events into one batch per interval (one
	// engine step); 0 publishes after every engine step. Default 5ms.
	EventInterval time.Duration
	// KVBindRetry is how long binding the ZMQ ports retries an address
	// still held by a crashed predecessor. Default 2s.
	KVBindRetry time.Duration
	// NIXLPort is the P/D side-channel port (VLLM_NIXL_SIDE_CHANNEL_PORT);
	// 0 picks a free one. The side channel runs for every role but none.
	NIXLPort int
	// SeedUnset simulates PYTHONHASHSEED unset: NONE_HASH is random bytes,
	// so nobody can recompute this worker's block hashes.
	SeedUnset bool
	// LeanEvents publishes BlockStored without extra_keys, group_idx and
	// kv_cache_spec_kind, as vLLM before mid-2025 and LoxiLB's CI publisher
	// do: llb's contract check cannot re-hash such runs, so only the
	// cache-truth check can tell a wrong seed.
	LeanEvents bool
	// NoPromptTokensDetails answers "prompt_tokens_details": null, as vLLM
	// started without --enable-prompt-tokens-details (vLLM's default); the
	// worker reports cached_tokens otherwise.
	NoPromptTokensDetails bool
	// ReportQueueWait adds a simulator-only field to every usage object,
	// "llbsim_queue_wait_s": the request's engine queue wait (admission into
	// a batch minus arrival at the engine, the longest of its prompts', in
	// seconds of the worker's clock; for a decode leg, plus the prefill
	// leg's, which the prefill carries inside its kv_transfer_params under
	// the same key). Off by default: the bytes are vLLM's. The load harness
	// turns it on to judge saturation by the per-request wait
	// (simulate/saturation.Criterion); OpenAI clients ignore unknown usage
	// fields.
	ReportQueueWait bool
	// Engine is the engine model (cache, batch, latency, hash, role).
	Engine engine.Config
	// DefaultMaxTokens is used when a request gives no max_tokens (vLLM's
	// completions default 16; used for chat too, where vLLM would fill the
	// context). Default 16.
	DefaultMaxTokens int
	// MaxBodyBytes bounds a request body. Default 16 MiB.
	MaxBodyBytes int64
	// PullTimeout bounds a decode leg's pull from the prefill side
	// channel. Default 2s.
	PullTimeout time.Duration
	// Faults are injected from the start (see Faults).
	Faults Faults
	// FaultSeed seeds the error/drop rate dice. Default 1.
	FaultSeed uint64
	// Logger receives transitions at Info and per-request detail at Debug.
	// Default: disabled.
	Logger *zerolog.Logger
	// Tokenizer, when set, replaces the toy tokenizer for text prompts and
	// chat renders (/v1/completions, /v1/chat/completions, /tokenize): a
	// real Hugging Face tokenizer, so tests can check llb's in-process
	// tokenization against an engine that tokenizes the same way. Output
	// tokens stay the toy's; return_token_strs is refused.
	Tokenizer RealTokenizer
}

// RealTokenizer is what a worker needs of a real tokenizer (llb's
// *tokenizer.Encoder has it).
type RealTokenizer interface {
	// Encode appends the ids of text.
	Encode(text string, addSpecialTokens bool, dst []uint32) []uint32
	// RenderChat renders a chat request with the model's template ("")
	// as vLLM's /tokenize does.
	RenderChat(template string, req tokenizer.Request, now time.Time) (string, error)
}

// DefaultConfig is a single-pool worker on 127.0.0.1 with KV events on, an
// 8B-on-H100 engine and the defaults documented on Config.
func DefaultConfig() Config {
	return Config{
		Model:            "sim-model",
		Dialect:          DialectVLLM,
		IP:               "127.0.0.1",
		BootstrapTimeout: 30 * time.Second,
		EventBuffer:      4096,
		KVEvents:         true,
		EventInterval:    5 * time.Millisecond,
		KVBindRetry:      2 * time.Second,
		Engine:           engine.DefaultConfig(),
		DefaultMaxTokens: 16,
		MaxBodyBytes:     16 << 20,
		PullTimeout:      2 * time.Second,
		FaultSeed:        1,
	}
}

// Validate reports every problem at once, each wrapping ErrConfig.
func (c Config) Validate() error {
	var errs []error
	if c.Model == "" {
		errs = append(errs, errors.New("model name is required"))
	}
	if _, err := ParseDialect(string(c.Dialect)); err != nil {
		errs = append(errs, err)
	}
	if c.BootstrapTimeout < 0 || c.EventBuffer < 0 || c.DPRank < 0 || c.DPRank > 63 {
		errs = append(errs, fmt.Errorf("bootstrap timeout %v, event buffer %d, dp rank %d (want >= 0, >= 0, 0..63)", c.BootstrapTimeout, c.EventBuffer, c.DPRank))
	}
	if _, err := netip.ParseAddr(c.IP); err != nil {
		errs = append(errs, fmt.Errorf("ip %q: %w", c.IP, err))
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"http port", c.HTTPPort}, {"kv port", c.KVPort}, {"replay port", c.ReplayPort}, {"nixl port", c.NIXLPort}, {"bootstrap port", c.BootstrapPort}} {
		if p.v < 0 || p.v > 65535 {
			errs = append(errs, fmt.Errorf("%s %d (want 0..65535)", p.name, p.v))
		}
	}
	if c.Replay && !c.KVEvents {
		errs = append(errs, errors.New("replay needs kv events"))
	}
	if c.KVBindRetry < 0 {
		errs = append(errs, fmt.Errorf("kv bind retry %v (want >= 0)", c.KVBindRetry))
	}
	if c.EventInterval < 0 {
		errs = append(errs, fmt.Errorf("event interval %v (want >= 0)", c.EventInterval))
	}
	if c.DefaultMaxTokens < 1 {
		errs = append(errs, fmt.Errorf("default max tokens %d (want >= 1)", c.DefaultMaxTokens))
	}
	if c.MaxBodyBytes < 1 {
		errs = append(errs, fmt.Errorf("max body bytes %d (want >= 1)", c.MaxBodyBytes))
	}
	if c.PullTimeout <= 0 {
		errs = append(errs, fmt.Errorf("pull timeout %v (want > 0)", c.PullTimeout))
	}
	seen := map[string]bool{c.Model: true}
	for _, l := range c.LoRAs {
		if l == "" || seen[l] {
			errs = append(errs, fmt.Errorf("lora name %q empty or duplicate", l))
		}
		seen[l] = true
	}
	if err := c.Faults.validate(); err != nil {
		errs = append(errs, err)
	}
	ec := c.Engine
	if ec.EngineID == "" {
		ec.EngineID = "validate" // Start fills it in
	}
	if err := ec.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("worker config: %w: %w", ErrConfig, errors.Join(errs...))
}
