package jinja

import (
	"errors"
	"math"
	"strings"
)

// Render renders the template with vars (the top-level names; values as
// ParseJSON makes them, plus Func globals).
func (t *Template) Render(vars map[string]Value) (string, error) {
	steps := maxSteps
	r := &renderer{scopes: []map[string]Value{vars, {}}, depth: new(int), steps: &steps}
	var b strings.Builder
	if err := r.nodes(&b, t.body); err != nil {
		if errors.Is(err, errBreak) || errors.Is(err, errContinue) {
			return "", errorf("break/continue outside a loop")
		}
		return "", err
	}
	return b.String(), nil
}

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

// maxOutput bounds a render (a template looping forever on a huge input
// must not eat the daemon's memory).
const maxOutput = 64 << 20

type renderer struct {
	scopes []map[string]Value // innermost last
	depth  *int               // macro calls in progress (shared by nested renderers)
	steps  *int               // loop iterations left (shared)
	// constEval is set while an expression is evaluated as jinja2's
	// optimizer evaluates it at compile time (as_const; see fold).
	constEval bool
}

// maxSteps bounds the loop iterations of one render: a template that
// loops for ever fails instead of hanging a request.
const maxSteps = 1 << 20

// maxMacroDepth bounds macro recursion (Python would hit its recursion
// limit; either way the render fails).
const maxMacroDepth = 64

func (r *renderer) lookup(name string) Value {
	for i := len(r.scopes) - 1; i >= 0; i-- {
		if v, ok := r.scopes[i][name]; ok {
			return v
		}
	}
	if f, ok := globals[name]; ok {
		return f
	}
	return Undefined{Name: name}
}

func (r *renderer) set(name string, v Value) { r.scopes[len(r.scopes)-1][name] = v }

func (r *renderer) push() { r.scopes = append(r.scopes, map[string]Value{}) }
func (r *renderer) pop()  { r.scopes = r.scopes[:len(r.scopes)-1] }

func (r *renderer) nodes(b *strings.Builder, ns []node) error {
	for _, n := range ns {
		if err := r.node(b, n); err != nil {
			return err
		}
		if b.Len() > maxOutput {
			return errorf("output over %d bytes", maxOutput)
		}
	}
	return nil
}

func (r *renderer) node(b *strings.Builder, n node) error {
	switch n := n.(type) {
	case *textNode:
		b.WriteString(n.s)
	case *outputNode:
		v, ok := r.fold(n.e)
		if !ok {
			var err error
			if v, err = r.eval(n.e); err != nil {
				return err
			}
		}
		b.WriteString(str(v))
	case *ifNode:
		for i, c := range n.conds {
			v, err := r.eval(c)
			if err != nil {
				return err
			}
			if truthy(v) {
				return r.nodes(b, n.bodies[i])
			}
		}
		if len(n.bodies) > len(n.conds) {
			return r.nodes(b, n.bodies[len(n.conds)])
		}
	case *forNode:
		return r.forLoop(b, n)
	case *setNode:
		return r.setStmt(n)
	case *macroNode:
		r.set(n.name, r.macro(n))
	case *breakNode:
		return errBreak
	case *continueNode:
		return errContinue
	default:
		return errorf("unknown node %T", n)
	}
	return nil
}

func (r *renderer) setStmt(n *setNode) error {
	var v Value
	if n.val != nil {
		var err error
		if v, err = r.eval(n.val); err != nil {
			return err
		}
	} else {
		var b strings.Builder
		if err := r.nodes(&b, n.body); err != nil {
			return err
		}
		v = b.String()
	}
	if n.attr != "" {
		ns, ok := r.lookup(n.targets[0]).(*Namespace)
		if !ok {
			return errorf("cannot assign attribute on non-namespace object")
		}
		ns.d.Set(n.attr, v)
		return nil
	}
	if len(n.targets) == 1 {
		r.set(n.targets[0], v)
		return nil
	}
	items, err := iterate(v)
	if err != nil {
		return err
	}
	if len(items) != len(n.targets) {
		return errorf("cannot unpack %d values into %d names", len(items), len(n.targets))
	}
	for i, t := range n.targets {
		r.set(t, items[i])
	}
	return nil
}

