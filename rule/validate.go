package rule

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Validate checks a decoded entry against every rule of loxilb-compat.md §1.3–1.6
// and §5 and returns a *ValidationError listing all problems at once: schema
// problems (enum, range, required; HTTP 422) first, then semantic problems
// (combinations; HTTP 400). It returns nil for a valid entry.
//
// Validate judges one entry on its own; conflicts with a stored rule (409)
// are decided when the entry is merged into the rule table.
//
// Unlike LoxiLB, no validation failure is a 500 and DSR with sel≠1 is a 400
// rather than LoxiLB's 200 with an error text in the result.
func Validate(e *LoadbalanceEntry) error {
	var schema, sem Checker
	if e.ServiceArguments == nil {
		schema.Required("serviceArguments", false)
		checkEndpointsSchema(&schema, e.Endpoints)
		return ProblemsErr(schema.problems)
	}
	sa := e.ServiceArguments
	checkCoreSchema(&schema, sa)
	checkOctaviaSchema(&schema, sa)
	checkLLMSchema(&schema, sa)
	checkAdmissionSchema(&schema, sa)
	checkEndpointsSchema(&schema, e.Endpoints)

	checkCore(&sem, e)
	checkProbe(&sem, sa)
	checkOctavia(&sem, sa)
	checkEndpoints(&sem, e)
	checkLLM(&sem, e)
	return ProblemsErr(append(schema.problems, sem.problems...))
}

func SAField(name string) string { return "serviceArguments." + name }

func EPField(i int, name string) string { return "endpoints." + strconv.Itoa(i) + "." + name }

func checkCoreSchema(c *Checker, sa *ServiceArguments) {
	c.Required(SAField("externalIP"), sa.ExternalIP != "")
	if c.Required(SAField("protocol"), sa.Protocol != "") {
		c.OneOfString(SAField("protocol"), sa.Protocol, ProtoTCP, ProtoUDP, ProtoSCTP, ProtoICMP)
	}
	if sa.Port != nil {
		c.Between(SAField("port"), *sa.Port, 0, MaxUint16)
	} else if sa.Protocol != ProtoICMP {
		c.Required(SAField("port"), false)
	}
	c.Between(SAField("portMax"), sa.PortMax, 0, MaxUint16)
	c.OneOf(SAField("sel"), sa.Sel, SelRR, SelHash, SelPriority, SelPersist, SelLC, SelN2, SelN3,
		SelReserved, SelCHWBL, SelGPUAware, SelWRRHash)
	c.OneOf(SAField("mode"), sa.Mode, ModeDNAT, ModeOneArm, ModeFullNAT, ModeDSR, ModeFullProxy, ModeHostOneArm)
	c.OneOf(SAField("security"), sa.Security, 0, 1, 2)
	c.OneOf(SAField("oper"), sa.Oper, 0, 1, 2)
	c.OneOfString(SAField("probetype"), sa.ProbeType, ProbeTCP, ProbeUDP, ProbeSCTP, ProbeHTTP, ProbeHTTPS, ProbePing, ProbeNone)
	c.Between(SAField("probeport"), sa.ProbePort, 0, MaxUint16)
	c.Between(SAField("probeTimeout"), sa.ProbeTimeout, 0, MaxUint32)
	c.Between(SAField("probeRetries"), sa.ProbeRetries, 0, MaxInt32)
	c.Between(SAField("block"), sa.Block, 0, MaxUint32)
	c.Between(SAField("inactiveTimeOut"), sa.InactiveTimeOut, 0, MaxInt32)
}

func checkEndpointsSchema(c *Checker, eps []Endpoint) {
	for i, ep := range eps {
		c.Required(EPField(i, "endpointIP"), ep.EndpointIP != nil)
		if c.Required(EPField(i, "targetPort"), ep.TargetPort != nil) {
			c.Between(EPField(i, "targetPort"), *ep.TargetPort, 1, MaxUint16)
		}
		if c.Required(EPField(i, "weight"), ep.Weight != nil) {
			c.Between(EPField(i, "weight"), *ep.Weight, 0, MaxUint8)
		}
		c.OneOf(EPField(i, "ep_role"), ep.EpRole, RoleNone, RolePrefill, RoleDecode)
		c.Between(EPField(i, "nixl_port"), ep.NixlPort, 0, MaxUint16)
	}
}

