package jinja

import "fmt"

// Template is a parsed template. Safe for concurrent Render calls.
type Template struct {
	body []node
}

// Parse parses a chat template.
func Parse(src string) (*Template, error) {
	chunks, err := lex(src)
	if err != nil {
		return nil, err
	}
	p := &stmtParser{chunks: chunks}
	body, end, err := p.block()
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, &Error{Pos: p.lastPos, Msg: "unexpected {% " + end + " %}"}
	}
	return &Template{body: body}, nil
}

// stmtParser walks chunks into nodes.
type stmtParser struct {
	chunks  []chunk
	i       int
	lastPos int
	endToks *exprParser // the tokens of the end tag block() stopped at
}

// block parses nodes until an end tag it does not own; it returns that
// tag's first word ("" at the end of the template) with p.i past it and the
// tag's tokens in p.endToks.
func (p *stmtParser) block() ([]node, string, error) {
	var out []node
	for p.i < len(p.chunks) {
		c := p.chunks[p.i]
		p.i++
		p.lastPos = c.pos
		switch c.kind {
		case chunkText:
			out = append(out, &textNode{s: c.src})
		case chunkExpr:
			toks, err := tokenize(c.src, c.pos)
			if err != nil {
				return nil, "", err
			}
			ep := &exprParser{toks: toks}
			e, err := ep.tuple(true)
			if err != nil {
				return nil, "", err
			}
			if err := ep.expectEOF(); err != nil {
				return nil, "", err
			}
			out = append(out, &outputNode{e: e})
		case chunkStmt:
			toks, err := tokenize(c.src, c.pos)
			if err != nil {
				return nil, "", err
			}
			if toks[0].kind != tokName {
				return nil, "", &Error{Pos: c.pos, Msg: "statement without a keyword"}
			}
			ep := &exprParser{toks: toks, i: 1}
			switch kw := toks[0].s; kw {
			case "if":
				n, err := p.ifStmt(ep)
				if err != nil {
					return nil, "", err
				}
				out = append(out, n)
			case "for":
				n, err := p.forStmt(ep)
				if err != nil {
					return nil, "", err
				}
				out = append(out, n)
			case "set":
				n, err := p.setStmt(ep)
				if err != nil {
					return nil, "", err
				}
				out = append(out, n)
			case "macro":
				n, err := p.macroStmt(ep)
				if err != nil {
					return nil, "", err
				}
				out = append(out, n)
			case "generation":
				body, end, err := p.block()
				if err != nil {
					return nil, "", err
				}
				if end != "endgeneration" {
					return nil, "", &Error{Pos: c.pos, Msg: "generation without endgeneration"}
				}
				out = append(out, body...)
			case "break":
				out = append(out, &breakNode{})
			case "continue":
				out = append(out, &continueNode{})
			case "elif", "else", "endif", "endfor", "endset", "endmacro", "endgeneration":
				p.endToks = ep
				return out, kw, nil
			default:
				return nil, "", &Error{Pos: c.pos, Msg: fmt.Sprintf("unsupported statement %q", kw)}
			}
		}
	}
	return out, "", nil
}

func (p *stmtParser) ifStmt(ep *exprParser) (node, error) {
	n := &ifNode{}
	cond, err := ep.tuple(true)
	if err != nil {
		return nil, err
	}
	if err := ep.expectEOF(); err != nil {
		return nil, err
	}
	n.conds = append(n.conds, cond)
	for {
		body, end, err := p.block()
		if err != nil {
			return nil, err
		}
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			c, err := p.endToks.tuple(true)
			if err != nil {
				return nil, err
			}
			if err := p.endToks.expectEOF(); err != nil {
				return nil, err
			}
			n.conds = append(n.conds, c)
		case "else":
			body, end, err := p.block()
			if err != nil {
				return nil, err
			}
			if end != "endif" {
				return nil, &Error{Pos: p.lastPos, Msg: "else without endif"}
			}
			n.bodies = append(n.bodies, body)
			return n, nil
		case "endif":
			return n, nil
		default:
			return nil, &Error{Pos: p.lastPos, Msg: "if without endif"}
		}
	}
}

