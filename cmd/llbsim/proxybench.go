package main

import (
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/simulate/proxybench"
)

func newProxyBenchCmd(stdout, stderr io.Writer) *cobra.Command {
	var cfg proxybench.Config
	var quiet bool
	cmd := &cobra.Command{
		Use:   "proxybench",
		Short: "Measure llbd's data plane against HAProxy and a direct path (make bench-proxy)",
		Long: `Start nginx (a fixed completion), HAProxy 2.6 (roundrobin, http-reuse always),
a streaming SSE backend and llbd (a single-pool RR rule posted over REST) on
loopback, then measure side by side in one run:

  - wrk -t1 -c32 and -c256 with a small POST /v1/completions, direct / HAProxy / llbd /
    llbd's data plane alone (its gateway in this process with a router that
    answers at once) / a bare fasthttp proxy (fasthttp's server and HostClient,
    in this process: the floor a Go proxy reaches) in interleaved rounds: req/s, p50, p99, CPU per request
    and the ratios to HAProxy (medians of the rounds);
  - llbd minus direct latency at a fixed rate, open loop;
  - the added delay per chunk of a streamed 256-token SSE response.

nginx, haproxy and wrk must be installed (make bench-proxy installs them).
Results are Markdown tables on stdout, progress on stderr.`,
		Example: `  llbsim proxybench --llbd bin/llbd
  llbsim proxybench --llbd bin/llbd --rounds 5 --access-log --profile-dir /tmp/prof
  llbsim proxybench --llbd bin/llbd --before /tmp/old/llbd --paths llbd,llbd-before,dataplane,fasthttp`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !quiet {
				cfg.Progress = stderr
			}
			res, err := proxybench.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			proxybench.WriteReport(stdout, res)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.LLBD, "llbd", "bin/llbd", "the llbd binary")
	f.StringVar(&cfg.Dir, "dir", "", "directory for configs and logs (default: a temporary one, removed)")
	f.DurationVar(&cfg.Duration, "duration", 10*time.Second, "each wrk run")
	f.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "warm-up before each path's first run")
	f.IntVar(&cfg.Rounds, "rounds", 3, "interleaved wrk rounds")
	f.IntSliceVar(&cfg.Connections, "connections", []int{32, 256}, "wrk -c, one throughput table each")
	f.IntVar(&cfg.Threads, "threads", 1, "wrk -t")
	f.IntVar(&cfg.Rate, "rate", 2000, "open-loop request rate of the added-latency test (per second)")
	f.DurationVar(&cfg.RateDuration, "rate-duration", 5*time.Second, "each path's share of an added-latency round (two rounds)")
	f.IntVar(&cfg.Streams, "streams", 10, "SSE streams per path")
	f.IntVar(&cfg.Tokens, "tokens", 256, "events per SSE stream")
	f.DurationVar(&cfg.TokenGap, "token-gap", 4*time.Millisecond, "time between SSE events")
	f.BoolVar(&cfg.AccessLog, "access-log", false, "also measure an llbd writing its per-request access log (--access-log)")
	f.StringVar(&cfg.Before, "before", "", "a second llbd binary (the build before a change) measured in the same rounds as llbd-before")
	f.StringSliceVar(&cfg.Paths, "paths", nil, "throughput paths to run (of direct,haproxy,llbd,llbd-before,dataplane,fasthttp,llbd+log; default all, haproxy always)")
	f.StringVar(&cfg.ProfileDir, "profile-dir", "", "save CPU profiles of each path's first throughput run here (llbd.pprof, llbd-before.pprof, dataplane.pprof, fasthttp.pprof)")
	f.IntVar(&cfg.BasePort, "base-port", 18000, "first of the nine ports used on 127.0.0.21–27")
	f.BoolVar(&quiet, "quiet", false, "no progress lines")
	return cmd
}
