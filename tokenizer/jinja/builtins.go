package jinja

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Globals transformers adds (raise_exception, strftime_now) and jinja2's
// own (range, namespace, dict).
var globals = map[string]Value{
	"raise_exception": Func(func(args []Value, _ *Dict) (Value, error) {
		msg := ""
		if len(args) > 0 {
			msg = str(args[0])
		}
		return nil, &RaisedError{Msg: msg}
	}),
	"range": Func(func(args []Value, _ *Dict) (Value, error) {
		var a [3]int64
		a[2] = 1
		switch len(args) {
		case 1:
			a[1], _ = asInt(args[0])
		case 2, 3:
			for i := range args {
				v, ok := asInt(args[i])
				if !ok {
					return nil, errorf("range arguments must be integers")
				}
				a[i] = v
			}
		default:
			return nil, errorf("range expected 1 to 3 arguments")
		}
		if a[2] == 0 {
			return nil, errorf("range() arg 3 must not be zero")
		}
		var out []Value
		for i := a[0]; (a[2] > 0 && i < a[1]) || (a[2] < 0 && i > a[1]); i += a[2] {
			if len(out) > 1<<20 {
				return nil, errorf("range too big")
			}
			out = append(out, i)
		}
		if out == nil {
			out = []Value{}
		}
		return out, nil
	}),
	"namespace": Func(func(args []Value, kwargs *Dict) (Value, error) {
		d := NewDict()
		for _, a := range args {
			if ad, ok := a.(*Dict); ok {
				for _, k := range ad.keys {
					d.Set(k, ad.m[k])
				}
			}
		}
		for _, k := range kwargs.Keys() {
			d.Set(k, kwargs.m[k])
		}
		return &Namespace{d: d}, nil
	}),
	"dict": Func(func(args []Value, kwargs *Dict) (Value, error) {
		d := NewDict()
		for _, k := range kwargs.Keys() {
			d.Set(k, kwargs.m[k])
		}
		return d, nil
	}),
}

// RaisedError is the template's own raise_exception(msg).
type RaisedError struct{ Msg string }

func (e *RaisedError) Error() string { return "jinja: template raised: " + e.Msg }

// StrftimeNow returns transformers' strftime_now global for a clock.
func StrftimeNow(now func() time.Time) Func {
	return func(args []Value, _ *Dict) (Value, error) {
		if len(args) != 1 {
			return nil, errorf("strftime_now takes one argument")
		}
		f, ok := args[0].(string)
		if !ok {
			return nil, errorf("strftime format must be str")
		}
		return strftime(now(), f)
	}
}

// strftime implements the C directives chat templates use.
func strftime(t time.Time, f string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 >= len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 'd':
			b.WriteString(t.Format("02"))
		case 'm':
			b.WriteString(t.Format("01"))
		case 'Y':
			b.WriteString(t.Format("2006"))
		case 'y':
			b.WriteString(t.Format("06"))
		case 'b':
			b.WriteString(t.Format("Jan"))
		case 'B':
			b.WriteString(t.Format("January"))
		case 'a':
			b.WriteString(t.Format("Mon"))
		case 'A':
			b.WriteString(t.Format("Monday"))
		case 'H':
			b.WriteString(t.Format("15"))
		case 'I':
			b.WriteString(t.Format("03"))
		case 'M':
			b.WriteString(t.Format("04"))
		case 'S':
			b.WriteString(t.Format("05"))
		case 'p':
			b.WriteString(t.Format("PM"))
		case 'j':
			b.WriteString(strconv.Itoa(1000 + t.YearDay())[1:])
		case 'e':
			b.WriteString(t.Format("_2"))
		case '%':
			b.WriteByte('%')
		default:
			return "", errorf("strftime directive %%%c is not supported", f[i])
		}
	}
	return b.String(), nil
}

func (r *renderer) filter(e *filterExpr) (Value, error) {
	v, err := r.eval(e.obj)
	if err != nil {
		return nil, err
	}
	args, kwargs, err := r.args(e.args, e.kwargs)
	if err != nil {
		return nil, err
	}
	return applyFilter(r, e.name, v, args, kwargs)
}

