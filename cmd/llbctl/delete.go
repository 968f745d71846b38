package main

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/restapi"
)

// deleteOpts are the flags of "delete lb".
type deleteOpts struct {
	tcp, udp, sctp string
	host           string
	mark           int64
	name           string
	all            bool
	ignoreNotFound bool
}

func (a *app) deleteCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "delete",
		Short: "Delete load-balancer rules",
		Args:  usageArgs(cobra.NoArgs, "llbctl delete lb ..."),
		RunE:  func(cmd *cobra.Command, _ []string) error { return needSubcommand(cmd) },
	}
	o := &deleteOpts{}
	lb := &cobra.Command{
		Use:     "lb <externalIP> --tcp=<port>[-<portMax>] [--host <host>] [--mark <n>] | lb --name <name> | lb --all",
		Aliases: []string{"loadbalancer"},
		Short:   "Delete a rule by key, all rules with a name, or every rule",
		Long: `Delete a rule by its key (VIP, protocol, port, host, mark), every rule with a
name, or every rule.

A rule created with --host is keyed by it: give the same --host to delete it
(llbd's 404 names the rule that does exist on that VIP and port).`,
		Example: `  llbctl delete lb 10.10.10.254 --tcp=2020 --host=10.10.10.254
  llbctl delete lb --name chat-pool
  llbctl delete lb --all`,
		Args: usageArgs(cobra.MaximumNArgs(1), "llbctl delete lb <externalIP> --tcp=<port> | --name <name> | --all"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.deleteLB(cmd, o, args)
		},
	}
	f := lb.Flags()
	f.StringVar(&o.tcp, "tcp", "", "TCP service port, <port>[-<portMax>]")
	f.StringVar(&o.udp, "udp", "", "UDP service port")
	f.StringVar(&o.sctp, "sctp", "", "SCTP service port")
	f.StringVar(&o.host, "host", "", "the rule's host key")
	f.Int64Var(&o.mark, "mark", 0, "the rule's mark (serviceArguments.block)")
	f.StringVar(&o.name, "name", "", "delete every rule with this name")
	f.BoolVar(&o.all, "all", false, "delete every rule")
	f.BoolVar(&o.ignoreNotFound, "ignore-not-found", false, "with --name: succeed when no rule has the name")
	c.AddCommand(lb, a.deleteAPIKeyCmd())
	return c
}

// deleteLB picks the form the flags name and runs it.
func (a *app) deleteLB(cmd *cobra.Command, o *deleteOpts, args []string) error {
	f := cmd.Flags()
	byKey := len(args) == 1
	forms := 0
	for _, on := range []bool{byKey, f.Changed("name"), o.all} {
		if on {
			forms++
		}
	}
	if forms != 1 {
		return usagef("delete lb takes exactly one of: <externalIP> --tcp=<port>, --name <name>, --all")
	}
	if !byKey {
		var keyFlags []string
		for _, n := range []string{"tcp", "udp", "sctp", "host", "mark"} {
			if f.Changed(n) {
				keyFlags = append(keyFlags, "--"+n)
			}
		}
		if len(keyFlags) > 0 {
			return usagef("%s name a rule by key: give the externalIP too, or drop them", strings.Join(keyFlags, ", "))
		}
	}
	if o.ignoreNotFound && !f.Changed("name") {
		return usagef("--ignore-not-found goes with --name")
	}
	switch {
	case o.all:
		return a.deleteAt("delete lb --all", lbPath+"/all", nil, errorOpts{})
	case f.Changed("name"):
		return a.deleteByName(o.name, o.ignoreNotFound)
	}
	path, q, err := o.keyPath(f.Changed, args[0])
	if err != nil {
		return err
	}
	return a.deleteAt("delete lb", path, q, errorOpts{
		hint404: "give the rule's key as it was created: its --host, --mark and port range (llbctl get lb shows them)",
	})
}

// keyPath builds LoxiLB's DELETE-by-key route.
func (o *deleteOpts) keyPath(changed func(string) bool, vipArg string) (string, url.Values, error) {
	vip := strings.TrimSuffix(strings.TrimPrefix(vipArg, "["), "]")
	if _, err := netip.ParseAddr(vip); err != nil {
		return "", nil, usagef("externalIP %q is not an IP address", vipArg)
	}
	var proto, spec string
	n := 0
	for _, p := range []struct{ name, val string }{{"tcp", o.tcp}, {"udp", o.udp}, {"sctp", o.sctp}} {
		if changed(p.name) {
			n++
			proto, spec = p.name, p.val
		}
	}
	if n != 1 {
		return "", nil, usagef("give the rule's port with exactly one of --tcp, --udp, --sctp")
	}
	if strings.Contains(spec, ":") {
		return "", nil, usagef("--%s %q: give the service port only (<port>[-<portMax>]), no target port", proto, spec)
	}
	pp, err := parsePortPair(proto, spec)
	if err != nil {
		return "", nil, err
	}
	if o.mark < 0 || o.mark > 4294967295 {
		return "", nil, usagef("--mark %d is outside 0–4294967295", o.mark)
	}
	var b strings.Builder
	b.WriteString(lbPath)
	if changed("host") && o.host != "" {
		b.WriteString("/hosturl/" + url.PathEscape(o.host))
	}
	b.WriteString("/externalipaddress/" + url.PathEscape(vip) + "/port/" + strconv.FormatInt(pp.port, 10))
	if pp.portMax != 0 {
		b.WriteString("/portmax/" + strconv.FormatInt(pp.portMax, 10))
	}
	b.WriteString("/protocol/" + proto)
	var q url.Values
	if o.mark != 0 {
		q = url.Values{"block": {strconv.FormatInt(o.mark, 10)}}
	}
	return b.String(), q, nil
}

// deleteByName deletes every rule with the name. LoxiLB answers Success
// even when no rule has it, so llbctl looks first and says so.
func (a *app) deleteByName(name string, ignoreNotFound bool) error {
	if name == "" {
		return usagef("--name is empty")
	}
	body, err := a.get("delete lb --name", lbPath+"/all", nil, errorOpts{})
	if err != nil {
		return err
	}
	var all restapi.AllView
	if err := decode("delete lb --name", body, &all); err != nil {
		return err
	}
	n := 0
	for _, e := range all.LbAttr {
		if e.ServiceArguments != nil && e.ServiceArguments.Name == name {
			n++
		}
	}
	if n == 0 {
		if ignoreNotFound {
			_, err := fmt.Fprintf(a.stdout, "no rule is named %q\n", name)
			return err
		}
		return &notFoundError{fmt.Sprintf("delete lb --name: no rule is named %q; nothing was deleted "+
			"(llbctl get lb lists the rules; --ignore-not-found makes this a success)", name)}
	}
	return a.deleteAt("delete lb --name", lbPath+"/name/"+url.PathEscape(name), nil, errorOpts{})
}

// deleteAt sends a DELETE and prints the answer.
func (a *app) deleteAt(op, path string, q url.Values, o errorOpts) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	res, err := c.do(a.ctx, http.MethodDelete, path, q, nil)
	if err != nil {
		return err
	}
	if err := check(op, res, o); err != nil {
		return err
	}
	return a.printResult(res.body)
}