// ParseIP parses an IP literal without a zone, unmapping IPv4-in-IPv6.
func ParseIP(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%q is not an IP address", s)
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%q has an IPv6 zone, which a rule cannot use", s)
	}
	return a.Unmap(), nil
}

func checkCore(c *Checker, e *LoadbalanceEntry) {
	sa := e.ServiceArguments
	if sa.ExternalIP != "" {
		vip, err := ParseIP(sa.ExternalIP)
		switch {
		case err != nil:
			c.Semantic(SAField("externalIP"), "malformed-service error: %v", err)
		case vip.IsUnspecified() && !sa.Egress && sa.Mode != ModeHostOneArm:
			c.Semantic(SAField("externalIP"), "malformed-service error: the unspecified address %s is only allowed for egress rules or mode 5 (hostonearm)", vip)
		case !vip.IsUnspecified() && sa.Mode == ModeHostOneArm:
			c.Semantic(SAField("externalIP"), "malformed-service error: mode 5 (hostonearm) needs the unspecified VIP 0.0.0.0 or ::, got %s", vip)
		}
	}
	if sa.PrivateIP != "" {
		if _, err := ParseIP(sa.PrivateIP); err != nil {
			c.Semantic(SAField("privateIP"), "malformed-service error: %v", err)
		}
	}
	if sa.Port != nil {
		switch {
		case sa.Protocol == ProtoICMP && *sa.Port != 0:
			c.Semantic(SAField("port"), "service-args error: icmp rules take port 0, got %d", *sa.Port)
		case sa.Protocol != ProtoICMP && *sa.Port == 0:
			c.Semantic(SAField("port"), "service-args error: a %s rule needs a port in 1..65535, got 0", sa.Protocol)
		}
		if sa.PortMax != 0 && sa.PortMax < *sa.Port {
			c.Semantic(SAField("portMax"), "serv-port-args range error: portMax %d is below port %d", sa.PortMax, *sa.Port)
		}
	}
	switch sa.Sel {
	case SelReserved:
		c.Semantic(SAField("sel"), "sel=7 is reserved (formerly QUIC) and cannot be used")
	case SelN2, SelCHWBL, SelGPUAware, SelWRRHash:
		if sa.Mode != ModeFullProxy {
			c.Semantic(SAField("sel"), "sel=%d (%s) requires mode=4 (fullproxy), got mode %d", sa.Sel, selName(sa.Sel), sa.Mode)
		} else if sa.Sel == SelN2 && notServedWhy(sa) == "" {
			c.Semantic(SAField("sel"), "sel=5 (n2) is LoxiLB's SCTP/NGAP selector, which llb's data plane does not implement; use 0–4 or 8–10 on a served mode:4 rule")
		}
	case SelN3:
		if sa.Protocol != ProtoUDP {
			c.Semantic(SAField("sel"), "non-udp-n3-args error: sel=6 (n3) requires protocol udp, got %q", sa.Protocol)
		}
	}
	if sa.Mode == ModeDSR && sa.Sel != SelHash {
		// LoxiLB answers this with HTTP 200 and an error text in "result";
		// llb fixes the quirk: a rule that was not created is not a success.
		c.Semantic(SAField("sel"), "Only Hash Selection criteria allowed for DSR mode (mode=3 needs sel=1, got sel %d)", sa.Sel)
	}
	if sa.ProxyProtocolV2 && sa.Protocol != ProtoTCP {
		// LoxiLB answers this with a 500; it is bad input, so 400.
		c.Semantic(SAField("proxyprotocolv2"), "proxy-proto-v2 not tcp service error: proxyprotocolv2 needs protocol tcp, got %q", sa.Protocol)
	}
	if sa.InactiveTimeOut > MaxInactiveTimeoutSec {
		c.Semantic(SAField("inactiveTimeOut"), "service-args error: inactiveTimeOut is at most %d seconds, got %d", MaxInactiveTimeoutSec, sa.InactiveTimeOut)
	}
	checkSecondary(c, e)
}

