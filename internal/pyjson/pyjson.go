// Package pyjson re-encodes a JSON document the way Python's json.dumps
// does with its defaults, which is how vLLM turns JSON it parsed back into
// text (an Anthropic tool_use block's input becomes a chat tool call's
// arguments string: json.dumps(block.input)): members in document order,
// ", " and ": " between them, every character outside printable ASCII
// escaped as \uXXXX (lowercase hex, surrogate pairs above U+FFFF), integers
// as written, other numbers as Python's float repr.
package pyjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrUnsupported reports a document whose Python rendering Dumps does not
// reproduce: a duplicate member (Python keeps the first position and the
// last value), a lone surrogate escape, invalid UTF-8, or a number out of
// float range.
var ErrUnsupported = errors.New("pyjson: not reproducible")

// Dumps appends json.dumps(json.loads(doc)) to dst.
func Dumps(dst, doc []byte) ([]byte, error) {
	if !utf8.Valid(doc) || hasSurrogateEscape(doc) {
		return dst, ErrUnsupported
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	dst, err := value(dst, dec)
	if err != nil {
		return dst, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return dst, errors.Join(ErrUnsupported, errors.New("trailing data"))
	}
	return dst, nil
}

// hasSurrogateEscape reports a \uD800–\uDFFF escape (Go's decoder turns a
// lone one into U+FFFD, Python keeps it).
func hasSurrogateEscape(doc []byte) bool {
	for i := 0; i+5 < len(doc); i++ {
		if doc[i] == '\\' {
			if doc[i+1] == 'u' && (doc[i+2] == 'd' || doc[i+2] == 'D') && strings.ContainsRune("89abcdefABCDEF", rune(doc[i+3])) {
				return true
			}
			i++ // skip the escaped character
		}
	}
	return false
}

func value(dst []byte, dec *json.Decoder) ([]byte, error) {
	tok, err := dec.Token()
	if err != nil {
		return dst, errors.Join(ErrUnsupported, err)
	}
	return token(dst, dec, tok)
}

func token(dst []byte, dec *json.Decoder, tok json.Token) ([]byte, error) {
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			return object(dst, dec)
		case '[':
			return array(dst, dec)
		}
		return dst, ErrUnsupported
	case string:
		return String(dst, v), nil
	case json.Number:
		return number(dst, string(v))
	case bool:
		if v {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case nil:
		return append(dst, "null"...), nil
	}
	return dst, ErrUnsupported
}

func object(dst []byte, dec *json.Decoder) ([]byte, error) {
	dst = append(dst, '{')
	seen := map[string]bool{}
	for first := true; ; first = false {
		tok, err := dec.Token()
		if err != nil {
			return dst, errors.Join(ErrUnsupported, err)
		}
		if tok == json.Delim('}') {
			return append(dst, '}'), nil
		}
		key, ok := tok.(string)
		if !ok || seen[key] {
			return dst, ErrUnsupported
		}
		seen[key] = true
		if !first {
			dst = append(dst, ", "...)
		}
		dst = String(dst, key)
		dst = append(dst, ": "...)
		if dst, err = value(dst, dec); err != nil {
			return dst, err
		}
	}
}

func array(dst []byte, dec *json.Decoder) ([]byte, error) {
	dst = append(dst, '[')
	for first := true; ; first = false {
		tok, err := dec.Token()
		if err != nil {
			return dst, errors.Join(ErrUnsupported, err)
		}
		if tok == json.Delim(']') {
			return append(dst, ']'), nil
		}
		if !first {
			dst = append(dst, ", "...)
		}
		if dst, err = token(dst, dec, tok); err != nil {
			return dst, err
		}
	}
}

const hex = "0123456789abcdef"

// String appends s quoted as json.dumps quotes it (ensure_ascii).
func String(dst []byte, s string) []byte {
	dst = append(dst, '"')
	u := func(r rune) {
		dst = append(dst, '\\', 'u', hex[r>>12&0xf], hex[r>>8&0xf], hex[r>>4&0xf], hex[r&0xf])
	}
	for _, r := range s {
		switch {
		case r == '"':
			dst = append(dst, '\\', '"')
		case r == '\\':
			dst = append(dst, '\\', '\\')
		case r == '\n':
			dst = append(dst, '\\', 'n')
		case r == '\r':
			dst = append(dst, '\\', 'r')
		case r == '\t':
			dst = append(dst, '\\', 't')
		case r == '\b':
			dst = append(dst, '\\', 'b')
		case r == '\f':
			dst = append(dst, '\\', 'f')
		case r >= ' ' && r <= '~':
			dst = append(dst, byte(r))
		case r > 0xffff:
			r -= 0x10000
			u(0xd800 | (r >> 10 & 0x3ff))
			u(0xdc00 | (r & 0x3ff))
		default:
			u(r)
		}
	}
	return append(dst, '"')
}

// number appends a JSON number as Python renders what json.loads made of
// it: an integer as an int, anything with a fraction or an exponent as a
// float's repr.
func number(dst []byte, s string) ([]byte, error) {
	if !strings.ContainsAny(s, ".eE") {
		if strings.TrimLeft(s, "-0") == "" {
			return append(dst, '0'), nil // -0 is the int 0
		}
		return append(dst, s...), nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return dst, ErrUnsupported // out of range: Python's inf
	}
	return Float(dst, f), nil
}

// Float appends Python's repr of f (finite): the shortest digits that
// round-trip, in fixed notation for decimal exponents -4 to 15 (with ".0"
// when integral), else d.ddde±XX.
func Float(dst []byte, f float64) []byte {
	if f < 0 || f == 0 && 1/f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	if f == 0 {
		return append(dst, "0.0"...)
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	i := strings.IndexByte(e, 'e')
	digits := strings.Replace(e[:i], ".", "", 1)
	exp, _ := strconv.Atoi(e[i+1:])
	switch {
	case exp < -4 || exp >= 16:
		dst = append(dst, digits[0])
		if len(digits) > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if exp < 0 {
			dst = append(dst, '-')
			exp = -exp
		} else {
			dst = append(dst, '+')
		}
		if exp < 10 {
			dst = append(dst, '0')
		}
		return strconv.AppendInt(dst, int64(exp), 10)
	case exp < 0:
		dst = append(dst, "0."...)
		dst = append(dst, strings.Repeat("0", -exp-1)...)
		return append(dst, digits...)
	default:
		if len(digits) <= exp+1 {
			dst = append(dst, digits...)
			dst = append(dst, strings.Repeat("0", exp+1-len(digits))...)
			return append(dst, ".0"...)
		}
		dst = append(dst, digits[:exp+1]...)
		dst = append(dst, '.')
		return append(dst, digits[exp+1:]...)
	}
}
