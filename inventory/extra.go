package inventory

import (
	"fmt"
)

// ExtraKeys are the request-level inputs vLLM folds into block hashes
// (vllm-contract.md §2.4). The per-block extra-key tuple is built from them in
// vLLM's order: LoRA name (every block), then one (identifier, offset) pair per
// multimodal item overlapping the block, then cache_salt (block 0 only). An
// empty tuple hashes as None. The zero value means "no extra keys".
//
// Prompt-embeds inputs (vLLM's fourth kind) are not representable: a request
// with prompt embeddings must be treated as a Tier-1.5 guard miss by the
// caller.
type ExtraKeys struct {
	// LoRAName is the LoRA adapter name (lora_request.lora_name); "" = none.
	LoRAName string
	// CacheSalt is the request's cache_salt; "" = none.
	CacheSalt string
	// MM lists multimodal items in prompt order (ascending Offset). The
	// Identifier must already be what vLLM hashes (the mm hash, LoRA-prefixed
	// when a LoRA is active).
	MM []MMItem
}

// MMItem is one multimodal placeholder range in the prompt's token space.
type MMItem struct {
	// Identifier is the engine's mm hash string for the item.
	Identifier string
	// Offset is the token index where the item's placeholder starts.
	Offset int
	// Length is the number of placeholder tokens (> 0).
	Length int
}

// IsZero reports whether e contributes nothing to any block hash.
func (e ExtraKeys) IsZero() bool {
	return e.LoRAName == "" && e.CacheSalt == "" && len(e.MM) == 0
}

// Validate reports malformed multimodal items (all problems at once).
func (e ExtraKeys) Validate() error {
	var errs []error
	prev := -1 << 62
	for i, it := range e.MM {
		if it.Length <= 0 {
			errs = append(errs, fmt.Errorf("mm item %d: length %d (want > 0)", i, it.Length))
		}
		if it.Offset < 0 {
			errs = append(errs, fmt.Errorf("mm item %d: offset %d (want >= 0)", i, it.Offset))
		}
		if it.Offset < prev {
			errs = append(errs, fmt.Errorf("mm item %d: offset %d before previous item's %d (want ascending)", i, it.Offset, prev))
		}
		prev = it.Offset
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("extra keys: %w: %v", ErrConfig, errs)
}

// appendBlockTuple appends the canonical CBOR of the extra-key tuple of the
// block covering tokens [start, start+size) with absolute block index block;
// None (0xf6) when the tuple is empty.
func (e ExtraKeys) appendBlockTuple(buf []byte, block, start, size int) []byte {
	if e.IsZero() {
		return append(buf, cborNull)
	}
	end := start + size
	n := 0
	if e.LoRAName != "" {
		n++
	}
	for _, it := range e.MM {
		if it.Offset < end && it.Offset+it.Length > start {
			n++
		}
	}
	if block == 0 && e.CacheSalt != "" {
		n++
	}
	if n == 0 {
		return append(buf, cborNull)
	}
	buf = appendCBORHead(buf, cborArray, uint64(n))
	if e.LoRAName != "" {
		buf = appendCBORText(buf, e.LoRAName)
	}
	for _, it := range e.MM {
		if it.Offset < end && it.Offset+it.Length > start {
			buf = append(buf, cborArray|2)
			buf = appendCBORText(buf, it.Identifier)
			buf = appendCBORInt(buf, int64(it.Offset-start))
		}
	}
	if block == 0 && e.CacheSalt != "" {
		buf = appendCBORText(buf, e.CacheSalt)
	}
	return buf
}

// BlockTuple returns block's extra-key tuple as generic values, the way a
// BlockStored event's extra_keys[i] carries it (nil for None). It exists for
// the simulator, which must publish the extras it hashed.
func (e ExtraKeys) BlockTuple(block, blockSize int) []any {
	start := block * blockSize
	end := start + blockSize
	var out []any
	if e.LoRAName != "" {
		out = append(out, e.LoRAName)
	}
	for _, it := range e.MM {
		if it.Offset < end && it.Offset+it.Length > start {
			out = append(out, []any{it.Identifier, int64(it.Offset - start)})
		}
	}
	if block == 0 && e.CacheSalt != "" {
		out = append(out, e.CacheSalt)
	}
	return out
}
