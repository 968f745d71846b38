package jinja

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Value is a template value with Python's types: nil (None), bool, int64,
// float64, string, []Value (list), Tuple, *Dict, *Namespace, Func, or
// Undefined.
type Value = any

// Undefined is a missing variable, attribute or item (jinja2's Undefined):
// it prints as "", is false, iterates as empty, and errors on most else.
type Undefined struct{ Name string }

// BigInt is an integer beyond int64 from JSON input, kept as its digits
// (Python's int has no bound); it prints and serializes exactly, and takes
// part in no arithmetic.
type BigInt string

// Tuple is a Python tuple (prints with parentheses).
type Tuple []Value

// Func is a callable: a global, a bound method or a macro.
type Func func(args []Value, kwargs *Dict) (Value, error)

// Dict is an insertion-ordered dict with string keys.
type Dict struct {
	keys []string
	m    map[string]Value
}

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{m: map[string]Value{}} }

// Set inserts or replaces k (keeping its first position).
func (d *Dict) Set(k string, v Value) {
	if _, ok := d.m[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.m[k] = v
}

// Get returns the value at k.
func (d *Dict) Get(k string) (Value, bool) {
	if d == nil {
		return nil, false
	}
	v, ok := d.m[k]
	return v, ok
}

// Keys returns the keys in insertion order.
func (d *Dict) Keys() []string {
	if d == nil {
		return nil
	}
	return d.keys
}

// Len is the number of keys.
func (d *Dict) Len() int {
	if d == nil {
		return 0
	}
	return len(d.keys)
}

// Loop is a for loop's "loop" variable (index, index0, first, last,
// length, revindex, revindex0, previtem, nextitem, depth, depth0, cycle).
type Loop struct {
	items []Value
	i     int
}

// attr returns the loop attribute name.
func (l *Loop) attr(name string) Value {
	n := len(l.items)
	switch name {
	case "index":
		return int64(l.i + 1)
	case "index0":
		return int64(l.i)
	case "revindex":
		return int64(n - l.i)
	case "revindex0":
		return int64(n - l.i - 1)
	case "first":
		return l.i == 0
	case "last":
		return l.i == n-1
	case "length":
		return int64(n)
	case "depth":
		return int64(1)
	case "depth0":
		return int64(0)
	case "previtem":
		if l.i > 0 {
			return l.items[l.i-1]
		}
	case "nextitem":
		if l.i+1 < n {
			return l.items[l.i+1]
		}
	case "cycle":
		idx := l.i
		return Func(func(args []Value, _ *Dict) (Value, error) {
			if len(args) == 0 {
				return nil, errorf("no items for cycling given")
			}
			return args[idx%len(args)], nil
		})
	}
	return Undefined{Name: name}
}

// Namespace is jinja2's namespace(): attributes assignable from inside
// loops.
type Namespace struct{ d *Dict }

// errorf builds a render error.
func errorf(format string, args ...any) error {
	return &Error{Pos: -1, Msg: fmt.Sprintf(format, args...)}
}

// typeName is Python's type name of v.
func typeName(v Value) string {
	switch v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64, BigInt:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case []Value:
		return "list"
	case Tuple:
		return "tuple"
	case *Dict:
		return "dict"
	case *Namespace:
		return "Namespace"
	case *Loop:
		return "LoopContext"
	case Func:
		return "function"
	case Undefined:
		return "Undefined"
	}
	return fmt.Sprintf("%T", v)
}

// truthy is Python's bool(v).
func truthy(v Value) bool {
	switch x := v.(type) {
	case nil, Undefined:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case []Value:
		return len(x) > 0
	case Tuple:
		return len(x) > 0
	case *Dict:
		return x.Len() > 0
	}
	return true
}

// str is Python's str(v) (what {{ v }} prints).
func str(v Value) string {
	switch x := v.(type) {
	case string:
		return x
	case Undefined:
		return ""
	}
	return repr(v)
}

// repr is Python's repr(v).
func repr(v Value) string {
	var b strings.Builder
	writeRepr(&b, v)
	return b.String()
}

