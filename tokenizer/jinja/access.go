package jinja

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// getAttr is jinja2's obj.name: a method of the type first, then an item.
func getAttr(obj Value, name string) (Value, error) {
	switch x := obj.(type) {
	case Undefined:
		return nil, errorf("'%s' is undefined", x.Name)
	case *Namespace:
		if v, ok := x.d.Get(name); ok {
			return v, nil
		}
		return Undefined{Name: name}, nil
	case *Loop:
		return x.attr(name), nil
	}
	if m := method(obj, name); m != nil {
		return m, nil
	}
	if d, ok := obj.(*Dict); ok {
		if v, ok := d.Get(name); ok {
			return v, nil
		}
	}
	return Undefined{Name: name}, nil
}

// getItem is jinja2's obj[key]: an item first, then an attribute.
func getItem(obj Value, key Value) (Value, error) {
	switch x := obj.(type) {
	case Undefined:
		return nil, errorf("'%s' is undefined", x.Name)
	case *Dict:
		if k, ok := key.(string); ok {
			if v, ok := x.Get(k); ok {
				return v, nil
			}
			if m := method(obj, k); m != nil {
				return m, nil
			}
		}
		return Undefined{Name: str(key)}, nil
	case []Value, Tuple, string:
		i, ok := asInt(key)
		if !ok {
			if k, isStr := key.(string); isStr {
				if m := method(obj, k); m != nil {
					return m, nil
				}
			}
			return Undefined{Name: str(key)}, nil
		}
		if s, isStr := x.(string); isStr {
			runes := []rune(s)
			if i < 0 {
				i += int64(len(runes))
			}
			if i < 0 || i >= int64(len(runes)) {
				return Undefined{Name: str(key)}, nil
			}
			return string(runes[i]), nil
		}
		items, _ := asList(x)
		if i < 0 {
			i += int64(len(items))
		}
		if i < 0 || i >= int64(len(items)) {
			return Undefined{Name: str(key)}, nil
		}
		return items[i], nil
	case *Namespace:
		if k, ok := key.(string); ok {
			if v, ok := x.d.Get(k); ok {
				return v, nil
			}
		}
		return Undefined{Name: str(key)}, nil
	case *Loop:
		if k, ok := key.(string); ok {
			return x.attr(k), nil
		}
	}
	return Undefined{Name: str(key)}, nil
}

// method returns the bound method name of obj, or nil. Mutating methods
// are refused as the ImmutableSandboxedEnvironment refuses them.
func method(obj Value, name string) Value {
	switch x := obj.(type) {
	case string:
		return strMethod(x, name)
	case *Dict:
		return dictMethod(x, name)
	case []Value:
		switch name {
		case "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse":
			return Func(func([]Value, *Dict) (Value, error) {
				return nil, errorf("access to attribute '%s' of 'list' object is unsafe", name)
			})
		case "index", "count":
			return Func(func(args []Value, _ *Dict) (Value, error) {
				if len(args) != 1 {
					return nil, errorf("list.%s takes one argument", name)
				}
				n, at := 0, -1
				for i, it := range x {
					if equal(it, args[0]) {
						n++
						if at < 0 {
							at = i
						}
					}
				}
				if name == "count" {
					return int64(n), nil
				}
				if at < 0 {
					return nil, errorf("%s is not in list", repr(args[0]))
				}
				return int64(at), nil
			})
		}
	}
	return nil
}

func dictMethod(d *Dict, name string) Value {
	switch name {
	case "items":
		return Func(func([]Value, *Dict) (Value, error) { return dictItems(d), nil })
	case "keys":
		return Func(func([]Value, *Dict) (Value, error) {
			out := make([]Value, len(d.keys))
			for i, k := range d.keys {
				out[i] = k
			}
			return out, nil
		})
	case "values":
		return Func(func([]Value, *Dict) (Value, error) {
			out := make([]Value, len(d.keys))
			for i, k := range d.keys {
				out[i] = d.m[k]
			}
			return out, nil
		})
	case "get":
		return Func(func(args []Value, _ *Dict) (Value, error) {
			if len(args) < 1 || len(args) > 2 {
				return nil, errorf("get expected 1 or 2 arguments")
			}
			if k, ok := args[0].(string); ok {
				if v, ok := d.Get(k); ok {
					return v, nil
				}
			}
			if len(args) == 2 {
				return args[1], nil
			}
			return nil, nil
		})
	case "update", "pop", "popitem", "setdefault", "clear":
		return Func(func([]Value, *Dict) (Value, error) {
			return nil, errorf("access to attribute '%s' of 'dict' object is unsafe", name)
		})
	}
	return nil
}

