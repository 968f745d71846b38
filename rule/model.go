package rule

import (
	"net"
	"strconv"
)

// The JSON model of LoxiLB's LoadbalanceEntry (loxilb-compat.md §1.3–1.5).
//
// Decoding is plain encoding/json, as in LoxiLB's generated models: key
// matching ignores case but underscores are significant, and unknown keys are
// ignored. Every scalar serializes with omitempty, so zero values are absent
// from GET responses exactly as LoxiLB writes them. Pointers are used only
// where "absent" and "zero" mean different things.
//
// All integers are int64 on the wire model regardless of the narrower type
// LoxiLB stores them in (uint8 weight, uint16 ports, ...): the narrower bound
// is enforced by Validate with a message naming the field, instead of a silent
// wrap-around or an opaque decoder error.

// LoadbalanceEntry is one load-balancer rule as POSTed to and returned from
// /netlox/v1/config/loadbalancer.
//
// endpoints, secondaryIPs, secondaryVIPs and allowedSources have no omitempty,
// as in LoxiLB: an empty list serializes as null.
type LoadbalanceEntry struct {
	// ServiceArguments is the rule's service definition.
	ServiceArguments *ServiceArguments `json:"serviceArguments,omitempty"`
	// Endpoints are the backends; 1 to 32 of them.
	Endpoints []Endpoint `json:"endpoints"`
	// SecondaryIPs are extra SCTP multihoming VIPs (SCTP only, at most 3).
	SecondaryIPs []SecondaryIP `json:"secondaryIPs"`
	// SecondaryVIPs are Octavia additional VIPs, stored and returned verbatim.
	SecondaryVIPs []SecondaryVIP `json:"secondaryVIPs"`
	// AllowedSources is a CIDR allow-list of client sources.
	AllowedSources []AllowedSource `json:"allowedSources"`
}

// ServiceArguments is LoxiLB's serviceArguments object. Its keys are grouped
// by concern into embedded structs; encoding/json promotes them, so the wire
// object stays flat exactly as LoxiLB expects.
type ServiceArguments struct {
	CoreArguments
	OctaviaArguments
	LLMArguments
	AdmissionArguments
	LLBArguments
}

// CoreArguments are the serviceArguments keys shared by upstream LoxiLB and the
// inference gateway.
type CoreArguments struct {
	// ExternalIP is the VIP. Required; must parse as an IP address.
	ExternalIP string `json:"externalIP,omitempty"`
	// PrivateIP is an optional NAT'd IP; must parse if present.
	PrivateIP string `json:"privateIP,omitempty"`
	// Port is the (first) service port, 1–65535; 0 and only 0 for icmp. A
	// pointer because it is always present on GET, even when 0.
	Port *int64 `json:"port,omitempty"`
	// PortMax ends a port range; 0 = no range, otherwise ≥ Port. Part of the rule key.
	PortMax int64 `json:"portMax,omitempty"`
	// Protocol is tcp, udp, sctp or icmp. Required.
	Protocol string `json:"protocol,omitempty"`
	// Sel is the endpoint selector: 0 rr, 1 hash, 2 priority/wrr, 3 persist,
	// 4 lc, 5 n2, 6 n3, 7 reserved, 8 chwbl, 9 gpuaware, 10 wrr-hash.
	Sel int64 `json:"sel,omitempty"`
	// Mode is the LB mode: 0 dnat, 1 onearm, 2 fullnat, 3 dsr, 4 fullproxy,
	// 5 hostonearm. llb's data plane serves mode 4.
	Mode int64 `json:"mode,omitempty"`
	// Security is 0 plain, 1 TLS termination, 2 end-to-end TLS. Immutable.
	Security int64 `json:"security,omitempty"`
	// BGP advertises the VIP (stored; llb has no BGP speaker).
	BGP bool `json:"bgp,omitempty"`
	// Monitor turns on endpoint probing; forced true when ProbeType is set and not "none".
	Monitor bool `json:"monitor,omitempty"`
	// ProbeType is tcp, udp, sctp, http, https, ping or none.
	ProbeType string `json:"probetype,omitempty"`
	// ProbePort is required (≠ 0) for tcp/udp/sctp/http/https probes and must be
	// 0 for ping/none or without a probe type.
	ProbePort int64 `json:"probeport,omitempty"`
	// ProbeReq is the HTTP probe path or the request sent by a connect probe.
	ProbeReq string `json:"probereq,omitempty"`
	// ProbeResp is the expected response (substring) of a probe.
	ProbeResp string `json:"proberesp,omitempty"`
	// ProbeTimeout is, despite its name, the probe period in seconds
	// (0 → 60, at most 86400).
	ProbeTimeout int64 `json:"probeTimeout,omitempty"`
	// ProbeRetries is the consecutive failures before an endpoint goes
	// inactive (0 → 2, at most 100).
	ProbeRetries int64 `json:"probeRetries,omitempty"`
	// Managed marks an externally managed rule (stored only).
	Managed bool `json:"managed,omitempty"`
	// Block is the rule "mark"; part of the rule key. 0–4294967295.
	Block int64 `json:"block,omitempty"`
	// InactiveTimeOut is the idle session timeout in seconds (0 → 240 for
	// tcp/sctp, 20 otherwise; at most 86400).
	InactiveTimeOut int64 `json:"inactiveTimeOut,omitempty"`
	// Name is a free-form rule name; DELETE …/name/{name} removes by it.
	Name string `json:"name,omitempty"`
	// Snat is GET-only in LoxiLB; ignored on input.
	Snat bool `json:"snat,omitempty"`
	// Oper is 0 create/replace, 1 attach endpoints, 2 detach endpoints.
	Oper int64 `json:"oper,omitempty"`
	// Host is the L7 host key; part of the rule key.
	Host string `json:"host,omitempty"`
	// ProxyProtocolV2 sends a PROXY v2 header to endpoints; tcp only.
	ProxyProtocolV2 bool `json:"proxyprotocolv2,omitempty"`
	// Egress marks an egress rule. Immutable.
	Egress bool `json:"egress,omitempty"`
}