// arg returns positional argument i or keyword name, or def.
func arg(args []Value, kwargs *Dict, i int, name string, def Value) Value {
	if i < len(args) {
		return args[i]
	}
	if v, ok := kwargs.Get(name); ok {
		return v
	}
	return def
}

func applyFilter(r *renderer, name string, v Value, args []Value, kwargs *Dict) (Value, error) {
	switch name {
	case "tojson":
		indent := int64(-1)
		if iv := arg(args, kwargs, 0, "indent", nil); iv != nil {
			n, ok := asInt(iv)
			if !ok {
				return nil, errorf("tojson indent must be an int")
			}
			indent = n
		}
		itemSep, keySep := ", ", ": "
		if indent >= 0 {
			itemSep = ","
		}
		if sv := arg(args, kwargs, 2, "separators", nil); sv != nil {
			seps, ok := asList(sv)
			if !ok || len(seps) != 2 {
				return nil, errorf("tojson separators must be a pair")
			}
			itemSep, keySep = str(seps[0]), str(seps[1])
		}
		if ea := arg(args, kwargs, 1, "ensure_ascii", false); truthy(ea) {
			return nil, errorf("tojson ensure_ascii=True is not supported")
		}
		return toJSON(v, int(indent), itemSep, keySep, truthy(arg(args, kwargs, 3, "sort_keys", false)))
	case "length", "count":
		return length(v)
	case "string":
		return str(v), nil
	case "trim":
		f, err := stripChars(args)
		if err != nil {
			return nil, err
		}
		return strings.TrimFunc(str(v), f), nil
	case "upper":
		return strings.ToUpper(str(v)), nil
	case "lower":
		return strings.ToLower(str(v)), nil
	case "title":
		return pyTitle(str(v)), nil
	case "capitalize":
		return pyCapitalize(str(v)), nil
	case "safe", "e", "escape", "forceescape":
		if name != "safe" {
			return htmlEscape(str(v)), nil
		}
		return v, nil
	case "default", "d":
		def := arg(args, kwargs, 0, "default_value", "")
		if _, undef := v.(Undefined); undef || (truthy(arg(args, kwargs, 1, "boolean", false)) && !truthy(v)) {
			return def, nil
		}
		return v, nil
	case "first", "last":
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return Undefined{Name: name}, nil
		}
		if name == "first" {
			return items[0], nil
		}
		return items[len(items)-1], nil
	case "join":
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		sep := str(arg(args, kwargs, 0, "d", ""))
		attr := arg(args, kwargs, 1, "attribute", nil)
		parts := make([]string, len(items))
		for i, it := range items {
			if attr != nil {
				if it, err = getItem(it, attr); err != nil {
					return nil, err
				}
			}
			parts[i] = str(it)
		}
		return strings.Join(parts, sep), nil
	case "list":
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		return append([]Value{}, items...), nil
	case "items":
		switch d := v.(type) {
		case *Dict:
			return dictItems(d), nil
		case Undefined:
			return []Value{}, nil
		}
		return nil, errorf("can only get item pairs from a mapping")
	case "reverse":
		if s, ok := v.(string); ok {
			rs := []rune(s)
			slices.Reverse(rs)
			return string(rs), nil
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		out := slices.Clone(items)
		slices.Reverse(out)
		return out, nil
	case "replace":
		if len(args) < 2 {
			return nil, errorf("replace needs two arguments")
		}
		n := int64(-1)
		if len(args) > 2 {
			n, _ = asInt(args[2])
		}
		return strings.Replace(str(v), str(args[0]), str(args[1]), int(n)), nil
	case "int":
		if u, ok := v.(Undefined); ok {
			return nil, errorf("'%s' is undefined", u.Name) // int(Undefined) raises
		}
		switch x := v.(type) {
		case int64:
			return x, nil
		case bool:
			return b2i(x), nil
		case float64:
			return int64(x), nil
		case string:
			if n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64); err == nil {
				return n, nil
			}
			if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
				return int64(f), nil
			}
		}
		return arg(args, kwargs, 0, "default", int64(0)), nil
	case "float":
		if u, ok := v.(Undefined); ok {
			return nil, errorf("'%s' is undefined", u.Name) // float(Undefined) raises
		}
		if _, f, _, ok := asNumber(v); ok {
			return f, nil
		}
		if s, ok := v.(string); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(s), 64); err == nil {
				return f, nil
			}
		}
		return arg(args, kwargs, 0, "default", 0.0), nil
	case "abs":
		i, f, isF, ok := asNumber(v)
		if !ok {
			return nil, errorf("bad operand type for abs()")
		}
		if isF {
			return math.Abs(f), nil
		}
		if i < 0 {
			return -i, nil
		}
		return i, nil
	case "round":
		_, f, _, ok := asNumber(v)
		if !ok {
			return nil, errorf("round needs a number")
		}
		prec, _ := asInt(arg(args, kwargs, 0, "precision", int64(0)))
		method := str(arg(args, kwargs, 1, "method", "common"))
		p := math.Pow(10, float64(prec))
		switch method {
		case "common":
			return math.RoundToEven(f*p) / p, nil
		case "floor":
			return math.Floor(f*p) / p, nil
		case "ceil":
			return math.Ceil(f*p) / p, nil
		}
		return nil, errorf("method must be common, ceil or floor")
	case "indent":
		width := arg(args, kwargs, 0, "width", int64(4))
		pad := ""
		switch w := width.(type) {
		case string:
			pad = w
		default:
			n, _ := asInt(w)
			pad = strings.Repeat(" ", int(n))
		}
		first := truthy(arg(args, kwargs, 1, "first", false))
		blank := truthy(arg(args, kwargs, 2, "blank", false))
		lines := strings.Split(str(v), "\n")
		for i := range lines {
			if (i == 0 && !first) || (!blank && strings.TrimSpace(lines[i]) == "" && i > 0) {
				continue
			}
			lines[i] = pad + lines[i]
		}
		return strings.Join(lines, "\n"), nil
	case "map", "select", "reject", "selectattr", "rejectattr", "sort", "unique", "sum", "min", "max", "dictsort", "wordcount", "center":
		return seqFilter(r, name, v, args, kwargs)
	}
	return nil, errorf("no filter named '%s'", name)
}

