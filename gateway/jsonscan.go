package gateway

import (
	"encoding/binary"
	"errors"
	"math"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// A fast JSON validator and string/integer decoders for request bodies.
// encoding/json's scanner costs ~7 ns per byte through a state-function per
// byte; a 32k-token prompt (~128 KiB) would spend about a millisecond being
// validated twice (json.Valid, then json.Unmarshal of the prompt). These
// routines run at a few hundred MB/s to GB/s and accept exactly RFC 8259
// JSON (a fuzz test checks them against encoding/json).

// maxJSONDepth bounds nesting (encoding/json uses 10000 too).
const maxJSONDepth = 10000

var errInvalidJSON = errors.New("gateway: invalid JSON")

// validJSON reports whether b is exactly one valid JSON value (surrounding
// whitespace allowed).
func validJSON(b []byte) bool {
	end, ok := scanValue(b, skipSpace(b, 0))
	return ok && skipSpace(b, end) == len(b)
}

// scanValue validates the JSON value starting at b[i] and returns the
// index just past it.
func scanValue(b []byte, i int) (int, bool) {
	var stack []byte // '{' or '['
	var small [32]byte
	stack = small[:0]
	for {
		// Expect a value at b[i].
		if i >= len(b) {
			return i, false
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(stack) >= maxJSONDepth {
				return i, false
			}
			stack = append(stack, c)
			i = skipSpace(b, i+1)
			if i < len(b) && b[i] == closer(c) {
				stack = stack[:len(stack)-1]
				i++
				goto afterValue
			}
			if c == '{' {
				var ok bool
				if i, ok = scanKey(b, i); !ok {
					return i, false
				}
			}
			continue
		case c == '"':
			var ok bool
			if i, ok = scanString(b, i); !ok {
				return i, false
			}
		case c == '-' || (c >= '0' && c <= '9'):
			var ok bool
			if i, ok = scanNumber(b, i); !ok {
				return i, false
			}
		case c == 't':
			if !hasLit(b, i, "true") {
				return i, false
			}
			i += 4
		case c == 'f':
			if !hasLit(b, i, "false") {
				return i, false
			}
			i += 5
		case c == 'n':
			if !hasLit(b, i, "null") {
				return i, false
			}
			i += 4
		default:
			return i, false
		}
	afterValue:
		for {
			if len(stack) == 0 {
				return i, true
			}
			i = skipSpace(b, i)
			if i >= len(b) {
				return i, false
			}
			top := stack[len(stack)-1]
			switch b[i] {
			case ',':
				i = skipSpace(b, i+1)
				if top == '{' {
					var ok bool
					if i, ok = scanKey(b, i); !ok {
						return i, false
					}
				}
			case closer(top):
				stack = stack[:len(stack)-1]
				i++
				continue
			default:
				return i, false
			}
			break
		}
	}
}

func closer(open byte) byte {
	if open == '{' {
		return '}'
	}
	return ']'
}

func hasLit(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

// scanKey scans `"key" :` at b[i] and returns the index of the value.
func scanKey(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	i, ok := scanString(b, i)
	if !ok {
		return i, false
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return i, false
	}
	return skipSpace(b, i+1), true
}

// SWAR (8 bytes per step) byte-class tests. hasZero is exact as a
// "some byte is zero" test; hasLess(w, n), n ≤ 128, exactly tests "some byte
// is below n". Neither says which byte: callers rescan the word bytewise.
const (
	swarLSB = 0x0101010101010101
	swarMSB = 0x8080808080808080
)

func hasZero(w uint64) uint64           { return (w - swarLSB) & ^w & swarMSB }
func hasLess(w uint64, n uint64) uint64 { return (w - swarLSB*n) & ^w & swarMSB }

// strSpecial returns the index of the first byte of b that ends a plain run
// inside a JSON string ('"', '\\' or a control byte), or len(b).
func strSpecial(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		if hasZero(w^(swarLSB*'"'))|hasZero(w^(swarLSB*'\\'))|hasLess(w, 0x20) != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return len(b)
}

// decodeSpecial returns the index of the first byte of b that unquote must
// decode (a backslash or a non-ASCII byte), or len(b).
func decodeSpecial(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		if w&swarMSB|hasZero(w^(swarLSB*'\\')) != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '\\' || c >= utf8.RuneSelf {
			return i
		}
	}
	return len(b)
}

// scanString validates the string starting at b[i] == '"' and returns the
// index after its closing quote.
func scanString(b []byte, i int) (int, bool) {
	i++
	for i < len(b) {
		i += strSpecial(b[i:])
		if i >= len(b) {
			break
		}
		c := b[i]
		switch {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= len(b) {
				return i, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 || !isHex4(b[i+2:i+6]) {
					return i, false
				}
				i += 6
			default:
				return i, false
			}
		case c < 0x20:
			return i, false
		default:
			i++
		}
	}
	return i, false
}

func isHex4(h []byte) bool {
	for _, c := range h[:4] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// scanNumber validates the number at b[i].
func scanNumber(b []byte, i int) (int, bool) {
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == start {
			return i, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		if i == start {
			return i, false
		}
	}
	return i, true
}

// unquoteBody is unquote for a literal of a request body; when owned
// (nothing writes to the body again, see Request.parse), a literal with
// nothing to unescape is returned as a string sharing the body's bytes.
func unquoteBody(lit []byte, owned bool) string {
	s := lit[1 : len(lit)-1]
	if owned && len(s) > 0 && plainString(s) {
		return unsafe.String(&s[0], len(s))
	}
	return unquote(lit)
}

// unquote decodes a valid JSON string literal (quotes included) the way
// encoding/json does: escapes resolved, invalid UTF-8 and lone surrogates
// replaced by U+FFFD. It allocates the result once.
func unquote(lit []byte) string {
	s := lit[1 : len(lit)-1]
	if plainString(s) {
		return string(s)
	}
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		j := decodeSpecial(s[i:])
		out = append(out, s[i:i+j]...)
		if i += j; i >= len(s) {
			break
		}
		c := s[i]
		if c == '\\' {
			switch s[i+1] {
			case '"', '\\', '/':
				out = append(out, s[i+1])
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r := hex4(s[i+2:])
				i += 6
				if utf16.IsSurrogate(r) {
					if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
						if r2 := utf16.DecodeRune(r, hex4(s[i+2:])); r2 != utf8.RuneError {
							out = utf8.AppendRune(out, r2)
							i += 6
							continue
						}
					}
					r = utf8.RuneError
				}
				out = utf8.AppendRune(out, r)
				continue
			}
			i += 2
			continue
		}
		if c < utf8.RuneSelf {
			out = append(out, c)
			i++
			continue
		}
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size == 1 {
			out = utf8.AppendRune(out, utf8.RuneError)
		} else {
			out = append(out, s[i:i+size]...)
		}
		i += size
	}
	return string(out)
}