func (p *stmtParser) forStmt(ep *exprParser) (node, error) {
	n := &forNode{p: ep.peek().pos}
	for {
		t := ep.next()
		if t.kind != tokName {
			return nil, &Error{Pos: t.pos, Msg: "for: want a loop variable"}
		}
		n.targets = append(n.targets, t.s)
		if !ep.acceptOp(",") {
			break
		}
	}
	if !ep.acceptName("in") {
		return nil, &Error{Pos: ep.peek().pos, Msg: "for: want 'in'"}
	}
	iter, err := ep.tupleNoCond()
	if err != nil {
		return nil, err
	}
	n.iter = iter
	if ep.acceptName("if") {
		if n.filter, err = ep.expression(false); err != nil {
			return nil, err
		}
	}
	if ep.acceptName("recursive") {
		return nil, &Error{Pos: n.p, Msg: "recursive loops are not supported"}
	}
	if err := ep.expectEOF(); err != nil {
		return nil, err
	}
	body, end, err := p.block()
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if n.orElse, end, err = p.block(); err != nil {
			return nil, err
		}
	}
	if end != "endfor" {
		return nil, &Error{Pos: n.p, Msg: "for without endfor"}
	}
	return n, nil
}

func (p *stmtParser) setStmt(ep *exprParser) (node, error) {
	n := &setNode{p: ep.peek().pos}
	t := ep.next()
	if t.kind != tokName {
		return nil, &Error{Pos: t.pos, Msg: "set: want a name"}
	}
	n.targets = []string{t.s}
	if ep.acceptOp(".") {
		a := ep.next()
		if a.kind != tokName {
			return nil, &Error{Pos: a.pos, Msg: "set: want an attribute name"}
		}
		n.attr = a.s
	} else {
		for ep.acceptOp(",") {
			t := ep.next()
			if t.kind != tokName {
				return nil, &Error{Pos: t.pos, Msg: "set: want a name"}
			}
			n.targets = append(n.targets, t.s)
		}
	}
	if ep.acceptOp("=") {
		v, err := ep.tuple(true)
		if err != nil {
			return nil, err
		}
		n.val = v
		return n, ep.expectEOF()
	}
	if ep.peek().kind == tokOp && ep.peek().s == "|" {
		return nil, &Error{Pos: n.p, Msg: "filtered block set is not supported"}
	}
	if err := ep.expectEOF(); err != nil {
		return nil, err
	}
	if len(n.targets) != 1 || n.attr != "" {
		return nil, &Error{Pos: n.p, Msg: "block set takes one name"}
	}
	body, end, err := p.block()
	if err != nil {
		return nil, err
	}
	if end != "endset" {
		return nil, &Error{Pos: n.p, Msg: "set without endset"}
	}
	n.body = body
	return n, nil
}

func (p *stmtParser) macroStmt(ep *exprParser) (node, error) {
	t := ep.next()
	if t.kind != tokName {
		return nil, &Error{Pos: t.pos, Msg: "macro: want a name"}
	}
	n := &macroNode{name: t.s}
	if err := ep.expectOp("("); err != nil {
		return nil, err
	}
	for !ep.acceptOp(")") {
		a := ep.next()
		if a.kind != tokName {
			return nil, &Error{Pos: a.pos, Msg: "macro: want a parameter name"}
		}
		n.params = append(n.params, a.s)
		var def expr
		if ep.acceptOp("=") {
			var err error
			if def, err = ep.expression(true); err != nil {
				return nil, err
			}
		}
		n.defaults = append(n.defaults, def)
		if !ep.acceptOp(",") {
			if err := ep.expectOp(")"); err != nil {
				return nil, err
			}
			break
		}
	}
	if err := ep.expectEOF(); err != nil {
		return nil, err
	}
	body, end, err := p.block()
	if err != nil {
		return nil, err
	}
	if end != "endmacro" {
		return nil, &Error{Pos: t.pos, Msg: "macro without endmacro"}
	}
	n.body = body
	return n, nil
}

// exprParser parses one tag's tokens (jinja2's expression grammar).
type exprParser struct {
	toks []token
	i    int
}

func (ep *exprParser) peek() token { return ep.toks[ep.i] }
func (ep *exprParser) next() token {
	t := ep.toks[ep.i]
	if t.kind != tokEOF {
		ep.i++
	}
	return t
}
func (ep *exprParser) acceptOp(op string) bool {
	if t := ep.peek(); t.kind == tokOp && t.s == op {
		ep.i++
		return true
	}
	return false
}
func (ep *exprParser) acceptName(n string) bool {
	if t := ep.peek(); t.kind == tokName && t.s == n {
		ep.i++
		return true
	}
	return false
}
func (ep *exprParser) isName(n string) bool {
	t := ep.peek()
	return t.kind == tokName && t.s == n
}
func (ep *exprParser) expectOp(op string) error {
	if !ep.acceptOp(op) {
		return &Error{Pos: ep.peek().pos, Msg: fmt.Sprintf("want %q", op)}
	}
	return nil
}
func (ep *exprParser) expectEOF() error {
	if t := ep.peek(); t.kind != tokEOF {
		return &Error{Pos: t.pos, Msg: fmt.Sprintf("unexpected %q", tokText(t))}
	}
	return nil
}

