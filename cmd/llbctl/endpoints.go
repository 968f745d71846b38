package main

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// endpointSpec is one --endpoints entry.
type endpointSpec struct {
	// ip is the endpoint address as written (brackets removed).
	ip string
	// port is the target port; 0 = the rule's default (--tcp=<port>:<targetPort>).
	port int64
	// weight is 0–255.
	weight int64
	// role is the P/D role; -1 = not given.
	role int64
	// nixl is the NIXL side-channel port; -1 = not given.
	nixl int64
}

// endpointGrammar is the accepted --endpoints syntax, for error messages.
const endpointGrammar = "IP:WEIGHT, IP:PORT:WEIGHT, IP[:PORT]:WEIGHT:ROLE[:NIXL] with ROLE prefill|decode|none; bracket IPv6 as [2001:db8::1]"

// parseEndpoint reads one --endpoints entry.
//
// loxicmd's form is IP:WEIGHT (the target port comes from --tcp). llb adds
// an optional port before the weight and an optional role and NIXL port
// after it: 127.0.0.1:8100:1:prefill:5600. The role is written as a word, so
// its position tells whether a port precedes the weight; without a role, two
// numbers are PORT:WEIGHT. An IPv6 address is bracketed, except in loxicmd's
// bare IPV6:WEIGHT form.
func parseEndpoint(s string) (endpointSpec, error) {
	ep := endpointSpec{role: -1, nixl: -1}
	bad := func(format string, args ...any) (endpointSpec, error) {
		return endpointSpec{}, fmt.Errorf("endpoint %q: %s (want %s)", s, fmt.Sprintf(format, args...), endpointGrammar)
	}
	s = strings.TrimSpace(s)
	var addr string
	var fields []string
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return bad("unclosed [")
		}
		addr = s[1:end]
		rest := s[end+1:]
		if !strings.HasPrefix(rest, ":") {
			return bad("a weight must follow the address")
		}
		fields = strings.Split(rest[1:], ":")
	default:
		parts := strings.Split(s, ":")
		if a, err := netip.ParseAddr(parts[0]); err == nil && a.Is4() {
			addr, fields = parts[0], parts[1:]
			break
		}
		// loxicmd's bare IPv6 form: everything before the last ':' is the address.
		i := strings.LastIndex(s, ":")
		if i < 0 {
			return bad("no weight")
		}
		addr, fields = s[:i], []string{s[i+1:]}
	}
	if _, err := netip.ParseAddr(addr); err != nil {
		return bad("%q is not an IP address", addr)
	}
	ep.ip = addr

	roleAt := -1
	for i, f := range fields {
		if _, ok := lookupName(roles, f); ok {
			if roleAt >= 0 {
				return bad("two roles")
			}
			roleAt = i
			continue
		}
		if _, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64); err != nil {
			return bad("%q is neither a number nor a role (prefill, decode, none)", f)
		}
	}
	nums := fields
	if roleAt >= 0 {
		nums = fields[:roleAt]
		ep.role, _ = lookupName(roles, fields[roleAt])
		switch after := fields[roleAt+1:]; len(after) {
		case 0:
		case 1:
			n, err := parseIntIn(after[0], 0, 65535)
			if err != nil {
				return bad("NIXL port: %v", err)
			}
			ep.nixl = n
		default:
			return bad("only a NIXL port may follow the role")
		}
	}
	switch len(nums) {
	case 1:
		w, err := parseIntIn(nums[0], 0, 255)
		if err != nil {
			return bad("weight: %v", err)
		}
		ep.weight = w
	case 2:
		p, err := parseIntIn(nums[0], 1, 65535)
		if err != nil {
			return bad("port: %v", err)
		}
		w, err := parseIntIn(nums[1], 0, 255)
		if err != nil {
			return bad("weight: %v", err)
		}
		ep.port, ep.weight = p, w
	case 0:
		return bad("no weight")
	default:
		return bad("too many fields")
	}
	return ep, nil
}

// parseIntIn parses a decimal integer in [lo, hi].
func parseIntIn(s string, lo, hi int64) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", s)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%d is outside %d–%d", n, lo, hi)
	}
	return n, nil
}

// portPair is a parsed --tcp/--udp/--sctp value.
type portPair struct {
	// port and portMax are the service port range (portMax 0: no range).
	port, portMax int64
	// target is the default endpoint port; 0 = every endpoint names its own.
	target int64
}

// parsePortPair reads PORT[-PORTMAX][:TARGETPORT].
func parsePortPair(flag, s string) (portPair, error) {
	var pp portPair
	bad := func(format string, args ...any) (portPair, error) {
		return portPair{}, usagef("--%s %q: %s (want <port>[-<portMax>]:<targetPort>)", flag, s, fmt.Sprintf(format, args...))
	}
	svc, target, hasTarget := strings.Cut(strings.TrimSpace(s), ":")
	lo, hi, isRange := strings.Cut(svc, "-")
	p, err := parseIntIn(lo, 1, 65535)
	if err != nil {
		return bad("port: %v", err)
	}
	pp.port = p
	if isRange {
		m, err := parseIntIn(hi, 1, 65535)
		if err != nil {
			return bad("port range end: %v", err)
		}
		if m < p {
			return bad("the range ends before it starts")
		}
		if m > p {
			pp.portMax = m
		}
	}
	if hasTarget {
		if strings.Contains(target, "-") {
			return bad("a target port range is not supported; give one target port, or a port per endpoint")
		}
		t, err := parseIntIn(target, 1, 65535)
		if err != nil {
			return bad("target port: %v", err)
		}
		pp.target = t
	}
	return pp, nil
}
