package rule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// RuleKey identifies a rule: VIP + protocol + port + portMax + block + host,
// LoxiLB's upstream key, and the inference gateway's path_prefix,
// path_match_mode and model_name. Rules whose keys differ only in host,
// path or model share their VIP:port: each request goes to the rule its
// Host, path and model select (gateway.RuleMatch, LoxiLB's
// find_endpoint_lpm).
//
// RuleKey is comparable and usable as a map key.
type RuleKey struct {
	// VIP is the canonical external IP (IPv4-in-IPv6 unmapped).
	VIP netip.Addr
	// Protocol is tcp, udp, sctp or icmp.
	Protocol string
	// Port is the service port (0 for icmp).
	Port uint16
	// PortMax ends a port range; 0 = no range.
	PortMax uint16
	// Block is serviceArguments.block.
	Block uint32
	// Host is serviceArguments.host; "" = no host.
	Host string
	// PathPrefix is serviceArguments.path_prefix; "" = none.
	PathPrefix string
	// PathMatchMode is path_match_mode: "disabled" (the default, stored
	// as ""), "prefix" or "exact".
	PathMatchMode string
	// ModelName is model_name; "" = the wildcard pool.
	ModelName string
}

// String prints the key as "tcp:127.0.0.1:2020", with "-<portMax>",
// "/block=<n>", "@<host>", "|<mode>:<path_prefix>" and "|model=<name>"
// suffixes when those are set; IPv6 VIPs are bracketed.
func (k RuleKey) String() string {
	var b strings.Builder
	b.WriteString(k.Protocol)
	b.WriteByte(':')
	b.WriteString(netip.AddrPortFrom(k.VIP, k.Port).String())
	if k.PortMax != 0 {
		b.WriteByte('-')
		b.WriteString(strconv.Itoa(int(k.PortMax)))
	}
	if k.Block != 0 {
		b.WriteString("/block=")
		b.WriteString(strconv.FormatUint(uint64(k.Block), 10))
	}
	if k.Host != "" {
		b.WriteByte('@')
		b.WriteString(k.Host)
	}
	if k.PathPrefix != "" || k.PathMatchMode != "" {
		b.WriteByte('|')
		b.WriteString(cmpOr(k.PathMatchMode, "disabled"))
		b.WriteByte(':')
		b.WriteString(k.PathPrefix)
	}
	if k.ModelName != "" {
		b.WriteString("|model=")
		b.WriteString(k.ModelName)
	}
	return b.String()
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Rule is a validated, normalized rule: what the table stores, the state file
// persists, and the Runtime is handed.
//
// Invariant: Entry passed Validate; Entry.ServiceArguments is non-nil, its id
// is set, oper is 0 and the GET-only fields are clear; Key and Effective are
// derived from Entry.
type Rule struct {
	// Key identifies the rule.
	Key RuleKey
	// Entry is the rule in LoxiLB's JSON model, as stored and returned by GET
	// (minus the GET-only endpoint state and counter).
	Entry LoadbalanceEntry
	// Effective holds the values the data plane acts on, defaults applied.
	Effective Effective
}

// ID is the rule's opaque id (serviceArguments.id).
func (r *Rule) ID() string { return r.Entry.ServiceArguments.ID }

// Name is serviceArguments.name.
func (r *Rule) Name() string { return r.Entry.ServiceArguments.Name }

// Clone returns a deep copy that shares nothing mutable with r.
func (r *Rule) Clone() Rule {
	return Rule{Key: r.Key, Entry: CloneEntry(&r.Entry), Effective: r.Effective.clone()}
}

// SameConfig reports whether two rules carry the same normalized
// configuration, the test for LoxiLB's "identical re-POST is 409".
func (r *Rule) SameConfig(o *Rule) bool {
	a, errA := json.Marshal(&r.Entry)
	b, errB := json.Marshal(&o.Entry)
	return errA == nil && errB == nil && bytes.Equal(a, b)
}

// NormalizeEntry turns a validated entry into a Rule: canonical IP spellings,
// adminStateUp stored only when false, LoxiLB's implied values (monitor forced on by a probe type, path_match_mode
// "disabled", backend_protocol "http1" on fullproxy rules, backup false), the
// GET-only fields cleared, empty lists as null, and oper dropped (it is a verb
// of the request, not part of the rule). The id is left as given; the rule
// table mints or keeps it.
//
// It does not modify e. It fails only for an entry that did not pass Validate.
func NormalizeEntry(e *LoadbalanceEntry) (Rule, error) {
	if e.ServiceArguments == nil {
		return Rule{}, fmt.Errorf("restapi: normalize: %w", ProblemsErr([]Problem{SchemaProblem("serviceArguments", CodeRequired, "is required")}))
	}
	n := CloneEntry(e)
	sa := n.ServiceArguments
	vip, err := ParseIP(sa.ExternalIP)
	if err != nil {
		return Rule{}, fmt.Errorf("restapi: normalize externalIP: %w", err)
	}
	sa.ExternalIP = vip.String()
	if sa.PrivateIP != "" {
		if a, err := ParseIP(sa.PrivateIP); err == nil {
			sa.PrivateIP = a.String()
		}
	}
	if sa.Port == nil {
		sa.Port = new(int64)
	}
	sa.Oper = 0
	sa.Snat = false
	sa.OffloadState, sa.HWPkts, sa.HWBytes = "", 0, 0
	if sa.ProbeType != "" && sa.ProbeType != ProbeNone {
		sa.Monitor = true
	}
	if sa.AdminStateUp != nil && *sa.AdminStateUp {
		sa.AdminStateUp = nil // absent means true; only a pause is stored
	}
	if sa.PathMatchMode == nil {
		sa.PathMatchMode = ptr("disabled")
	}
	if sa.BackendProtocol == nil && sa.Mode == ModeFullProxy {
		sa.BackendProtocol = ptr("http1")
	}
	if len(sa.Annotations) == 0 {
		sa.Annotations = nil
	}
	sa.AlpnProtocols = nilIfEmpty(sa.AlpnProtocols)
	sa.TLSVersions = nilIfEmpty(sa.TLSVersions)
	n.Endpoints = nilIfEmpty(n.Endpoints)
	n.SecondaryIPs = nilIfEmpty(n.SecondaryIPs)
	n.SecondaryVIPs = nilIfEmpty(n.SecondaryVIPs)
	n.AllowedSources = nilIfEmpty(n.AllowedSources)
	for i := range n.SecondaryIPs {
		if a, err := ParseIP(n.SecondaryIPs[i].SecondaryIP); err == nil {
			n.SecondaryIPs[i].SecondaryIP = a.String()
		}
	}
	for i := range n.Endpoints {
		ep := &n.Endpoints[i]
		a, err := ParseIP(derefString(ep.EndpointIP))
		if err != nil {
			return Rule{}, fmt.Errorf("restapi: normalize endpoints.%d.endpointIP: %w", i, err)
		}
		ep.EndpointIP = ptr(a.String())
		if ep.Backup == nil {
			ep.Backup = ptr(false)
		}
		ep.State, ep.Counter = "", ""
	}
	r := Rule{Key: keyOf(sa, vip), Entry: n}
	r.Effective, err = effectiveOf(&r.Entry)
	if err != nil {
		return Rule{}, fmt.Errorf("restapi: normalize %s: %w", r.Key, err)
	}
	return r, nil
}

func keyOf(sa *ServiceArguments, vip netip.Addr) RuleKey {
	return RuleKey{
		VIP:      vip,
		Protocol: sa.Protocol,
		Port:     uint16(derefInt(sa.Port)),
		PortMax:  uint16(sa.PortMax),
		Block:    uint32(sa.Block),
		Host:     sa.Host,

		PathPrefix:    sa.PathPrefix,
		PathMatchMode: pathMode(sa.PathMatchMode),
		ModelName:     sa.ModelName,
	}
}

// pathMode is a key's path_match_mode: "" for disabled.
func pathMode(m *string) string {
	if m == nil || *m == "disabled" {
		return ""
	}
	return *m
}

func ptr[T any](v T) *T { return &v }

func derefString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func derefInt(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

// CloneEntry deep-copies an entry.
func CloneEntry(e *LoadbalanceEntry) LoadbalanceEntry { return deepCopy(*e) }
