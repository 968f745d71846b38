package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/llbproject/llb/rule"
)

// lbPath is the load-balancer collection under the REST base path.
const lbPath = "/netlox/v1/config/loadbalancer"

// maxRuleFileBytes bounds a -f rule file.
const maxRuleFileBytes = 16 << 20

// createOpts are the flags of "create lb".
type createOpts struct {
	fields    fieldFlags
	tcp       string
	udp       string
	sctp      string
	endpoints []string
	epRoles   []string
	nixlPorts []int
	sel       string
	mode      string
	security  string
	attach    bool
	detach    bool
	adminDown bool
	sources   []string
	secIPs    []string
	file      string
	dryRun    bool
}

func (a *app) createCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "create",
		Short: "Create a load-balancer rule",
		Args:  usageArgs(cobra.NoArgs, "llbctl create lb ..."),
		RunE:  func(cmd *cobra.Command, _ []string) error { return needSubcommand(cmd) },
	}
	c.AddCommand(a.createLBCmd(), a.createAPIKeyCmd())
	return c
}

func (a *app) createLBCmd() *cobra.Command {
	o := &createOpts{}
	c := &cobra.Command{
		Use:     "lb <externalIP> --tcp=<port>:<targetPort> --endpoints=<ip>:<weight>,... [flags] | lb -f rule.json",
		Aliases: []string{"loadbalancer"},
		Short:   "Create or replace a load-balancer rule (POST /netlox/v1/config/loadbalancer)",
		Long: `Create or replace a load-balancer rule.

The flags are loxicmd's; each sets the serviceArguments key of the same meaning
and is sent only when given. POSTing to an existing rule key replaces the rule
(--attachEP / --detachEP add or remove endpoints instead).

--endpoints takes IP:WEIGHT (the port comes from --tcp=<port>:<targetPort>),
IP:PORT:WEIGHT, and IP[:PORT]:WEIGHT:ROLE[:NIXL] with ROLE prefill, decode or
none (roles are written as words; loxicmd's --ep-role/--nixl-port lists, aligned
with --endpoints, work too). Bracket IPv6 addresses: [2001:db8::1]:8000:1.

--mode defaults to fullproxy (loxicmd's default is "default"): llb's data plane
serves fullproxy rules only.

-f FILE posts a JSON LoadbalanceEntry as-is ("-" reads standard input).`,
		Example: `  # P/D with Tier-1 trie and Tier-1.5 KV-exact routing (the routing-hierarchy seed)
  llbctl create lb 10.10.10.254 --tcp=2020 --host=10.10.10.254 --pd --pd-cache-aware \
    --kv-exact-mode=1 --kv-zmq-port=5557 --kv-hash-algo=sha256_cbor --kv-block-size=16 \
    --endpoints=192.0.2.1:8100:1:prefill:5600,198.51.100.1:8200:1:decode:5600

  # single pool, consistent hashing with bounded loads
  llbctl create lb 10.10.10.254 --tcp=2021:8000 --select=chwbl --host=10.10.10.254 \
    --endpoints=192.0.2.1:1,198.51.100.1:1

  # a rule kept as JSON
  llbctl create lb -f deploy/examples/pd-kv-exact.json`,
		Args: usageArgs(cobra.MaximumNArgs(1), "llbctl create lb <externalIP> [flags] | llbctl create lb -f FILE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			body, err := o.body(cmd.Flags(), args, a.stdin)
			if err != nil {
				return err
			}
			if o.dryRun {
				if !json.Valid(body) {
					return usagef("-f %s: the file is not valid JSON", o.file)
				}
				return writeJSON(a.stdout, body)
			}
			return a.postRule(body)
		},
	}
	o.register(c.Flags())
	return c
}

// body returns the JSON to POST: the -f file as-is, or the rule the flags
// describe.
func (o *createOpts) body(fs *pflag.FlagSet, args []string, stdin io.Reader) ([]byte, error) {
	if fs.Changed("file") {
		var extra []string
		if len(args) > 0 {
			extra = append(extra, "the externalIP argument")
		}
		fs.Visit(func(f *pflag.Flag) {
			if f.Name != "file" && f.Name != "dry-run" && !isGlobalFlag(f.Name) {
				extra = append(extra, "--"+f.Name)
			}
		})
		if len(extra) > 0 {
			return nil, usagef("-f posts the file as-is; drop %s", strings.Join(extra, ", "))
		}
		return readRuleFile(o.file, stdin)
	}
	if len(args) == 0 {
		return nil, usagef("create lb needs an externalIP argument, or -f FILE")
	}
	e, err := o.entry(fs, args[0])
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encoding the rule: %w", err)
	}
	return b, nil
}

// isGlobalFlag reports whether name is one of the root's persistent flags.
func isGlobalFlag(name string) bool {
	switch name {
	case "server", "token-file", "tls-ca", "insecure", "timeout", "output":
		return true
	}
	return false
}

// readRuleFile reads a -f file ("-": stdin).
func readRuleFile(path string, stdin io.Reader) ([]byte, error) {
	var r io.Reader
	if path == "-" {
		r = stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, usagef("-f: %v", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxRuleFileBytes+1))
	if err != nil {
		return nil, usagef("-f %s: %v", path, err)
	}
	if len(b) > maxRuleFileBytes {
		return nil, usagef("-f %s: larger than %d MiB", path, maxRuleFileBytes>>20)
	}
	return b, nil
}

