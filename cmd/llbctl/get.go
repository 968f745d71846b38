package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/restapi"
	"github.com/llbproject/llb/rule"
)

func (a *app) getCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "get",
		Short: "Show rules, endpoints, KV inventories, controller state and the cluster",
		Args:  usageArgs(cobra.NoArgs, "llbctl get lb|endpoints|kv|controller|cluster ..."),
		RunE:  func(cmd *cobra.Command, _ []string) error { return needSubcommand(cmd) },
	}
	c.AddCommand(a.getLBCmd(), a.getEndpointsCmd(), a.getKVCmd(), a.getControllerCmd(), a.getClusterCmd(), a.getAPIKeyCmd(), a.getRateLimitCmd())
	return c
}

// ruleRef is a rule named on the command line as <ip> <port> <proto>.
type ruleRef struct {
	ip    string // without brackets
	port  int64
	proto string
}

// parseRuleRef reads the <ip> <port> <proto> arguments.
func parseRuleRef(args []string) (ruleRef, error) {
	r := ruleRef{ip: strings.TrimSuffix(strings.TrimPrefix(args[0], "["), "]"), proto: strings.ToLower(args[2])}
	var errs []string
	if _, err := netip.ParseAddr(r.ip); err != nil {
		errs = append(errs, fmt.Sprintf("%q is not an IP address", args[0]))
	}
	p, err := parseIntIn(args[1], 0, 65535)
	if err != nil {
		errs = append(errs, "port: "+err.Error())
	}
	r.port = p
	switch r.proto {
	case rule.ProtoTCP, rule.ProtoUDP, rule.ProtoSCTP, rule.ProtoICMP:
	default:
		errs = append(errs, fmt.Sprintf("protocol %q: want tcp, udp, sctp or icmp", args[2]))
	}
	if len(errs) > 0 {
		return ruleRef{}, usagef("%s", strings.Join(errs, "; "))
	}
	return r, nil
}

// path is the rule's REST path (LoxiLB's GET-by-key route).
func (r ruleRef) path() string {
	return lbPath + "/externalipaddress/" + url.PathEscape(r.ip) + "/port/" + strconv.FormatInt(r.port, 10) + "/protocol/" + r.proto
}

// String names the rule in messages.
func (r ruleRef) String() string {
	return fmt.Sprintf("%s port %d/%s", r.ip, r.port, r.proto)
}

func (a *app) getLBCmd() *cobra.Command {
	var status, stats bool
	var name string
	c := &cobra.Command{
		Use:     "lb [<ip> <port> <proto>]",
		Aliases: []string{"loadbalancer", "lbs"},
		Short:   "List the rules, or show one rule, its status or its stats",
		Example: `  llbctl get lb
  llbctl get lb 10.10.10.254 2020 tcp
  llbctl get lb 10.10.10.254 2020 tcp --status
  llbctl get lb -o json`,
		Args: usageArgs(func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 && len(args) != 3 {
				return fmt.Errorf("got %d arguments", len(args))
			}
			return nil
		}, "llbctl get lb [<ip> <port> <proto>] [--status|--stats]"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				if status || stats {
					return usagef("--status and --stats need a rule: llbctl get lb <ip> <port> <proto> --status")
				}
				return a.listRules(name)
			}
			if name != "" {
				return usagef("--name filters the list; drop it when naming a rule by <ip> <port> <proto>")
			}
			ref, err := parseRuleRef(args)
			if err != nil {
				return err
			}
			switch {
			case status:
				return a.showStatus(ref)
			case stats:
				return a.showStats(ref)
			}
			return a.showRule(ref)
		},
	}
	c.Flags().BoolVar(&status, "status", false, "show the rule's operating status and per-endpoint state")
	c.Flags().BoolVar(&stats, "stats", false, "show the rule's traffic counters")
	c.Flags().StringVar(&name, "name", "", "list only the rules with this name")
	c.MarkFlagsMutuallyExclusive("status", "stats")
	return c
}

// get sends a GET and checks the status.
func (a *app) get(op, path string, query url.Values, o errorOpts) ([]byte, error) {
	c, err := a.client()
	if err != nil {
		return nil, err
	}
	res, err := c.do(a.ctx, http.MethodGet, path, query, nil)
	if err != nil {
		return nil, err
	}
	if err := check(op, res, o); err != nil {
		return nil, err
	}
	return res.body, nil
}

// decode unmarshals an answer, as an *answerError on failure.
func decode(op string, body []byte, v any) error {
	if err := json.Unmarshal(body, v); err != nil {
		return &answerError{fmt.Errorf("%s: cannot read llbd's answer: %w", op, err)}
	}
	return nil
}

