package engine

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/llbproject/llb/ladder"
)

// KVRole is a worker's kv_role, vLLM's KV connector setting
// (--kv-transfer-config): which kv_transfer_params the engine honours. It is
// not a rule's endpoint role (ladder.Role, REST ep_role): a kv_both engine
// can stand in a rule as a prefill and as a decode endpoint at once, and
// vLLM's NIXL guide starts both sides as kv_both. KVRoleFor gives the
// kv_role a rule position needs.
type KVRole uint8

// KV roles.
const (
	// KVNone has no KV connector: kv_transfer_params are ignored (and
	// counted), as a vLLM started without --kv-transfer-config does.
	KVNone KVRole = iota
	// KVProducer (kv_producer) honours do_remote_decode: it prefills,
	// returns kv_transfer_params and holds the blocks for the decode side.
	KVProducer
	// KVConsumer (kv_consumer) honours do_remote_prefill: it pulls the
	// blocks, skips prefill and decodes.
	KVConsumer
	// KVBoth (kv_both) honours both.
	KVBoth
)

// kvRoleNames are the spellings the worker's admin JSON and logs show.
var kvRoleNames = [...]string{KVNone: "none", KVProducer: "prefill", KVConsumer: "decode", KVBoth: "both"}

// String is the role's admin and log spelling: "none", "prefill" (kv_producer),
// "decode" (kv_consumer) or "both".
func (r KVRole) String() string {
	if int(r) < len(kvRoleNames) {
		return kvRoleNames[r]
	}
	return fmt.Sprintf("kv_role(%d)", uint8(r))
}

// KVRoleFor is the kv_role an engine needs to serve a rule's endpoint of
// role r: a prefill endpoint produces KV, a decode endpoint consumes it, a
// role-less (single-pool) endpoint has no connector.
func KVRoleFor(r ladder.Role) KVRole {
	switch r {
	case ladder.RolePrefill:
		return KVProducer
	case ladder.RoleDecode:
		return KVConsumer
	}
	return KVNone
}

// ServesRemoteDecode reports whether the role answers do_remote_decode.
func (r KVRole) ServesRemoteDecode() bool { return r == KVProducer || r == KVBoth }

// AcceptsRemotePrefill reports whether the role honours do_remote_prefill.
func (r KVRole) AcceptsRemotePrefill() bool { return r == KVConsumer || r == KVBoth }

// Latency is the latency model, llm-d-inference-sim's:
//
//	LF(n)   = 1 + (TimeFactorUnderLoad−1)·(n−1)/(MaxNumSeqs−1)   (n = running requests)
//	prefill = (PrefillOverhead + uncached_tokens·PrefillPerToken)·LF(n at admission)
//	token k = previous token + InterTokenLatency·LF(n at the previous token)
//	pull    = KVTransferOverhead + blocks·KVTransferPerBlock   (decode leg, replaces prefill)
//
// every duration multiplied by TimeScale. Defaults are 8B-on-H100 figures
// (spec/peers-and-workloads.md §3.3).
type Latency struct {
	// PrefillOverhead is the fixed cost of a prefill. Default 30ms.
	PrefillOverhead time.Duration
	// PrefillPerToken is the cost of one uncached prompt token. Default 200µs.
	PrefillPerToken time.Duration
	// InterTokenLatency is the time between output tokens. Default 12ms.
	InterTokenLatency time.Duration
	// TimeFactorUnderLoad (>= 1) is the slowdown when MaxNumSeqs requests
	// run; it falls linearly to 1 for a single running request. Default 2.
	TimeFactorUnderLoad float64
	// KVTransferOverhead is the fixed cost of a decode leg's KV pull.
	// Default 2ms.
	KVTransferOverhead time.Duration
	// KVTransferPerBlock is the cost of pulling one block. Default 100µs.
	KVTransferPerBlock time.Duration
	// TimeScale multiplies every duration above (0 < TimeScale; 0.01 makes
	// tests run a hundred times faster). Default 1.
	TimeScale float64
}

