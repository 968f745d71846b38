package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/gateway"
	"github.com/llbproject/llb/internal/etcdconn"
	"github.com/llbproject/llb/replica"
	"github.com/llbproject/llb/restapi"
	"github.com/llbproject/llb/rulestore"
)

// config is llbd's configuration: flags, each with an LLB_* environment
// fallback (a flag on the command line wins over the environment, which wins
// over the default). docs/configuration.md documents every one.
type config struct {
	// Listen is the REST API's host:port (default ":11111", LoxiLB's port).
	Listen string
	// StateDir holds rules.json. Default: /var/lib/llb when writable, else
	// ./state; an explicitly given directory must be writable.
	StateDir string
	// stateDirExplicit is true when StateDir came from a flag or LLB_STATE_DIR.
	stateDirExplicit bool
	// TokenFile holds the REST bearer token; "" disables authentication.
	TokenFile string
	// TLSCert and TLSKey turn on HTTPS for the REST API; both or neither.
	TLSCert, TLSKey string
	// LogLevel is debug, info, warn or error (default info).
	LogLevel zerolog.Level
	// LogFormat is json, console or auto (default auto: console when stderr
	// is a terminal, JSON otherwise).
	LogFormat string
	// DrainTimeout bounds how long SIGTERM/SIGINT waits for in-flight
	// requests (default 15s; 1ms–10m).
	DrainTimeout time.Duration
	// BodyLimit caps a REST request body in bytes (default 1 MiB; 1 KiB–64 MiB).
	BodyLimit int64
	// MaxRules is the most rules the daemon holds (default 1024; 1–100000).
	MaxRules int
	// MaxRuleBytes bounds one rule as stored, in bytes of JSON (default
	// 64 KiB; 1 KiB–16 MiB).
	MaxRuleBytes int
	// ShowVersion prints the version and exits.
	ShowVersion bool
	// NoDataPlane runs the control plane alone: rules are validated,
	// persisted and listed, nothing is served (staging, tests).
	NoDataPlane bool
	// HideBackendAddrs keeps endpoint addresses out of what data-plane
	// clients see (X-Llb-Route, error bodies).
	HideBackendAddrs bool
	// AccessLog writes one access log line per data-plane request at Info
	// (default off: the line is then Debug detail).
	AccessLog bool
	// StreamPoller parks a data-plane SSE stream between its events with
	// the gateway's stream poller, holding no goroutine while it waits
	// (gateway.SetStreamPoller; Linux only, off by default).
	StreamPoller bool
	// DebugListen is the opt-in debug listener's loopback host:port (chaos
	// tests, debug.go); "" (the default) turns it off. A host that is not
	// a loopback address is refused.
	DebugListen string
	// BodyBufferBytes bounds the request bodies the data plane holds at once,
	// across every rule (default 1 GiB; 0 turns the bound off, else at
	// least the largest rule body limit, 16 MiB). A request whose body does
	// not fit is answered 503 body_buffer_full before its body is read.
	BodyBufferBytes int64
	// MaxConns bounds the data plane's client connections, across every
	// rule (default derived from the open-file limit,
	// gateway.DefaultMaxConns; 0 turns the bound off). A connection over it
	// is answered 503 too_many_connections (h2c: GOAWAY) and closed.
	MaxConns int
	// ClientSendTimeout is the send bound: a data-plane client that accepts
	// no byte of its answer for this long has its connection closed (an
	// h2c stream reset), a stream's upstream leg with it (default
	// gateway.DefaultClientSendTimeout, 60 s; 0 turns it off).
	ClientSendTimeout time.Duration
	// RouteTimeout is a tenth of how long a request waits for its routing
	// decision while the router handles no message (a stuck router); a
	// router that is slow but moving is waited for (default
	// actors.DefaultRouteTimeout, 2 s; at least 10 ms).
	RouteTimeout time.Duration
	// DecisionTimeout is how long a routing decision waits for the
	// inventory and session replies it fans out; a late reply counts as a
	// miss (default actors.DefaultDecisionTimeout, 5 ms; 1 ms to 1 s).
	DecisionTimeout time.Duration
	// MaxTenantLabels bounds the tenant label of the per-tenant metrics:
	// the first this many tenants get their own value, later ones count
	// as "_other" (default gateway.DefaultMaxTenantLabels, 64).
	MaxTenantLabels int
	// TokenizerDir is the default Hugging Face tokenizer directory of rules
	// with Tier 1.5 (kvTokenizerDir overrides it per rule): one model's
	// directory, or a root of directories named by served model name. ""
	// (the default) keeps the engines' /tokenize.
	TokenizerDir string
	// Cluster is cluster mode (docs/scale-out.md): empty Name is a single
	// node.
	Cluster clusterConfig
	// DataBind, when valid, is the address every rule's listener binds
	// instead of the rule's externalIP (--data-bind).
	DataBind netip.Addr
}