func checkSecondary(c *Checker, e *LoadbalanceEntry) {
	sa := e.ServiceArguments
	if len(e.SecondaryIPs) > 0 {
		if sa.Protocol != ProtoSCTP {
			c.Semantic("secondaryIPs", "secondaryIP-args error: secondary IPs need protocol sctp, got %q", sa.Protocol)
		}
		if len(e.SecondaryIPs) > MaxSecondaryIPs {
			c.Semantic("secondaryIPs", "secondaryIP-args error: at most %d secondary IPs, got %d", MaxSecondaryIPs, len(e.SecondaryIPs))
		}
		for i, s := range e.SecondaryIPs {
			if _, err := ParseIP(s.SecondaryIP); err != nil {
				c.Semantic("secondaryIPs."+strconv.Itoa(i)+".secondaryIP", "malformed-secip error: %v", err)
			}
		}
	}
	for i, src := range e.AllowedSources {
		if _, err := ParsePrefix(src.Prefix); err != nil {
			c.Semantic("allowedSources."+strconv.Itoa(i)+".prefix", "rule-allowed-src error: %v", err)
		}
	}
}

// ParsePrefix parses a CIDR, or a bare address as a host prefix.
func ParsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	if a, err := ParseIP(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.Prefix{}, fmt.Errorf("%q is not a CIDR prefix or an IP address", s)
}

func checkProbe(c *Checker, sa *ServiceArguments) {
	switch sa.ProbeType {
	case ProbeTCP, ProbeUDP, ProbeSCTP, ProbeHTTP, ProbeHTTPS:
		if sa.ProbePort == 0 {
			c.Semantic(SAField("probeport"), "malformed-service-pport error: probetype %s needs a probeport in 1..65535", sa.ProbeType)
		}
	case ProbePing, ProbeNone:
		if sa.ProbePort != 0 {
			c.Semantic(SAField("probeport"), "malformed-service-pport error: probetype %s takes no probeport, got %d", sa.ProbeType, sa.ProbePort)
		}
	case "":
		if sa.ProbePort != 0 {
			c.Semantic(SAField("probeport"), "malformed-service-pport error: probeport %d needs a probetype", sa.ProbePort)
		}
	}
	switch sa.ProbeType {
	case ProbeUDP, ProbeSCTP, ProbePing:
		if notServedWhy(sa) == "" {
			c.Semantic(SAField("probetype"), "malformed-service error: probetype %s is not supported on a mode:4 rule llb serves; use http, https, tcp or none (or omit it: GET /health)", sa.ProbeType)
		}
	}
	switch sa.ProbeType {
	case ProbeHTTP, ProbeHTTPS, "": // probereq is the HTTP path (mode 4 probes http by default)
		if err := checkProbePath(sa.ProbeReq); err != nil {
			c.Semantic(SAField("probereq"), "malformed-service error: probereq %v", err)
		}
	}
	if sa.ProbeTimeout > MaxProbePeriodSec {
		c.Semantic(SAField("probeTimeout"), "service-args error: probeTimeout (the probe period) is at most %d seconds, got %d", MaxProbePeriodSec, sa.ProbeTimeout)
	}
	if sa.ProbeRetries > MaxProbeRetries {
		c.Semantic(SAField("probeRetries"), "service-args error: probeRetries is at most %d, got %d", MaxProbeRetries, sa.ProbeRetries)
	}
}

