package inventory

import "strings"

// EventKind is the tag of a KV event.
type EventKind uint8

// The KV event kinds vLLM publishes (vllm-contract.md §1.3).
const (
	// EventBlockStored: full blocks became cached.
	EventBlockStored EventKind = iota + 1
	// EventBlockRemoved: blocks were evicted.
	EventBlockRemoved
	// EventAllBlocksCleared: the publisher dropped every block.
	EventAllBlocksCleared
)

// String is the wire tag.
func (k EventKind) String() string {
	switch k {
	case EventBlockStored:
		return "BlockStored"
	case EventBlockRemoved:
		return "BlockRemoved"
	case EventAllBlocksCleared:
		return "AllBlocksCleared"
	}
	return "unknown"
}

// Medium and spec-kind values that feed routing.
const (
	// MediumGPU is the block pool's medium.
	MediumGPU = "GPU"
	// MediumCPU is vLLM's KV offloading to CPU memory (OffloadingConnector,
	// LMCache); STORAGE and others come from further offload tiers.
	MediumCPU = "CPU"
	// MediumCPUPinned is SGLang's HiCache host tier (StorageMedium.CPU, the
	// L2 in pinned host memory); DISK and EXTERNAL are further tiers.
	MediumCPUPinned = "CPU_PINNED"
	// SpecFullAttention is the KV-cache spec kind Tier 1.5 routes on.
	SpecFullAttention = "full_attention"
)

// CacheTier is a memory tier llb mirrors separately.
type CacheTier uint8

// Mirrored tiers.
const (
	// TierGPU is the engine's GPU prefix cache (medium "GPU" or absent).
	TierGPU CacheTier = iota
	// TierCPU is an offload tier in CPU memory (medium "CPU"): the engine
	// loads its blocks instead of recomputing them.
	TierCPU
	numTiers
)

// String returns "GPU" or "CPU".
func (t CacheTier) String() string {
	if t == TierCPU {
		return MediumCPU
	}
	return MediumGPU
}

// TierOf maps an event's medium to the tier llb mirrors it in, case
// insensitively (LoxiLB's CI publisher sends "gpu"): absent or "GPU" → GPU,
// "CPU" (vLLM) or "CPU_PINNED" (SGLang's HiCache) → CPU; ok is false for any
// other medium.
func TierOf(ev *Event) (CacheTier, bool) {
	switch {
	case !ev.HasMedium || strings.EqualFold(ev.Medium, MediumGPU):
		return TierGPU, true
	case strings.EqualFold(ev.Medium, MediumCPU), strings.EqualFold(ev.Medium, MediumCPUPinned):
		return TierCPU, true
	}
	return TierGPU, false
}

// Event is one decoded KV event. Optional wire fields carry a Has flag: false
// means nil or absent (msgspec omits defaulted map fields and legacy arrays
// may be short). Slices alias the owning Batch's storage: they stay valid
// until that Batch is decoded into again.
type Event struct {
	// Kind is the event tag.
	Kind EventKind

	// BlockHashes are the event keys (last 8 digest bytes, big-endian),
	// in prefix order. BlockStored and BlockRemoved.
	BlockHashes []uint64
	// BlockDigests holds the full digests when the publisher sent bytes
	// (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0): one per hash, the zero Digest
	// for entries sent as ints. Nil when every hash was an int.
	BlockDigests []Digest
	// Medium is "GPU", "CPU", "STORAGE", ... BlockStored and BlockRemoved.
	Medium    string
	HasMedium bool
	// GroupIdx is the KV-cache group. BlockStored and BlockRemoved.
	GroupIdx    int64
	HasGroupIdx bool

	// Parent is the key of the block before the first stored one; absent
	// when the run starts at token 0. BlockStored only.
	Parent    uint64
	HasParent bool
	// ParentDigest is the parent's full digest when it was sent as bytes.
	ParentDigest Digest
	// TokenIDs are len(BlockHashes)*BlockSize token ids.
	TokenIDs []uint32
	// BlockSize is the engine's tokens per block (0 if nil on the wire).
	BlockSize int
	// LoRAID is the deprecated int LoRA id.
	LoRAID    int64
	HasLoRAID bool
	// LoRAName is the LoRA adapter name that feeds the hash.
	LoRAName    string
	HasLoRAName bool
	// CacheSalt is the cache_salt of SGLang's BlockStored metadata (the
	// element after medium, a map, where vLLM has lora_name): the run was
	// cached for salted requests, which SGLang keeps apart although its
	// page keys equal unsalted ones.
	CacheSalt    string
	HasCacheSalt bool
	// ExtraKeys has one entry per block when HasExtraKeys: nil (no extras)
	// or the extra-key tuple as generic values ([]any of string, int64,
	// []byte, []any ...).
	ExtraKeys    []any
	HasExtraKeys bool
	// SpecKind is the kv_cache_spec_kind ("full_attention", "sliding_window").
	SpecKind    string
	HasSpecKind bool
	// SlidingWindow is kv_cache_spec_sliding_window.
	SlidingWindow    int64
	HasSlidingWindow bool
}

// Batch is one decoded EventBatch: [ts, events, data_parallel_rank]. A Batch
// can be decoded into repeatedly (Decode) and then reuses its storage; a
// Batch handed to another goroutine must not be decoded into again.
type Batch struct {
	// TS is the publisher's time.time() in seconds.
	TS float64
	// DPRank is the data-parallel rank; HasDPRank is false for pre-May-2025
	// two-element batches and nil ranks.
	DPRank    int64
	HasDPRank bool
	// Events are the decoded, valid events of known kinds, in wire order.
	Events []Event
	// Unknown counts events with tags this package does not know (skipped);
	// UnknownTag is the first such tag.
	Unknown    int
	UnknownTag string
	// Invalid counts events dropped for bad fields (a hash that is neither an
	// int nor a bin of >= 8 bytes, a negative token, a missing tag, ...).
	Invalid int
	// InvalidErr is the first invalid event's cause (nil if Invalid == 0).
	InvalidErr error

	// storage the events alias
	hashes  []uint64
	digests []Digest
	tokens  []uint32
	extras  []any
	spans   []eventSpan
}

// eventSpan records where an event's slices sit in the Batch storage while
// decoding (the storage may still grow and move).
type eventSpan struct {
	h0, h1 int // hashes
	d0, d1 int // digests (d0 == d1 when none)
	t0, t1 int // tokens
	x0, x1 int // extras
}

// NumBlocks counts the blocks named by stored and removed events.
func (b *Batch) NumBlocks() int {
	n := 0
	for i := range b.Events {
		n += len(b.Events[i].BlockHashes)
	}
	return n
}

// reset empties the batch, keeping storage.
func (b *Batch) reset() {
	clear(b.extras[:cap(b.extras)]) // drop references held by generic values
	*b = Batch{
		Events:  b.Events[:0],
		hashes:  b.hashes[:0],
		digests: b.digests[:0],
		tokens:  b.tokens[:0],
		extras:  b.extras[:0],
		spans:   b.spans[:0],
	}
}
