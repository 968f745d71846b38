package jinja

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// ParseJSON decodes JSON into template values as Python's json.loads does:
// objects keep their key order (a repeated key keeps its first position
// and its last value), integers stay int (BigInt beyond int64), other
// numbers float. Invalid UTF-8 bytes in strings become U+FFFD, as
// encoding/json does. It is a direct parser: chat requests are parsed on
// the request path.
func ParseJSON(raw []byte) (Value, error) {
	p := jsonParser{s: raw}
	p.space()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.s) {
		return nil, p.fail("trailing data")
	}
	return v, nil
}

// maxJSONDepth bounds nesting (encoding/json's limit).
const maxJSONDepth = 10000

type jsonParser struct {
	s []byte
	i int
}

func (p *jsonParser) fail(what string) error {
	return errors.New("jinja: JSON at offset " + strconv.Itoa(p.i) + ": " + what)
}

func (p *jsonParser) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (Value, error) {
	if depth > maxJSONDepth {
		return nil, p.fail("nested too deep")
	}
	if p.i >= len(p.s) {
		return nil, p.fail("unexpected end")
	}
	switch c := p.s[p.i]; {
	case c == '{':
		p.i++
		d := NewDict()
		p.space()
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			return d, nil
		}
		for {
			p.space()
			if p.i >= len(p.s) || p.s[p.i] != '"' {
				return nil, p.fail("want an object key")
			}
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			p.space()
			if p.i >= len(p.s) || p.s[p.i] != ':' {
				return nil, p.fail("want ':'")
			}
			p.i++
			p.space()
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			d.Set(k, v)
			p.space()
			if p.i < len(p.s) && p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.s) && p.s[p.i] == '}' {
				p.i++
				return d, nil
			}
			return nil, p.fail("want ',' or '}'")
		}
	case c == '[':
		p.i++
		out := []Value{}
		p.space()
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			return out, nil
		}
		for {
			p.space()
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
			p.space()
			if p.i < len(p.s) && p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.s) && p.s[p.i] == ']' {
				p.i++
				return out, nil
			}
			return nil, p.fail("want ',' or ']'")
		}
	case c == '"':
		return p.str()
	case c == 't':
		return p.literal("true", true)
	case c == 'f':
		return p.literal("false", false)
	case c == 'n':
		return p.literal("null", nil)
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	}
	return nil, p.fail("unexpected character")
}

func (p *jsonParser) literal(word string, v Value) (Value, error) {
	if !strings.HasPrefix(string(p.s[p.i:min(p.i+len(word), len(p.s))]), word) {
		return nil, p.fail("bad literal")
	}
	p.i += len(word)
	return v, nil
}

func (p *jsonParser) number() (Value, error) {
	start := p.i
	digits := func() int {
		n := 0
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.s[p.i] == '-' {
		p.i++
	}
	if p.i < len(p.s) && p.s[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return nil, p.fail("bad number")
	}
	isFloat := false
	if p.i < len(p.s) && p.s[p.i] == '.' {
		p.i++
		isFloat = true
		if digits() == 0 {
			return nil, p.fail("bad number")
		}
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		p.i++
		isFloat = true
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return nil, p.fail("bad number")
		}
	}
	lit := string(p.s[start:p.i])
	if !isFloat {
		if n, err := strconv.ParseInt(lit, 10, 64); err == nil {
			return n, nil
		}
		return BigInt(lit), nil
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return nil, p.fail("bad number")
	}
	return f, nil // out of range: ±inf or 0, as Python's float()
}

// str reads a string literal at p.i (the opening quote).
func (p *jsonParser) str() (string, error) {
	p.i++
	start := p.i
	// Fast path: no escapes, valid UTF-8.
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c == '"' {
			s := p.s[start:p.i]
			p.i++
			if utf8.Valid(s) {
				return string(s), nil
			}
			return fixUTF8(s), nil
		}
		if c == '\\' || c < 0x20 {
			break
		}
		p.i++
	}
	var b strings.Builder
	b.Write(p.s[start:p.i])
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			out := b.String()
			if !utf8.ValidString(out) {
				return fixUTF8([]byte(out)), nil
			}
			return out, nil
		case c < 0x20:
			return "", p.fail("control character in string")
		case c != '\\':
			j := p.i + 1
			for j < len(p.s) && p.s[j] != '\\' && p.s[j] != '"' && p.s[j] >= 0x20 {
				j++
			}
			b.Write(p.s[p.i:j])
			p.i = j
			continue
		}
		p.i++
		if p.i >= len(p.s) {
			break
		}
		e := p.s[p.i]
		p.i++
		switch e {
		case '"', '\\', '/':
			b.WriteByte(e)
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", p.fail("bad \\u escape")
			}
			if utf16.IsSurrogate(r) {
				if p.i+1 < len(p.s) && p.s[p.i] == '\\' && p.s[p.i+1] == 'u' {
					save := p.i
					p.i += 2
					if r2, ok := p.hex4(); ok {
						if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
							b.WriteRune(dec)
							continue
						}
					}
					p.i = save
				}
				r = utf8.RuneError
			}
			b.WriteRune(r)
		default:
			return "", p.fail("bad escape")
		}
	}
	return "", p.fail("unterminated string")
}

func (p *jsonParser) hex4() (rune, bool) {
	if p.i+4 > len(p.s) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(p.s[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(n), true
}

// fixUTF8 replaces each invalid byte with U+FFFD (encoding/json's rule).
func fixUTF8(s []byte) string {
	var b strings.Builder
	for len(s) > 0 {
		r, w := utf8.DecodeRune(s)
		if r == utf8.RuneError && w == 1 {
			b.WriteString("\uFFFD")
		} else {
			b.Write(s[:w])
		}
		s = s[w:]
	}
	return b.String()
}
