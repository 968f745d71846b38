package jinja

// Expression nodes.
type expr interface{ pos() int }

type (
	literal struct {
		p int
		v Value
	}
	nameExpr struct {
		p    int
		name string
	}
	listExpr struct {
		p     int
		items []expr
		tuple bool
	}
	dictExpr struct {
		p          int
		keys, vals []expr
	}
	attrExpr struct {
		p    int
		obj  expr
		name string
	}
	indexExpr struct {
		p        int
		obj, key expr
	}
	sliceExpr struct {
		p                 int
		obj               expr
		start, stop, step expr // nil when absent
	}
	callExpr struct {
		p      int
		fn     expr
		args   []expr
		kwargs []kwarg
	}
	filterExpr struct {
		p      int
		name   string
		obj    expr
		args   []expr
		kwargs []kwarg
	}
	testExpr struct {
		p      int
		name   string
		obj    expr
		args   []expr
		negate bool
	}
	unaryExpr struct {
		p  int
		op string // "-", "+", "not"
		x  expr
	}
	binaryExpr struct {
		p    int
		op   string
		l, r expr
	}
	// compareExpr is a comparison chain, a op0 b op1 c ...: Python
	// evaluates it as (a op0 b) and (b op1 c) ..., each operand once,
	// stopping at the first false link.
	compareExpr struct {
		p     int
		first expr
		ops   []string // "==", "!=", "<", "<=", ">", ">=", "in", "not in"
		rest  []expr   // len(rest) == len(ops)
	}
	condExpr struct {
		p             int
		cond, yes, no expr // no may be nil
	}
)

type kwarg struct {
	name string
	val  expr
}

func (e *literal) pos() int     { return e.p }
func (e *nameExpr) pos() int    { return e.p }
func (e *listExpr) pos() int    { return e.p }
func (e *dictExpr) pos() int    { return e.p }
func (e *attrExpr) pos() int    { return e.p }
func (e *indexExpr) pos() int   { return e.p }
func (e *sliceExpr) pos() int   { return e.p }
func (e *callExpr) pos() int    { return e.p }
func (e *filterExpr) pos() int  { return e.p }
func (e *testExpr) pos() int    { return e.p }
func (e *unaryExpr) pos() int   { return e.p }
func (e *binaryExpr) pos() int  { return e.p }
func (e *compareExpr) pos() int { return e.p }
func (e *condExpr) pos() int    { return e.p }

// Statement nodes.
type node interface{}

type (
	textNode   struct{ s string }
	outputNode struct{ e expr }
	ifNode     struct {
		conds  []expr
		bodies [][]node // len(bodies) == len(conds) or +1 for else
	}
	forNode struct {
		p       int
		targets []string // one name, or several to unpack
		iter    expr
		filter  expr // the "if" clause, nil when absent
		body    []node
		orElse  []node
	}
	setNode struct {
		p       int
		targets []string // names; or one "ns.attr"
		attr    string   // set for "ns.attr" targets
		val     expr     // nil for a block set
		body    []node
	}
	macroNode struct {
		name     string
		params   []string
		defaults []expr // aligned to params; nil when required
		body     []node
	}
	breakNode    struct{}
	continueNode struct{}
)