func checkEndpoints(c *Checker, e *LoadbalanceEntry) {
	sa := e.ServiceArguments
	n := len(e.Endpoints)
	if n == 0 || n > MaxEndpoints {
		c.Semantic("endpoints", "endpoints-range error: a rule needs 1 to %d endpoints, got %d", MaxEndpoints, n)
	}
	vip, vipErr := ParseIP(sa.ExternalIP)
	for i, ep := range e.Endpoints {
		if ep.EndpointIP != nil {
			a, err := ParseIP(*ep.EndpointIP)
			switch {
			case err != nil:
				c.Semantic(EPField(i, "endpointIP"), "malformed-lbep error: %v", err)
			case vipErr == nil && vip.Is4() && a.Is6():
				c.Semantic(EPField(i, "endpointIP"), "malformed-service nat46 error: IPv4 VIP %s cannot front IPv6 endpoint %s", vip, a)
			}
		}
		if sa.Mode == ModeDSR && sa.Port != nil && ep.TargetPort != nil && *ep.TargetPort != *sa.Port {
			c.Semantic(EPField(i, "targetPort"), "malformed-lbep error: DSR (mode 3) endpoints must use the service port %d, got %d", *sa.Port, *ep.TargetPort)
		}
		if ep.MonitorAddress != "" {
			if _, err := ParseIP(ep.MonitorAddress); err != nil {
				c.Semantic(EPField(i, "monitorAddress"), "malformed-lbep error: %v", err)
			}
		}
		if ep.ExpectedCodes != "" {
			if err := checkExpectedCodes(ep.ExpectedCodes); err != nil {
				c.Semantic(EPField(i, "expectedCodes"), "%v", err)
			}
		}
		if ep.HTTPVersion != "" && ep.HTTPVersion != "1.0" && ep.HTTPVersion != "1.1" {
			c.Semantic(EPField(i, "httpVersion"), "httpVersion must be \"1.0\" or \"1.1\", got %q", ep.HTTPVersion)
		}
		if ep.HTTPMethod != "" && !isHTTPToken(ep.HTTPMethod) {
			c.Semantic(EPField(i, "httpMethod"), "httpMethod %q is not an HTTP method token", ep.HTTPMethod)
		}
		if err := checkProbePath(ep.URLPath); err != nil {
			c.Semantic(EPField(i, "urlPath"), "malformed-lbep error: urlPath %v", err)
		}
		if ep.DomainName != "" && strings.ContainsAny(ep.DomainName, " /\t\r\n") {
			c.Semantic(EPField(i, "domainName"), "domainName %q is not a host name", ep.DomainName)
		}
	}
}

// checkExpectedCodes accepts "200", "200,202" and "200-204", codes 100–599.
func checkExpectedCodes(s string) error {
	_, err := ParseExpectedCodes(s)
	return err
}

// CodeRange is an inclusive range of HTTP statuses a probe accepts.
type CodeRange struct{ Lo, Hi int }

// ParseExpectedCodes parses an endpoint's expectedCodes: "200", "200,202",
// "200-204" and combinations, codes 100–599; "" means any 2xx. Validate
// has checked it for every stored rule; the probe builds its matcher here.
func ParseExpectedCodes(s string) ([]CodeRange, error) {
	if strings.TrimSpace(s) == "" {
		return []CodeRange{{200, 299}}, nil
	}
	var out []CodeRange
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, errA := strconv.Atoi(strings.TrimSpace(lo))
		b := a
		var errB error
		if isRange {
			b, errB = strconv.Atoi(strings.TrimSpace(hi))
		}
		if errA != nil || errB != nil || a < 100 || b > 599 || a > b {
			return nil, fmt.Errorf("expectedCodes %q: %q is not a status code or range within 100..599 (\"200\", \"200,202\", \"200-204\")", s, part)
		}
		out = append(out, CodeRange{a, b})
	}
	return out, nil
}

// checkProbePath refuses an HTTP probe path that cannot go on a request line:
// control characters (CR/LF would split the request; net/http refuses the
// URL and the endpoint would stay down forever) and spaces. "" is valid (the
// default path).
func checkProbePath(p string) error {
	for i := 0; i < len(p); i++ {
		if b := p[i]; b < 0x20 || b == 0x7f || b == ' ' {
			return fmt.Errorf("%q holds a control character or space at byte %d; an HTTP path cannot", p, i)
		}
	}
	return nil
}

// isHTTPToken reports an RFC 9110 token of upper-case letters (GET, HEAD, ...).
func isHTTPToken(s string) bool {
	for _, r := range s {
		if r < 'A' || r > 'Z' {
			return false
		}
	}
	return s != ""
}
