package inventory

import (
	"fmt"
	"math"

	"github.com/fxamacker/cbor/v2"
)

// This file is the hand-written canonical CBOR encoder for the one shape vLLM
// hashes, [parent bytes, [tokens...], extra|null], plus the small set of
// value types that appear in extra-key tuples. It must produce exactly the
// bytes of cbor2.dumps(obj, canonical=True) and of fxamacker's
// CanonicalEncOptions; cbor_test.go proves that against fxamacker with a
// property test and against the spec vectors.

// CBOR major types (RFC 8949 §3.1), pre-shifted.
const (
	cborUint  byte = 0 << 5
	cborNeg   byte = 1 << 5
	cborBytes byte = 2 << 5
	cborText  byte = 3 << 5
	cborArray byte = 4 << 5
	cborNull  byte = 0xf6
	cborFalse byte = 0xf4
	cborTrue  byte = 0xf5
)

// appendCBORHead appends a shortest-form head for major type mt and argument v.
func appendCBORHead(buf []byte, mt byte, v uint64) []byte {
	switch {
	case v < 24:
		return append(buf, mt|byte(v))
	case v <= math.MaxUint8:
		return append(buf, mt|24, byte(v))
	case v <= math.MaxUint16:
		return append(buf, mt|25, byte(v>>8), byte(v))
	case v <= math.MaxUint32:
		return append(buf, mt|26, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	default:
		return append(buf, mt|27, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32),
			byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
}

// appendCBORInt appends a signed integer (major type 0 or 1).
func appendCBORInt(buf []byte, v int64) []byte {
	if v >= 0 {
		return appendCBORHead(buf, cborUint, uint64(v))
	}
	return appendCBORHead(buf, cborNeg, uint64(-(v + 1)))
}

// appendCBORText appends a UTF-8 text string.
func appendCBORText(buf []byte, s string) []byte {
	buf = appendCBORHead(buf, cborText, uint64(len(s)))
	return append(buf, s...)
}

// appendCBORTokens appends a definite array of unsigned token ids.
func appendCBORTokens(buf []byte, tokens []uint32) []byte {
	buf = appendCBORHead(buf, cborArray, uint64(len(tokens)))
	for _, t := range tokens {
		switch {
		case t < 24:
			buf = append(buf, byte(t))
		case t <= math.MaxUint8:
			buf = append(buf, 24, byte(t))
		case t <= math.MaxUint16:
			buf = append(buf, 25, byte(t>>8), byte(t))
		default:
			buf = append(buf, 26, byte(t>>24), byte(t>>16), byte(t>>8), byte(t))
		}
	}
	return buf
}

// cborValueEncoder encodes extra-key values that arrive as generic Go values
// (decoded from KV events): nil, bool, string, []byte, signed and unsigned
// integers, and []any tuples of those are hand-encoded; anything else (floats,
// maps) goes through fxamacker's canonical mode, which is the reference.
type cborValueEncoder struct {
	em cbor.EncMode
}

// newCBORValueEncoder builds the canonical fxamacker mode used as fallback.
func newCBORValueEncoder() (cborValueEncoder, error) {
	em, err := cbor.CanonicalEncOptions().EncMode()
	if err != nil {
		return cborValueEncoder{}, fmt.Errorf("cbor canonical mode: %w", err)
	}
	return cborValueEncoder{em: em}, nil
}

// maxCBORDepth bounds nesting in extra-key values; vLLM nests two deep.
const maxCBORDepth = 16

// appendValue appends the canonical CBOR of v.
func (e cborValueEncoder) appendValue(buf []byte, v any, depth int) ([]byte, error) {
	if depth > maxCBORDepth {
		return buf, fmt.Errorf("extra key nested deeper than %d: %w", maxCBORDepth, ErrUnsupported)
	}
	switch x := v.(type) {
	case nil:
		return append(buf, cborNull), nil
	case bool:
		if x {
			return append(buf, cborTrue), nil
		}
		return append(buf, cborFalse), nil
	case string:
		return appendCBORText(buf, x), nil
	case []byte:
		buf = appendCBORHead(buf, cborBytes, uint64(len(x)))
		return append(buf, x...), nil
	case int:
		return appendCBORInt(buf, int64(x)), nil
	case int8:
		return appendCBORInt(buf, int64(x)), nil
	case int16:
		return appendCBORInt(buf, int64(x)), nil
	case int32:
		return appendCBORInt(buf, int64(x)), nil
	case int64:
		return appendCBORInt(buf, x), nil
	case uint:
		return appendCBORHead(buf, cborUint, uint64(x)), nil
	case uint8:
		return appendCBORHead(buf, cborUint, uint64(x)), nil
	case uint16:
		return appendCBORHead(buf, cborUint, uint64(x)), nil
	case uint32:
		return appendCBORHead(buf, cborUint, uint64(x)), nil
	case uint64:
		return appendCBORHead(buf, cborUint, x), nil
	case []any:
		buf = appendCBORHead(buf, cborArray, uint64(len(x)))
		var err error
		for _, el := range x {
			if buf, err = e.appendValue(buf, el, depth+1); err != nil {
				return buf, err
			}
		}
		return buf, nil
	}
	if e.em == nil {
		return buf, fmt.Errorf("extra key of type %T: %w", v, ErrUnsupported)
	}
	raw, err := e.em.Marshal(v)
	if err != nil {
		return buf, fmt.Errorf("extra key of type %T: %w: %w", v, ErrUnsupported, err)
	}
	return append(buf, raw...), nil
}