// clusterConfig is the cluster-mode part of config.
type clusterConfig struct {
	// Name turns cluster mode on: replicas with the same name and etcd act
	// as one router (--cluster-name).
	Name string
	// Advertise is this replica's cluster address HOST:PORT
	// (--cluster-advertise); required with Name.
	Advertise string
	// Etcd is how to reach etcd (--etcd-endpoints and the --etcd-* TLS and
	// credential flags); required with Name.
	Etcd etcdconn.Config
	// passwordFile is --etcd-password-file, read into Etcd.Password.
	passwordFile string
}

// flagSpec ties a flag to its environment variable.
type flagSpec struct {
	name, env, usage string
}

// usageError is a configuration error: a bad flag, environment variable or
// file named by one. llbd exits 2 on it.
type usageError struct{ err error }

// Error is the underlying message.
func (e usageError) Error() string { return e.err.Error() }

// Unwrap returns the underlying error.
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// defaultStateDirs are tried in order when no state directory is given.
func defaultStateDirs() []string { return []string{"/var/lib/llb", "state"} }

// parseConfig reads args and the environment. It prints the usage and returns
// flag.ErrHelp for -h/--help, and returns a usageError (exit 2) naming every
// bad flag or variable at once.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("llbd", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are returned, not printed twice
	var logLevel string
	var bodyLimit int64
	specs := []flagSpec{
		{"listen", "LLB_LISTEN", "REST API listen address, host:port"},
		{"state-dir", "LLB_STATE_DIR", "directory for rules.json (default /var/lib/llb if writable, else ./state)"},
		{"token-file", "LLB_TOKEN_FILE", "file holding the REST bearer token (empty: no authentication)"},
		{"tls-cert", "LLB_TLS_CERT", "PEM certificate for HTTPS on the REST API (needs --tls-key)"},
		{"tls-key", "LLB_TLS_KEY", "PEM private key for --tls-cert"},
		{"log-level", "LLB_LOG_LEVEL", "debug, info, warn or error"},
		{"log-format", "LLB_LOG_FORMAT", "json, console or auto (console when stderr is a terminal)"},
		{"drain-timeout", "LLB_DRAIN_TIMEOUT", "how long SIGTERM/SIGINT waits for in-flight requests"},
		{"body-limit", "LLB_BODY_LIMIT", "largest REST request body, in bytes"},
		{"max-rules", "LLB_MAX_RULES", "most rules the daemon holds; a POST beyond gets 422"},
		{"max-rule-bytes", "LLB_MAX_RULE_BYTES", "largest rule as stored, in bytes of JSON; a larger rule gets 422"},
		{"no-data-plane", "LLB_NO_DATA_PLANE", "run the REST control plane only: rules are stored and listed, no traffic is served"},
		{"hide-backend-addrs", "LLB_HIDE_BACKEND_ADDRS", "keep endpoint addresses out of X-Llb-Route and error bodies sent to clients"},
		{"access-log", "LLB_ACCESS_LOG", "log every data-plane request at info (off: only with --log-level debug)"},
		{"stream-poller", "LLB_STREAM_POLLER", "relay HTTP/1.1 SSE streams past the HTTP server and park each between its events with the epoll poller (an instance per core, in Go's netpoller), holding no goroutine, server write buffer or request context while it waits (Linux)"},
		{"debug-listen", "LLB_DEBUG_LISTEN", "loopback host:port of the debug listener (POST /debug/chaos/crash makes an actor panic; empty: off)"},
		{"cluster-name", "LLB_CLUSTER_NAME", "cluster mode: replicas with this name and the same etcd act as one router (empty: a single node)"},
		{"cluster-advertise", "LLB_CLUSTER_ADVERTISE", "this replica's cluster address HOST:PORT, which peers dial (cluster mode)"},
		{"etcd-endpoints", "LLB_ETCD_ENDPOINTS", "etcd client URLs, comma-separated: http://host:2379,... (cluster mode)"},
		{"etcd-cacert", "LLB_ETCD_CACERT", "PEM CA that verifies etcd's server certificates (https endpoints)"},
		{"etcd-cert", "LLB_ETCD_CERT", "PEM client certificate for etcd (needs --etcd-key)"},
		{"etcd-key", "LLB_ETCD_KEY", "PEM private key for --etcd-cert"},
		{"etcd-server-name", "LLB_ETCD_SERVER_NAME", "name to check in etcd's server certificates instead of the endpoint's host"},
		{"etcd-username", "LLB_ETCD_USERNAME", "etcd user (etcd auth; needs --etcd-password-file)"},
		{"etcd-password-file", "LLB_ETCD_PASSWORD_FILE", "file holding the etcd user's password"},
		{"data-bind", "LLB_DATA_BIND", "bind every rule's listener on this IP address instead of the rule's externalIP (replicas behind one VIP)"},
		{"body-buffer-bytes", "LLB_BODY_BUFFER_BYTES", "most request-body bytes the data plane holds at once, across every rule; a request over it gets 503 body_buffer_full (0: no bound but each rule's body limit)"},
		{"max-conns", "LLB_MAX_CONNS", "most data-plane client connections open at once, across every rule; one over it gets 503 too_many_connections and is closed (0: no bound; default derived from the open-file limit)"},
		{"client-send-timeout", "LLB_CLIENT_SEND_TIMEOUT", "close a data-plane client connection (reset an h2c stream) that accepts no byte of its answer for this long, ending its upstream leg (0: no bound but max_stream_duration)"},
		{"decision-timeout", "LLB_DECISION_TIMEOUT", "how long a routing decision waits for the inventory and session replies it asks for; a late reply counts as a miss (overlap 0, no session pin, llb_router_fanout_missed_total)"},
		{"route-timeout", "LLB_ROUTE_TIMEOUT", "answer 503 service_unavailable when the router handled no message for 10 of these in a row while a request waited for its decision (a slow but moving router is waited for)"},
		{"max-tenant-labels", "LLB_MAX_TENANT_LABELS", "most tenants that get their own tenant label in the llb_tenant_* metrics; later ones count as _other"},
		{"tokenizer-dir", "LLB_TOKENIZER_DIR", "Hugging Face tokenizer directory (or a root of them named by served model) for Tier 1.5 to tokenize in process; empty: the engines' /tokenize"},
	}
	usage := func(name string) string {
		for _, s := range specs {
			if s.name == name {
				return s.usage + " (env " + s.env + ")"
			}
		}
		return ""
	}
	fs.StringVar(&cfg.Listen, "listen", ":11111", usage("listen"))
	fs.StringVar(&cfg.StateDir, "state-dir", "", usage("state-dir"))
	fs.StringVar(&cfg.TokenFile, "token-file", "", usage("token-file"))
	fs.StringVar(&cfg.TLSCert, "tls-cert", "", usage("tls-cert"))
	fs.StringVar(&cfg.TLSKey, "tls-key", "", usage("tls-key"))
	fs.StringVar(&logLevel, "log-level", "info", usage("log-level"))
	fs.StringVar(&cfg.LogFormat, "log-format", "auto", usage("log-format"))
	fs.DurationVar(&cfg.DrainTimeout, "drain-timeout", 15*time.Second, usage("drain-timeout"))
	fs.Int64Var(&bodyLimit, "body-limit", restapi.DefaultBodyLimit, usage("body-limit"))
	fs.IntVar(&cfg.MaxRules, "max-rules", restapi.DefaultMaxRules, usage("max-rules"))
	fs.IntVar(&cfg.MaxRuleBytes, "max-rule-bytes", restapi.DefaultMaxRuleBytes, usage("max-rule-bytes"))
	fs.BoolVar(&cfg.ShowVersion, "version", false, "print the version and exit")
	fs.BoolVar(&cfg.NoDataPlane, "no-data-plane", false, usage("no-data-plane"))
	fs.StringVar(&cfg.DebugListen, "debug-listen", "", usage("debug-listen"))
	fs.BoolVar(&cfg.AccessLog, "access-log", false, usage("access-log"))
	fs.BoolVar(&cfg.StreamPoller, "stream-poller", false, usage("stream-poller"))
	fs.BoolVar(&cfg.HideBackendAddrs, "hide-backend-addrs", false, usage("hide-backend-addrs"))
	fs.Int64Var(&cfg.BodyBufferBytes, "body-buffer-bytes", gateway.DefaultBodyBufferBytes, usage("body-buffer-bytes"))
	fs.IntVar(&cfg.MaxConns, "max-conns", gateway.DefaultMaxConns(), usage("max-conns"))
	fs.DurationVar(&cfg.ClientSendTimeout, "client-send-timeout", gateway.DefaultClientSendTimeout, usage("client-send-timeout"))
	fs.DurationVar(&cfg.RouteTimeout, "route-timeout", actors.DefaultRouteTimeout, usage("route-timeout"))
	fs.DurationVar(&cfg.DecisionTimeout, "decision-timeout", actors.DefaultDecisionTimeout, usage("decision-timeout"))
	fs.IntVar(&cfg.MaxTenantLabels, "max-tenant-labels", gateway.DefaultMaxTenantLabels, usage("max-tenant-labels"))
	var etcdEndpoints, dataBind string
	fs.StringVar(&cfg.Cluster.Name, "cluster-name", "", usage("cluster-name"))
	fs.StringVar(&cfg.Cluster.Advertise, "cluster-advertise", "", usage("cluster-advertise"))
	fs.StringVar(&etcdEndpoints, "etcd-endpoints", "", usage("etcd-endpoints"))
	fs.StringVar(&cfg.Cluster.Etcd.CAFile, "etcd-cacert", "", usage("etcd-cacert"))
	fs.StringVar(&cfg.Cluster.Etcd.CertFile, "etcd-cert", "", usage("etcd-cert"))
	fs.StringVar(&cfg.Cluster.Etcd.KeyFile, "etcd-key", "", usage("etcd-key"))
	fs.StringVar(&cfg.Cluster.Etcd.ServerName, "etcd-server-name", "", usage("etcd-server-name"))
	fs.StringVar(&cfg.Cluster.Etcd.Username, "etcd-username", "", usage("etcd-username"))
	fs.StringVar(&cfg.Cluster.passwordFile, "etcd-password-file", "", usage("etcd-password-file"))
	fs.StringVar(&dataBind, "data-bind", "", usage("data-bind"))
	fs.StringVar(&cfg.TokenizerDir, "tokenizer-dir", "", usage("tokenizer-dir"))
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "Usage: llbd [flags]\n\nllbd is an LLM-aware L7 load balancer with LoxiLB's REST API.\n\nFlags:\n")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return cfg, err
		}
		return cfg, usagef("%v", err)
	}
	if fs.NArg() > 0 {
		return cfg, usagef("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var problems []error
	for _, s := range specs {
		v := getenv(s.env)
		if set[s.name] || v == "" {
			continue
		}
		if err := fs.Set(s.name, v); err != nil {
			problems = append(problems, fmt.Errorf("%s=%q is not a valid value for --%s: %v", s.env, v, s.name, err))
			_ = fs.Set(s.name, fs.Lookup(s.name).DefValue) // report only this problem for the flag
			continue
		}
		set[s.name] = true
	}
	cfg.stateDirExplicit = set["state-dir"]
	cfg.BodyLimit = bodyLimit
	lvl, err := zerolog.ParseLevel(strings.ToLower(logLevel))
	if err != nil || logLevel == "" || lvl > zerolog.ErrorLevel || lvl < zerolog.DebugLevel {
		problems = append(problems, fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel))
	}
	cfg.LogLevel = lvl
	cfg.Cluster.Etcd.Endpoints = etcdconn.ParseEndpoints(etcdEndpoints)
	if dataBind != "" {
		a, err := netip.ParseAddr(dataBind)
		if err != nil {
			problems = append(problems, fmt.Errorf("--data-bind %q: want an IP address (0.0.0.0 or :: binds every address)", dataBind))
		}
		cfg.DataBind = a.Unmap()
	}
	problems = append(problems, cfg.validate()...)
	if err := errors.Join(problems...); err != nil {
		return cfg, usageError{err}
	}
	return cfg, nil
}

