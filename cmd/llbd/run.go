package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/catalog"
	"github.com/llbproject/llb/gateway"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/lifecycle"
	"github.com/llbproject/llb/replica"
	"github.com/llbproject/llb/restapi"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/rulestore"
	"github.com/llbproject/llb/tenant"
)

// exitCode maps run's error to the process exit status, printing it.
func exitCode(err error, stderr io.Writer) int {
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "llbd: %v\nRun llbd --help for the flags.\n", strings.ReplaceAll(ue.Error(), "\n", "\nllbd: "))
		return exitUsage
	default:
		fmt.Fprintf(stderr, "llbd: %v\n", err)
		return exitFailure
	}
}

// run is llbd: parse the configuration, wire the parts, serve until ctx is
// cancelled (SIGTERM/SIGINT), then drain in-flight requests up to the drain
// timeout and return nil. Everything main does not need to own happens here,
// so tests run the daemon in-process.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	cfg, err := parseConfig(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	if cfg.ShowVersion {
		fmt.Fprintln(stdout, buildVersion())
		return nil
	}
	base := newLogger(cfg.LogFormat, cfg.LogLevel, stderr)
	log := base.With().Str(logfield.Component, "llbd").Logger()

	stateDir, fellBack, err := resolveStateDir(cfg, defaultStateDirs())
	if err != nil {
		return err
	}
	if fellBack {
		log.Warn().Str(logfield.StateDir, stateDir).Msg("/var/lib/llb is not writable; keeping state in ./state (set --state-dir to choose)")
	}
	var token string
	if cfg.TokenFile != "" {
		if token, err = restapi.LoadToken(cfg.TokenFile); err != nil {
			return usagef("--token-file: %v", err)
		}
	}
	var tlsConf *tls.Config
	if cfg.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCert, cfg.TLSKey)
		if err != nil {
			return usagef("--tls-cert/--tls-key: %v", err)
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}

	set := metrics.NewSet()
	shared, stateFile, closeStore, err := openSharedStore(cfg, base)
	if err != nil {
		return err
	}
	defer closeStore()
	// The API keys and tenant limits: the catalog publishes them, the data
	// plane enforces them.
	keys := tenant.NewGate()
	rt, closeRuntime, err := newRuntime(base, set, getenv, cfg, keys)
	if err != nil {
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
		defer cancel()
		closeRuntime(dctx)
	}()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("rest api: %w", err)
	}
	defer ln.Close() // after Serve, a second close is harmless
	selfAddrs := []netip.AddrPort{addrPortOf(ln.Addr())}
	if cfg.DebugListen != "" {
		debugAddr, stopDebug, err := startDebugListener(cfg.DebugListen, lookupFor(rt), log)
		if err != nil {
			return err
		}
		selfAddrs = append(selfAddrs, addrPortOf(debugAddr))
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			stopDebug(dctx)
		}()
	}
	srv, err := restapi.New(restapi.Config{
		Logger:         base, // restapi adds its own component field
		Metrics:        set,
		ProcessMetrics: true,
		Runtime:        rt,
		StateDir:       stateDir,
		StateFile:      stateFile,
		Shared:         shared,
		Keys:           keys,
		Token:          token,
		BodyLimit:      cfg.BodyLimit,
		SelfAddrs:      selfAddrs,
		MaxRules:       cfg.MaxRules,
		MaxRuleBytes:   cfg.MaxRuleBytes,
		Version:        buildVersion(),
	})
	if err != nil {
		return err
	}

	warnExposure(log, ln.Addr(), token != "", tlsConf != nil)
	hs := srv.HTTPServer(tlsConf)
	served := make(chan error, 1)
	go func() {
		if tlsConf != nil {
			served <- hs.ServeTLS(ln, "", "")
			return
		}
		served <- hs.Serve(ln)
	}()
	log.Info().Str(logfield.Addr, ln.Addr().String()).Str(logfield.Version, buildVersion()).
		Str(logfield.StateDir, stateDir).Bool("tls", tlsConf != nil).Bool("auth", token != "").Msg("rest api listening")

	if _, err := srv.Restore(ctx); err != nil {
		_ = hs.Close()
		if ctx.Err() != nil {
			log.Info().Msg("stopped during state restore")
			return nil
		}
		return fmt.Errorf("restore state from %s: %w", stateDir, err)
	}

	select {
	case <-ctx.Done():
	case err := <-served:
		return fmt.Errorf("rest api stopped: %w", err)
	}
	log.Info().Str(logfield.Deadline, cfg.DrainTimeout.String()).Msg("shutting down: no new connections, draining in-flight requests")
	dctx, cancel := context.WithTimeout(context.Background(), cfg.DrainTimeout)
	defer cancel()
	if err := hs.Shutdown(dctx); err != nil {
		log.Warn().Err(err).Msg("drain deadline passed; closing the remaining connections")
		_ = hs.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn().Err(err).Msg("rest api listener")
	}
	log.Info().Msg("stopped")
	return nil
}