func (r *renderer) forLoop(b *strings.Builder, n *forNode) error {
	seq, err := r.eval(n.iter)
	if err != nil {
		return err
	}
	items, err := iterate(seq)
	if err != nil {
		return err
	}
	bind := func(item Value) error {
		if len(n.targets) == 1 {
			r.set(n.targets[0], item)
			return nil
		}
		parts, err := iterate(item)
		if err != nil {
			return err
		}
		if len(parts) != len(n.targets) {
			return errorf("cannot unpack %d values into %d names", len(parts), len(n.targets))
		}
		for i, t := range n.targets {
			r.set(t, parts[i])
		}
		return nil
	}
	if n.filter != nil {
		var kept []Value
		for _, it := range items {
			r.push()
			err := bind(it)
			var v Value
			if err == nil {
				v, err = r.eval(n.filter)
			}
			r.pop()
			if err != nil {
				return err
			}
			if truthy(v) {
				kept = append(kept, it)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return r.nodes(b, n.orElse)
	}
	for i, it := range items {
		if *r.steps--; *r.steps < 0 {
			return errorf("render took over %d loop iterations", maxSteps)
		}
		r.push()
		r.set("loop", &Loop{items: items, i: i})
		err := bind(it)
		if err == nil {
			err = r.nodes(b, n.body)
		}
		r.pop()
		switch {
		case errors.Is(err, errBreak):
			return nil
		case errors.Is(err, errContinue):
		case err != nil:
			return err
		}
	}
	return nil
}

// macro turns a macro definition into a callable closed over the
// definition-time scopes.
func (r *renderer) macro(n *macroNode) Func {
	defScopes := append([]map[string]Value(nil), r.scopes...)
	return func(args []Value, kwargs *Dict) (Value, error) {
		if len(args) > len(n.params) {
			return nil, errorf("macro %s takes not more than %d arguments", n.name, len(n.params))
		}
		if *r.depth >= maxMacroDepth {
			return nil, errorf("macro recursion too deep")
		}
		*r.depth++
		defer func() { *r.depth-- }()
		inner := &renderer{scopes: append(append([]map[string]Value(nil), defScopes...), map[string]Value{}), depth: r.depth, steps: r.steps}
		for i, p := range n.params {
			switch v, ok := kwargs.Get(p); {
			case i < len(args):
				inner.set(p, args[i])
			case ok:
				inner.set(p, v)
			case n.defaults[i] != nil:
				dv, err := inner.eval(n.defaults[i])
				if err != nil {
					return nil, err
				}
				inner.set(p, dv)
			default:
				inner.set(p, Undefined{Name: p})
			}
		}
		var b strings.Builder
		if err := inner.nodes(&b, n.body); err != nil {
			return nil, err
		}
		return b.String(), nil
	}
}

// iterate lists what a for loop over v visits.
func iterate(v Value) ([]Value, error) {
	switch x := v.(type) {
	case []Value:
		return x, nil
	case Tuple:
		return x, nil
	case *Dict:
		out := make([]Value, len(x.keys))
		for i, k := range x.keys {
			out[i] = k
		}
		return out, nil
	case string:
		out := make([]Value, 0, len(x))
		for _, c := range x {
			out = append(out, string(c))
		}
		return out, nil
	case Undefined:
		return nil, nil
	}
	return nil, errorf("'%s' object is not iterable", typeName(v))
}

func (r *renderer) eval(e expr) (Value, error) {
	switch e := e.(type) {
	case *literal:
		return e.v, nil
	case *nameExpr:
		if r.constEval {
			return nil, errNotConst
		}
		return r.lookup(e.name), nil
	case *listExpr:
		items := make([]Value, len(e.items))
		for i, it := range e.items {
			v, err := r.eval(it)
			if err != nil {
				return nil, err
			}
			items[i] = v
		}
		if e.tuple {
			return Tuple(items), nil
		}
		return items, nil
	case *dictExpr:
		d := NewDict()
		for i := range e.keys {
			k, err := r.eval(e.keys[i])
			if err != nil {
				return nil, err
			}
			ks, ok := k.(string)
			if !ok {
				return nil, errorf("dict keys other than strings are not supported")
			}
			v, err := r.eval(e.vals[i])
			if err != nil {
				return nil, err
			}
			d.Set(ks, v)
		}
		return d, nil
	case *attrExpr:
		obj, err := r.eval(e.obj)
		if err != nil {
			return nil, err
		}
		return getAttr(obj, e.name)
	case *indexExpr:
		obj, err := r.eval(e.obj)
		if err != nil {
			return nil, err
		}
		key, err := r.eval(e.key)
		if err != nil {
			return nil, err
		}
		return getItem(obj, key)
	case *sliceExpr:
		return r.slice(e)
	case *callExpr:
		if r.constEval {
			return nil, errNotConst
		}
		return r.call(e)
	case *filterExpr:
		return r.filter(e)
	case *testExpr:
		return r.test(e)
	case *unaryExpr:
		x, err := r.eval(e.x)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "not":
			return !truthy(x), nil
		case "-":
			switch n := x.(type) {
			case int64:
				return -n, nil
			case float64:
				return -n, nil
			case bool:
				return -b2i(n), nil
			}
		case "+":
			switch n := x.(type) {
			case int64, float64:
				return n, nil
			case bool:
				return b2i(n), nil
			}
		}
		return nil, errorf("bad operand type for unary %s: '%s'", e.op, typeName(x))
	case *binaryExpr:
		return r.binary(e)
	case *compareExpr:
		return r.compareChain(e)
	case *condExpr:
		c, err := r.eval(e.cond)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return r.eval(e.yes)
		}
		if e.no == nil {
			if r.constEval {
				return nil, errNotConst // jinja2 leaves this undefined to the render
			}
			return Undefined{Name: "conditional expression"}, nil
		}
		return r.eval(e.no)
	}
	return nil, errorf("unknown expression %T", e)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (r *renderer) slice(e *sliceExpr) (Value, error) {
	obj, err := r.eval(e.obj)
	if err != nil {
		return nil, err
	}
	if u, ok := obj.(Undefined); ok {
		return nil, errorf("'%s' is undefined", u.Name)
	}
	var bounds [3]*int64
	for i, x := range []expr{e.start, e.stop, e.step} {
		if x == nil {
			continue
		}
		v, err := r.eval(x)
		if err != nil {
			return nil, err
		}
		switch n := v.(type) {
		case nil:
		case int64:
			bounds[i] = &n
		case bool:
			k := b2i(n)
			bounds[i] = &k
		default:
			return r.sliceFailure(errorf("slice indices must be integers or None or have an __index__ method"))
		}
	}
	switch x := obj.(type) {
	case string:
		runes := []rune(x)
		idx, err := sliceIndexes(len(runes), bounds)
		if err != nil {
			return nil, err
		}
		out := make([]rune, 0, len(idx))
		for _, i := range idx {
			out = append(out, runes[i])
		}
		return string(out), nil
	case []Value, Tuple:
		items, _ := asList(x)
		idx, err := sliceIndexes(len(items), bounds)
		if err != nil {
			return nil, err
		}
		out := make([]Value, 0, len(idx))
		for _, i := range idx {
			out = append(out, items[i])
		}
		if _, ok := x.(Tuple); ok {
			return Tuple(out), nil
		}
		return out, nil
	case Undefined:
		return nil, errorf("'%s' is undefined", x.Name)
	}
	if _, ok := obj.(*Dict); ok {
		return r.sliceFailure(errorf("unhashable type: 'slice'"))
	}
	return r.sliceFailure(errorf("'%s' object is not subscriptable", typeName(obj)))
}

// sliceFailure is a slice's TypeError: compiled templates slice with
// Python's own [a:b] and raise it, but a constant folded at compile time
// goes through jinja2's getitem, which makes it undefined.
func (r *renderer) sliceFailure(err error) (Value, error) {
	if r.constEval {
		return Undefined{Name: "slice"}, nil
	}
	return nil, err
}

// sliceIndexes is Python's slice.indices applied to a length.
func sliceIndexes(n int, b [3]*int64) ([]int, error) {
	step := int64(1)
	if b[2] != nil {
		step = *b[2]
	}
	if step == 0 {
		return nil, errorf("slice step cannot be zero")
	}
	clamp := func(p *int64, def int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += int64(n)
			if v < 0 {
				if step < 0 {
					return -1
				}
				return 0
			}
		}
		if v >= int64(n) {
			if step < 0 {
				return int64(n) - 1
			}
			return int64(n)
		}
		return v
	}
	var start, stop int64
	if step > 0 {
		start, stop = clamp(b[0], 0), clamp(b[1], int64(n))
	} else {
		start, stop = clamp(b[0], int64(n)-1), clamp(b[1], -1)
		if b[1] == nil {
			stop = -1
		}
	}
	var out []int
	for i := start; (step > 0 && i < stop) || (step < 0 && i > stop); i += step {
		out = append(out, int(i))
	}
	return out, nil
}