// DefaultLatency returns the default latency model.
func DefaultLatency() Latency {
	return Latency{
		PrefillOverhead:     30 * time.Millisecond,
		PrefillPerToken:     200 * time.Microsecond,
		InterTokenLatency:   12 * time.Millisecond,
		TimeFactorUnderLoad: 2,
		KVTransferOverhead:  2 * time.Millisecond,
		KVTransferPerBlock:  100 * time.Microsecond,
		TimeScale:           1,
	}
}

// validate reports every problem of l.
func (l Latency) validate() []error {
	var errs []error
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"prefill overhead", l.PrefillOverhead},
		{"prefill per token", l.PrefillPerToken},
		{"inter-token latency", l.InterTokenLatency},
		{"kv transfer overhead", l.KVTransferOverhead},
		{"kv transfer per block", l.KVTransferPerBlock},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s %v (want >= 0)", d.name, d.v))
		}
	}
	if !(l.TimeFactorUnderLoad >= 1) || math.IsInf(l.TimeFactorUnderLoad, 0) {
		errs = append(errs, fmt.Errorf("time factor under load %v (want >= 1)", l.TimeFactorUnderLoad))
	}
	if !(l.TimeScale > 0) || math.IsInf(l.TimeScale, 0) {
		errs = append(errs, fmt.Errorf("time scale %v (want > 0)", l.TimeScale))
	}
	return errs
}

// Scheduler is how an engine turns its running batch into time.
type Scheduler uint8

// Schedulers.
const (
	// SchedLoadFactor is llm-d-inference-sim's model (Latency): every
	// running request keeps its own clock — a prefill of its uncached
	// tokens, then a token every ITL — slowed by a load factor that grows
	// with the batch. A cache miss costs its own request prefill time but
	// does not slow the others. The default.
	SchedLoadFactor Scheduler = iota
	// SchedStep is vLLM V1's step loop (StepLatency): the whole batch
	// advances in steps; each step spends a token budget
	// (MaxNumBatchedTokens) on the running requests in admission order —
	// one token per decoding request, the next chunk of a prefill — then on
	// waiting requests (FCFS, chunked prefill), and lasts as long as its
	// tokens take. A prefill in the batch slows every decode in it.
	SchedStep
)

var schedulerNames = [...]string{"lf", "step"}

// String is the scheduler's flag spelling: "lf" or "step".
func (s Scheduler) String() string {
	if int(s) < len(schedulerNames) {
		return schedulerNames[s]
	}
	return fmt.Sprintf("scheduler(%d)", uint8(s))
}

// ParseScheduler reads a scheduler's flag spelling.
func ParseScheduler(s string) (Scheduler, error) {
	for i, n := range schedulerNames {
		if n == s {
			return Scheduler(i), nil
		}
	}
	return SchedLoadFactor, fmt.Errorf("scheduler %q (want lf or step): %w", s, ErrConfig)
}

