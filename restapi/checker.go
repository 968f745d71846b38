package restapi

import (
	"fmt"
	"slices"
	"strings"
)

// checker accumulates problems; its helpers word schema problems as go-openapi
// does ("<field> in body should be ...").
type checker struct {
	problems []Problem
}

func (c *checker) add(p Problem) { c.problems = append(c.problems, p) }

func (c *checker) semantic(field, format string, args ...any) {
	c.add(semanticProblem(field, format, args...))
}

// required reports a missing required key.
func (c *checker) required(field string, present bool) bool {
	if !present {
		c.add(schemaProblem(field, CodeRequired, "is required"))
	}
	return present
}

// between reports v outside [lo, hi].
func (c *checker) between(field string, v, lo, hi int64) bool {
	switch {
	case v < lo:
		c.add(schemaProblem(field, CodeMin, "should be greater than or equal to %d, got %d", lo, v))
		return false
	case v > hi:
		c.add(schemaProblem(field, CodeMax, "should be less than or equal to %d, got %d", hi, v))
		return false
	}
	return true
}

// atLeast reports v below lo.
func (c *checker) atLeast(field string, v, lo int64) bool {
	if v < lo {
		c.add(schemaProblem(field, CodeMin, "should be greater than or equal to %d, got %d", lo, v))
		return false
	}
	return true
}

// betweenOrZero is between for fields where 0 means "absent, use the default".
func (c *checker) betweenOrZero(field string, v, lo, hi int64) bool {
	if v == 0 {
		return true
	}
	return c.between(field, v, lo, hi)
}

// oneOf reports an integer outside its enumeration.
func (c *checker) oneOf(field string, v int64, allowed ...int64) bool {
	if slices.Contains(allowed, v) {
		return true
	}
	c.add(schemaProblem(field, CodeEnum, "should be one of %v, got %d", allowed, v))
	return false
}

// oneOfString reports a non-empty string outside its enumeration
// (case-sensitive, as LoxiLB's generated validators are).
func (c *checker) oneOfString(field, v string, allowed ...string) bool {
	if v == "" || slices.Contains(allowed, v) {
		return true
	}
	c.add(schemaProblem(field, CodeEnum, "should be one of %s, got %q", enumList(allowed), v))
	return false
}

func enumList(allowed []string) string {
	return fmt.Sprintf("[%s]", strings.Join(allowed, " "))
}

// Bounds of the integer types LoxiLB stores fields in.
const (
	maxUint8  = 1<<8 - 1
	maxUint16 = 1<<16 - 1
	maxUint32 = 1<<32 - 1
	maxInt32  = 1<<31 - 1
)