func length(v Value) (Value, error) {
	switch x := v.(type) {
	case string:
		return int64(len([]rune(x))), nil
	case []Value:
		return int64(len(x)), nil
	case Tuple:
		return int64(len(x)), nil
	case *Dict:
		return int64(x.Len()), nil
	case Undefined:
		return int64(0), nil
	}
	return nil, errorf("object of type '%s' has no len()", typeName(v))
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;").Replace(s)
}

func seqFilter(r *renderer, name string, v Value, args []Value, kwargs *Dict) (Value, error) {
	switch name {
	case "wordcount":
		return int64(len(strings.FieldsFunc(str(v), func(c rune) bool { return !isWordRune(c) }))), nil
	case "center":
		w, _ := asInt(arg(args, kwargs, 0, "width", int64(80)))
		s := str(v)
		n := int(w) - len([]rune(s))
		if n <= 0 {
			return s, nil
		}
		left := n / 2
		if n%2 == 1 && int(w)%2 == 1 {
			left++
		}
		return strings.Repeat(" ", left) + s + strings.Repeat(" ", n-left), nil
	case "dictsort":
		d, ok := v.(*Dict)
		if !ok {
			return nil, errorf("dictsort needs a mapping")
		}
		keys := slices.Clone(d.keys)
		sort.SliceStable(keys, func(i, j int) bool { return strings.ToLower(keys[i]) < strings.ToLower(keys[j]) })
		out := make([]Value, len(keys))
		for i, k := range keys {
			out[i] = Tuple{k, d.m[k]}
		}
		return out, nil
	}
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	switch name {
	case "map":
		out := make([]Value, 0, len(items))
		if attr, ok := kwargs.Get("attribute"); ok {
			def, hasDef := kwargs.Get("default")
			for _, it := range items {
				x, err := getItemPath(it, attr)
				if err != nil {
					return nil, err
				}
				if _, undef := x.(Undefined); undef && hasDef {
					x = def
				}
				out = append(out, x)
			}
			return out, nil
		}
		if len(args) == 0 {
			return nil, errorf("map needs a filter name or attribute=")
		}
		fname := str(args[0])
		for _, it := range items {
			x, err := applyFilter(r, fname, it, args[1:], kwargs)
			if err != nil {
				return nil, err
			}
			out = append(out, x)
		}
		return out, nil
	case "select", "reject", "selectattr", "rejectattr":
		attrMode := strings.HasSuffix(name, "attr")
		want := strings.HasPrefix(name, "select")
		rest := args
		var attr Value
		if attrMode {
			if len(args) == 0 {
				return nil, errorf("%s needs an attribute", name)
			}
			attr, rest = args[0], args[1:]
		}
		out := []Value{}
		for _, it := range items {
			x := it
			if attrMode {
				if x, err = getItemPath(it, attr); err != nil {
					return nil, err
				}
			}
			var ok bool
			if len(rest) == 0 {
				ok = truthy(x)
			} else {
				tv, err := applyTest(str(rest[0]), x, rest[1:])
				if err != nil {
					return nil, err
				}
				ok = tv
			}
			if ok == want {
				out = append(out, it)
			}
		}
		return out, nil
	case "sort":
		out := slices.Clone(items)
		reverse := truthy(arg(args, kwargs, 0, "reverse", false))
		caseSensitive := truthy(arg(args, kwargs, 1, "case_sensitive", false))
		attr := arg(args, kwargs, 2, "attribute", nil)
		key := func(x Value) Value {
			if attr != nil {
				x, _ = getItemPath(x, attr)
			}
			if s, ok := x.(string); ok && !caseSensitive {
				return strings.ToLower(s)
			}
			return x
		}
		var cmpErr error
		sort.SliceStable(out, func(i, j int) bool {
			c, err := compare(key(out[i]), key(out[j]))
			if err != nil {
				cmpErr = err
			}
			if reverse {
				return c > 0
			}
			return c < 0
		})
		return out, cmpErr
	case "unique":
		out := []Value{}
		for _, it := range items {
			dup := false
			for _, o := range out {
				a, b := it, o
				if s, ok := a.(string); ok {
					a = strings.ToLower(s)
				}
				if s, ok := b.(string); ok {
					b = strings.ToLower(s)
				}
				if equal(a, b) {
					dup = true
					break
				}
			}
			if !dup {
				out = append(out, it)
			}
		}
		return out, nil
	case "sum":
		var total Value = arg(args, kwargs, 1, "start", int64(0))
		attr := arg(args, kwargs, 0, "attribute", nil)
		for _, it := range items {
			if attr != nil {
				if it, err = getItemPath(it, attr); err != nil {
					return nil, err
				}
			}
			if total, err = arith("+", total, it); err != nil {
				return nil, err
			}
		}
		return total, nil
	case "min", "max":
		if len(items) == 0 {
			return Undefined{Name: name}, nil
		}
		best := items[0]
		for _, it := range items[1:] {
			c, err := compare(it, best)
			if err != nil {
				return nil, err
			}
			if (name == "min" && c < 0) || (name == "max" && c > 0) {
				best = it
			}
		}
		return best, nil
	}
	return nil, errorf("no filter named '%s'", name)
}