// StepLatency is the step model's cost of one step, in microseconds:
//
//	step = Fixed + PrefillToken·P + DecodeToken·D + ContextToken·C + AttentionPair·A
//
// P is the prefill (uncached prompt) tokens computed in the step, D the
// decoding requests in it, C the context tokens (prompt and generated) of
// those decoding requests, A the attention pairs of its prefill chunks (a
// chunk of c tokens after p computed ones attends c·(p + c/2) pairs); the
// whole step is multiplied by Latency.TimeScale.
//
// The defaults are Llama-3.1-8B-Instruct on one H100 (BF16), as vLLM serves
// it:
//   - Fixed 5752.705 µs, PrefillToken 17.25086 µs, DecodeToken 5.999144 µs
//     are BLIS's fitted step coefficients β0, β1, β2 for
//     meta-llama/llama-3.1-8b-instruct, GPU H100, tensor parallelism 1,
//     vllm/vllm-openai:v0.8.4 (github.com/inference-sim/inference-sim,
//     coefficients.yaml; trained by Bayesian optimisation against real vLLM
//     TTFT, ITL and E2E). They agree with the hardware's bounds: reading
//     the 16 GB of BF16 weights once per step at the H100 SXM's 3.35 TB/s
//     takes 4.8 ms (≤ β0), and 2 · 8.0e9 FLOPs per prompt token at its
//     989 TFLOPS dense BF16 take 16 µs (≈ β1).
//   - ContextToken 0.039 µs is what a decode step reads per context token:
//     the model's KV cache is 2 (K, V) · 32 layers · 8 KV heads · 128 dims
//     · 2 bytes = 128 KiB per token (Llama-3.1-8B's config.json), at 3.35
//     TB/s. BLIS's linear fit has no context term (its traces have short
//     contexts); without one a 32k-token context would decode as fast as a
//     1k one.
//   - AttentionPair 0.00106 µs is causal self-attention's compute per
//     (query, key) pair: 4 FLOPs · 4096 (32 heads · 128 dims) · 32 layers =
//     524 kFLOP at half of the 989 TFLOPS (attention kernels reach about
//     50 % of peak). At 32k tokens it doubles a prefill's linear cost.
//
// BLIS's α coefficients (API-server overheads: 0.23 ms + 1.75 µs per
// input token before scheduling, 3.4 ms per output token, neither
// blocking the GPU) are not modelled: they add the same offset to every
// routing strategy's latencies.
type StepLatency struct {
	FixedUs, PrefillTokenUs, DecodeTokenUs, ContextTokenUs, AttentionPairUs float64
}

// DefaultStepLatency returns the calibrated defaults documented on
// StepLatency.
func DefaultStepLatency() StepLatency {
	return StepLatency{
		FixedUs:         5752.705191348184,
		PrefillTokenUs:  17.25086436834028,
		DecodeTokenUs:   5.999143920128404,
		ContextTokenUs:  0.039,
		AttentionPairUs: 0.00106,
	}
}

// validate reports every problem of l.
func (l StepLatency) validate() []error {
	var errs []error
	for _, c := range []struct {
		name string
		v    float64
	}{
		{"step fixed", l.FixedUs}, {"step per prefill token", l.PrefillTokenUs}, {"step per decode token", l.DecodeTokenUs},
		{"step per context token", l.ContextTokenUs}, {"step per attention pair", l.AttentionPairUs},
	} {
		if !(c.v >= 0) || math.IsInf(c.v, 0) {
			errs = append(errs, fmt.Errorf("%s %v µs (want a finite value >= 0)", c.name, c.v))
		}
	}
	if l.FixedUs+l.PrefillTokenUs+l.DecodeTokenUs <= 0 {
		errs = append(errs, errors.New("step latency: a step must take time (fixed, prefill or decode cost > 0)"))
	}
	return errs
}

// Config configures an Engine. Use DefaultConfig and change what differs.
type Config struct {
	// BlockSize is tokens per KV block (vLLM --block-size). Default 16.
	BlockSize int
	// NumBlocks is the KV cache capacity in blocks (num_gpu_blocks).
	// Default 31250 (about 500k tokens, an 8B model on an H100).
	NumBlocks int
	// OffloadBlocks is the CPU offload tier's capacity in blocks (vLLM's
	// OffloadingConnector with cpu_bytes_to_use); 0 turns offloading off.
	// Blocks in it are published with medium "CPU" and loaded instead of
	// recomputed. Default 0.
	OffloadBlocks int
	// MaxNumSeqs is the running-batch limit (--max-num-seqs). Default 256.
	MaxNumSeqs int
	// MaxWaiting bounds the FIFO waiting queue; 0 means unbounded (vLLM).
	// A full queue rejects with ErrQueueFull. Default 0.
	MaxWaiting int
	// MaxModelLen bounds prompt plus output tokens (--max-model-len).
	// Default 32768.
	MaxModelLen int
	// Hash is the prefix-cache hash contract. Default sha256_cbor, seed "0".
	Hash HashConfig
	// KVRole is the KV connector's role (vLLM's kv_role). Default KVNone.
	KVRole KVRole
	// EngineID is this engine's id, returned as remote_engine_id by a
	// prefill and checked when a decode side pulls. Required when KVRole
	// serves remote decode.
	EngineID string
	// KVLease is how long a finished prefill leg's blocks stay pinned for
	// the decode side to pull (VLLM_NIXL_ABORT_REQUEST_TIMEOUT). Default 30s
	// (not scaled by TimeScale: it is a protocol timeout, not GPU time).
	KVLease time.Duration
	// Latency is the load-factor model's latency (SchedLoadFactor), and
	// its TimeScale scales both models.
	Latency Latency
	// Scheduler picks the engine model. Default SchedLoadFactor.
	Scheduler Scheduler
	// MaxNumBatchedTokens is the step model's token budget per step
	// (--max-num-batched-tokens, vLLM V1's default 8192 for online
	// serving). Default 8192.
	MaxNumBatchedTokens int
	// Step is the step model's cost of a step.
	Step StepLatency
	// MaxLoRAs is --max-loras: at most this many LoRA adapters run at once;
	// a waiting request whose adapter would be one too many is skipped
	// until one ends. 0: no limit.
	MaxLoRAs int
	// LoRASwapIn is the time an adapter not resident in the GPU's
	// MaxLoRAs slots costs before its request's prefill (vLLM loading it
	// from its CPU cache). Scaled by TimeScale. Default 0.
	LoRASwapIn time.Duration
}