func writeRepr(b *strings.Builder, v Value) {
	switch x := v.(type) {
	case nil:
		b.WriteString("None")
	case Undefined:
		b.WriteString("Undefined")
	case bool:
		if x {
			b.WriteString("True")
		} else {
			b.WriteString("False")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case BigInt:
		b.WriteString(string(x))
	case float64:
		b.WriteString(formatFloat(x))
	case string:
		writeStrRepr(b, x)
	case []Value:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, e)
		}
		b.WriteByte(']')
	case Tuple:
		b.WriteByte('(')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeRepr(b, e)
		}
		if len(x) == 1 {
			b.WriteByte(',')
		}
		b.WriteByte(')')
	case *Dict:
		b.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			writeStrRepr(b, k)
			b.WriteString(": ")
			writeRepr(b, x.m[k])
		}
		b.WriteByte('}')
	case *Namespace:
		b.WriteString("<Namespace ")
		writeRepr(b, x.d)
		b.WriteByte('>')
	case *Loop:
		fmt.Fprintf(b, "<LoopContext %d/%d>", x.i+1, len(x.items))
	default:
		fmt.Fprintf(b, "<%s>", typeName(v))
	}
}

// writeStrRepr writes Python's repr of a str.
func writeStrRepr(b *strings.Builder, s string) {
	q := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		q = '"'
	}
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case r < 0x7f:
			b.WriteRune(r)
		case !pyPrintable(r):
			switch {
			case r <= 0xff:
				fmt.Fprintf(b, `\x%02x`, r)
			case r <= 0xffff:
				fmt.Fprintf(b, `\u%04x`, r)
			default:
				fmt.Fprintf(b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
}

// pyPrintable is str.isprintable for one rune: not Cc, Cf, Cs, Co, Cn,
// Zl, Zp, or Zs other than the space.
func pyPrintable(r rune) bool {
	if r == ' ' {
		return true
	}
	if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Cs, unicode.Co, unicode.Zl, unicode.Zp, unicode.Zs) {
		return false
	}
	return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S)
}

// formatFloat is Python's repr of a float.
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddddde±XX
	mant, expS, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expS)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// toJSON is transformers' tojson filter: json.dumps(v, ensure_ascii=False,
// indent=indent, separators=..., sort_keys=sortKeys).
func toJSON(v Value, indent int, itemSep, keySep string, sortKeys bool) (string, error) {
	var b strings.Builder
	if err := writeJSON(&b, v, indent, 0, itemSep, keySep, sortKeys); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeJSON(b *strings.Builder, v Value, indent, depth int, itemSep, keySep string, sortKeys bool) error {
	nl := func(d int) {
		if indent >= 0 {
			b.WriteByte('\n')
			b.WriteString(strings.Repeat(" ", indent*d))
		}
	}
	switch x := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case BigInt:
		b.WriteString(string(x))
	case float64:
		switch {
		case math.IsNaN(x):
			b.WriteString("NaN")
		case math.IsInf(x, 1):
			b.WriteString("Infinity")
		case math.IsInf(x, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(formatFloat(x))
		}
	case string:
		writeJSONString(b, x)
	case []Value, Tuple:
		items, _ := asList(v)
		if len(items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, e := range items {
			if i > 0 {
				b.WriteString(itemSep)
			}
			nl(depth + 1)
			if err := writeJSON(b, e, indent, depth+1, itemSep, keySep, sortKeys); err != nil {
				return err
			}
		}
		nl(depth)
		b.WriteByte(']')
	case *Dict:
		if x.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := x.keys
		if sortKeys {
			keys = append([]string(nil), keys...)
			sort.Strings(keys)
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(itemSep)
			}
			nl(depth + 1)
			writeJSONString(b, k)
			b.WriteString(keySep)
			if err := writeJSON(b, x.m[k], indent, depth+1, itemSep, keySep, sortKeys); err != nil {
				return err
			}
		}
		nl(depth)
		b.WriteByte('}')
	default:
		return errorf("Object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

// writeJSONString is json.dumps of a str with ensure_ascii=False.
func writeJSONString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\f':
			b.WriteString(`\f`)
		case c < 0x20:
			fmt.Fprintf(b, `\u%04x`, c)
		case c < utf8.RuneSelf:
			b.WriteByte(c)
		default:
			_, w := utf8.DecodeRuneInString(s[i:])
			b.WriteString(s[i : i+w])
			i += w
			continue
		}
		i++
	}
	b.WriteByte('"')
}

// asList returns the items of a list or tuple.
func asList(v Value) ([]Value, bool) {
	switch x := v.(type) {
	case []Value:
		return x, true
	case Tuple:
		return x, true
	}
	return nil, false
}