func dictItems(d *Dict) []Value {
	out := make([]Value, len(d.keys))
	for i, k := range d.keys {
		out[i] = Tuple{k, d.m[k]}
	}
	return out
}

// pySpace is str.isspace for one rune.
func pySpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

func stripChars(args []Value) (func(rune) bool, error) {
	if len(args) == 0 || args[0] == nil {
		return pySpace, nil
	}
	cs, ok := args[0].(string)
	if !ok {
		return nil, errorf("strip arg must be None or str")
	}
	return func(r rune) bool { return strings.ContainsRune(cs, r) }, nil
}

func strMethod(s string, name string) Value {
	one := func(f func(args []Value) (Value, error)) Value {
		return Func(func(args []Value, _ *Dict) (Value, error) { return f(args) })
	}
	switch name {
	case "strip", "lstrip", "rstrip":
		return one(func(args []Value) (Value, error) {
			f, err := stripChars(args)
			if err != nil {
				return nil, err
			}
			switch name {
			case "strip":
				return strings.TrimFunc(s, f), nil
			case "lstrip":
				return strings.TrimLeftFunc(s, f), nil
			}
			return strings.TrimRightFunc(s, f), nil
		})
	case "upper":
		return one(func([]Value) (Value, error) { return strings.ToUpper(s), nil })
	case "lower":
		return one(func([]Value) (Value, error) { return strings.ToLower(s), nil })
	case "title":
		return one(func([]Value) (Value, error) { return pyTitle(s), nil })
	case "capitalize":
		return one(func([]Value) (Value, error) { return pyCapitalize(s), nil })
	case "startswith", "endswith":
		return one(func(args []Value) (Value, error) {
			if len(args) != 1 {
				return nil, errorf("%s takes one argument", name)
			}
			var cands []Value
			switch a := args[0].(type) {
			case string:
				cands = []Value{a}
			case Tuple:
				cands = a
			default:
				return nil, errorf("%s first arg must be str or a tuple of str", name)
			}
			for _, c := range cands {
				cs, ok := c.(string)
				if !ok {
					return nil, errorf("tuple for %s must only contain str", name)
				}
				if (name == "startswith" && strings.HasPrefix(s, cs)) || (name == "endswith" && strings.HasSuffix(s, cs)) {
					return true, nil
				}
			}
			return false, nil
		})
	case "split", "rsplit":
		return Func(func(args []Value, kwargs *Dict) (Value, error) {
			var sep Value
			maxSplit := int64(-1)
			if len(args) > 0 {
				sep = args[0]
			}
			if v, ok := kwargs.Get("sep"); ok {
				sep = v
			}
			if len(args) > 1 {
				maxSplit, _ = asInt(args[1])
			}
			if v, ok := kwargs.Get("maxsplit"); ok {
				maxSplit, _ = asInt(v)
			}
			return pySplit(s, sep, maxSplit, name == "rsplit")
		})
	case "splitlines":
		return one(func([]Value) (Value, error) {
			var out []Value
			for _, l := range strings.Split(normalizeNewlines(s+"\n"), "\n") {
				out = append(out, l)
			}
			if len(out) > 0 && s == "" {
				out = nil
			}
			return out, nil
		})
	case "replace":
		return one(func(args []Value) (Value, error) {
			if len(args) < 2 {
				return nil, errorf("replace expected at least 2 arguments")
			}
			old, ok1 := args[0].(string)
			nw, ok2 := args[1].(string)
			if !ok1 || !ok2 {
				return nil, errorf("replace arguments must be str")
			}
			n := int64(-1)
			if len(args) > 2 {
				n, _ = asInt(args[2])
			}
			return strings.Replace(s, old, nw, int(n)), nil
		})
	case "find", "rfind", "count":
		return one(func(args []Value) (Value, error) {
			if len(args) != 1 {
				return nil, errorf("%s takes one argument", name)
			}
			sub, ok := args[0].(string)
			if !ok {
				return nil, errorf("must be str, not %s", typeName(args[0]))
			}
			switch name {
			case "count":
				if sub == "" {
					return int64(len([]rune(s)) + 1), nil
				}
				return int64(strings.Count(s, sub)), nil
			case "find":
				i := strings.Index(s, sub)
				if i < 0 {
					return int64(-1), nil
				}
				return int64(len([]rune(s[:i]))), nil
			}
			i := strings.LastIndex(s, sub)
			if i < 0 {
				return int64(-1), nil
			}
			return int64(len([]rune(s[:i]))), nil
		})
	case "join":
		return one(func(args []Value) (Value, error) {
			if len(args) != 1 {
				return nil, errorf("join takes one argument")
			}
			items, err := iterate(args[0])
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				p, ok := it.(string)
				if !ok {
					return nil, errorf("sequence item %d: expected str instance, %s found", i, typeName(it))
				}
				parts[i] = p
			}
			return strings.Join(parts, s), nil
		})
	case "isdigit", "isalpha", "isspace", "isupper", "islower", "isalnum":
		return one(func([]Value) (Value, error) { return strPredicate(s, name), nil })
	}
	return nil
}

