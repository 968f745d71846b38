package attack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"
)

// jnode is a JSON value the mutators can bend into what encoding/json
// never writes: duplicate keys (objects are ordered pairs), numbers of any
// spelling, strings with raw control bytes or invalid UTF-8, and raw bytes
// spliced in anywhere.
type jnode struct {
	kind jkind
	keys []string // objects: keys, parallel to kids
	kids []*jnode // objects and arrays
	text string   // strings (the value), numbers and raw (verbatim)
	// rawCtl writes a string's control characters unescaped (invalid
	// JSON); otherwise they are escaped as \uXXXX (valid JSON carrying
	// them).
	rawCtl bool
}

type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNum
	jStr
	jArr
	jObj
	jRaw
)

func jstr(s string) *jnode    { return &jnode{kind: jStr, text: s} }
func jnum(s string) *jnode    { return &jnode{kind: jNum, text: s} }
func jraw(s string) *jnode    { return &jnode{kind: jRaw, text: s} }
func jbool(b bool) *jnode     { return &jnode{kind: jBool, text: strconv.FormatBool(b)} }
func jnull() *jnode           { return &jnode{kind: jNull} }
func jarr(k ...*jnode) *jnode { return &jnode{kind: jArr, kids: k} }

// jobj builds an object from alternating keys and values.
func jobj(kv ...any) *jnode {
	n := &jnode{kind: jObj}
	for i := 0; i+1 < len(kv); i += 2 {
		n.keys = append(n.keys, kv[i].(string))
		n.kids = append(n.kids, kv[i+1].(*jnode))
	}
	return n
}

// parseJSON reads a JSON document, keeping key order.
func parseJSON(b []byte) (*jnode, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	n, err := parseValue(dec)
	if err != nil {
		return nil, fmt.Errorf("parse template: %w", err)
	}
	return n, nil
}

func parseValue(dec *json.Decoder) (*jnode, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		n := &jnode{kind: jArr}
		if t == '{' {
			n.kind = jObj
		}
		for dec.More() {
			if n.kind == jObj {
				k, err := dec.Token()
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, k.(string))
			}
			kid, err := parseValue(dec)
			if err != nil {
				return nil, err
			}
			n.kids = append(n.kids, kid)
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
		return n, nil
	case string:
		return jstr(t), nil
	case json.Number:
		return jnum(t.String()), nil
	case bool:
		return jbool(t), nil
	case nil:
		return jnull(), nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

// clone deep-copies n.
func (n *jnode) clone() *jnode {
	c := *n
	c.keys = append([]string(nil), n.keys...)
	c.kids = make([]*jnode, len(n.kids))
	for i, k := range n.kids {
		c.kids[i] = k.clone()
	}
	return &c
}

// get returns the value of key in an object (the first one), or nil.
func (n *jnode) get(key string) *jnode {
	if n == nil || n.kind != jObj {
		return nil
	}
	for i, k := range n.keys {
		if k == key {
			return n.kids[i]
		}
	}
	return nil
}

// set replaces (or appends) key's value in an object.
func (n *jnode) set(key string, v *jnode) {
	for i, k := range n.keys {
		if k == key {
			n.kids[i] = v
			return
		}
	}
	n.keys = append(n.keys, key)
	n.kids = append(n.kids, v)
}

// encode writes n as JSON (or as the not-quite-JSON its raw parts make).
func (n *jnode) encode() []byte { return n.appendTo(nil) }

func (n *jnode) appendTo(b []byte) []byte {
	switch n.kind {
	case jNull:
		return append(b, "null"...)
	case jBool, jNum, jRaw:
		return append(b, n.text...)
	case jStr:
		return appendJSONString(b, n.text, n.rawCtl)
	case jArr:
		b = append(b, '[')
		for i, k := range n.kids {
			if i > 0 {
				b = append(b, ',')
			}
			b = k.appendTo(b)
		}
		return append(b, ']')
	}
	b = append(b, '{')
	for i, k := range n.kids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, n.keys[i], false)
		b = append(b, ':')
		b = k.appendTo(b)
	}
	return append(b, '}')
}

// appendJSONString quotes s: quotes and backslashes escaped, control
// characters escaped unless rawCtl, invalid UTF-8 bytes written as they
// are (encoding/json reads them as U+FFFD).
func appendJSONString(b []byte, s string, rawCtl bool) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
			i++
		case c < 0x20 && !rawCtl:
			b = fmt.Appendf(b, `\u%04x`, c)
			i++
		case c < utf8.RuneSelf:
			b = append(b, c)
			i++
		default:
			_, size := utf8.DecodeRuneInString(s[i:])
			b = append(b, s[i:i+size]...)
			i += size
		}
	}
	return append(b, '"')
}

// paths lists every value's location in n (nil for n itself), depth first.
func (n *jnode) paths() [][]int {
	var out [][]int
	var walk func(m *jnode, at []int)
	walk = func(m *jnode, at []int) {
		out = append(out, append([]int(nil), at...))
		for i, k := range m.kids {
			walk(k, append(at, i))
		}
	}
	walk(n, nil)
	return out
}

// at returns the node at path p, and its parent and index there (nil, -1
// for the root).
func (n *jnode) at(p []int) (node, parent *jnode, idx int) {
	node, idx = n, -1
	for _, i := range p {
		parent, node, idx = node, node.kids[i], i
	}
	return node, parent, idx
}

// keyAt is the object key leading to path p's last step ("" inside an
// array or at the root).
func (n *jnode) keyAt(p []int) string {
	if len(p) == 0 {
		return ""
	}
	_, parent, idx := n.at(p)
	if parent.kind == jObj {
		return parent.keys[idx]
	}
	return ""
}
