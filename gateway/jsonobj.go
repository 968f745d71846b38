package gateway

import (
	"errors"
)

// Top-level JSON object surgery. The gateway forwards request bodies
// byte-for-byte and only ever touches top-level members (the P/D prefill
// rewrite, the decode leg's kv_transfer_params). Decoding the body into a map
// and re-encoding it would reorder keys and reformat numbers (1e3 → 1000,
// big token ids → floats), so instead these helpers walk the raw bytes,
// yield each top-level member's key and raw value, and splice new bodies out
// of the original spans.

// errNotObject reports a JSON value that is not an object where one is
// required.
var errNotObject = errors.New("gateway: JSON value is not an object")

// member is one top-level member of a JSON object: the decoded key and the
// raw value bytes (a sub-slice of the scanned document).
type member struct {
	// key is the decoded key; it aliases doc unless the key had escapes.
	// Compare it as string(m.key), which does not allocate.
	key []byte
	val []byte
	// start and end delimit the whole member in the document (key through
	// value), for splicing.
	start, end int
}

// forEachMember calls fn for every top-level member of the JSON object in
// doc, in document order (duplicates included, as they appear). doc must be
// valid JSON (validJSON); a value that is not an object yields errNotObject.
// fn must not keep m beyond the call.
func forEachMember(doc []byte, fn func(m *member) error) error {
	it := memberIter{doc: doc}
	for it.next() {
		if err := fn(&it.m); err != nil {
			return err
		}
	}
	return it.err
}

// memberIter walks the top-level members of a JSON object, like
// forEachMember, without a callback (so nothing escapes to the heap on the
// request path):
//
//	it := memberIter{doc: doc}
//	for it.next() { use(&it.m) }
//	if it.err != nil { … }
type memberIter struct {
	doc     []byte
	i       int
	started bool
	m       member
	err     error
}

// next advances to the next member; false at the end of the object or on
// an error (err).
func (it *memberIter) next() bool {
	doc, i := it.doc, it.i
	if !it.started {
		it.started = true
		i = skipSpace(doc, 0)
		if i >= len(doc) || doc[i] != '{' {
			it.err = errNotObject
			return false
		}
		i++
	}
	i = skipSpace(doc, i)
	if i >= len(doc) {
		it.err = errNotObject
		return false
	}
	if doc[i] == '}' {
		it.i = i
		return false
	}
	if doc[i] == ',' {
		i = skipSpace(doc, i+1)
	}
	m := &it.m
	m.start = i
	kEnd := skipString(doc, i)
	raw := doc[i+1 : kEnd-1]
	if !plainString(raw) {
		m.key = []byte(unquote(doc[i:kEnd]))
	} else {
		m.key = raw
	}
	i = skipSpace(doc, kEnd)
	i = skipSpace(doc, i+1) // ':'
	vEnd := skipValue(doc, i)
	m.val = doc[i:vEnd]
	m.end = vEnd
	it.i = vEnd
	return true
}

// plainString reports whether a string literal's body needs no decoding
// (no escapes, ASCII only).
func plainString(raw []byte) bool { return decodeSpecial(raw) == len(raw) }

// skipSpace returns the index of the first non-whitespace byte at or after i.
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the index just past the string starting at b[i] == '"'.
func skipString(b []byte, i int) int {
	i++
	for i < len(b) {
		if i += strSpecial(b[i:]); i >= len(b) {
			break
		}
		switch b[i] {
		case '\\':
			i += 2
		case '"':
			return i + 1
		default:
			i++
		}
	}
	return i
}

// skipValue returns the index just past the value starting at b[i]. b must
// be valid JSON.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	default: // number, true, false, null
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// isNull reports whether a raw JSON value is the literal null.
func isNull(v []byte) bool { return len(v) == 4 && string(v) == "null" }

// objectEditor rebuilds a JSON object from an original document: members
// whose key is dropped are left out, the rest are copied byte-for-byte in
// order, and appended members follow. Whitespace between members is not
// preserved (the original spans are joined with ',').
type objectEditor struct {
	out   []byte
	first bool
}

func newObjectEditor(capHint int) objectEditor {
	e := objectEditor{out: make([]byte, 0, capHint+2), first: true}
	e.out = append(e.out, '{')
	return e
}

// copyMember appends an original member (its raw span).
func (e *objectEditor) copyMember(doc []byte, m *member) {
	e.sep()
	e.out = append(e.out, doc[m.start:m.end]...)
}

// add appends "key":raw. key must not need escaping.
func (e *objectEditor) add(key string, raw []byte) {
	e.sep()
	e.out = append(e.out, '"')
	e.out = append(e.out, key...)
	e.out = append(e.out, '"', ':')
	e.out = append(e.out, raw...)
}

func (e *objectEditor) sep() {
	if !e.first {
		e.out = append(e.out, ',')
	}
	e.first = false
}

// bytes closes the object and returns it.
func (e *objectEditor) bytes() []byte { return append(e.out, '}') }

// topLevelValue returns the raw value of the last top-level member named key
// in the JSON object doc (valid JSON), or nil when absent.
func topLevelValue(doc []byte, key string) ([]byte, error) {
	var v []byte
	err := forEachMember(doc, func(m *member) error {
		if string(m.key) == key {
			v = m.val
		}
		return nil
	})
	return v, err
}

// withMember returns doc (a valid JSON object) with its top-level key set
// to raw: every member named key is dropped and "key":raw appended; the
// rest is copied byte-for-byte, in order. key must not need escaping.
func withMember(doc []byte, key string, raw []byte) ([]byte, error) {
	ed := newObjectEditor(len(doc) + len(key) + len(raw) + 4)
	err := forEachMember(doc, func(m *member) error {
		if string(m.key) != key {
			ed.copyMember(doc, m)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	ed.add(key, raw)
	return ed.bytes(), nil
}