// entry builds the rule the flags describe. Every problem of the command line
// is reported at once; the rule's semantics (which keys need which mode,
// P/D roles, ...) are llbd's to judge, and its answer names every problem.
func (o *createOpts) entry(fs *pflag.FlagSet, vipArg string) (*rule.LoadbalanceEntry, error) {
	var errs []error
	fail := func(err error) {
		var ue *usageError
		if errors.As(err, &ue) {
			err = ue.err
		}
		errs = append(errs, err)
	}
	sa := &rule.ServiceArguments{}

	vip := strings.TrimSuffix(strings.TrimPrefix(vipArg, "["), "]")
	if _, err := netip.ParseAddr(vip); err != nil {
		fail(fmt.Errorf("externalIP %q is not an IP address", vipArg))
	}
	sa.ExternalIP = vip

	var pp portPair
	var protos []string
	for _, p := range []struct{ name, val string }{{"tcp", o.tcp}, {"udp", o.udp}, {"sctp", o.sctp}} {
		if !fs.Changed(p.name) {
			continue
		}
		protos = append(protos, "--"+p.name)
		got, err := parsePortPair(p.name, p.val)
		if err != nil {
			fail(err)
			continue
		}
		pp, sa.Protocol = got, p.name
	}
	switch len(protos) {
	case 0:
		fail(errors.New("give the service port: --tcp=<port>:<targetPort> (or --udp, --sctp)"))
	case 1:
		sa.Port, sa.PortMax = ptr(pp.port), pp.portMax
	default:
		fail(fmt.Errorf("give one of %s: llbctl creates one rule per call", strings.Join(protos, ", ")))
	}

	if v, err := parseNamed("select", selectors, o.sel); err != nil {
		fail(err)
	} else {
		sa.Sel = v
	}
	if v, err := parseNamed("mode", modes, o.mode); err != nil {
		fail(err)
	} else {
		sa.Mode = v
	}
	if fs.Changed("security") {
		if v, err := parseNamed("security", securities, o.security); err != nil {
			fail(err)
		} else {
			sa.Security = v
		}
	}
	switch {
	case o.attach && o.detach:
		fail(errors.New("give --attachEP or --detachEP, not both"))
	case o.attach:
		sa.Oper = 1
	case o.detach:
		sa.Oper = 2
	}
	if o.adminDown {
		sa.AdminStateUp = ptr(false)
	}
	if err := o.fields.apply(sa); err != nil {
		fail(err)
	}

	eps, err := o.buildEndpoints(pp.target)
	if err != nil {
		fail(err)
	}
	e := &rule.LoadbalanceEntry{ServiceArguments: sa, Endpoints: eps}
	for _, s := range o.sources {
		e.AllowedSources = append(e.AllowedSources, rule.AllowedSource{Prefix: strings.TrimSpace(s)})
	}
	for _, s := range o.secIPs {
		e.SecondaryIPs = append(e.SecondaryIPs, rule.SecondaryIP{SecondaryIP: strings.TrimSpace(s)})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, &usageError{err}
	}
	return e, nil
}

// buildEndpoints parses --endpoints with the aligned --ep-role and
// --nixl-port lists; target is the default endpoint port.
func (o *createOpts) buildEndpoints(target int64) ([]rule.Endpoint, error) {
	if len(o.endpoints) == 0 {
		return nil, errors.New("give the endpoints: --endpoints=<ip>:<weight>,...")
	}
	var errs []error
	if len(o.epRoles) > 0 && len(o.epRoles) != len(o.endpoints) {
		errs = append(errs, fmt.Errorf("--ep-role has %d values for %d endpoints", len(o.epRoles), len(o.endpoints)))
	}
	if len(o.nixlPorts) > 0 && len(o.nixlPorts) != len(o.endpoints) {
		errs = append(errs, fmt.Errorf("--nixl-port has %d values for %d endpoints", len(o.nixlPorts), len(o.endpoints)))
	}
	out := make([]rule.Endpoint, 0, len(o.endpoints))
	for i, s := range o.endpoints {
		ep, err := parseEndpoint(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if len(o.epRoles) == len(o.endpoints) {
			r, err := parseRole(o.epRoles[i])
			switch {
			case err != nil:
				errs = append(errs, fmt.Errorf("--ep-role %d: %w", i+1, err))
			case ep.role >= 0 && ep.role != r:
				errs = append(errs, fmt.Errorf("endpoint %q: its role differs from --ep-role %q", s, o.epRoles[i]))
			default:
				ep.role = r
			}
		}
		if len(o.nixlPorts) == len(o.endpoints) {
			n := int64(o.nixlPorts[i])
			switch {
			case n < 0 || n > 65535:
				errs = append(errs, fmt.Errorf("--nixl-port %d: %d is outside 0–65535", i+1, n))
			case ep.nixl >= 0 && ep.nixl != n:
				errs = append(errs, fmt.Errorf("endpoint %q: its NIXL port differs from --nixl-port %d", s, n))
			default:
				ep.nixl = n
			}
		}
		port := ep.port
		if port == 0 {
			port = target
		}
		if port == 0 {
			errs = append(errs, fmt.Errorf("endpoint %q has no port: give --tcp=<port>:<targetPort>, or IP:PORT:WEIGHT", s))
			continue
		}
		rep := rule.Endpoint{EndpointIP: ptr(ep.ip), TargetPort: ptr(port), Weight: ptr(ep.weight)}
		if ep.role > 0 {
			rep.EpRole = ep.role
		}
		if ep.nixl > 0 {
			rep.NixlPort = ep.nixl
		}
		out = append(out, rep)
	}
	return out, errors.Join(errs...)
}

// postRule POSTs a rule body and prints llbd's answer.
func (a *app) postRule(body []byte) error {
	c, err := a.client()
	if err != nil {
		return err
	}
	res, err := c.do(a.ctx, http.MethodPost, lbPath, nil, body)
	if err != nil {
		return err
	}
	if err := check("create lb", res, errorOpts{}); err != nil {
		return err
	}
	return a.printResult(res.body)
}
