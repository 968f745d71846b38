package main

import (
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/simulate/proxybench"
)

func newStreamBenchCmd(stdout, stderr io.Writer) *cobra.Command {
	var cfg proxybench.StreamsConfig
	var quiet bool
	cmd := &cobra.Command{
		Use:   "streambench",
		Short: "Measure llbd's data plane under thousands of SSE streams against HAProxy (make bench-streams)",
		Long: `Start a vLLM-shaped SSE backend (a process of its own: 256 chat.completion.chunk
events per stream at 30/s, each stamped with its send time), HAProxy 2.6
(http-reuse always, option http-no-delay; --haproxy-check adds llbd's default check)
and llbd (a single-pool rule with its defaults) on loopback, then hold 200,
1 000, 4 000 and 9 000 concurrent streams, one client connection each, through
each path in interleaved rounds: direct, HAProxy, llbd (and --before, a second
llbd binary, e.g. the previous release).

Per run: events/s, each event's delay (p50/p99/p99.9) and what each proxy adds
over direct, the first event's delay, the CPU per event of the proxy, the
backend and the client (from /proc), the proxy's RSS per stream, and every
answer other than 200 by status; then llbd against HAProxy with issue 31's
targets, and llbd's memory after idling.

haproxy must be installed (make bench-streams installs it). The open-file
limit bounds the top count: each stream holds two descriptors in a proxy.
Results are Markdown tables on stdout, progress on stderr.`,
		Example: `  llbsim streambench --llbd bin/llbd
  llbsim streambench --llbd bin/llbd --before /tmp/llbd-main --counts 1000,4000 --rounds 3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !quiet {
				cfg.Progress = stderr
			}
			res, err := proxybench.RunStreams(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			proxybench.WriteStreamsReport(stdout, res)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.LLBD, "llbd", "bin/llbd", "the llbd binary")
	f.StringVar(&cfg.Before, "before", "", "a second llbd binary measured as path llbd-before in the same rounds")
	f.StringVar(&cfg.Dir, "dir", "", "directory for configs and logs (default: a temporary one, removed)")
	f.IntSliceVar(&cfg.Counts, "counts", []int{200, 1000, 4000, 9000}, "concurrent streams per run")
	f.IntVar(&cfg.Rounds, "rounds", 3, "interleaved rounds per count")
	f.IntVar(&cfg.Events, "events", 256, "events per stream")
	f.Float64Var(&cfg.Rate, "rate", 30, "events per second per stream")
	f.DurationVar(&cfg.Window, "window", 10*time.Second, "measured steady state of each run")
	f.DurationVar(&cfg.Ramp, "ramp", 0, "spread of the streams' starts before the window (0: one stream's length)")
	f.DurationVar(&cfg.Settle, "settle", 3*time.Second, "pause between runs")
	f.DurationVar(&cfg.IdleCheck, "idle-check", 20*time.Second, "idle time after the last run before llbd's memory is read again (negative: skip)")
	f.StringSliceVar(&cfg.Paths, "paths", nil, "paths in each round's order (default direct,haproxy,llbd[,llbd-before])")
	f.IntVar(&cfg.MaxConns, "max-conns", 0, "HAProxy's maxconn and llbd's --max-conns (0: from the open-file limit, at most 9700)")
	f.BoolVar(&cfg.HAProxyCheck, "haproxy-check", false, "health-check HAProxy's server as llbd probes by default (GET /health every 5 s, 2 s timeout, fall 2)")
	f.StringSliceVar(&cfg.LLBDArgs, "llbd-arg", nil, "a further llbd flag (repeatable)")
	f.IntVar(&cfg.BasePort, "base-port", 18100, "first of the four ports used on 127.0.0.31–34")
	f.BoolVar(&quiet, "quiet", false, "no progress lines")
	return cmd
}