func (r *renderer) call(e *callExpr) (Value, error) {
	fn, err := r.eval(e.fn)
	if err != nil {
		return nil, err
	}
	args, kwargs, err := r.args(e.args, e.kwargs)
	if err != nil {
		return nil, err
	}
	switch f := fn.(type) {
	case Func:
		return f(args, kwargs)
	case Undefined:
		return nil, errorf("'%s' is undefined", f.Name)
	}
	return nil, errorf("'%s' object is not callable", typeName(fn))
}

func (r *renderer) args(exprs []expr, kws []kwarg) ([]Value, *Dict, error) {
	args := make([]Value, len(exprs))
	for i, a := range exprs {
		v, err := r.eval(a)
		if err != nil {
			return nil, nil, err
		}
		args[i] = v
	}
	var kwargs *Dict
	if len(kws) > 0 {
		kwargs = NewDict()
		for _, k := range kws {
			v, err := r.eval(k.val)
			if err != nil {
				return nil, nil, err
			}
			kwargs.Set(k.name, v)
		}
	}
	return args, kwargs, nil
}

func (r *renderer) binary(e *binaryExpr) (Value, error) {
	l, err := r.eval(e.l)
	if err != nil {
		return nil, err
	}
	switch e.op {
	case "and":
		if !truthy(l) {
			return l, nil
		}
		return r.eval(e.r)
	case "or":
		if truthy(l) {
			return l, nil
		}
		return r.eval(e.r)
	}
	rv, err := r.eval(e.r)
	if err != nil {
		return nil, err
	}
	if e.op == "**" && !r.constEval {
		if p, ok, err := r.negConstPow(e, l, rv); ok {
			return p, err
		}
	}
	return binaryOp(e.op, l, rv)
}

