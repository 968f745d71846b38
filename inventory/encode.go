package inventory

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
)

// Layout selects the KV-event encoding generation.
type Layout uint8

// Event layouts (vllm-contract.md §1.3).
const (
	// LayoutMap is current vLLM (>= PR #42892): tagged maps, defaulted
	// fields omitted when nil.
	LayoutMap Layout = iota
	// LayoutArray is legacy vLLM: tagged arrays with every field present;
	// BlockStored has 12 elements (the last generation before maps).
	LayoutArray
	// LayoutSGLang is SGLang's KVEventBatch (disaggregation/kv_events.py):
	// tagged arrays, BlockStored [tag, block_hashes, parent_block_hash,
	// token_ids, block_size, lora_id, medium] (plus metadata {"cache_salt"}
	// when the event has a CacheSalt), BlockRemoved [tag, block_hashes,
	// medium], hashes as signed int64 (the same 64 bits as the keys).
	LayoutSGLang
)

// EncodeOptions control AppendBatch.
type EncodeOptions struct {
	// Layout is the event encoding; the zero value is LayoutMap.
	Layout Layout
	// DigestHashes sends block and parent hashes as their full digests
	// (bin, as VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 does) instead of uint64
	// keys. Every event must then carry BlockDigests (and ParentDigest when
	// HasParent).
	DigestHashes bool
}

// AppendBatch appends the msgpack EventBatch for b exactly as vLLM's msgspec
// encoder writes it: an array envelope [ts float64, events, dp_rank|nil],
// shortest integer forms, str8 and bin8 heads. Only b's exported fields are
// read (Unknown/Invalid are ignored). Extra-key values may be nil, bool,
// string, []byte, integers, float64, []any and map[string]any (keys sorted).
func AppendBatch(dst []byte, b *Batch, opts EncodeOptions) ([]byte, error) {
	dst = append(dst, 0x93, 0xcb)
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(b.TS))
	dst = mpArrayHead(dst, len(b.Events))
	var err error
	for i := range b.Events {
		if dst, err = appendEvent(dst, &b.Events[i], opts); err != nil {
			return dst, fmt.Errorf("encode event %d: %w", i, err)
		}
	}
	if b.HasDPRank {
		return mpInt(dst, b.DPRank), nil
	}
	return append(dst, 0xc0), nil
}

func appendEvent(dst []byte, ev *Event, opts EncodeOptions) ([]byte, error) {
	if opts.Layout == LayoutSGLang {
		return appendSGLangEvent(dst, ev)
	}
	m := opts.Layout == LayoutMap
	var err error
	switch ev.Kind {
	case EventAllBlocksCleared:
		if m {
			dst = append(dst, 0x81)
			dst = mpStr(dst, "type")
		} else {
			dst = append(dst, 0x91)
		}
		return mpStr(dst, "AllBlocksCleared"), nil
	case EventBlockRemoved:
		if m {
			n := 3
			if ev.HasGroupIdx {
				n++
			}
			dst = mpMapHead(dst, n)
			dst = mpStr(dst, "type")
		} else {
			dst = append(dst, 0x94)
		}
		dst = mpStr(dst, "BlockRemoved")
		dst = mpKey(dst, m, "block_hashes")
		if dst, err = appendHashes(dst, ev, opts.DigestHashes); err != nil {
			return dst, err
		}
		dst = mpKey(dst, m, "medium")
		dst = mpOptStr(dst, ev.Medium, ev.HasMedium)
		if !m || ev.HasGroupIdx {
			dst = mpKey(dst, m, "group_idx")
			dst = mpOptInt(dst, ev.GroupIdx, ev.HasGroupIdx)
		}
		return dst, nil
	case EventBlockStored:
		return appendStored(dst, ev, opts)
	}
	return dst, fmt.Errorf("event kind %d: %w", ev.Kind, ErrUnsupported)
}