func tokText(t token) string {
	switch t.kind {
	case tokInt:
		return fmt.Sprint(t.i)
	case tokFloat:
		return fmt.Sprint(t.f)
	case tokString:
		return "'" + t.s + "'"
	}
	return t.s
}

// tuple parses an expression or an implicit tuple (a, b).
func (ep *exprParser) tuple(withCond bool) (expr, error) {
	start := ep.peek().pos
	first, err := ep.expression(withCond)
	if err != nil {
		return nil, err
	}
	if !ep.acceptOp(",") {
		return first, nil
	}
	items := []expr{first}
	for ep.exprStarts() {
		e, err := ep.expression(withCond)
		if err != nil {
			return nil, err
		}
		items = append(items, e)
		if !ep.acceptOp(",") {
			break
		}
	}
	return &listExpr{p: start, items: items, tuple: true}, nil
}

func (ep *exprParser) tupleNoCond() (expr, error) { return ep.tuple(false) }

// exprStarts reports whether the next token can start an expression.
func (ep *exprParser) exprStarts() bool {
	t := ep.peek()
	switch t.kind {
	case tokEOF:
		return false
	case tokOp:
		return t.s == "(" || t.s == "[" || t.s == "{" || t.s == "-" || t.s == "+"
	case tokName:
		return t.s != "if" && t.s != "in" && t.s != "recursive"
	}
	return true
}

func (ep *exprParser) expression(withCond bool) (expr, error) {
	if !withCond {
		return ep.or()
	}
	e, err := ep.or()
	if err != nil {
		return nil, err
	}
	for ep.isName("if") {
		p := ep.next().pos
		cond, err := ep.or()
		if err != nil {
			return nil, err
		}
		var no expr
		if ep.acceptName("else") {
			if no, err = ep.expression(true); err != nil {
				return nil, err
			}
		}
		e = &condExpr{p: p, cond: cond, yes: e, no: no}
	}
	return e, nil
}

func (ep *exprParser) or() (expr, error) {
	l, err := ep.and()
	for err == nil && ep.isName("or") {
		p := ep.next().pos
		var r expr
		if r, err = ep.and(); err == nil {
			l = &binaryExpr{p: p, op: "or", l: l, r: r}
		}
	}
	return l, err
}

func (ep *exprParser) and() (expr, error) {
	l, err := ep.not()
	for err == nil && ep.isName("and") {
		p := ep.next().pos
		var r expr
		if r, err = ep.not(); err == nil {
			l = &binaryExpr{p: p, op: "and", l: l, r: r}
		}
	}
	return l, err
}

func (ep *exprParser) not() (expr, error) {
	if ep.isName("not") {
		p := ep.next().pos
		x, err := ep.not()
		if err != nil {
			return nil, err
		}
		return &unaryExpr{p: p, op: "not", x: x}, nil
	}
	return ep.compare()
}

var compareOps = map[string]bool{"==": true, "!=": true, "<": true, "<=": true, ">": true, ">=": true}

func (ep *exprParser) compare() (expr, error) {
	l, err := ep.math1()
	if err != nil {
		return nil, err
	}
	var c *compareExpr
	for {
		t := ep.peek()
		var op string
		switch {
		case t.kind == tokOp && compareOps[t.s]:
			op = t.s
			ep.next()
		case ep.isName("in"):
			op = "in"
			ep.next()
		case ep.isName("not") && ep.toks[ep.i+1].kind == tokName && ep.toks[ep.i+1].s == "in":
			op = "not in"
			ep.i += 2
		default:
			if c == nil {
				return l, nil
			}
			return c, nil
		}
		r, err := ep.math1()
		if err != nil {
			return nil, err
		}
		if c == nil {
			c = &compareExpr{p: t.pos, first: l}
		}
		c.ops, c.rest = append(c.ops, op), append(c.rest, r)
	}
}

