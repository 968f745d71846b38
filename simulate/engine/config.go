package engine

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Role is a worker's part in P/D disaggregation, as vLLM's kv_role of the
// NixlConnector: it decides which kv_transfer_params the worker honours.
type Role uint8

// Roles.
const (
	// RoleNone has no KV connector: kv_transfer_params are ignored (and
	// counted), as a vLLM started without --kv-transfer-config does.
	RoleNone Role = iota
	// RolePrefill (kv_producer) honours do_remote_decode: it prefills,
	// returns kv_transfer_params and holds the blocks for the decode side.
	RolePrefill
	// RoleDecode (kv_consumer) honours do_remote_prefill: it pulls the
	// blocks, skips prefill and decodes.
	RoleDecode
	// RoleBoth (kv_both) honours both.
	RoleBoth
)

// String is the role's flag spelling.
func (r Role) String() string {
	switch r {
	case RoleNone:
		return "none"
	case RolePrefill:
		return "prefill"
	case RoleDecode:
		return "decode"
	case RoleBoth:
		return "both"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// ParseRole reads a role's flag spelling.
func ParseRole(s string) (Role, error) {
	for r := RoleNone; r <= RoleBoth; r++ {
		if r.String() == s {
			return r, nil
		}
	}
	return RoleNone, fmt.Errorf("role %q (want none, prefill, decode or both): %w", s, ErrConfig)
}

// ServesRemoteDecode reports whether the role answers do_remote_decode.
func (r Role) ServesRemoteDecode() bool { return r == RolePrefill || r == RoleBoth }

// AcceptsRemotePrefill reports whether the role honours do_remote_prefill.
func (r Role) AcceptsRemotePrefill() bool { return r == RoleDecode || r == RoleBoth }

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
	// Role is the P/D role. Default RoleNone.
	Role Role
	// EngineID is this engine's id, returned as remote_engine_id by a
	// prefill and checked when a decode side pulls. Required when Role
	// serves remote decode.
	EngineID string
	// KVLease is how long a finished prefill leg's blocks stay pinned for
	// the decode side to pull (VLLM_NIXL_ABORT_REQUEST_TIMEOUT). Default 30s
	// (not scaled by TimeScale: it is a protocol timeout, not GPU time).
	KVLease time.Duration
	// Latency is the latency model.
	Latency Latency
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
	if c.MaxNumSeqs < 1 {
		errs = append(errs, fmt.Errorf("max num seqs %d (want >= 1)", c.MaxNumSeqs))
	}
	if c.MaxWaiting < 0 {
		errs = append(errs, fmt.Errorf("max waiting %d (want >= 0)", c.MaxWaiting))
	}
	if c.MaxModelLen < 1 {
		errs = append(errs, fmt.Errorf("max model len %d (want >= 1)", c.MaxModelLen))
	}
	if c.Role > RoleBoth {
		errs = append(errs, fmt.Errorf("role %d unknown", c.Role))
	}
	if c.Role.ServesRemoteDecode() && c.EngineID == "" {
		errs = append(errs, errors.New("engine id is required for a role that serves remote decode"))
	}
	if c.KVLease <= 0 {
		errs = append(errs, fmt.Errorf("kv lease %v (want > 0)", c.KVLease))
	}
	if err := c.Hash.validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.Latency.validate()...)
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("engine config: %w: %w", ErrConfig, errors.Join(errs...))
}