// newRuntime builds the data plane the REST API hands rules to: the actor
// runtime and the gateway listeners, configured from the routing
// environment (read once, here). With noDataPlane it returns
// restapi.NoDataPlane instead and says so. The returned func drains and
// stops every rule.
func newRuntime(base zerolog.Logger, set *metrics.Set, getenv func(string) string, cfg config, keys *tenant.Gate) (restapi.Runtime, func(context.Context), error) {
	log := base.With().Str(logfield.Component, "llbd").Logger()
	if cfg.NoDataPlane {
		log.Warn().Msg("--no-data-plane: rules are validated, persisted and listed, but no traffic is served and every endpoint reports inactive")
		return restapi.NewNoDataPlane(), func(context.Context) {}, nil
	}
	env, warnings, err := ladder.ParseEnv(getenv)
	if err != nil {
		return nil, nil, usagef("routing environment: %v", err)
	}
	for _, w := range warnings {
		log.Warn().Msg(w)
	}
	defaults, err := rule.DefaultsFromEnv(getenv, int(env.OriginErrThreshold))
	if err != nil {
		return nil, nil, usagef("%v", err)
	}
	maxMsg, err := inventory.MaxMsgSizeFromEnv(getenv)
	if err != nil {
		return nil, nil, usagef("%v", err)
	}
	defaults.TokenizerDir = cfg.TokenizerDir
	gateway.SetStreamPoller(cfg.StreamPoller)
	lc := lifecycle.Config{Log: base, Metrics: set, Env: env, Defaults: defaults, KVMaxMsgSize: maxMsg,
		AccessLog: cfg.AccessLog, HideBackendAddrs: cfg.HideBackendAddrs, DataBind: cfg.DataBind,
		BodyBufferBytes: cfg.BodyBufferBytes, MaxConns: cfg.MaxConns, ClientSendTimeout: cfg.ClientSendTimeout,
		MaxTenantLabels: cfg.MaxTenantLabels, Keys: keys, RouteTimeout: cfg.RouteTimeout,
		DecisionTimeout: cfg.DecisionTimeout}
	if cl := cfg.Cluster; cl.Name != "" {
		lc.Cluster = &replica.Config{ClusterName: cl.Name, Advertise: cl.Advertise, Etcd: cl.Etcd, Log: base}
	}
	dp, err := lifecycle.New(lc)
	if err != nil {
		return nil, nil, err
	}
	if cfg.BodyBufferBytes == 0 {
		log.Warn().Msg("--body-buffer-bytes 0: request bodies are bounded per request only; many large bodies at once can take any amount of memory")
	}
	if cfg.MaxConns == 0 {
		log.Warn().Msg("--max-conns 0: data-plane client connections are not bounded; a flood of connections can use every file descriptor")
	}
	if cfg.ClientSendTimeout == 0 {
		log.Warn().Msg("--client-send-timeout 0: a client that stops reading holds its connection and its upstream leg until max_stream_duration")
	}
	ev := log.Info().Str("kv_lb_mode", env.LBMode.String()).Int64("body_buffer_bytes", cfg.BodyBufferBytes).Int("max_conns", cfg.MaxConns).
		Dur("client_send_timeout", cfg.ClientSendTimeout)
	if cfg.DataBind.IsValid() {
		ev = ev.Str("data_bind", cfg.DataBind.String())
	}
	if cfg.Cluster.Name != "" {
		ev = ev.Str(logfield.Cluster, cfg.Cluster.Name).Str("advertise", cfg.Cluster.Advertise).Strs("etcd", cfg.Cluster.Etcd.Endpoints)
	}
	ev.Msg("data plane ready")
	return dp, dp.Close, nil
}

// addrPortOf is a bound TCP address as a netip.AddrPort.
func addrPortOf(a net.Addr) netip.AddrPort {
	if tcp, ok := a.(*net.TCPAddr); ok {
		ap := tcp.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

// warnExposure warns loudly when the REST API is reachable beyond loopback
// without a token, or sends a token in the clear beyond loopback.
func warnExposure(log zerolog.Logger, addr net.Addr, auth, tls bool) {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || tcp.IP.IsLoopback() {
		return
	}
	if !auth {
		log.Warn().Str(logfield.Addr, addr.String()).
			Msg("SECURITY: the REST API is reachable beyond loopback WITHOUT authentication: anyone who can reach it can rewrite the load balancer. Set --token-file (LLB_TOKEN_FILE), or listen on 127.0.0.1")
		return
	}
	if !tls {
		log.Warn().Str(logfield.Addr, addr.String()).
			Msg("SECURITY: the bearer token travels in clear text beyond loopback; set --tls-cert and --tls-key")
	}
}

// openSharedStore opens the rule and controller stores of cluster mode in
// etcd; on a single node it returns nothing (rules.json in the state dir).
// stateFile is the local cache's name in cluster mode.
func openSharedStore(cfg config, base zerolog.Logger) (shared *catalog.SharedConfig, stateFile string, closeFn func(), err error) {
	cl := cfg.Cluster
	if cl.Name == "" {
		return nil, "", func() {}, nil
	}
	cli, err := cl.Etcd.New()
	if err != nil {
		return nil, "", nil, usagef("%v", err)
	}
	where := "etcd at " + strings.Join(cl.Etcd.Endpoints, ",")
	opt := rulestore.EtcdOptions{Cluster: cl.Name, Endpoints: cl.Etcd.Endpoints, Log: base}
	opt.Namespace = rulestore.NamespaceRules
	rules, err := rulestore.NewEtcd(cli, opt)
	if err != nil {
		_ = cli.Close()
		return nil, "", nil, err
	}
	opt.Namespace = rulestore.NamespaceController
	ctrl, err := rulestore.NewEtcd(cli, opt)
	if err != nil {
		_ = cli.Close()
		return nil, "", nil, err
	}
	opt.Namespace = rulestore.NamespaceTenants
	keys, err := rulestore.NewEtcd(cli, opt)
	if err != nil {
		_ = cli.Close()
		return nil, "", nil, err
	}
	return &catalog.SharedConfig{Rules: rules, Controller: ctrl, Keys: keys, Where: where},
		"cluster-" + cl.Name + ".rules.json", func() { _ = cli.Close() }, nil
}
