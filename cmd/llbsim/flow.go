package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/simulate/des"
	"github.com/llbproject/llb/simulate/harness"
)

// newFlowCmd is `llbsim flow`: the tenant and class scenarios on the
// admission simulator (des.RunFlowPlan), or with --harness through a real
// llbd in front of simulated workers (harness.RunFlowPlan), printed as
// markdown.
func newFlowCmd(stdout, stderr io.Writer) *cobra.Command {
	p := des.StandardFlowPlan()
	hp := harness.StandardFlowPlan()
	var seeds []int64
	var onHarness bool
	var llbd, workDir string
	c := &cobra.Command{
		Use:   "flow",
		Short: "Run the tenant and priority-class scenarios on the admission simulator, or through llbd (--harness)",
		Long: `Runs llb's admission gate and admission queue (ladder.Router with a per-endpoint
cap, ladder.FlowQueue) in front of simulated engines, in virtual time: the
fleet's capacity; a tenant flooding at 5× its neighbour's rate at 120 % load;
three priority classes at 70–150 % load; and two backlogged tenants' fairness
gap against the VTC bound. Prints a markdown report.

With --harness the same scenarios (except the fairness gap, which needs the
queue's counters) run through a real llbd built from this module, in front
of simulated vLLM workers over HTTP, with the tenant and class sent as
headers; this takes wall time (about 25 minutes for the standard plan).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			start := time.Now()
			if onHarness {
				return runHarnessFlow(cmd, hp, seeds, llbd, workDir, stdout, stderr)
			}
			if len(seeds) > 0 {
				p.Seeds = seeds
			}
			rep, err := des.RunFlowPlan(p)
			if err != nil {
				return err
			}
			fmt.Fprint(stdout, rep.Markdown())
			fmt.Fprintf(stdout, "\n(%v of CPU-bound simulation)\n", time.Since(start).Round(time.Second))
			return nil
		},
	}
	c.Flags().Int64SliceVar(&seeds, "seeds", nil, "seeds of every point (default 1,2,3)")
	c.Flags().DurationVar(&p.Duration, "duration", p.Duration, "virtual length of every run (simulator)")
	c.Flags().IntVar(&p.Cap, "cap", p.Cap, "per-endpoint in-flight cap (simulator)")
	c.Flags().BoolVar(&onHarness, "harness", false, "run through a real llbd and simulated workers instead of the simulator")
	c.Flags().DurationVar(&hp.Duration, "harness-duration", hp.Duration, "model-time length of every harness run")
	c.Flags().Float64Var(&hp.Fleet.Engine.Latency.TimeScale, "harness-time-scale", hp.Fleet.Engine.Latency.TimeScale, "the workers' time scale (wall seconds per model second)")
	c.Flags().Float64SliceVar(&hp.Loads, "harness-loads", hp.Loads, "the class scenario's loads, fractions of the capacity")
	c.Flags().StringVar(&llbd, "llbd", "", "llbd binary for --harness (default: built from this module)")
	c.Flags().StringVar(&workDir, "work-dir", "", "directory for llbd's state and logs (default: a temporary one, removed on success)")
	return c
}

func runHarnessFlow(cmd *cobra.Command, p harness.FlowPlan, seeds []int64, llbd, workDir string, stdout, stderr io.Writer) error {
	ctx := cmd.Context()
	if len(seeds) > 0 {
		p.Seeds = p.Seeds[:0]
		for _, s := range seeds {
			p.Seeds = append(p.Seeds, uint64(s))
		}
	}
	work := workDir
	var err error
	if work == "" {
		if work, err = os.MkdirTemp("", "llbsim-flow-"); err != nil {
			return fmt.Errorf("work dir: %w", err)
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	p.WorkDir, p.Daemon.Bin = work, llbd
	if llbd == "" {
		fmt.Fprintln(stderr, "llbsim flow: building llbd")
		if p.Daemon.Bin, err = harness.BuildDaemon(ctx, work, ""); err != nil {
			return err
		}
	}
	p.Progress = func(what string) { fmt.Fprintf(stderr, "llbsim flow: %s\n", what) }
	rep, err := harness.RunFlowPlan(ctx, p)
	if err != nil {
		fmt.Fprintf(stderr, "llbsim flow: llbd logs kept in %s\n", work)
		return err
	}
	if workDir == "" {
		_ = os.RemoveAll(work)
	}
	fmt.Fprint(stdout, rep.Markdown())
	return nil
}