// DefaultConfig returns the defaults documented on Config's fields.
func DefaultConfig() Config {
	return Config{
		BlockSize:   16,
		NumBlocks:   31250,
		MaxNumSeqs:  256,
		MaxModelLen: 32768,
		Hash:        HashConfig{Algo: HashSHA256CBOR, Seed: "0"},
		KVLease:     30 * time.Second,
		Latency:     DefaultLatency(),

		MaxNumBatchedTokens: 8192,
		Step:                DefaultStepLatency(),
	}
}

// Validate reports every problem of c at once (errors.Join), each wrapping
// ErrConfig.
func (c Config) Validate() error {
	var errs []error
	if c.BlockSize < 1 || c.BlockSize > 4096 {
		errs = append(errs, fmt.Errorf("block size %d (want 1..4096)", c.BlockSize))
	}
	if c.NumBlocks < 1 {
		errs = append(errs, fmt.Errorf("num blocks %d (want >= 1)", c.NumBlocks))
	}
	if c.OffloadBlocks < 0 {
		errs = append(errs, fmt.Errorf("offload blocks %d (want >= 0)", c.OffloadBlocks))
	}
	if c.MaxLoRAs < 0 || c.LoRASwapIn < 0 {
		errs = append(errs, fmt.Errorf("max loras %d, lora swap-in %v (want >= 0)", c.MaxLoRAs, c.LoRASwapIn))
	}
	if c.MaxNumSeqs < 1 {
		errs = append(errs, fmt.Errorf("max num seqs %d (want >= 1)", c.MaxNumSeqs))
	}
	if c.MaxWaiting < 0 {
		errs = append(errs, fmt.Errorf("max waiting %d (want >= 0)", c.MaxWaiting))
	}
	if c.MaxModelLen < 1 {
		errs = append(errs, fmt.Errorf("max model len %d (want >= 1)", c.MaxModelLen))
	}
	if c.KVRole > KVBoth {
		errs = append(errs, fmt.Errorf("kv role %d unknown", c.KVRole))
	}
	if c.KVRole.ServesRemoteDecode() && c.EngineID == "" {
		errs = append(errs, errors.New("engine id is required for a role that serves remote decode"))
	}
	if c.KVLease <= 0 {
		errs = append(errs, fmt.Errorf("kv lease %v (want > 0)", c.KVLease))
	}
	if err := c.Hash.validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.Latency.validate()...)
	if c.Scheduler > SchedStep {
		errs = append(errs, fmt.Errorf("scheduler %d unknown", c.Scheduler))
	}
	if c.Scheduler == SchedStep {
		if c.MaxNumBatchedTokens < 1 {
			errs = append(errs, fmt.Errorf("max num batched tokens %d (want >= 1)", c.MaxNumBatchedTokens))
		}
		errs = append(errs, c.Step.validate()...)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("engine config: %w: %w", ErrConfig, errors.Join(errs...))
}
