package jinja

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Expression tokens.

type tokKind uint8

const (
	tokEOF tokKind = iota
	tokName
	tokString
	tokInt
	tokFloat
	tokOp
)

type token struct {
	kind tokKind
	s    string // name, operator, or the decoded string
	i    int64
	f    float64
	pos  int
}

// operators, longest first.
var operators = []string{"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "=", "(", ")", "[", "]", "{", "}", ",", ".", ":", "|"}

// tokenize splits one tag's inside into tokens; base is its offset.
func tokenize(src string, base int) ([]token, error) {
	var out []token
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '_' || isLetter(c):
			j := i + 1
			for j < len(src) && (src[j] == '_' || isLetter(src[j]) || isDigit(src[j])) {
				j++
			}
			out = append(out, token{kind: tokName, s: src[i:j], pos: base + i})
			i = j
		case isDigit(c):
			j := i
			for j < len(src) && (isDigit(src[j]) || src[j] == '_') {
				j++
			}
			isFloat := false
			if j+1 < len(src) && src[j] == '.' && isDigit(src[j+1]) {
				isFloat = true
				j++
				for j < len(src) && (isDigit(src[j]) || src[j] == '_') {
					j++
				}
			}
			if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
				k := j + 1
				if k < len(src) && (src[k] == '+' || src[k] == '-') {
					k++
				}
				if k < len(src) && isDigit(src[k]) {
					isFloat = true
					for k < len(src) && isDigit(src[k]) {
						k++
					}
					j = k
				}
			}
			lit := strings.ReplaceAll(src[i:j], "_", "")
			if isFloat {
				f, err := strconv.ParseFloat(lit, 64)
				if err != nil {
					return nil, &Error{Pos: base + i, Msg: "bad number " + lit}
				}
				out = append(out, token{kind: tokFloat, f: f, pos: base + i})
			} else {
				n, err := strconv.ParseInt(lit, 10, 64)
				if err != nil {
					return nil, &Error{Pos: base + i, Msg: "bad integer " + lit}
				}
				out = append(out, token{kind: tokInt, i: n, pos: base + i})
			}
			i = j
		case c == '\'' || c == '"':
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(src) {
				return nil, &Error{Pos: base + i, Msg: "unterminated string"}
			}
			s, err := unescape(src[i+1 : j])
			if err != nil {
				return nil, &Error{Pos: base + i, Msg: err.Error()}
			}
			out = append(out, token{kind: tokString, s: s, pos: base + i})
			i = j + 1
		default:
			matched := false
			for _, op := range operators {
				if strings.HasPrefix(src[i:], op) {
					out = append(out, token{kind: tokOp, s: op, pos: base + i})
					i += len(op)
					matched = true
					break
				}
			}
			if !matched {
				return nil, &Error{Pos: base + i, Msg: fmt.Sprintf("unexpected character %q", c)}
			}
		}
	}
	return append(out, token{kind: tokEOF, pos: base + len(src)}), nil
}

func isLetter(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }
func isDigit(c byte) bool  { return c >= '0' && c <= '9' }

// unescape decodes a string literal's body as Python's "unicode-escape"
// codec does (jinja2 decodes literals that way).
func unescape(s string) (string, error) {
	if !strings.Contains(s, "\\") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := s[i]; e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '\\', '\'', '"':
			b.WriteByte(e)
		case '\n':
		case 'a':
			b.WriteByte(7)
		case 'b':
			b.WriteByte(8)
		case 'f':
			b.WriteByte(12)
		case 'v':
			b.WriteByte(11)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i
			for j < len(s) && j < i+3 && s[j] >= '0' && s[j] <= '7' {
				j++
			}
			n, _ := strconv.ParseUint(s[i:j], 8, 32)
			b.WriteRune(rune(n))
			i = j - 1
		case 'x', 'u', 'U':
			w := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+1+w > len(s) {
				return "", fmt.Errorf("truncated \\%c escape", e)
			}
			n, err := strconv.ParseUint(s[i+1:i+1+w], 16, 32)
			if err != nil || !utf8.ValidRune(rune(n)) {
				return "", fmt.Errorf("bad \\%c escape", e)
			}
			b.WriteRune(rune(n))
			i += w
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), nil
}