// Endpoint is one element of endpoints[].
type Endpoint struct {
	// EndpointIP is the backend address. Required.
	EndpointIP *string `json:"endpointIP"`
	// TargetPort is the backend port, 1–65535. Required.
	TargetPort *int64 `json:"targetPort"`
	// Weight is the endpoint weight, 0–255 (stored as uint8 by LoxiLB). Required.
	Weight *int64 `json:"weight"`
	// EpRole is the P/D role: 0 none, 1 prefill, 2 decode.
	EpRole int64 `json:"ep_role,omitempty"`
	// NixlPort is the worker's NIXL side-channel port (VLLM_NIXL_SIDE_CHANNEL_PORT);
	// 0 means use TargetPort. P/D only.
	NixlPort int64 `json:"nixl_port,omitempty"`
	// Backup marks a standby endpoint used only when every primary is down.
	// Always present on GET, as in LoxiLB.
	Backup *bool `json:"backup,omitempty"`
	// SubnetID is an opaque Octavia member subnet id, stored verbatim.
	SubnetID string `json:"subnetId,omitempty"`
	// MonitorAddress, when set, is probed instead of EndpointIP.
	MonitorAddress string `json:"monitorAddress,omitempty"`
	// HTTPMethod is the HTTP monitor method (GET when empty).
	HTTPMethod string `json:"httpMethod,omitempty"`
	// URLPath is the HTTP monitor path (probereq or "/" when empty).
	URLPath string `json:"urlPath,omitempty"`
	// ExpectedCodes is "200", "200,202" or "200-204" (200 when empty).
	ExpectedCodes string `json:"expectedCodes,omitempty"`
	// HTTPVersion is the HTTP monitor version, "1.0" or "1.1".
	HTTPVersion string `json:"httpVersion,omitempty"`
	// DomainName is the HTTP monitor Host header and TLS SNI.
	DomainName string `json:"domainName,omitempty"`
	// State is GET-only: "active" or "inactive".
	State string `json:"state,omitempty"`
	// Counter is GET-only: "<requests>:<bytes>" (LoxiLB: packets:bytes).
	Counter string `json:"counter,omitempty"`
}

// Identity is the endpoint's identity, ip:port with the IP in canonical form:
// what a replace, an attach or a detach matches endpoints by.
func (ep *Endpoint) Identity() string {
	ip := derefString(ep.EndpointIP)
	if a, err := ParseIP(ip); err == nil {
		ip = a.String()
	}
	return net.JoinHostPort(ip, strconv.FormatInt(derefInt(ep.TargetPort), 10))
}

// SecondaryIP is one element of secondaryIPs[].
type SecondaryIP struct {
	// SecondaryIP is an extra SCTP VIP.
	SecondaryIP string `json:"secondaryIP,omitempty"`
}

// SecondaryVIP is one element of secondaryVIPs[]: opaque Octavia data, stored
// and returned verbatim.
type SecondaryVIP struct {
	// Address is the secondary VIP address.
	Address string `json:"address,omitempty"`
	// SubnetID is an opaque Octavia subnet id.
	SubnetID string `json:"subnetId,omitempty"`
	// PortID is an opaque Octavia port id.
	PortID string `json:"portId,omitempty"`
	// Proto is an opaque protocol hint.
	Proto string `json:"proto,omitempty"`
}

// AllowedSource is one element of allowedSources[].
type AllowedSource struct {
	// Prefix is a source CIDR (or a bare IP, taken as a host prefix).
	Prefix string `json:"prefix,omitempty"`
}