// listRules prints GET /all.
func (a *app) listRules(name string) error {
	body, err := a.get("get lb", lbPath+"/all", nil, errorOpts{})
	if err != nil {
		return err
	}
	var all restapi.AllView
	if err := decode("get lb", body, &all); err != nil {
		return err
	}
	if name != "" {
		kept := all.LbAttr[:0]
		for _, e := range all.LbAttr {
			if e.ServiceArguments != nil && e.ServiceArguments.Name == name {
				kept = append(kept, e)
			}
		}
		all.LbAttr = kept
	}
	if a.opts.output == outputJSON {
		if name == "" {
			return writeJSON(a.stdout, body)
		}
		return writeValue(a.stdout, all)
	}
	t := newTable("VIP", "PORT", "PROTO", "NAME", "HOST", "SEL", "MODE", "LLM", "ENDPOINT", "ROLE", "WEIGHT", "STATE", "COUNTER")
	for _, e := range all.LbAttr {
		sa := e.ServiceArguments
		if sa == nil {
			continue
		}
		rule := []string{sa.ExternalIP, portCell(sa), protoCell(sa), orDash(sa.Name), orDash(sa.Host),
			nameOf(selectors, sa.Sel, "sel"), modeCell(sa), llmCell(sa)}
		if len(e.Endpoints) == 0 {
			t.add(append(rule, "-", "-", "-", "-", "-")...)
			continue
		}
		for i, ep := range e.Endpoints {
			if i > 0 {
				rule = make([]string, len(rule))
			}
			t.add(append(rule, endpointCell(ep), nameOf(roles, ep.EpRole, "role"), intCell(ep.Weight), orDash(ep.State), orDash(ep.Counter))...)
		}
	}
	return t.render(a.stdout)
}

// showRule prints one rule: its key, its serviceArguments and endpoints.
func (a *app) showRule(ref ruleRef) error {
	body, err := a.get("get lb", ref.path(), nil, errorOpts{notFound: "no rule on " + ref.String()})
	if err != nil {
		return err
	}
	if a.opts.output == outputJSON {
		return writeJSON(a.stdout, body)
	}
	var raw struct {
		ServiceArguments json.RawMessage `json:"serviceArguments"`
	}
	var e rule.LoadbalanceEntry
	if err := decode("get lb", body, &raw); err != nil {
		return err
	}
	if err := decode("get lb", body, &e); err != nil {
		return err
	}
	fields, err := orderedFields(raw.ServiceArguments)
	if err != nil {
		return &answerError{fmt.Errorf("get lb: cannot read serviceArguments: %w", err)}
	}
	if k := ruleKey(&e); k != "" {
		fmt.Fprintf(a.stdout, "rule key: %s\n", k)
	}
	if e.ServiceArguments != nil {
		fmt.Fprintf(a.stdout, "engine: %s\n", rule.EngineOf(e.ServiceArguments))
	}
	fmt.Fprintln(a.stdout)
	t := newTable("SERVICE ARGUMENT", "VALUE")
	for _, f := range fields {
		t.add(f[0], f[1])
	}
	if err := t.render(a.stdout); err != nil {
		return err
	}
	fmt.Fprintln(a.stdout)
	et := newTable("IDX", "ENDPOINT", "ROLE", "WEIGHT", "NIXL", "STATE", "COUNTER")
	for i, ep := range e.Endpoints {
		et.add(strconv.Itoa(i), endpointCell(ep), nameOf(roles, ep.EpRole, "role"), intCell(ep.Weight),
			nixlCell(ep), orDash(ep.State), orDash(ep.Counter))
	}
	return et.render(a.stdout)
}

// showStatus prints GET …/status.
func (a *app) showStatus(ref ruleRef) error {
	body, err := a.get("get lb --status", ref.path()+"/status", nil, errorOpts{notFound: "no rule on " + ref.String()})
	if err != nil {
		return err
	}
	if a.opts.output == outputJSON {
		return writeJSON(a.stdout, body)
	}
	var st restapi.StatusView
	if err := decode("get lb --status", body, &st); err != nil {
		return err
	}
	admin := "up"
	if !st.AdminStateUp {
		admin = "down"
	}
	t := newTable("ADMIN", "STATUS", "LAST UPDATED", "DETAIL")
	t.add(admin, string(st.OperatingStatus), st.LastUpdated, orDash(st.Detail))
	if err := t.render(a.stdout); err != nil {
		return err
	}
	if st.ApplyError != "" {
		fmt.Fprintln(a.stdout, "apply error: "+sanitize(st.ApplyError))
	}
	if st.ListenError != "" {
		fmt.Fprintln(a.stdout, "listen error: "+sanitize(st.ListenError))
	}
	if len(st.Endpoints) == 0 {
		return nil
	}
	fmt.Fprintln(a.stdout)
	et := newTable("ENDPOINT", "STATE", "BREAKER", "IN-FLIGHT", "KV BLOCKS", "DETAIL")
	for _, ep := range st.Endpoints {
		et.add(net.JoinHostPort(ep.EndpointIP, strconv.Itoa(ep.TargetPort)), ep.State, orDash(ep.Breaker),
			strconv.Itoa(ep.InFlight), blocksCell(ep.InventoryBlocks), orDash(ep.Detail))
	}
	return et.render(a.stdout)
}