// errNotConst stops a compile-time evaluation (fold) at a name or a
// call: the expression is evaluated when rendering instead.
var errNotConst = errors.New("jinja: not constant")

// fold evaluates e as jinja2's optimizer does at compile time (as_const):
// lazily, left to right, failing at the first name or call, at a
// conditional without else whose test is false, or at any error. ok is
// false when e cannot be folded. jinja2 prints a folded output as is, and
// folds subexpressions whose value has a safe repr; the two places where
// a folded value behaves differently from a rendered one are a failing
// subscript (undefined, not a TypeError; sliceFailure) and a negative
// base of ** (negConstPow).
func (r *renderer) fold(e expr) (Value, bool) {
	saved := r.constEval
	r.constEval = true
	v, err := r.eval(e)
	r.constEval = saved
	return v, err == nil
}

// negConstPow applies jinja2's folding to c ** x where c folds to a
// negative number and x does not fold: the compiled code writes c's repr
// unparenthesised, and Python reads -1 ** x as -(1 ** x). ok is false
// when the quirk does not apply.
func (r *renderer) negConstPow(e *binaryExpr, l, rv Value) (Value, bool, error) {
	if _, isBool := l.(bool); isBool {
		return nil, false, nil
	}
	if _, f, _, isNum := asNumber(l); !isNum || f >= 0 {
		return nil, false, nil
	}
	if _, ok := r.fold(e.l); !ok {
		return nil, false, nil
	}
	if rc, ok := r.fold(e.r); ok && safeRepr(rc) {
		return nil, false, nil
	}
	p, err := binaryOp("**", negate(l), rv)
	if err != nil {
		return nil, true, err
	}
	return negate(p), true, nil
}

// safeRepr is jinja2's has_safe_repr: values the optimizer folds into
// the compiled code.
func safeRepr(v Value) bool {
	switch x := v.(type) {
	case nil, bool, int64, float64, string, BigInt:
		return true
	case []Value:
		return allSafe(x)
	case Tuple:
		return allSafe(x)
	case *Dict:
		for _, k := range x.keys {
			if !safeRepr(x.m[k]) {
				return false
			}
		}
		return true
	}
	return false
}

func allSafe(xs []Value) bool {
	for _, x := range xs {
		if !safeRepr(x) {
			return false
		}
	}
	return true
}

// negate is -v for an int or float.
func negate(v Value) Value {
	switch n := v.(type) {
	case int64:
		return -n
	case float64:
		return -n
	}
	return v
}

