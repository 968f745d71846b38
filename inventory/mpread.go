package inventory

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// mpReader is a bounds-checked, allocation-free msgpack cursor over one
// payload. It reads only the subset KV events use and can skip anything.
// Errors come in two kinds: errWrongType (the next value exists but has
// another type; the cursor has NOT moved, so the caller can skip it and carry
// on), and structural errors wrapping ErrMalformed (truncated or invalid
// bytes; the rest of the payload cannot be trusted).
type mpReader struct {
	b []byte
	i int
}

// Reader errors. errWrongType is recoverable; the others are structural.
var (
	errWrongType = errors.New("unexpected msgpack type")
	errTruncated = fmt.Errorf("truncated msgpack: %w", ErrMalformed)
	errBadCode   = fmt.Errorf("invalid msgpack code 0xc1: %w", ErrMalformed)
	errTooDeep   = fmt.Errorf("msgpack nested too deep: %w", ErrMalformed)
	errTooLong   = fmt.Errorf("msgpack length exceeds payload: %w", ErrMalformed)
)

// maxSkipDepth bounds nesting for skip and generic decode (garbage such as a
// megabyte of 0x91 must not recurse a million frames).
const maxSkipDepth = 32

// remaining is the number of unread bytes.
func (r *mpReader) remaining() int { return len(r.b) - r.i }

// peek returns the next code without consuming it.
func (r *mpReader) peek() (byte, error) {
	if r.i >= len(r.b) {
		return 0, errTruncated
	}
	return r.b[r.i], nil
}

// isMap reports whether the next value is a map (without consuming it).
func (r *mpReader) isMap() bool {
	if r.i >= len(r.b) {
		return false
	}
	c := r.b[r.i]
	return (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf
}

// take consumes n bytes.
func (r *mpReader) take(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.i {
		return nil, errTruncated
	}
	s := r.b[r.i : r.i+n]
	r.i += n
	return s, nil
}

// uintN reads an n-byte big-endian unsigned after the code byte.
func (r *mpReader) uintN(n int) (uint64, error) {
	s, err := r.take(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return uint64(s[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(s)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(s)), nil
	default:
		return binary.BigEndian.Uint64(s), nil
	}
}

// tryNil consumes a nil and reports whether there was one.
func (r *mpReader) tryNil() bool {
	if r.i < len(r.b) && r.b[r.i] == 0xc0 {
		r.i++
		return true
	}
	return false
}

// checkLen rejects lengths that cannot fit in the rest of the payload, given
// that each element takes at least minBytes.
func (r *mpReader) checkLen(n uint64, minBytes int) (int, error) {
	if n > uint64(r.remaining()/minBytes) {
		return 0, errTooLong
	}
	return int(n), nil
}

// arrayLen reads an array header.
func (r *mpReader) arrayLen() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c >= 0x90 && c <= 0x9f:
		r.i++
		n = uint64(c & 0x0f)
	case c == 0xdc:
		r.i++
		if n, err = r.uintN(2); err != nil {
			return 0, err
		}
	case c == 0xdd:
		r.i++
		if n, err = r.uintN(4); err != nil {
			return 0, err
		}
	default:
		return 0, errWrongType
	}
	return r.checkLen(n, 1)
}

// mapLen reads a map header.
func (r *mpReader) mapLen() (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c >= 0x80 && c <= 0x8f:
		r.i++
		n = uint64(c & 0x0f)
	case c == 0xde:
		r.i++
		if n, err = r.uintN(2); err != nil {
			return 0, err
		}
	case c == 0xdf:
		r.i++
		if n, err = r.uintN(4); err != nil {
			return 0, err
		}
	default:
		return 0, errWrongType
	}
	return r.checkLen(n, 2)
}

// str reads a string's bytes (aliasing the payload).
func (r *mpReader) str() ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	var n uint64
	switch {
	case c >= 0xa0 && c <= 0xbf:
		r.i++
		n = uint64(c & 0x1f)
	case c == 0xd9, c == 0xda, c == 0xdb:
		r.i++
		if n, err = r.uintN(1 << (c - 0xd9)); err != nil {
			return nil, err
		}
	default:
		return nil, errWrongType
	}
	if n > uint64(r.remaining()) {
		return nil, errTruncated
	}
	return r.take(int(n))
}