func appendStored(dst []byte, ev *Event, opts EncodeOptions) ([]byte, error) {
	m := opts.Layout == LayoutMap
	if m {
		n := 8
		for _, has := range []bool{ev.HasExtraKeys, ev.HasGroupIdx, ev.HasSpecKind, ev.HasSlidingWindow} {
			if has {
				n++
			}
		}
		dst = mpMapHead(dst, n)
		dst = mpStr(dst, "type")
	} else {
		dst = mpArrayHead(dst, 12)
	}
	dst = mpStr(dst, "BlockStored")
	var err error
	dst = mpKey(dst, m, "block_hashes")
	if dst, err = appendHashes(dst, ev, opts.DigestHashes); err != nil {
		return dst, err
	}
	dst = mpKey(dst, m, "parent_block_hash")
	switch {
	case !ev.HasParent:
		dst = append(dst, 0xc0)
	case opts.DigestHashes:
		if ev.ParentDigest.IsZero() {
			return dst, fmt.Errorf("parent digest missing with DigestHashes: %w", ErrConfig)
		}
		dst = mpBin(dst, ev.ParentDigest.b[:ev.ParentDigest.n])
	default:
		dst = mpUint(dst, ev.Parent)
	}
	dst = mpKey(dst, m, "token_ids")
	dst = mpArrayHead(dst, len(ev.TokenIDs))
	for _, t := range ev.TokenIDs {
		dst = mpUint(dst, uint64(t))
	}
	dst = mpKey(dst, m, "block_size")
	dst = mpInt(dst, int64(ev.BlockSize))
	dst = mpKey(dst, m, "lora_id")
	dst = mpOptInt(dst, ev.LoRAID, ev.HasLoRAID)
	dst = mpKey(dst, m, "medium")
	dst = mpOptStr(dst, ev.Medium, ev.HasMedium)
	dst = mpKey(dst, m, "lora_name")
	dst = mpOptStr(dst, ev.LoRAName, ev.HasLoRAName)
	if !m || ev.HasExtraKeys {
		dst = mpKey(dst, m, "extra_keys")
		if !ev.HasExtraKeys {
			dst = append(dst, 0xc0)
		} else {
			dst = mpArrayHead(dst, len(ev.ExtraKeys))
			for _, v := range ev.ExtraKeys {
				if dst, err = mpValue(dst, v, 0); err != nil {
					return dst, fmt.Errorf("extra_keys: %w", err)
				}
			}
		}
	}
	if !m || ev.HasGroupIdx {
		dst = mpKey(dst, m, "group_idx")
		dst = mpOptInt(dst, ev.GroupIdx, ev.HasGroupIdx)
	}
	if !m || ev.HasSpecKind {
		dst = mpKey(dst, m, "kv_cache_spec_kind")
		dst = mpOptStr(dst, ev.SpecKind, ev.HasSpecKind)
	}
	if !m || ev.HasSlidingWindow {
		dst = mpKey(dst, m, "kv_cache_spec_sliding_window")
		dst = mpOptInt(dst, ev.SlidingWindow, ev.HasSlidingWindow)
	}
	return dst, nil
}

// appendSGLangEvent writes ev as SGLang's msgspec encoder does.
func appendSGLangEvent(dst []byte, ev *Event) ([]byte, error) {
	signed := func(dst []byte, hs []uint64) []byte {
		dst = mpArrayHead(dst, len(hs))
		for _, h := range hs {
			dst = mpInt(dst, int64(h))
		}
		return dst
	}
	switch ev.Kind {
	case EventAllBlocksCleared:
		return mpStr(append(dst, 0x91), "AllBlocksCleared"), nil
	case EventBlockRemoved:
		dst = mpStr(append(dst, 0x93), "BlockRemoved")
		dst = signed(dst, ev.BlockHashes)
		return mpOptStr(dst, ev.Medium, ev.HasMedium), nil
	case EventBlockStored:
		n := 7
		if ev.HasCacheSalt {
			n = 8
		}
		dst = mpStr(mpArrayHead(dst, n), "BlockStored")
		dst = signed(dst, ev.BlockHashes)
		if ev.HasParent {
			dst = mpInt(dst, int64(ev.Parent))
		} else {
			dst = append(dst, 0xc0)
		}
		dst = mpArrayHead(dst, len(ev.TokenIDs))
		for _, t := range ev.TokenIDs {
			dst = mpUint(dst, uint64(t))
		}
		dst = mpInt(dst, int64(ev.BlockSize))
		dst = mpOptInt(dst, ev.LoRAID, ev.HasLoRAID)
		dst = mpOptStr(dst, ev.Medium, ev.HasMedium)
		if ev.HasCacheSalt {
			dst = mpStr(append(dst, 0x81), "cache_salt")
			dst = mpStr(dst, ev.CacheSalt)
		}
		return dst, nil
	}
	return dst, fmt.Errorf("event kind %d: %w", ev.Kind, ErrUnsupported)
}

func appendHashes(dst []byte, ev *Event, digests bool) ([]byte, error) {
	dst = mpArrayHead(dst, len(ev.BlockHashes))
	if digests && len(ev.BlockDigests) != len(ev.BlockHashes) {
		return dst, fmt.Errorf("%d digests for %d hashes with DigestHashes: %w", len(ev.BlockDigests), len(ev.BlockHashes), ErrConfig)
	}
	for i, h := range ev.BlockHashes {
		if !digests {
			dst = mpUint(dst, h)
			continue
		}
		d := ev.BlockDigests[i]
		if d.IsZero() {
			return dst, fmt.Errorf("block %d digest missing with DigestHashes: %w", i, ErrConfig)
		}
		dst = mpBin(dst, d.b[:d.n])
	}
	return dst, nil
}