// compareChain evaluates a op0 b op1 c ... as Python does: each operand
// once, left to right, the first false link's result (or the last one's).
func (r *renderer) compareChain(e *compareExpr) (Value, error) {
	l, err := r.eval(e.first)
	if err != nil {
		return nil, err
	}
	var res Value
	for i, op := range e.ops {
		rv, err := r.eval(e.rest[i])
		if err != nil {
			return nil, err
		}
		if res, err = binaryOp(op, l, rv); err != nil {
			return nil, err
		}
		if !truthy(res) {
			return res, nil
		}
		l = rv
	}
	return res, nil
}

// binaryOp applies a Python operator.
func binaryOp(op string, l, r Value) (Value, error) {
	switch op {
	case "==":
		return equal(l, r), nil
	case "!=":
		return !equal(l, r), nil
	case "<", "<=", ">", ">=":
		c, err := compare(l, r)
		if err != nil {
			return nil, errorf("'%s' not supported between instances of '%s' and '%s'", op, typeName(l), typeName(r))
		}
		switch op {
		case "<":
			return c < 0, nil
		case "<=":
			return c <= 0, nil
		case ">":
			return c > 0, nil
		}
		return c >= 0, nil
	case "in", "not in":
		in, err := contains(r, l)
		if err != nil {
			return nil, err
		}
		return in != (op == "not in"), nil
	case "~":
		return str(l) + str(r), nil
	}
	if u, ok := l.(Undefined); ok {
		return nil, errorf("'%s' is undefined", u.Name)
	}
	if u, ok := r.(Undefined); ok {
		return nil, errorf("'%s' is undefined", u.Name)
	}
	switch op {
	case "+":
		switch a := l.(type) {
		case string:
			if b, ok := r.(string); ok {
				return a + b, nil
			}
		case []Value:
			if b, ok := r.([]Value); ok {
				return append(append([]Value(nil), a...), b...), nil
			}
		case Tuple:
			if b, ok := r.(Tuple); ok {
				return append(append(Tuple(nil), a...), b...), nil
			}
		}
	case "*":
		s, n, ok := strTimesInt(l, r)
		if !ok {
			s, n, ok = strTimesInt(r, l)
		}
		if ok {
			if n > 0 && int64(len(s))*n > maxOutput {
				return nil, errorf("string repetition over %d bytes", maxOutput)
			}
			return strings.Repeat(s, int(max(n, 0))), nil
		}
		if v, ok, err := seqTimesInt(l, r); ok {
			return v, err
		} else if v, ok, err := seqTimesInt(r, l); ok {
			return v, err
		}
	case "%":
		if f, ok := l.(string); ok {
			return printf(f, r)
		}
	}
	return arith(op, l, r)
}

// strTimesInt matches str * int.
func strTimesInt(a, b Value) (string, int64, bool) {
	s, ok := a.(string)
	if !ok {
		return "", 0, false
	}
	n, ok := asInt(b)
	return s, n, ok
}

// seqTimesInt is list * int or tuple * int; ok is false for other types.
func seqTimesInt(a, b Value) (v Value, ok bool, err error) {
	items, ok := asList(a)
	if !ok {
		return nil, false, nil
	}
	n, ok := asInt(b)
	if !ok {
		return nil, false, nil
	}
	n = max(n, 0)
	if int64(len(items))*n > maxOutput {
		return nil, true, errorf("sequence repetition over %d items", maxOutput)
	}
	out := make([]Value, 0, int64(len(items))*n)
	for range n {
		out = append(out, items...)
	}
	if _, isTuple := a.(Tuple); isTuple {
		return Tuple(out), true, nil
	}
	return out, true, nil
}

// asInt reads an int (or bool) operand.
func asInt(v Value) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case bool:
		return b2i(n), true
	}
	return 0, false
}

// asNumber reads a numeric operand; isFloat says whether it is a float.
func asNumber(v Value) (i int64, f float64, isFloat, ok bool) {
	switch n := v.(type) {
	case int64:
		return n, float64(n), false, true
	case bool:
		return b2i(n), float64(b2i(n)), false, true
	case float64:
		return 0, n, true, true
	}
	return 0, 0, false, false
}