// math1 parses + and -, which bind looser than ~ in Jinja (unlike
// Python): 1 + 2 ~ 3 is 1 + (2 ~ 3).
func (ep *exprParser) math1() (expr, error) {
	l, err := ep.concat()
	for err == nil && ep.peek().kind == tokOp && (ep.peek().s == "+" || ep.peek().s == "-") {
		t := ep.next()
		var r expr
		if r, err = ep.concat(); err == nil {
			l = &binaryExpr{p: t.pos, op: t.s, l: l, r: r}
		}
	}
	return l, err
}

func (ep *exprParser) concat() (expr, error) {
	l, err := ep.math2()
	for err == nil && ep.peek().kind == tokOp && ep.peek().s == "~" {
		p := ep.next().pos
		var r expr
		if r, err = ep.math2(); err == nil {
			l = &binaryExpr{p: p, op: "~", l: l, r: r}
		}
	}
	return l, err
}

func (ep *exprParser) math2() (expr, error) {
	l, err := ep.pow()
	for err == nil && ep.peek().kind == tokOp && (ep.peek().s == "*" || ep.peek().s == "/" || ep.peek().s == "//" || ep.peek().s == "%") {
		t := ep.next()
		var r expr
		if r, err = ep.pow(); err == nil {
			l = &binaryExpr{p: t.pos, op: t.s, l: l, r: r}
		}
	}
	return l, err
}

func (ep *exprParser) pow() (expr, error) {
	l, err := ep.unary(true)
	for err == nil && ep.peek().kind == tokOp && ep.peek().s == "**" {
		t := ep.next()
		var r expr
		if r, err = ep.unary(true); err == nil {
			l = &binaryExpr{p: t.pos, op: "**", l: l, r: r}
		}
	}
	return l, err
}

func (ep *exprParser) unary(withFilter bool) (expr, error) {
	t := ep.peek()
	var e expr
	var err error
	if t.kind == tokOp && (t.s == "-" || t.s == "+") {
		ep.next()
		x, err := ep.unary(false)
		if err != nil {
			return nil, err
		}
		e = &unaryExpr{p: t.pos, op: t.s, x: x}
	} else if e, err = ep.primary(); err != nil {
		return nil, err
	}
	if e, err = ep.postfix(e); err != nil {
		return nil, err
	}
	if withFilter {
		return ep.filters(e)
	}
	return e, nil
}

func (ep *exprParser) primary() (expr, error) {
	t := ep.next()
	switch t.kind {
	case tokName:
		switch t.s {
		case "true", "True":
			return &literal{p: t.pos, v: true}, nil
		case "false", "False":
			return &literal{p: t.pos, v: false}, nil
		case "none", "None":
			return &literal{p: t.pos, v: nil}, nil
		}
		return &nameExpr{p: t.pos, name: t.s}, nil
	case tokString:
		s := t.s
		for ep.peek().kind == tokString {
			s += ep.next().s
		}
		return &literal{p: t.pos, v: s}, nil
	case tokInt:
		return &literal{p: t.pos, v: t.i}, nil
	case tokFloat:
		return &literal{p: t.pos, v: t.f}, nil
	case tokOp:
		switch t.s {
		case "(":
			if ep.acceptOp(")") {
				return &listExpr{p: t.pos, tuple: true}, nil
			}
			e, err := ep.tuple(true)
			if err != nil {
				return nil, err
			}
			return e, ep.expectOp(")")
		case "[":
			l := &listExpr{p: t.pos}
			for !ep.acceptOp("]") {
				e, err := ep.expression(true)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, e)
				if !ep.acceptOp(",") {
					if err := ep.expectOp("]"); err != nil {
						return nil, err
					}
					break
				}
			}
			return l, nil
		case "{":
			d := &dictExpr{p: t.pos}
			for !ep.acceptOp("}") {
				k, err := ep.expression(true)
				if err != nil {
					return nil, err
				}
				if err := ep.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := ep.expression(true)
				if err != nil {
					return nil, err
				}
				d.keys, d.vals = append(d.keys, k), append(d.vals, v)
				if !ep.acceptOp(",") {
					if err := ep.expectOp("}"); err != nil {
						return nil, err
					}
					break
				}
			}
			return d, nil
		}
	}
	return nil, &Error{Pos: t.pos, Msg: fmt.Sprintf("unexpected %q", tokText(t))}
}

