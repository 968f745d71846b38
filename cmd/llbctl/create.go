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

	"github.com/llbproject/llb/restapi"
)

// lbPath is the load-balancer collection under the REST base path.
const lbPath = "/netlox/v1/config/loadbalancer"

// maxRuleFileBytes bounds a -f rule file.
const maxRuleFileBytes = 16 << 20

// createAliases are the short flag names accepted beside loxicmd's.
var createAliases = map[string]string{
	"pd":             "pd-disagg",
	"cb":             "cb-enable",
	"sse":            "sse-mode",
	"pd-balance-abs": "pd-balance-abs-threshold",
}

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
	c.AddCommand(a.createLBCmd())
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

// register defines the flags of "create lb".
func (o *createOpts) register(fs *pflag.FlagSet) {
	fs.StringVarP(&o.file, "file", "f", "", "post this JSON rule file as-is (\"-\": standard input)")
	fs.BoolVar(&o.dryRun, "dry-run", false, "print the JSON that would be posted and exit")
	fs.StringVar(&o.tcp, "tcp", "", "TCP service port and default endpoint port, <port>[-<portMax>][:<targetPort>]")
	fs.StringVar(&o.udp, "udp", "", "UDP service port, as --tcp")
	fs.StringVar(&o.sctp, "sctp", "", "SCTP service port, as --tcp")
	fs.StringSliceVar(&o.endpoints, "endpoints", nil, "endpoints: IP:WEIGHT, IP:PORT:WEIGHT or IP[:PORT]:WEIGHT:ROLE[:NIXL], comma-separated")
	fs.StringSliceVar(&o.epRoles, "ep-role", nil, "per-endpoint role aligned with --endpoints: none|prefill|decode (or 0|1|2)")
	fs.IntSliceVar(&o.nixlPorts, "nixl-port", nil, "per-endpoint NIXL side-channel port aligned with --endpoints")
	fs.StringVar(&o.sel, "select", "rr", "endpoint selector: "+names(selectors))
	fs.StringVar(&o.mode, "mode", "fullproxy", "LB mode: "+names(modes))
	fs.StringVar(&o.security, "security", "", "TLS: "+names(securities))
	fs.BoolVar(&o.attach, "attachEP", false, "add the endpoints to the existing rule (oper 1)")
	fs.BoolVar(&o.detach, "detachEP", false, "remove the endpoints from the existing rule (oper 2)")
	fs.BoolVar(&o.adminDown, "admin-down", false, "create the rule paused (adminStateUp false)")
	fs.StringSliceVar(&o.sources, "sources", nil, "allowed client source CIDRs")
	fs.StringSliceVar(&o.secIPs, "secips", nil, "secondary IPs (SCTP multihoming)")

	f := &o.fields
	f.fs = fs
	type sa = restapi.ServiceArguments
	// Core.
	f.str("name", "rule name", func(s *sa, v string) { s.Name = v })
	f.str("host", "L7 host key (part of the rule key)", func(s *sa, v string) { s.Host = v })
	f.int64("mark", "rule mark, serviceArguments.block (part of the rule key)", func(s *sa, v int64) { s.Block = v })
	f.boolean("bgp", "advertise the VIP over BGP", func(s *sa, v bool) { s.BGP = v })
	f.boolean("monitor", "probe the endpoints", func(s *sa, v bool) { s.Monitor = v })
	f.int64("inatimeout", "idle session timeout in seconds (inactiveTimeOut)", func(s *sa, v int64) { s.InactiveTimeOut = v })
	f.boolean("ppv2en", "send a PROXY v2 header to endpoints (tcp)", func(s *sa, v bool) { s.ProxyProtocolV2 = v })
	f.boolean("egress", "egress rule", func(s *sa, v bool) { s.Egress = v })
	f.str("probetype", "health probe: tcp|udp|sctp|http|https|ping|none", func(s *sa, v string) { s.ProbeType = v })
	f.int64("probeport", "health probe port", func(s *sa, v int64) { s.ProbePort = v })
	f.str("probereq", "probe request (HTTP path)", func(s *sa, v string) { s.ProbeReq = v })
	f.str("proberesp", "expected probe response (substring)", func(s *sa, v string) { s.ProbeResp = v })
	f.int64("probetimeout", "probe period in seconds (probeTimeout)", func(s *sa, v int64) { s.ProbeTimeout = v })
	f.int64("proberetries", "consecutive failures before an endpoint is inactive", func(s *sa, v int64) { s.ProbeRetries = v })
	f.int64("connection-limit", "concurrent connection ceiling (0 = unlimited)", func(s *sa, v int64) { s.ConnectionLimit = v })
	// L7.
	f.str("model-name", "model_name", func(s *sa, v string) { s.ModelName = v })
	f.str("path-prefix", "path_prefix, e.g. /v1", func(s *sa, v string) { s.PathPrefix = v })
	f.str("path-match-mode", "path_match_mode: disabled|prefix|exact", func(s *sa, v string) { s.PathMatchMode = ptr(v) })
	f.str("session-header-name", "session_header_name (sel rr or persist)", func(s *sa, v string) { s.SessionHeaderName = v })
	f.str("trace-type", "trace_type", func(s *sa, v string) { s.TraceType = v })
	f.str("backend-protocol", "backend_protocol: http1|http2|both", func(s *sa, v string) { s.BackendProtocol = ptr(v) })
	f.int64("hsts-max-age", "hsts_max_age in seconds", func(s *sa, v int64) { s.HSTSMaxAge = v })
	f.boolean("hsts-include-subdomains", "hsts_include_subdomains", func(s *sa, v bool) { s.HSTSIncludeSubdomains = v })
	f.boolean("hsts-preload", "hsts_preload", func(s *sa, v bool) { s.HSTSPreload = v })
	// SSE and breaker.
	f.boolean("sse-mode", "SSE streaming mode, sse_mode (alias --sse)", func(s *sa, v bool) { s.SSEMode = v })
	f.int64("max-stream-duration", "max_stream_duration_sec", func(s *sa, v int64) { s.MaxStreamDurationSec = v })
	f.int64("backend-keepalive-interval", "backend_keepalive_interval_sec", func(s *sa, v int64) { s.BackendKeepaliveIntervalSec = v })
	f.boolean("cb-enable", "per-endpoint circuit breaker, cb_enable (alias --cb)", func(s *sa, v bool) { s.CBEnable = v })
	// CHWBL.
	f.int64("chwbl-hash-level", "chwbl_prefix_hash_level 1|2|3", func(s *sa, v int64) { s.ChwblPrefixHashLevel = ptr(v) })
	f.int64("chwbl-hash-flags", "chwbl_prefix_hash_flags bitmask 0-255 (0 = auto)", func(s *sa, v int64) { s.ChwblPrefixHashFlags = ptr(v) })
	f.int64("chwbl-load-factor", "chwbl_mean_load_factor 100-300 (% of mean load)", func(s *sa, v int64) { s.ChwblMeanLoadFactor = v })
	f.int64("chwbl-replication", "chwbl_replication, virtual nodes per endpoint", func(s *sa, v int64) { s.ChwblReplication = v })
	f.boolean("chwbl-cache-salt", "chwbl_enable_cache_salt", func(s *sa, v bool) { s.ChwblEnableCacheSalt = ptr(v) })
	// P/D.
	f.boolean("pd-disagg", "prefill/decode disaggregation, pd_disagg_mode (alias --pd)", func(s *sa, v bool) { s.PDDisaggMode = v })
	f.boolean("pd-cache-aware", "Tier-1 radix-trie affinity, pd_cache_aware_mode", func(s *sa, v bool) { s.PDCacheAwareMode = v })
	f.int64("pd-session-ttl", "Tier-0 session pin lifetime in seconds, pd_session_ttl_sec", func(s *sa, v int64) { s.PDSessionTTLSec = v })
	f.int64("pd-cache-threshold", "Tier-1 minimum match rate in percent, pd_cache_threshold", func(s *sa, v int64) { s.PDCacheThreshold = v })
	f.int64("pd-balance-abs-threshold", "Tier-1 imbalance guard, pd_balance_abs_threshold (alias --pd-balance-abs)", func(s *sa, v int64) { s.PDBalanceAbsThreshold = v })
	f.int64("pd-bootstrap-port", "pdBootstrapPort (sglang P/D)", func(s *sa, v int64) { s.PDBootstrapPort = v })
	// KV-exact.
	f.int64("kv-exact-mode", "Tier-1.5 KV-exact routing, kvExactMode: 0 off, 1 P/D, 3 single pool", func(s *sa, v int64) { s.KVExactMode = v })
	f.int64("kv-block-size", "kvBlockSize, tokens per block (vLLM --block-size)", func(s *sa, v int64) { s.KVBlockSize = v })
	f.str("kv-hash-algo", "kvHashAlgo: sha256_cbor|xxhash_cbor (best omitted)", func(s *sa, v string) { s.KVHashAlgo = v })
	f.int64("kv-zmq-port", "kvZmqPort, the engines' KV-event PUB port", func(s *sa, v int64) { s.KVZmqPort = v })
	f.int64("kv-warmup", "kvWarmupSec, Tier-1.5 warm-up after a feed connects", func(s *sa, v int64) { s.KVWarmupSec = v })
	f.str("kv-engine-type", "kvEngineType: vllm|sglang|trtllm|llamacpp (immutable)", func(s *sa, v string) { s.KVEngineType = v })
	f.int64("kv-dp-ranks", "kvDpRankCount, data-parallel ranks 1-8", func(s *sa, v int64) { s.KVDpRankCount = v })
	f.str("kv-none-hash-seed", "kvNoneHashSeed (llb): the workers' PYTHONHASHSEED", func(s *sa, v string) { s.KVNoneHashSeed = ptr(v) })
	f.int64("kv-replay-port", "kvReplayPort (llb): the workers' KV-event replay port", func(s *sa, v int64) { s.KVReplayPort = v })
	f.str("kv-block-key", "kvBlockKey (llb): hash|tokens", func(s *sa, v string) { s.KVBlockKey = v })
	// Admission (fc_*): sent when given; 0 or inherit resets a stored value.
	f.str("fc-mode", "fc_mode: off|observe|enforce|inherit", func(s *sa, v string) { s.FCMode = ptr(v) })
	f.int64("fc-max-outstanding", "fc_max_outstanding", func(s *sa, v int64) { s.FCMaxOutstanding = ptr(v) })
	f.int64("fc-ep-max-inflight", "fc_ep_max_inflight", func(s *sa, v int64) { s.FCEpMaxInflight = ptr(v) })
	f.int64("fc-prefill-max-inflight", "fc_prefill_max_inflight", func(s *sa, v int64) { s.FCPrefillMaxInflight = ptr(v) })
	f.int64("fc-decode-max-inflight", "fc_decode_max_inflight", func(s *sa, v int64) { s.FCDecodeMaxInflight = ptr(v) })
	f.int64("fc-max-queue-depth", "fc_max_queue_depth", func(s *sa, v int64) { s.FCMaxQueueDepth = ptr(v) })
	f.int64("fc-max-queue-wait-ms", "fc_max_queue_wait_ms", func(s *sa, v int64) { s.FCMaxQueueWaitMs = ptr(v) })
	f.int64("fc-telemetry-stale-ms", "fc_telemetry_stale_ms", func(s *sa, v int64) { s.FCTelemetryStaleMs = ptr(v) })
	f.str("fc-adaptive", "fc_adaptive: on|off|inherit", func(s *sa, v string) { s.FCAdaptive = ptr(v) })
	f.int64("fc-warmup-ms", "fc_warmup_ms", func(s *sa, v int64) { s.FCWarmupMs = ptr(v) })
	f.int64("fc-ttft-target-ms", "fc_ttft_target_ms", func(s *sa, v int64) { s.FCTTFTTargetMs = ptr(v) })
	f.int64("fc-tenant-max-share-pct", "fc_tenant_max_share_pct", func(s *sa, v int64) { s.FCTenantMaxSharePct = ptr(v) })
	f.str("fc-expose-headers", "fc_expose_headers: on|off|inherit", func(s *sa, v string) { s.FCExposeHeaders = ptr(v) })

	fs.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		if n, ok := createAliases[name]; ok {
			name = n
		}
		return pflag.NormalizedName(name)
	})
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
func (o *createOpts) entry(fs *pflag.FlagSet, vipArg string) (*restapi.LoadbalanceEntry, error) {
	var errs []error
	fail := func(err error) {
		var ue *usageError
		if errors.As(err, &ue) {
			err = ue.err
		}
		errs = append(errs, err)
	}
	sa := &restapi.ServiceArguments{}

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
	e := &restapi.LoadbalanceEntry{ServiceArguments: sa, Endpoints: eps}
	for _, s := range o.sources {
		e.AllowedSources = append(e.AllowedSources, restapi.AllowedSource{Prefix: strings.TrimSpace(s)})
	}
	for _, s := range o.secIPs {
		e.SecondaryIPs = append(e.SecondaryIPs, restapi.SecondaryIP{SecondaryIP: strings.TrimSpace(s)})
	}
	if err := errors.Join(errs...); err != nil {
		return nil, &usageError{err}
	}
	return e, nil
}

// buildEndpoints parses --endpoints with the aligned --ep-role and
// --nixl-port lists; target is the default endpoint port.
func (o *createOpts) buildEndpoints(target int64) ([]restapi.Endpoint, error) {
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
	out := make([]restapi.Endpoint, 0, len(o.endpoints))
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
		rep := restapi.Endpoint{EndpointIP: ptr(ep.ip), TargetPort: ptr(port), Weight: ptr(ep.weight)}
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
