// Package promlabel escapes Prometheus label values. llb builds its series
// names as text (`name{service="…"}`) for the VictoriaMetrics registry,
// which panics on a name that does not parse; a rule key carries the
// rule's host, which the REST API takes as any string.
package promlabel

import "strings"

var escaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// Escape returns v as a label value of the Prometheus text format wants it
// between its quotes: backslash, double quote and line feed escaped,
// everything else as it is.
func Escape(v string) string { return escaper.Replace(v) }