// showStats prints GET …/stats.
func (a *app) showStats(ref ruleRef) error {
	body, err := a.get("get lb --stats", ref.path()+"/stats", nil, errorOpts{notFound: "no rule on " + ref.String()})
	if err != nil {
		return err
	}
	if a.opts.output == outputJSON {
		return writeJSON(a.stdout, body)
	}
	var st restapi.StatsView
	if err := decode("get lb --stats", body, &st); err != nil {
		return err
	}
	t := newTable("ACTIVE CONNECTIONS", "TOTAL CONNECTIONS", "BYTES IN", "BYTES OUT")
	t.add(strconv.FormatUint(st.ActiveConnections, 10), strconv.FormatUint(st.TotalConnections, 10),
		strconv.FormatUint(st.BytesIn, 10), strconv.FormatUint(st.BytesOut, 10))
	return t.render(a.stdout)
}

// ruleKey is the key llbd files the rule under ("tcp:10.0.0.1:2020@host"),
// which the KV inventory and controller routes take as the service; "" when
// the entry does not validate.
func ruleKey(e *rule.LoadbalanceEntry) string {
	if rule.Validate(e) != nil {
		return ""
	}
	r, err := rule.NormalizeEntry(e)
	if err != nil {
		return ""
	}
	return r.Key.String()
}

// orderedFields lists a JSON object's members in document order, strings
// unquoted and other values as compact JSON.
func orderedFields(raw json.RawMessage) ([][2]string, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("not an object")
	}
	var out [][2]string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if string(v) == "null" {
			continue // absent in effect; nothing to show
		}
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			var buf bytes.Buffer
			if err := json.Compact(&buf, v); err != nil {
				return nil, err
			}
			s = buf.String()
		}
		out = append(out, [2]string{key, s})
	}
	return out, nil
}

// portCell renders the service port or range.
func portCell(sa *rule.ServiceArguments) string {
	var p int64
	if sa.Port != nil {
		p = *sa.Port
	}
	if sa.PortMax != 0 {
		return fmt.Sprintf("%d-%d", p, sa.PortMax)
	}
	return strconv.FormatInt(p, 10)
}

// llmCell summarizes a rule's LLM features: pd, trie, kv1/kv3, sse, cb, and
// paused for adminStateUp false.
func llmCell(sa *rule.ServiceArguments) string {
	var f []string
	if e := rule.EngineOf(sa); e != rule.EngineVLLM {
		f = append(f, sanitize(e)) // the engine behind the rule, when not vLLM
	}
	if sa.PDDisaggMode {
		f = append(f, "pd")
	}
	if sa.PDCacheAwareMode {
		f = append(f, "trie")
	}
	if sa.KVExactMode != 0 {
		f = append(f, "kv"+strconv.FormatInt(sa.KVExactMode, 10))
	}
	if sa.SSEMode {
		f = append(f, "sse")
	}
	if sa.CBEnable {
		f = append(f, "cb")
	}
	if sa.AdminStateUp != nil && !*sa.AdminStateUp {
		f = append(f, "paused")
	}
	return orDash(strings.Join(f, ","))
}

// endpointCell renders ip:port (IPv6 bracketed).
func endpointCell(ep rule.Endpoint) string {
	ip, port := "?", "?"
	if ep.EndpointIP != nil {
		ip = *ep.EndpointIP
	}
	if ep.TargetPort != nil {
		port = strconv.FormatInt(*ep.TargetPort, 10)
	}
	return net.JoinHostPort(ip, port)
}

// intCell renders an optional integer.
func intCell(p *int64) string {
	if p == nil {
		return "-"
	}
	return strconv.FormatInt(*p, 10)
}

// nixlCell renders an endpoint's NIXL port ("-" when unset).
func nixlCell(ep rule.Endpoint) string {
	if ep.NixlPort == 0 {
		return "-"
	}
	return strconv.FormatInt(ep.NixlPort, 10)
}
