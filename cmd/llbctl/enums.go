package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/llbproject/llb/rule"
)

// named is one loxicmd name of a numeric enum value.
type named struct {
	name  string
	value int64
}

// Selector names (loxicmd's --select), first name per value is canonical.
var selectors = []named{
	{"rr", rule.SelRR},
	{"hash", rule.SelHash},
	{"priority", rule.SelPriority},
	{"persist", rule.SelPersist},
	{"lc", rule.SelLC},
	{"n2", rule.SelN2},
	{"n3", rule.SelN3},
	{"chwbl", rule.SelCHWBL},
	{"gpuaware", rule.SelGPUAware},
	{"wrr-hash", rule.SelWRRHash},
	{"chwbl-wrr", rule.SelWRRHash},
}

// LB mode names (loxicmd's --mode).
var modes = []named{
	{"default", rule.ModeDNAT},
	{"onearm", rule.ModeOneArm},
	{"fullnat", rule.ModeFullNAT},
	{"dsr", rule.ModeDSR},
	{"fullproxy", rule.ModeFullProxy},
	{"hostonearm", rule.ModeHostOneArm},
}

// Security names (loxicmd's --security).
var securities = []named{
	{"none", 0},
	{"https", 1},
	{"tls", 1},
	{"e2ehttps", 2},
	{"e2etls", 2},
}

// Endpoint role names (ep_role).
var roles = []named{
	{"none", rule.RoleNone},
	{"normal", rule.RoleNone},
	{"prefill", rule.RolePrefill},
	{"decode", rule.RoleDecode},
}

// lookupName maps a name (case-insensitive) to its value.
func lookupName(table []named, s string) (int64, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	for _, n := range table {
		if n.name == s {
			return n.value, true
		}
	}
	return 0, false
}

// nameOf returns the canonical name of v, or fallback+v when it has none.
func nameOf(table []named, v int64, fallback string) string {
	for _, n := range table {
		if n.value == v {
			return n.name
		}
	}
	return fallback + strconv.FormatInt(v, 10)
}

// names lists a table's names as "a|b|c".
func names(table []named) string {
	s := make([]string, len(table))
	for i, n := range table {
		s[i] = n.name
	}
	return strings.Join(s, "|")
}

// parseNamed reads a flag value by name.
func parseNamed(flag string, table []named, s string) (int64, error) {
	v, ok := lookupName(table, s)
	if !ok {
		return 0, usagef("--%s %q: want one of %s", flag, s, names(table))
	}
	return v, nil
}

// parseRole reads an endpoint role: a name, or 0/1/2 as loxicmd's --ep-role
// also accepts.
func parseRole(s string) (int64, error) {
	if v, ok := lookupName(roles, s); ok {
		return v, nil
	}
	switch strings.TrimSpace(s) {
	case "0", "1", "2":
		n, _ := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		return n, nil
	}
	return 0, fmt.Errorf("role %q: want prefill, decode or none", s)
}

// modeCell renders a rule's mode as loxicmd does ("fullproxy", with
// ":ppv2" and ":egress" suffixes).
func modeCell(sa *rule.ServiceArguments) string {
	s := nameOf(modes, sa.Mode, "mode")
	if sa.ProxyProtocolV2 {
		s += ":ppv2"
	}
	if sa.Egress {
		s += ":egress"
	}
	return s
}

// protoCell renders the protocol with loxicmd's security suffix.
func protoCell(sa *rule.ServiceArguments) string {
	switch sa.Security {
	case 1:
		return sa.Protocol + ":https"
	case 2:
		return sa.Protocol + ":e2ehttps"
	}
	return sa.Protocol
}