// bin reads a byte string (aliasing the payload).
func (r *mpReader) bin() ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	if c < 0xc4 || c > 0xc6 {
		return nil, errWrongType
	}
	r.i++
	n, err := r.uintN(1 << (c - 0xc4))
	if err != nil {
		return nil, err
	}
	if n > uint64(r.remaining()) {
		return nil, errTruncated
	}
	return r.take(int(n))
}

// integer reads any msgpack integer. neg reports a negative signed value;
// u is then its two's-complement bit pattern (uint64(int64)).
func (r *mpReader) integer() (u uint64, neg bool, err error) {
	c, err := r.peek()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c <= 0x7f:
		r.i++
		return uint64(c), false, nil
	case c >= 0xe0:
		r.i++
		return uint64(int64(int8(c))), true, nil
	case c >= 0xcc && c <= 0xcf:
		r.i++
		u, err = r.uintN(1 << (c - 0xcc))
		return u, false, err
	case c >= 0xd0 && c <= 0xd3:
		r.i++
		n := 1 << (c - 0xd0)
		if u, err = r.uintN(n); err != nil {
			return 0, false, err
		}
		var v int64
		switch n {
		case 1:
			v = int64(int8(u))
		case 2:
			v = int64(int16(u))
		case 4:
			v = int64(int32(u))
		default:
			v = int64(u)
		}
		return uint64(v), v < 0, nil
	}
	return 0, false, errWrongType
}

// int64v reads an integer that must fit in int64.
func (r *mpReader) int64v() (int64, error) {
	save := r.i
	u, neg, err := r.integer()
	if err != nil {
		return 0, err
	}
	if !neg && u > math.MaxInt64 {
		r.i = save
		return 0, errWrongType
	}
	return int64(u), nil
}

// float reads a float64, float32 or integer as float64.
func (r *mpReader) float() (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xca:
		r.i++
		u, err := r.uintN(4)
		return float64(math.Float32frombits(uint32(u))), err
	case 0xcb:
		r.i++
		u, err := r.uintN(8)
		return math.Float64frombits(u), err
	}
	u, neg, err := r.integer()
	if err != nil {
		return 0, err
	}
	if neg {
		return float64(int64(u)), nil
	}
	return float64(u), nil
}

// skip consumes one value of any type.
func (r *mpReader) skip() error { return r.skipDepth(0) }

func (r *mpReader) skipDepth(depth int) error {
	if depth > maxSkipDepth {
		return errTooDeep
	}
	c, err := r.peek()
	if err != nil {
		return err
	}
	r.i++
	var n uint64
	switch {
	case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		return nil
	case c >= 0x80 && c <= 0x8f:
		return r.skipN(2*int(c&0x0f), depth)
	case c >= 0x90 && c <= 0x9f:
		return r.skipN(int(c&0x0f), depth)
	case c >= 0xa0 && c <= 0xbf:
		_, err = r.take(int(c & 0x1f))
		return err
	case c == 0xc1:
		return errBadCode
	case c >= 0xc4 && c <= 0xc6: // bin
		if n, err = r.uintN(1 << (c - 0xc4)); err != nil {
			return err
		}
		return r.skipBytes(n)
	case c >= 0xc7 && c <= 0xc9: // ext: len, type, data
		if n, err = r.uintN(1 << (c - 0xc7)); err != nil {
			return err
		}
		return r.skipBytes(n + 1)
	case c == 0xca:
		return r.skipBytes(4)
	case c == 0xcb:
		return r.skipBytes(8)
	case c >= 0xcc && c <= 0xcf:
		return r.skipBytes(1 << (c - 0xcc))
	case c >= 0xd0 && c <= 0xd3:
		return r.skipBytes(1 << (c - 0xd0))
	case c >= 0xd4 && c <= 0xd8: // fixext: type + 1,2,4,8,16
		return r.skipBytes(1 + 1<<(c-0xd4))
	case c >= 0xd9 && c <= 0xdb: // str
		if n, err = r.uintN(1 << (c - 0xd9)); err != nil {
			return err
		}
		return r.skipBytes(n)
	case c == 0xdc || c == 0xdd:
		if n, err = r.uintN(2 << (c - 0xdc)); err != nil {
			return err
		}
		cnt, err := r.checkLen(n, 1)
		if err != nil {
			return err
		}
		return r.skipN(cnt, depth)
	default: // 0xde, 0xdf maps
		if n, err = r.uintN(2 << (c - 0xde)); err != nil {
			return err
		}
		cnt, err := r.checkLen(n, 2)
		if err != nil {
			return err
		}
		return r.skipN(2*cnt, depth)
	}
}