func hex4(h []byte) rune {
	var r rune
	for _, c := range h[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		default:
			c = c - 'A' + 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// forEachElement calls fn with the raw bytes of every element of the valid
// JSON array arr.
func forEachElement(arr []byte, fn func(i int, v []byte) error) error {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return errInvalidJSON
	}
	i = skipSpace(arr, i+1)
	for n := 0; i < len(arr) && arr[i] != ']'; n++ {
		end := skipValue(arr, i)
		if err := fn(n, arr[i:end]); err != nil {
			return err
		}
		i = skipSpace(arr, end)
		if i < len(arr) && arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
	return nil
}

var errNotTokenIDs = errors.New("gateway: not an array of token ids")

// appendTokenIDs parses a valid JSON array of integers 0–2^32-1 (no
// fraction, no exponent) into dst.
func appendTokenIDs(dst []uint32, arr []byte) ([]uint32, error) {
	err := forEachElement(arr, func(_ int, v []byte) error {
		if len(v) == 0 || len(v) > 10 || (v[0] == '0' && len(v) > 1) {
			return errNotTokenIDs
		}
		var n uint64
		for _, c := range v {
			if c < '0' || c > '9' {
				return errNotTokenIDs
			}
			n = n*10 + uint64(c-'0')
		}
		if n > math.MaxUint32 {
			return errNotTokenIDs
		}
		dst = append(dst, uint32(n))
		return nil
	})
	return dst, err
}
