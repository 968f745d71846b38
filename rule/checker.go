package rule

import (
	"fmt"
	"slices"
	"strings"
)

// Checker accumulates problems; its helpers word schema problems as go-openapi
// does ("<field> in body should be ..."). The zero value is ready.
type Checker struct {
	problems []Problem
}

// Problems returns what was found, in order.
func (c *Checker) Problems() []Problem { return c.problems }

// Err returns nil when nothing was found, else a *ValidationError.
func (c *Checker) Err() error { return ProblemsErr(c.problems) }

func (c *Checker) Add(p Problem) { c.problems = append(c.problems, p) }

func (c *Checker) Semantic(field, format string, args ...any) {
	c.Add(SemanticProblem(field, format, args...))
}

// required reports a missing required key.
func (c *Checker) Required(field string, present bool) bool {
	if !present {
		c.Add(SchemaProblem(field, CodeRequired, "is required"))
	}
	return present
}

// between reports v outside [lo, hi].
func (c *Checker) Between(field string, v, lo, hi int64) bool {
	switch {
	case v < lo:
		c.Add(SchemaProblem(field, CodeMin, "should be greater than or equal to %d, got %d", lo, v))
		return false
	case v > hi:
		c.Add(SchemaProblem(field, CodeMax, "should be less than or equal to %d, got %d", hi, v))
		return false
	}
	return true
}

// atLeast reports v below lo.
func (c *Checker) AtLeast(field string, v, lo int64) bool {
	if v < lo {
		c.Add(SchemaProblem(field, CodeMin, "should be greater than or equal to %d, got %d", lo, v))
		return false
	}
	return true
}

// betweenOrZero is between for fields where 0 means "absent, use the default".
func (c *Checker) BetweenOrZero(field string, v, lo, hi int64) bool {
	if v == 0 {
		return true
	}
	return c.Between(field, v, lo, hi)
}

// oneOf reports an integer outside its enumeration.
func (c *Checker) OneOf(field string, v int64, allowed ...int64) bool {
	if slices.Contains(allowed, v) {
		return true
	}
	c.Add(SchemaProblem(field, CodeEnum, "should be one of %v, got %d", allowed, v))
	return false
}

// oneOfString reports a non-empty string outside its enumeration
// (case-sensitive, as LoxiLB's generated validators are).
func (c *Checker) OneOfString(field, v string, allowed ...string) bool {
	if v == "" || slices.Contains(allowed, v) {
		return true
	}
	c.Add(SchemaProblem(field, CodeEnum, "should be one of %s, got %q", EnumList(allowed), v))
	return false
}

func EnumList(allowed []string) string {
	return fmt.Sprintf("[%s]", strings.Join(allowed, " "))
}

// Bounds of the integer types LoxiLB stores fields in.
const (
	MaxUint8  = 1<<8 - 1
	MaxUint16 = 1<<16 - 1
	MaxUint32 = 1<<32 - 1
	MaxInt32  = 1<<31 - 1
)