func (r *mpReader) skipBytes(n uint64) error {
	if n > uint64(r.remaining()) {
		return errTruncated
	}
	r.i += int(n)
	return nil
}

func (r *mpReader) skipN(n, depth int) error {
	for k := 0; k < n; k++ {
		if err := r.skipDepth(depth + 1); err != nil {
			return err
		}
	}
	return nil
}

// value decodes one value generically for extra keys: nil, bool, int64 (or
// uint64 above MaxInt64), float64, string, []byte (copied), []any and
// map[string]any. Unsupported parts (ext values, non-string map keys) are
// consumed and reported as errWrongType, so the cursor is always past the
// value unless a structural error is returned.
func (r *mpReader) value(depth int) (any, error) {
	if depth > maxSkipDepth {
		return nil, errTooDeep
	}
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	switch {
	case c == 0xc0:
		r.i++
		return nil, nil
	case c == 0xc2 || c == 0xc3:
		r.i++
		return c == 0xc3, nil
	case c <= 0x7f || c >= 0xe0 || (c >= 0xcc && c <= 0xd3):
		u, neg, err := r.integer()
		if err != nil {
			return nil, err
		}
		if neg || u <= math.MaxInt64 {
			return int64(u), nil
		}
		return u, nil
	case c == 0xca || c == 0xcb:
		return r.float()
	case (c >= 0xa0 && c <= 0xbf) || (c >= 0xd9 && c <= 0xdb):
		s, err := r.str()
		return string(s), err
	case c >= 0xc4 && c <= 0xc6:
		b, err := r.bin()
		if err != nil {
			return nil, err
		}
		out := make([]byte, len(b)) // non-nil even when empty: bin is never nil
		copy(out, b)
		return out, nil
	case (c >= 0x90 && c <= 0x9f) || c == 0xdc || c == 0xdd:
		n, err := r.arrayLen()
		if err != nil {
			return nil, err
		}
		out := make([]any, n)
		var typeErr error
		for k := range out {
			v, err := r.value(depth + 1)
			if err != nil && !errors.Is(err, errWrongType) {
				return nil, err
			}
			if err != nil {
				typeErr = err
			}
			out[k] = v
		}
		return out, typeErr
	case (c >= 0x80 && c <= 0x8f) || c == 0xde || c == 0xdf:
		n, err := r.mapLen()
		if err != nil {
			return nil, err
		}
		out := make(map[string]any, n)
		var typeErr error
		for k := 0; k < n; k++ {
			key, err := r.str()
			if errors.Is(err, errWrongType) {
				typeErr = errWrongType
				if err = r.skipN(2, depth); err != nil {
					return nil, err
				}
				continue
			}
			if err != nil {
				return nil, err
			}
			v, err := r.value(depth + 1)
			if err != nil && !errors.Is(err, errWrongType) {
				return nil, err
			}
			if err != nil {
				typeErr = err
			}
			out[string(key)] = v
		}
		return out, typeErr
	}
	// ext and the invalid 0xc1 code
	if err := r.skip(); err != nil {
		return nil, err
	}
	return nil, errWrongType
}