func strPredicate(s, name string) bool {
	if s == "" {
		return false
	}
	switch name {
	case "isupper", "islower":
		cased := false
		for _, r := range s {
			if unicode.IsUpper(r) || unicode.IsTitle(r) {
				if name == "islower" {
					return false
				}
				cased = true
			} else if unicode.IsLower(r) {
				if name == "isupper" {
					return false
				}
				cased = true
			}
		}
		return cased
	}
	for _, r := range s {
		ok := false
		switch name {
		case "isdigit":
			ok = unicode.IsDigit(r)
		case "isalpha":
			ok = unicode.IsLetter(r)
		case "isspace":
			ok = pySpace(r)
		case "isalnum":
			ok = unicode.IsLetter(r) || unicode.IsNumber(r)
		}
		if !ok {
			return false
		}
	}
	return true
}

// pySplit is str.split / str.rsplit.
func pySplit(s string, sep Value, maxSplit int64, fromRight bool) (Value, error) {
	var parts []string
	switch sp := sep.(type) {
	case nil:
		fields := strings.FieldsFunc(s, pySpace)
		if maxSplit >= 0 && int64(len(fields)) > maxSplit+1 {
			// Re-split keeping the remainder intact.
			parts = splitWhitespaceN(s, int(maxSplit), fromRight)
		} else {
			parts = fields
		}
	case string:
		if sp == "" {
			return nil, errorf("empty separator")
		}
		if fromRight && maxSplit >= 0 {
			all := strings.Split(s, sp)
			if int64(len(all)) > maxSplit+1 {
				head := strings.Join(all[:len(all)-int(maxSplit)], sp)
				parts = append([]string{head}, all[len(all)-int(maxSplit):]...)
			} else {
				parts = all
			}
		} else {
			parts = strings.SplitN(s, sp, int(maxSplit+1))
			if maxSplit < 0 {
				parts = strings.Split(s, sp)
			}
		}
	default:
		return nil, errorf("must be str or None, not %s", typeName(sep))
	}
	out := make([]Value, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out, nil
}

func splitWhitespaceN(s string, n int, fromRight bool) []string {
	var out []string
	if fromRight {
		rest := strings.TrimRightFunc(s, pySpace)
		for len(out) < n {
			i := strings.LastIndexFunc(rest, pySpace)
			if i < 0 {
				break
			}
			_, w := utf8.DecodeRuneInString(rest[i:])
			out = append([]string{rest[i+w:]}, out...)
			rest = strings.TrimRightFunc(rest[:i], pySpace)
		}
		if rest != "" {
			out = append([]string{rest}, out...)
		}
		return out
	}
	rest := strings.TrimLeftFunc(s, pySpace)
	for len(out) < n {
		i := strings.IndexFunc(rest, pySpace)
		if i < 0 {
			break
		}
		out = append(out, rest[:i])
		rest = strings.TrimLeftFunc(rest[i:], pySpace)
	}
	if rest != "" {
		out = append(out, rest)
	}
	return out
}

// pyTitle is str.title: a cased letter after an uncased one is uppercased,
// the others lowercased.
func pyTitle(s string) string {
	var b strings.Builder
	prevCased := false
	for _, r := range s {
		if prevCased {
			b.WriteRune(unicode.ToLower(r))
		} else {
			b.WriteRune(unicode.ToTitle(r))
		}
		prevCased = unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r)
	}
	return b.String()
}

// pyCapitalize is str.capitalize.
func pyCapitalize(s string) string {
	for i, r := range s {
		return string(unicode.ToTitle(r)) + strings.ToLower(s[i+len(string(r)):])
	}
	return s
}