// mpKey writes a map key in the map layout (array layout: nothing).
func mpKey(dst []byte, isMap bool, k string) []byte {
	if isMap {
		return mpStr(dst, k)
	}
	return dst
}

func mpArrayHead(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x90|byte(n))
	case n <= math.MaxUint16:
		return append(dst, 0xdc, byte(n>>8), byte(n))
	default:
		return binary.BigEndian.AppendUint32(append(dst, 0xdd), uint32(n))
	}
}

func mpMapHead(dst []byte, n int) []byte {
	switch {
	case n < 16:
		return append(dst, 0x80|byte(n))
	case n <= math.MaxUint16:
		return append(dst, 0xde, byte(n>>8), byte(n))
	default:
		return binary.BigEndian.AppendUint32(append(dst, 0xdf), uint32(n))
	}
}

func mpStr(dst []byte, s string) []byte {
	n := len(s)
	switch {
	case n < 32:
		dst = append(dst, 0xa0|byte(n))
	case n <= math.MaxUint8:
		dst = append(dst, 0xd9, byte(n))
	case n <= math.MaxUint16:
		dst = append(dst, 0xda, byte(n>>8), byte(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xdb), uint32(n))
	}
	return append(dst, s...)
}

func mpBin(dst []byte, b []byte) []byte {
	n := len(b)
	switch {
	case n <= math.MaxUint8:
		dst = append(dst, 0xc4, byte(n))
	case n <= math.MaxUint16:
		dst = append(dst, 0xc5, byte(n>>8), byte(n))
	default:
		dst = binary.BigEndian.AppendUint32(append(dst, 0xc6), uint32(n))
	}
	return append(dst, b...)
}

func mpUint(dst []byte, v uint64) []byte {
	switch {
	case v <= 0x7f:
		return append(dst, byte(v))
	case v <= math.MaxUint8:
		return append(dst, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return append(dst, 0xcd, byte(v>>8), byte(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(dst, 0xce), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(dst, 0xcf), v)
	}
}

func mpInt(dst []byte, v int64) []byte {
	switch {
	case v >= 0:
		return mpUint(dst, uint64(v))
	case v >= -32:
		return append(dst, byte(int8(v)))
	case v >= math.MinInt8:
		return append(dst, 0xd0, byte(int8(v)))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(dst, 0xd1), uint16(int16(v)))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(dst, 0xd2), uint32(int32(v)))
	default:
		return binary.BigEndian.AppendUint64(append(dst, 0xd3), uint64(v))
	}
}

func mpOptInt(dst []byte, v int64, ok bool) []byte {
	if !ok {
		return append(dst, 0xc0)
	}
	return mpInt(dst, v)
}

func mpOptStr(dst []byte, s string, ok bool) []byte {
	if !ok {
		return append(dst, 0xc0)
	}
	return mpStr(dst, s)
}

// mpValue encodes a generic extra-key value.
func mpValue(dst []byte, v any, depth int) ([]byte, error) {
	if depth > maxSkipDepth {
		return dst, fmt.Errorf("value nested deeper than %d: %w", maxSkipDepth, ErrUnsupported)
	}
	switch x := v.(type) {
	case nil:
		return append(dst, 0xc0), nil
	case bool:
		if x {
			return append(dst, 0xc3), nil
		}
		return append(dst, 0xc2), nil
	case string:
		return mpStr(dst, x), nil
	case []byte:
		return mpBin(dst, x), nil
	case int:
		return mpInt(dst, int64(x)), nil
	case int8:
		return mpInt(dst, int64(x)), nil
	case int16:
		return mpInt(dst, int64(x)), nil
	case int32:
		return mpInt(dst, int64(x)), nil
	case int64:
		return mpInt(dst, x), nil
	case uint:
		return mpUint(dst, uint64(x)), nil
	case uint8:
		return mpUint(dst, uint64(x)), nil
	case uint16:
		return mpUint(dst, uint64(x)), nil
	case uint32:
		return mpUint(dst, uint64(x)), nil
	case uint64:
		return mpUint(dst, x), nil
	case float64:
		return binary.BigEndian.AppendUint64(append(dst, 0xcb), math.Float64bits(x)), nil
	case []any:
		dst = mpArrayHead(dst, len(x))
		var err error
		for _, el := range x {
			if dst, err = mpValue(dst, el, depth+1); err != nil {
				return dst, err
			}
		}
		return dst, nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		dst = mpMapHead(dst, len(x))
		var err error
		for _, k := range keys {
			dst = mpStr(dst, k)
			if dst, err = mpValue(dst, x[k], depth+1); err != nil {
				return dst, err
			}
		}
		return dst, nil
	}
	return dst, fmt.Errorf("value of type %T: %w", v, ErrUnsupported)
}
