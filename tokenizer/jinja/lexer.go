package jinja

import (
	"fmt"
	"strings"
)

// A template is first cut into chunks: literal text, {{ expressions }},
// {% statements %}. Whitespace control, trim_blocks and lstrip_blocks are
// applied here, as jinja2's lexer does.

type chunkKind uint8

const (
	chunkText chunkKind = iota
	chunkExpr
	chunkStmt
)

type chunk struct {
	kind chunkKind
	src  string // text, or the tag's inside
	pos  int    // offset in the normalized source (for errors)
}

// normalizeNewlines does what jinja2 does with a template source: every
// line break str.splitlines knows becomes "\n", and one trailing newline
// is dropped (keep_trailing_newline is off).
func normalizeNewlines(src string) string {
	var b strings.Builder
	b.Grow(len(src))
	for i := 0; i < len(src); {
		switch {
		case src[i] == '\r':
			b.WriteByte('\n')
			i++
			if i < len(src) && src[i] == '\n' {
				i++
			}
			continue
		case src[i] == '\n' || src[i] == '\v' || src[i] == '\f' || (src[i] >= 0x1c && src[i] <= 0x1e):
			b.WriteByte('\n')
			i++
			continue
		case strings.HasPrefix(src[i:], "\u0085"), strings.HasPrefix(src[i:], "\u2028"), strings.HasPrefix(src[i:], "\u2029"):
			b.WriteByte('\n')
			if src[i] == 0xC2 {
				i += 2
			} else {
				i += 3
			}
			continue
		}
		b.WriteByte(src[i])
		i++
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// lex cuts src into chunks.
func lex(src string) ([]chunk, error) {
	src = normalizeNewlines(src)
	var out []chunk
	pos := 0
	stripNext := false // the previous tag ended with "-"
	for pos <= len(src) {
		start := indexTagStart(src, pos)
		if start < 0 {
			text := src[pos:]
			if stripNext {
				text = strings.TrimLeft(text, " \t\n\r\v\f")
			}
			if text != "" {
				out = append(out, chunk{kind: chunkText, src: text, pos: pos})
			}
			break
		}
		text := src[pos:start]
		if stripNext {
			text = strings.TrimLeft(text, " \t\n\r\v\f")
		}
		open := src[start+1]
		inner := start + 2
		lstrip := true
		switch {
		case inner < len(src) && src[inner] == '-':
			text = strings.TrimRight(text, " \t\n\r\v\f")
			inner++
			lstrip = false
		case inner < len(src) && src[inner] == '+':
			inner++
			lstrip = false
		}
		if lstrip && open != '{' {
			// lstrip_blocks: spaces and tabs before a block or comment tag
			// that starts its line are removed.
			nl := strings.LastIndexByte(text, '\n')
			tail := text[nl+1:]
			atLineStart := nl >= 0 || pos == 0 || src[pos-1] == '\n'
			if atLineStart && strings.Trim(tail, " \t") == "" {
				text = text[:nl+1]
			}
		}
		if text != "" {
			out = append(out, chunk{kind: chunkText, src: text, pos: pos})
		}
		var closer string
		switch open {
		case '{':
			closer = "}}"
		case '%':
			closer = "%}"
		case '#':
			closer = "#}"
		}
		end := indexTagEnd(src, inner, closer, open != '#')
		if end < 0 {
			return nil, &Error{Pos: start, Msg: fmt.Sprintf("unclosed %q tag", src[start:start+2])}
		}
		body := src[inner:end]
		stripNext = false
		if strings.HasSuffix(body, "-") {
			body = body[:len(body)-1]
			stripNext = true
		}
		pos = end + 2
		if open != '{' && !stripNext && pos < len(src) && src[pos] == '\n' {
			pos++ // trim_blocks
		}
		switch open {
		case '{':
			out = append(out, chunk{kind: chunkExpr, src: body, pos: inner})
		case '%':
			if strings.TrimSpace(body) == "raw" {
				rawEnd, after, strip, err := findEndRaw(src, pos)
				if err != nil {
					return nil, err
				}
				raw := src[pos:rawEnd]
				if stripNext {
					raw = strings.TrimLeft(raw, " \t\n\r\v\f")
				}
				if out = append(out, chunk{kind: chunkText, src: raw, pos: pos}); raw == "" {
					out = out[:len(out)-1]
				}
				pos, stripNext = after, strip
				continue
			}
			out = append(out, chunk{kind: chunkStmt, src: body, pos: inner})
		}
	}
	return out, nil
}

// indexTagStart finds the next "{{", "{%" or "{#" at or after pos.
func indexTagStart(src string, pos int) int {
	for i := pos; i+1 < len(src); i++ {
		if src[i] == '{' && (src[i+1] == '{' || src[i+1] == '%' || src[i+1] == '#') {
			return i
		}
	}
	return -1
}

// indexTagEnd finds closer after pos, skipping string literals when quoted.
func indexTagEnd(src string, pos int, closer string, quoted bool) int {
	for i := pos; i+1 < len(src); i++ {
		c := src[i]
		if quoted && (c == '\'' || c == '"') {
			j := i + 1
			for j < len(src) && src[j] != c {
				if src[j] == '\\' {
					j++
				}
				j++
			}
			i = j
			continue
		}
		if c == closer[0] && src[i+1] == closer[1] {
			return i
		}
	}
	return -1
}

// findEndRaw finds the {% endraw %} that closes a raw block starting at pos.
func findEndRaw(src string, pos int) (rawEnd, after int, stripNext bool, err error) {
	for i := pos; ; {
		s := indexTagStart(src, i)
		if s < 0 {
			return 0, 0, false, &Error{Pos: pos, Msg: "raw block without endraw"}
		}
		if src[s+1] != '%' {
			i = s + 2
			continue
		}
		inner := s + 2
		stripLeft := inner < len(src) && src[inner] == '-'
		if stripLeft || (inner < len(src) && src[inner] == '+') {
			inner++
		}
		e := indexTagEnd(src, inner, "%}", true)
		if e < 0 {
			return 0, 0, false, &Error{Pos: s, Msg: "unclosed tag"}
		}
		body := src[inner:e]
		strip := strings.HasSuffix(body, "-")
		if strings.TrimSpace(strings.TrimSuffix(body, "-")) != "endraw" {
			i = e + 2
			continue
		}
		raw := s
		if stripLeft {
			raw = len(strings.TrimRight(src[:s], " \t\n\r\v\f"))
			raw = max(raw, pos)
		}
		after = e + 2
		if !strip && after < len(src) && src[after] == '\n' {
			after++
		}
		return raw, after, strip, nil
	}
}

// Error is a template syntax or render error.
type Error struct {
	Pos int
	Msg string
}

func (e *Error) Error() string { return fmt.Sprintf("jinja: at %d: %s", e.Pos, e.Msg) }
