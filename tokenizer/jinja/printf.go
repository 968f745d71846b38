package jinja

import (
	"math"
	"strconv"
	"strings"
)

// printf is Python's str % args (printf-style formatting): args is a
// tuple of arguments, a mapping for %(key)s, or a single argument. As in
// CPython a dict or list counts as a mapping, and an argument left
// unconsumed is an error unless args is a mapping.
func printf(format string, args Value) (string, error) {
	var list []Value
	mapping := false
	switch a := args.(type) {
	case Tuple:
		list = a
	case *Dict, []Value:
		mapping = true
		list = []Value{a}
	default:
		list = []Value{a}
	}
	_, isTuple := args.(Tuple)
	next := 0
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(format) {
			return "", errorf("incomplete format")
		}
		var arg Value
		haveArg := false
		if format[i] == '(' {
			end := strings.IndexByte(format[i:], ')')
			if end < 0 {
				return "", errorf("incomplete format key")
			}
			key := format[i+1 : i+end]
			i += end + 1
			d, ok := args.(*Dict)
			if !ok {
				return "", errorf("format requires a mapping")
			}
			v, ok := d.Get(key)
			if !ok {
				return "", errorf("KeyError: '%s'", key)
			}
			arg, haveArg = v, true
		}
		var left, zero, plus, space, alt bool
	flags:
		for ; i < len(format); i++ {
			switch format[i] {
			case '-':
				left = true
			case '0':
				zero = true
			case '+':
				plus = true
			case ' ':
				space = true
			case '#':
				alt = true
			default:
				break flags
			}
		}
		width, prec := 0, -1
		for ; i < len(format) && format[i] >= '0' && format[i] <= '9'; i++ {
			width = width*10 + int(format[i]-'0')
		}
		if i < len(format) && format[i] == '.' {
			prec = 0
			for i++; i < len(format) && format[i] >= '0' && format[i] <= '9'; i++ {
				prec = prec*10 + int(format[i]-'0')
			}
		}
		for i < len(format) && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L') {
			i++
		}
		if i >= len(format) {
			return "", errorf("incomplete format")
		}
		conv := format[i]
		if conv == '%' {
			b.WriteByte('%')
			continue
		}
		if !haveArg {
			if next >= len(list) || (!isTuple && next > 0) {
				return "", errorf("not enough arguments for format string")
			}
			arg = list[next]
			next++
		}
		body, err := formatOne(conv, arg, prec, plus, space, alt)
		if err != nil {
			return "", err
		}
		pad := width - len([]rune(body))
		switch {
		case pad <= 0:
			b.WriteString(body)
		case left:
			b.WriteString(body)
			b.WriteString(strings.Repeat(" ", pad))
		case zero && strings.ContainsRune("diuxXofFeEgG", rune(conv)):
			sign := ""
			if body != "" && (body[0] == '-' || body[0] == '+' || body[0] == ' ') {
				sign, body = body[:1], body[1:]
			}
			b.WriteString(sign + strings.Repeat("0", pad) + body)
		default:
			b.WriteString(strings.Repeat(" ", pad))
			b.WriteString(body)
		}
	}
	if !mapping && next < len(list) {
		return "", errorf("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

// formatOne formats one argument for conversion conv.
func formatOne(conv byte, arg Value, prec int, plus, space, alt bool) (string, error) {
	sign := func(s string, neg bool) string {
		switch {
		case neg:
			return "-" + s
		case plus:
			return "+" + s
		case space:
			return " " + s
		}
		return s
	}
	switch conv {
	case 's':
		s := str(arg)
		if prec >= 0 && prec < len([]rune(s)) {
			s = string([]rune(s)[:prec])
		}
		return s, nil
	case 'r', 'a':
		s := repr(arg)
		if prec >= 0 && prec < len([]rune(s)) {
			s = string([]rune(s)[:prec])
		}
		return s, nil
	case 'd', 'i', 'u':
		n, f, isFloat, ok := asNumber(arg)
		if !ok {
			return "", errorf("%%%c format: a real number is required, not %s", conv, typeName(arg))
		}
		if isFloat {
			if math.IsInf(f, 0) || math.IsNaN(f) {
				return "", errorf("cannot convert float to integer")
			}
			n = int64(f)
		}
		digits := strconv.FormatInt(abs64(n), 10)
		for prec > len(digits) {
			digits = "0" + digits
		}
		return sign(digits, n < 0), nil
	case 'x', 'X', 'o':
		n, ok := asInt(arg)
		if !ok {
			return "", errorf("%%%c format: an integer is required, not %s", conv, typeName(arg))
		}
		base, prefix := 16, "0x"
		if conv == 'o' {
			base, prefix = 8, "0o"
		}
		digits := strconv.FormatInt(abs64(n), base)
		if conv == 'X' {
			digits, prefix = strings.ToUpper(digits), "0X"
		}
		if alt {
			digits = prefix + digits
		}
		return sign(digits, n < 0), nil
	case 'f', 'F', 'e', 'E', 'g', 'G':
		_, f, _, ok := asNumber(arg)
		if !ok {
			return "", errorf("must be real number, not %s", typeName(arg))
		}
		if prec < 0 {
			prec = 6
		}
		var s string
		switch {
		case math.IsInf(f, 0):
			s = "inf"
		case math.IsNaN(f):
			s = "nan"
		case conv == 'g' || conv == 'G':
			s = pyGeneral(math.Abs(f), prec, alt)
		default:
			s = strconv.FormatFloat(math.Abs(f), byte(conv|0x20), prec, 64)
		}
		if conv == 'F' || conv == 'E' || conv == 'G' {
			s = strings.ToUpper(s)
		}
		return sign(s, math.Signbit(f) && !math.IsNaN(f)), nil
	case 'c':
		switch x := arg.(type) {
		case string:
			if len([]rune(x)) != 1 {
				return "", errorf("%%c requires an int or a unicode character, not a string of length %d", len([]rune(x)))
			}
			return x, nil
		}
		n, ok := asInt(arg)
		if !ok || n < 0 || n > 0x10FFFF {
			return "", errorf("%%c requires an int or a unicode character")
		}
		return string(rune(n)), nil
	}
	return "", errorf("unsupported format character '%c'", conv)
}

// pyGeneral is Python's %g of a non-negative finite f.
func pyGeneral(f float64, prec int, alt bool) string {
	if prec == 0 {
		prec = 1
	}
	exp := 0
	if f != 0 {
		// The exponent after rounding to prec significant digits.
		e := strconv.FormatFloat(f, 'e', prec-1, 64)
		exp, _ = strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	}
	var s string
	if exp < -4 || exp >= prec {
		s = strconv.FormatFloat(f, 'e', prec-1, 64)
		if !alt {
			m, e, _ := strings.Cut(s, "e")
			if strings.Contains(m, ".") {
				m = strings.TrimRight(strings.TrimRight(m, "0"), ".")
			}
			s = m + "e" + e
		}
	} else {
		s = strconv.FormatFloat(f, 'f', max(prec-1-exp, 0), 64)
		if !alt && strings.Contains(s, ".") {
			s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
		}
	}
	return s
}

func abs64(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}