// validate checks everything that can be checked before starting.
func (c *config) validate() []error {
	var errs []error
	if err := checkListen(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen %q: %v", c.Listen, err))
	}
	switch c.LogFormat {
	case "json", "console", "auto":
	default:
		errs = append(errs, fmt.Errorf("--log-format %q: want json, console or auto", c.LogFormat))
	}
	if c.DrainTimeout < time.Millisecond || c.DrainTimeout > 10*time.Minute {
		errs = append(errs, fmt.Errorf("--drain-timeout %s: want 1ms to 10m", c.DrainTimeout))
	}
	if c.BodyLimit < 1<<10 || c.BodyLimit > 64<<20 {
		errs = append(errs, fmt.Errorf("--body-limit %d: want 1024 to 67108864 bytes", c.BodyLimit))
	}
	if c.MaxRules < 1 || c.MaxRules > 100000 {
		errs = append(errs, fmt.Errorf("--max-rules %d: want 1 to 100000", c.MaxRules))
	}
	if c.MaxRuleBytes < 1<<10 || c.MaxRuleBytes > 16<<20 {
		errs = append(errs, fmt.Errorf("--max-rule-bytes %d: want 1024 to 16777216 bytes", c.MaxRuleBytes))
	}
	if c.BodyBufferBytes < 0 || c.BodyBufferBytes > 0 && c.BodyBufferBytes < gateway.DefaultBodyLimit {
		errs = append(errs, fmt.Errorf("--body-buffer-bytes %d: below the largest rule body limit (%d bytes), a body at that limit could never be buffered; want 0 (no bound) or at least %d",
			c.BodyBufferBytes, gateway.DefaultBodyLimit, gateway.DefaultBodyLimit))
	}
	if c.MaxConns < 0 {
		errs = append(errs, fmt.Errorf("--max-conns %d: want 0 (no bound) or a positive number of connections", c.MaxConns))
	}
	if c.ClientSendTimeout < 0 || c.ClientSendTimeout > 0 && c.ClientSendTimeout < time.Second {
		errs = append(errs, fmt.Errorf("--client-send-timeout %s: want 0 (no bound) or at least 1s", c.ClientSendTimeout))
	}
	if c.RouteTimeout < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("--route-timeout %s: want at least 10ms", c.RouteTimeout))
	}
	if c.DecisionTimeout < time.Millisecond || c.DecisionTimeout > time.Second {
		errs = append(errs, fmt.Errorf("--decision-timeout %s: want 1ms to 1s", c.DecisionTimeout))
	}
	if c.MaxTenantLabels < 1 || c.MaxTenantLabels > 10000 {
		errs = append(errs, fmt.Errorf("--max-tenant-labels %d: want 1 to 10000", c.MaxTenantLabels))
	}
	if (c.TLSCert == "") != (c.TLSKey == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key go together: give both or neither"))
	}
	if c.DebugListen != "" {
		if err := checkLoopback(c.DebugListen); err != nil {
			errs = append(errs, fmt.Errorf("--debug-listen %q: %v", c.DebugListen, err))
		}
	}
	if c.TokenizerDir != "" {
		if !filepath.IsAbs(c.TokenizerDir) {
			errs = append(errs, fmt.Errorf("--tokenizer-dir %q: want an absolute path", c.TokenizerDir))
		} else if st, err := os.Stat(c.TokenizerDir); err != nil || !st.IsDir() {
			errs = append(errs, fmt.Errorf("--tokenizer-dir %q: not a directory", c.TokenizerDir))
		}
	}
	errs = append(errs, c.validateCluster()...)
	return append(errs, unreadable(map[string]string{"--token-file": c.TokenFile, "--tls-cert": c.TLSCert, "--tls-key": c.TLSKey})...)
}

