package ladder

import (
	"strconv"
	"strings"
)

// Class is a request's priority class: which parked request leaves first
// when admission caps are reached, and whether the request may park at all.
// It follows the Gateway API Inference Extension's objective priorities
// (an integer, higher is more important, negative is sheddable), folded
// into three bands so metric labels and queues stay bounded:
//
//	priority > 0   ClassCritical   leaves the queue first
//	priority = 0   ClassStandard   the default
//	priority < 0   ClassSheddable  refused at once (429) instead of parking
//
// The zero value is ClassStandard.
type Class int8

// Classes, lowest first.
const (
	// ClassSheddable is refused with 429 when it would have to park
	// (Sheddable). Defined here once: every policy that sheds by class
	// (admission, a TTFT objective) asks Class.Sheddable.
	ClassSheddable Class = -1
	// ClassStandard is the default class.
	ClassStandard Class = 0
	// ClassCritical leaves the admission queue before every other class.
	ClassCritical Class = 1
)

// NumClasses is the number of classes; ClassIndex maps each to
// 0..NumClasses-1, highest priority first.
const NumClasses = 3

// Sheddable reports whether a request of class c is refused rather than
// parked when no endpoint has room for it.
func (c Class) Sheddable() bool { return c < ClassStandard }

// Index is c's position among the classes, highest priority first:
// critical 0, standard 1, sheddable 2. Out-of-range values clamp.
func (c Class) Index() int {
	switch {
	case c >= ClassCritical:
		return 0
	case c == ClassStandard:
		return 1
	}
	return 2
}

// ClassAt is the class at Index i (the inverse of Index).
func ClassAt(i int) Class { return ClassCritical - Class(i) }

var classNames = [NumClasses]string{"critical", "standard", "sheddable"}

// String returns "critical", "standard" or "sheddable".
func (c Class) String() string { return classNames[c.Index()] }

// ClassOfPriority folds a GIE-style integer priority into its class.
func ClassOfPriority(p int64) Class {
	switch {
	case p > 0:
		return ClassCritical
	case p < 0:
		return ClassSheddable
	}
	return ClassStandard
}

// ParseClass reads a class from a header value: a class name (any case,
// "default" and "batch" as aliases of standard and sheddable), or an
// integer priority (ClassOfPriority). ok is false for anything else.
func ParseClass(s string) (c Class, ok bool) {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "critical", "high":
		return ClassCritical, true
	case "standard", "default", "normal":
		return ClassStandard, true
	case "sheddable", "batch", "low":
		return ClassSheddable, true
	}
	if p, err := strconv.ParseInt(s, 10, 64); err == nil {
		return ClassOfPriority(p), true
	}
	return ClassStandard, false
}

// EnginePriority is the value of vLLM's "priority" request field for class
// c, for engines started with --scheduling-policy priority (vLLM serves a
// lower value first): critical -1, standard 0, sheddable 1.
func (c Class) EnginePriority() int { return -int(min(max(c, ClassSheddable), ClassCritical)) }

// Min returns the lower of c and o: a key's class caps what a request may
// ask for.
func (c Class) Min(o Class) Class { return min(c, o) }