func arith(op string, l, r Value) (Value, error) {
	li, lf, lFloat, ok1 := asNumber(l)
	ri, rf, rFloat, ok2 := asNumber(r)
	if !ok1 || !ok2 {
		return nil, errorf("unsupported operand type(s) for %s: '%s' and '%s'", op, typeName(l), typeName(r))
	}
	if lFloat || rFloat || op == "/" {
		switch op {
		case "+":
			return lf + rf, nil
		case "-":
			return lf - rf, nil
		case "*":
			return lf * rf, nil
		case "/":
			if rf == 0 {
				return nil, errorf("division by zero")
			}
			return lf / rf, nil
		case "//":
			if rf == 0 {
				return nil, errorf("float floor division by zero")
			}
			return math.Floor(lf / rf), nil
		case "%":
			if rf == 0 {
				return nil, errorf("float modulo")
			}
			m := math.Mod(lf, rf)
			if m != 0 && (m < 0) != (rf < 0) {
				m += rf
			}
			return m, nil
		case "**":
			if lf < 0 && rf != math.Trunc(rf) {
				return nil, errorf("complex numbers are not supported") // Python returns a complex
			}
			return math.Pow(lf, rf), nil
		}
	}
	switch op {
	case "+":
		return li + ri, nil
	case "-":
		return li - ri, nil
	case "*":
		return li * ri, nil
	case "//", "%":
		if ri == 0 {
			return nil, errorf("integer division or modulo by zero")
		}
		q, m := li/ri, li%ri
		if m != 0 && (m < 0) != (ri < 0) {
			q--
			m += ri
		}
		if op == "//" {
			return q, nil
		}
		return m, nil
	case "**":
		if ri < 0 {
			return math.Pow(lf, rf), nil
		}
		out := int64(1)
		for range ri {
			if next := out * li; li != 0 && next/li != out {
				return nil, errorf("integer power overflows int64")
			} else {
				out = next
			}
			if out == 0 || out == 1 {
				if li == 1 || li == 0 {
					break
				}
			}
		}
		return out, nil
	}
	return nil, errorf("unknown operator %s", op)
}

// equal is Python's ==.
func equal(a, b Value) bool {
	if ai, af, aF, ok := asNumber(a); ok {
		if bi, bf, bF, ok := asNumber(b); ok {
			if aF || bF {
				return af == bf
			}
			return ai == bi
		}
		return false
	}
	switch x := a.(type) {
	case nil:
		return b == nil
	case Undefined:
		_, ok := b.(Undefined)
		return ok
	case string:
		y, ok := b.(string)
		return ok && x == y
	case []Value:
		y, ok := b.([]Value)
		return ok && equalLists(x, y)
	case Tuple:
		y, ok := b.(Tuple)
		return ok && equalLists(x, y)
	case *Dict:
		y, ok := b.(*Dict)
		if !ok || x.Len() != y.Len() {
			return false
		}
		for _, k := range x.keys {
			v, ok := y.m[k]
			if !ok || !equal(x.m[k], v) {
				return false
			}
		}
		return true
	case *Namespace:
		return a == b
	case BigInt:
		y, ok := b.(BigInt)
		return ok && x == y
	}
	return false
}

func equalLists(a, b []Value) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// compare orders numbers, strings and lists as Python does.
func compare(a, b Value) (int, error) {
	if _, af, _, ok := asNumber(a); ok {
		if _, bf, _, ok := asNumber(b); ok {
			switch {
			case af < bf:
				return -1, nil
			case af > bf:
				return 1, nil
			}
			return 0, nil
		}
	}
	if x, ok := a.(string); ok {
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), nil
		}
	}
	xl, ok1 := asList(a)
	yl, ok2 := asList(b)
	_, ta := a.(Tuple)
	_, tb := b.(Tuple)
	if ok1 && ok2 && ta == tb {
		for i := 0; i < len(xl) && i < len(yl); i++ {
			if equal(xl[i], yl[i]) {
				continue
			}
			return compare(xl[i], yl[i])
		}
		return len(xl) - len(yl), nil
	}
	return 0, errorf("not comparable")
}

// contains is Python's "needle in hay".
func contains(hay, needle Value) (bool, error) {
	switch h := hay.(type) {
	case string:
		n, ok := needle.(string)
		if !ok {
			return false, errorf("'in <string>' requires string as left operand, not %s", typeName(needle))
		}
		return strings.Contains(h, n), nil
	case []Value, Tuple:
		items, _ := asList(h)
		for _, it := range items {
			if equal(it, needle) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		k, ok := needle.(string)
		if !ok {
			switch needle.(type) {
			case []Value, *Dict, *Namespace:
				return false, errorf("unhashable type: '%s'", typeName(needle))
			}
			return false, nil
		}
		_, in := h.m[k]
		return in, nil
	case Undefined:
		return false, nil
	}
	return false, errorf("argument of type '%s' is not iterable", typeName(hay))
}
