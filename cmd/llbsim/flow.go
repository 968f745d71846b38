package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/simulate/des"
)

// newFlowCmd is `llbsim flow`: the tenant and class scenarios on the
// admission simulator (des.RunFlowPlan), printed as markdown.
func newFlowCmd(stdout io.Writer) *cobra.Command {
	p := des.StandardFlowPlan()
	var seeds []int64
	c := &cobra.Command{
		Use:   "flow",
		Short: "Run the tenant and priority-class scenarios on the admission simulator (issue 27)",
		Long: `Runs llb's admission gate and admission queue (ladder.Router with a per-endpoint
cap, ladder.FlowQueue) in front of simulated engines, in virtual time: the
fleet's capacity; a tenant flooding at 5× its neighbour's rate at 120 % load;
three priority classes at 70–150 % load; and two backlogged tenants' fairness
gap against the VTC bound. Prints a markdown report.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if len(seeds) > 0 {
				p.Seeds = seeds
			}
			start := time.Now()
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
	c.Flags().DurationVar(&p.Duration, "duration", p.Duration, "virtual length of every run")
	c.Flags().IntVar(&p.Cap, "cap", p.Cap, "per-endpoint in-flight cap")
	return c
}
