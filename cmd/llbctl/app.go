package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit statuses.
const (
	exitOK = 0
	// exitAPI: llbd answered, with an error (or with a body llbctl cannot read).
	exitAPI = 1
	// exitUsage: a bad command line, or llbd could not be reached at all.
	exitUsage = 2
)

// Environment variables llbctl reads (a flag on the command line wins).
const (
	envServer    = "LLB_SERVER"
	envTokenFile = "LLB_TOKEN_FILE"
)

// Defaults of the global flags.
const (
	defaultServer  = "http://127.0.0.1:11111"
	defaultTimeout = 10 * time.Second
)

// Output formats (-o).
const (
	outputTable = "table"
	outputJSON  = "json"
)

// globalOpts are the flags every command shares.
type globalOpts struct {
	// server is llbd's REST base URL (scheme://host:port[/prefix]).
	server string
	// tokenFile holds the bearer token; "" sends none.
	tokenFile string
	// tlsCA is a PEM bundle that verifies llbd's certificate (https only).
	tlsCA string
	// insecure skips certificate verification (https only; labs).
	insecure bool
	// timeout bounds one HTTP exchange with llbd.
	timeout time.Duration
	// output is table or json.
	output string
}

// app is one llbctl invocation: its options, I/O and the lazily built client.
type app struct {
	ctx    context.Context
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	opts   globalOpts
	cl     *client // built on first use by client()
}

// run executes llbctl with args and returns the exit status. Errors are
// printed to stderr as "llbctl: <sentence>".
func run(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{ctx: ctx, getenv: getenv, stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.rootCmd()
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return a.exitCode(err)
}

// exitCode prints err and maps it to the documented exit status. llbctl's
// own code returns only *apiError, *answerError, *notFoundError, *connError
// or *usageError; any other error comes from cobra's command-line parsing
// and is a usage error.
func (a *app) exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(a.stderr, "llbctl: "+err.Error())
	var apiErr *apiError
	var ansErr *answerError
	var nfErr *notFoundError
	switch {
	case errors.As(err, &apiErr), errors.As(err, &ansErr), errors.As(err, &nfErr):
		return exitAPI
	default:
		return exitUsage
	}
}

// usageError is a bad command line (exit 2).
type usageError struct{ err error }

// Error is the underlying message.
func (e *usageError) Error() string { return e.err.Error() }

// Unwrap returns the underlying error.
func (e *usageError) Unwrap() error { return e.err }

// usagef builds a *usageError.
func usagef(format string, args ...any) error {
	return &usageError{fmt.Errorf(format, args...)}
}

// usageArgs wraps a cobra positional-argument check so its failure is a
// usage error naming the expected form.
func usageArgs(check cobra.PositionalArgs, form string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usagef("%s: %v (usage: %s)", commandName(cmd), err, form)
		}
		return nil
	}
}

// rootCmd builds the command tree.
func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "llbctl",
		Short: "Command-line client for llbd's LoxiLB-compatible REST API",
		Long: `llbctl talks to llbd's REST API (LoxiLB's /netlox/v1 routes on port 11111).

It creates, lists and deletes load-balancer rules with loxicmd's flag names,
shows endpoint health and KV inventories, and sets controller weights.

Exit status: 0 success; 1 llbd answered with an error (printed); 2 bad command
line, or llbd could not be reached.`,
		SilenceUsage:      true,
		SilenceErrors:     true,
		Args:              usageArgs(cobra.NoArgs, "llbctl <command>"),
		PersistentPreRunE: a.resolveGlobals,
		RunE:              func(cmd *cobra.Command, _ []string) error { return needSubcommand(cmd) },
	}
	root.SetIn(a.stdin)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.CompletionOptions.DisableDefaultCmd = true

	pf := root.PersistentFlags()
	pf.StringVar(&a.opts.server, "server", defaultServer, "llbd REST API base URL (env "+envServer+")")
	pf.StringVar(&a.opts.tokenFile, "token-file", "", "file holding the REST bearer token (env "+envTokenFile+")")
	pf.StringVar(&a.opts.tlsCA, "tls-ca", "", "PEM CA bundle that verifies llbd's certificate (https only)")
	pf.BoolVar(&a.opts.insecure, "insecure", false, "skip TLS certificate verification (https only; for labs)")
	a.opts.timeout = defaultTimeout
	pf.Var((*timeoutValue)(&a.opts.timeout), "timeout", "time limit of one request to llbd, e.g. 10s, 500ms, or plain seconds")
	pf.StringVarP(&a.opts.output, "output", "o", outputTable, "output format: table or json")

	root.AddCommand(a.createCmd(), a.getCmd(), a.deleteCmd(), a.setCmd(), a.versionCmd())
	return root
}

// needSubcommand is the RunE of a command that only groups subcommands.
func needSubcommand(cmd *cobra.Command) error {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return usagef("%s needs a subcommand: %s (see %s --help)", commandName(cmd), strings.Join(names, ", "), cmd.CommandPath())
}

// commandName is the command's path without the program name ("get lb").
func commandName(cmd *cobra.Command) string {
	if !cmd.HasParent() {
		return cmd.Name()
	}
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// resolveGlobals applies the environment fallbacks and checks the global
// flags before any command runs.
func (a *app) resolveGlobals(cmd *cobra.Command, _ []string) error {
	flags := cmd.Flags()
	fromEnv := func(flag, env string, dst *string) {
		if !flags.Changed(flag) {
			if v := strings.TrimSpace(a.getenv(env)); v != "" {
				*dst = v
			}
		}
	}
	fromEnv("server", envServer, &a.opts.server)
	fromEnv("token-file", envTokenFile, &a.opts.tokenFile)
	switch a.opts.output {
	case outputTable, outputJSON:
	default:
		return usagef("-o/--output %q: want table or json", a.opts.output)
	}
	if a.opts.timeout <= 0 {
		return usagef("--timeout must be positive")
	}
	return nil
}

// timeoutValue is a duration flag that also takes plain seconds, as loxicmd's
// -t does ("10" = 10s).
type timeoutValue time.Duration

// String renders the duration.
func (t *timeoutValue) String() string { return time.Duration(*t).String() }

// Set parses "10s", "500ms" or "10".
func (t *timeoutValue) Set(s string) error {
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if n <= 0 || n > 86400 {
			return fmt.Errorf("want a positive number of seconds up to 86400, got %s", s)
		}
		*t = timeoutValue(time.Duration(n * float64(time.Second)))
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration like 10s or 500ms, or seconds: %w", err)
	}
	*t = timeoutValue(d)
	return nil
}

// Type names the value in help.
func (t *timeoutValue) Type() string { return "duration" }

var _ pflag.Value = (*timeoutValue)(nil)