// unreadable reports, by flag, the files given that cannot be opened.
func unreadable(files map[string]string) []error {
	var errs []error
	for flagName, path := range files {
		if path == "" {
			continue
		}
		if f, err := os.Open(path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", flagName, err))
		} else {
			f.Close()
		}
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return errs
}

func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number in 0..65535", port)
	}
	return nil
}

// resolveStateDir picks and prepares the state directory: the given one (which
// must be writable), or the first writable of candidates. It reports whether
// it fell back from the first candidate.
func resolveStateDir(cfg config, candidates []string) (dir string, fellBack bool, err error) {
	if cfg.stateDirExplicit {
		if err := ensureWritable(cfg.StateDir); err != nil {
			return "", false, usagef("--state-dir %s: %v", cfg.StateDir, err)
		}
		return cfg.StateDir, false, nil
	}
	var tried []string
	for i, c := range candidates {
		if err := ensureWritable(c); err != nil {
			tried = append(tried, fmt.Sprintf("%s (%v)", c, err))
			continue
		}
		abs, err := filepath.Abs(c)
		if err != nil {
			abs = c
		}
		return abs, i > 0, nil
	}
	return "", false, usagef("no writable state directory: tried %s; set --state-dir", strings.Join(tried, ", "))
}

// ensureWritable creates dir (0700) if needed and proves it writable.
func ensureWritable(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".llbd-probe-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// validateCluster checks the cluster flags: all of them need
// --cluster-name, which needs an advertise address and etcd; the TLS and
// password files must be readable. The password is read here.
func (c *config) validateCluster() []error {
	cl := &c.Cluster
	if cl.Name == "" {
		var stray []string
		for name, v := range map[string]bool{
			"--cluster-advertise": cl.Advertise != "", "--etcd-endpoints": len(cl.Etcd.Endpoints) > 0,
			"--etcd-cacert": cl.Etcd.CAFile != "", "--etcd-cert": cl.Etcd.CertFile != "", "--etcd-key": cl.Etcd.KeyFile != "",
			"--etcd-server-name": cl.Etcd.ServerName != "", "--etcd-username": cl.Etcd.Username != "",
			"--etcd-password-file": cl.passwordFile != "",
		} {
			if v {
				stray = append(stray, name)
			}
		}
		if len(stray) == 0 {
			return nil
		}
		slices.Sort(stray)
		return []error{fmt.Errorf("%s: cluster settings without --cluster-name (LLB_CLUSTER_NAME), which turns cluster mode on", strings.Join(stray, ", "))}
	}
	var errs []error
	if c.NoDataPlane {
		errs = append(errs, errors.New("--cluster-name needs the data plane (a replica routes): drop --no-data-plane"))
	}
	if cl.Advertise == "" {
		errs = append(errs, errors.New("--cluster-name needs --cluster-advertise HOST:PORT (LLB_CLUSTER_ADVERTISE), the address peers reach this replica on"))
	}
	if len(cl.Etcd.Endpoints) == 0 {
		errs = append(errs, errors.New("--cluster-name needs --etcd-endpoints URL,URL (LLB_ETCD_ENDPOINTS)"))
	}
	if cl.passwordFile != "" {
		b, err := os.ReadFile(cl.passwordFile)
		if err != nil {
			errs = append(errs, fmt.Errorf("--etcd-password-file: %v", err))
		}
		cl.Etcd.Password = strings.TrimRight(string(b), "\r\n")
	}
	if (cl.Etcd.Username == "") != (cl.passwordFile == "") {
		errs = append(errs, errors.New("--etcd-username and --etcd-password-file go together"))
	}
	errs = append(errs, unreadable(map[string]string{"--etcd-cacert": cl.Etcd.CAFile, "--etcd-cert": cl.Etcd.CertFile, "--etcd-key": cl.Etcd.KeyFile})...)
	if cl.Advertise != "" && len(cl.Etcd.Endpoints) > 0 {
		rc := replica.Config{ClusterName: cl.Name, Advertise: cl.Advertise, Etcd: cl.Etcd}
		if err := rc.Validate(); err != nil {
			for _, e := range unjoin(err) {
				errs = append(errs, e)
			}
		}
	} else if err := rulestore.ValidClusterName(cl.Name); err != nil {
		errs = append(errs, fmt.Errorf("--cluster-name: %v", err))
	}
	return errs
}

// unjoin splits an errors.Join into its parts.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