func (ep *exprParser) postfix(e expr) (expr, error) {
	for {
		t := ep.peek()
		if t.kind != tokOp {
			return e, nil
		}
		switch t.s {
		case ".":
			ep.next()
			a := ep.next()
			switch a.kind {
			case tokName:
				e = &attrExpr{p: a.pos, obj: e, name: a.s}
			case tokInt:
				e = &indexExpr{p: a.pos, obj: e, key: &literal{p: a.pos, v: a.i}}
			default:
				return nil, &Error{Pos: a.pos, Msg: "want an attribute name"}
			}
		case "[":
			ep.next()
			s, err := ep.subscript(e, t.pos)
			if err != nil {
				return nil, err
			}
			e = s
		case "(":
			ep.next()
			args, kwargs, err := ep.callArgs()
			if err != nil {
				return nil, err
			}
			e = &callExpr{p: t.pos, fn: e, args: args, kwargs: kwargs}
		default:
			return e, nil
		}
	}
}

// subscript parses [key] or [start:stop:step] after "[".
func (ep *exprParser) subscript(obj expr, p int) (expr, error) {
	var parts [3]expr
	n := 0
	slice := false
	for {
		if t := ep.peek(); !(t.kind == tokOp && (t.s == ":" || t.s == "]")) {
			e, err := ep.expression(true)
			if err != nil {
				return nil, err
			}
			parts[n] = e
		}
		if ep.acceptOp(":") {
			slice = true
			n++
			if n > 2 {
				return nil, &Error{Pos: p, Msg: "bad slice"}
			}
			continue
		}
		if err := ep.expectOp("]"); err != nil {
			return nil, err
		}
		break
	}
	if !slice {
		if parts[0] == nil {
			return nil, &Error{Pos: p, Msg: "empty subscript"}
		}
		return &indexExpr{p: p, obj: obj, key: parts[0]}, nil
	}
	return &sliceExpr{p: p, obj: obj, start: parts[0], stop: parts[1], step: parts[2]}, nil
}

// callArgs parses arguments after "(" through ")".
func (ep *exprParser) callArgs() ([]expr, []kwarg, error) {
	var args []expr
	var kwargs []kwarg
	for !ep.acceptOp(")") {
		if t := ep.peek(); t.kind == tokName && ep.toks[ep.i+1].kind == tokOp && ep.toks[ep.i+1].s == "=" {
			ep.i += 2
			v, err := ep.expression(true)
			if err != nil {
				return nil, nil, err
			}
			kwargs = append(kwargs, kwarg{name: t.s, val: v})
		} else {
			if t.kind == tokOp && (t.s == "*" || t.s == "**") {
				return nil, nil, &Error{Pos: t.pos, Msg: "*args and **kwargs are not supported"}
			}
			if len(kwargs) > 0 {
				return nil, nil, &Error{Pos: t.pos, Msg: "positional argument after keyword argument"}
			}
			v, err := ep.expression(true)
			if err != nil {
				return nil, nil, err
			}
			args = append(args, v)
		}
		if !ep.acceptOp(",") {
			if err := ep.expectOp(")"); err != nil {
				return nil, nil, err
			}
			break
		}
	}
	return args, kwargs, nil
}

// filters parses "| name(args)" and "is [not] test(args)" chains.
func (ep *exprParser) filters(e expr) (expr, error) {
	for {
		switch {
		case ep.acceptOp("|"):
			t := ep.next()
			if t.kind != tokName {
				return nil, &Error{Pos: t.pos, Msg: "want a filter name"}
			}
			name := t.s
			for ep.acceptOp(".") {
				name += "." + ep.next().s
			}
			f := &filterExpr{p: t.pos, name: name, obj: e}
			if ep.acceptOp("(") {
				var err error
				if f.args, f.kwargs, err = ep.callArgs(); err != nil {
					return nil, err
				}
			}
			e = f
		case ep.isName("is"):
			ep.next()
			neg := ep.acceptName("not")
			t := ep.next()
			if t.kind != tokName {
				return nil, &Error{Pos: t.pos, Msg: "want a test name"}
			}
			te := &testExpr{p: t.pos, name: t.s, obj: e, negate: neg}
			if ep.acceptOp("(") {
				args, kwargs, err := ep.callArgs()
				if err != nil {
					return nil, err
				}
				if len(kwargs) > 0 {
					return nil, &Error{Pos: t.pos, Msg: "keyword arguments to tests are not supported"}
				}
				te.args = args
			} else if ep.exprStarts() && !ep.isName("and") && !ep.isName("or") && !ep.isName("else") && !ep.isName("is") && !ep.isName("not") {
				a, err := ep.primary()
				if err != nil {
					return nil, err
				}
				if a, err = ep.postfix(a); err != nil {
					return nil, err
				}
				te.args = []expr{a}
			}
			e = te
		default:
			return e, nil
		}
	}
}
