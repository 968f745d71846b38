// Package ruletest builds compiled rules for tests: what rule.Compile gives
// a LoxiLB rule, so tests of the gateway, the actors and the lifecycle run
// the values the daemon runs rather than a hand-filled copy. Support for
// tests and the simulator's tools; the daemon never imports it.
package ruletest

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/llbproject/llb/rule"
)

// Compile validates, normalizes and compiles the rule in LoxiLB's JSON (the
// body of POST /netlox/v1/config/loadbalancer) with the daemon defaults d.
// It panics on any error: a test's fixture is wrong.
func Compile(body string, d rule.Defaults) *rule.Compiled {
	var e rule.LoadbalanceEntry
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		panic(fmt.Sprintf("ruletest: %v in %s", err, body))
	}
	if err := rule.Validate(&e); err != nil {
		panic(fmt.Sprintf("ruletest: %v in %s", err, body))
	}
	r, err := rule.NormalizeEntry(&e)
	if err != nil {
		panic(fmt.Sprintf("ruletest: %v", err))
	}
	c, err := rule.Compile(&r, d)
	if err != nil {
		panic(fmt.Sprintf("ruletest: %v", err))
	}
	return c
}

// Endpoint is one endpoint of a test rule.
type Endpoint struct {
	// Addr is endpointIP:targetPort.
	Addr netip.AddrPort
	// Role is ep_role: 0 none, 1 prefill, 2 decode.
	Role int
}

// Options are the fields of a test rule beyond its endpoints; the zero
// value is a round-robin single pool on 127.0.0.1:2020 without probes.
type Options struct {
	// VIP and Port are externalIP and port (zero: 127.0.0.1 and 2020). Port
	// 0 is not a valid rule port: set the compiled rule's Port to 0 to let
	// a listener pick one.
	VIP  netip.Addr
	Port uint16
	// PD sets pd_disagg_mode.
	PD bool
	// Extra is more serviceArguments, JSON object members without braces
	// (`"sel":8,"kvExactMode":3`).
	Extra string
	// Probe is probetype ("" = none: tests start probes only when asked).
	Probe string
	// Defaults are the daemon's defaults the rule compiles with (the
	// zero value: every default, as an empty environment gives).
	Defaults rule.Defaults
}

// Rule compiles a rule over eps with o.
func Rule(o Options, eps ...Endpoint) *rule.Compiled {
	if !o.VIP.IsValid() {
		o.VIP = netip.MustParseAddr("127.0.0.1")
	}
	if o.Port == 0 {
		o.Port = 2020
	}
	if o.Probe == "" {
		o.Probe = rule.ProbeNone
	}
	sa := fmt.Sprintf(`"externalIP":%q,"port":%d,"protocol":"tcp","mode":4,"probetype":%q`, o.VIP, o.Port, o.Probe)
	if o.PD {
		sa += `,"pd_disagg_mode":true`
	}
	if o.Extra != "" {
		sa += "," + o.Extra
	}
	var list []map[string]any
	for _, ep := range eps {
		m := map[string]any{"endpointIP": ep.Addr.Addr().String(), "targetPort": ep.Addr.Port(), "weight": 1}
		if ep.Role != 0 {
			m["ep_role"] = ep.Role
		}
		list = append(list, m)
	}
	raw, err := json.Marshal(list)
	if err != nil {
		panic(err)
	}
	return Compile(`{"serviceArguments":{`+sa+`},"endpoints":`+string(raw)+`}`, o.Defaults)
}

// SinglePool is a round-robin rule over addrs on 127.0.0.1:2020, probes off.
func SinglePool(addrs ...netip.AddrPort) *rule.Compiled {
	eps := make([]Endpoint, len(addrs))
	for i, a := range addrs {
		eps[i] = Endpoint{Addr: a}
	}
	return Rule(Options{}, eps...)
}

// PD is a P/D rule with prefill endpoints first, then decode endpoints, on
// 127.0.0.1:2020, probes off.
func PD(prefill, decode []netip.AddrPort) *rule.Compiled {
	var eps []Endpoint
	for _, a := range prefill {
		eps = append(eps, Endpoint{Addr: a, Role: 1})
	}
	for _, a := range decode {
		eps = append(eps, Endpoint{Addr: a, Role: 2})
	}
	return Rule(Options{PD: true}, eps...)
}