func isWordRune(c rune) bool {
	return c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c > 127 && !pySpace(c)
}

// getItemPath reads attribute "a.b" (dotted) or an item.
func getItemPath(v Value, attr Value) (Value, error) {
	s, ok := attr.(string)
	if !ok {
		return getItem(v, attr)
	}
	for _, part := range strings.Split(s, ".") {
		var key Value = part
		if n, err := strconv.ParseInt(part, 10, 64); err == nil {
			key = n
		}
		x, err := getItem(v, key)
		if err != nil {
			return nil, err
		}
		v = x
	}
	return v, nil
}

func (r *renderer) test(e *testExpr) (Value, error) {
	if e.name == "defined" || e.name == "undefined" {
		v, err := r.eval(e.obj)
		if err != nil {
			return nil, err
		}
		_, undef := v.(Undefined)
		return undef == (e.name == "undefined") != e.negate, nil
	}
	v, err := r.eval(e.obj)
	if err != nil {
		return nil, err
	}
	args, _, err := r.args(e.args, nil)
	if err != nil {
		return nil, err
	}
	ok, err := applyTest(e.name, v, args)
	if err != nil {
		return nil, err
	}
	return ok != e.negate, nil
}

// applyTest is jinja2's "is name(args)".
func applyTest(name string, v Value, args []Value) (bool, error) {
	need := func(n int) error {
		if len(args) < n {
			return errorf("test %s needs an argument", name)
		}
		return nil
	}
	switch name {
	case "defined":
		_, undef := v.(Undefined)
		return !undef, nil
	case "undefined":
		_, undef := v.(Undefined)
		return undef, nil
	case "none":
		return v == nil, nil
	case "boolean":
		_, ok := v.(bool)
		return ok, nil
	case "true":
		b, ok := v.(bool)
		return ok && b, nil
	case "false":
		b, ok := v.(bool)
		return ok && !b, nil
	case "integer":
		switch v.(type) {
		case int64, BigInt:
			return true, nil
		}
		return false, nil
	case "float":
		_, ok := v.(float64)
		return ok, nil
	case "number":
		_, _, _, ok := asNumber(v)
		_, big := v.(BigInt)
		return ok || big, nil
	case "string":
		_, ok := v.(string)
		return ok, nil
	case "mapping":
		_, ok := v.(*Dict)
		return ok, nil
	case "iterable":
		switch v.(type) {
		case string, []Value, Tuple, *Dict, Undefined:
			return true, nil
		}
		return false, nil
	case "sequence":
		switch v.(type) {
		case string, []Value, Tuple, *Dict:
			return true, nil
		}
		return false, nil
	case "callable":
		_, ok := v.(Func)
		return ok, nil
	case "odd", "even":
		// jinja2: value % 2 == 1 (odd), value % 2 == 0 (even).
		m, err := binaryOp("%", v, int64(2))
		if err != nil {
			return false, err
		}
		return equal(m, b2i(name == "odd")), nil
	case "divisibleby":
		if err := need(1); err != nil {
			return false, err
		}
		m, err := binaryOp("%", v, args[0])
		if err != nil {
			return false, err
		}
		return equal(m, int64(0)), nil
	case "eq", "equalto", "==":
		if err := need(1); err != nil {
			return false, err
		}
		return equal(v, args[0]), nil
	case "ne", "!=":
		if err := need(1); err != nil {
			return false, err
		}
		return !equal(v, args[0]), nil
	case "sameas":
		if err := need(1); err != nil {
			return false, err
		}
		switch a := v.(type) {
		case nil:
			return args[0] == nil, nil
		case bool:
			b, ok := args[0].(bool)
			return ok && a == b, nil
		}
		return false, nil
	case "lt", "<", "le", "<=", "gt", ">", "ge", ">=":
		if err := need(1); err != nil {
			return false, err
		}
		op := map[string]string{"lt": "<", "le": "<=", "gt": ">", "ge": ">="}[name]
		if op == "" {
			op = name
		}
		res, err := binaryOp(op, v, args[0])
		if err != nil {
			return false, err
		}
		return res.(bool), nil
	case "in":
		if err := need(1); err != nil {
			return false, err
		}
		return contains(args[0], v)
	case "lower", "upper":
		s, ok := v.(string)
		if !ok {
			return false, nil
		}
		return strPredicate(s, "is"+name), nil
	}
	return false, errorf("no test named '%s'", name)
}
