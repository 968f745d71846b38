// Command llbsim runs llb's GPU-free stand-ins and test rigs: the demo
// (llbsim demo: a simulated fleet behind a real llbd), a fleet of simulated
// vLLM workers on loopback addresses (llbsim fleet), the workload generators
// (llbsim workload), the discrete-event sweeps (llbsim sweep, report) and the
// load harness against the real daemon (llbsim bench).
//
// Exit status: 0 after a clean run or shutdown (SIGINT or SIGTERM), 1 when it
// cannot run (a port in use), 2 for a bad flag.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/internal/command"
	"github.com/llbproject/llb/simulate/attack"
	"github.com/llbproject/llb/simulate/proxybench"
)

func main() {
	attack.ServeWorkerIfAsked()         // a worker process of "llbsim attack" (faults family)
	proxybench.ServeSSEBackendIfAsked() // the backend process of "llbsim streambench"
	command.Main(func(ctx context.Context) int {
		return exitCode(newRootCmd(os.Stdout, os.Stderr).ExecuteContext(ctx), os.Stderr)
	})
}

// usageError marks a bad command line (exit status 2).
type usageError struct{ err error }

// Error implements error.
func (e *usageError) Error() string { return e.err.Error() }

// Unwrap returns the cause.
func (e *usageError) Unwrap() error { return e.err }

// exitCode maps a run error to the documented exit status.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "llbsim:", err)
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// newRootCmd builds the command tree writing to stdout and stderr.
func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "llbsim",
		Short:         "Simulated vLLM fleet and workloads for llb",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err} })
	root.AddCommand(newDemoCmd(stdout, stderr), newFleetCmd(stdout, stderr), newWorkloadCmd(stdout, stderr), newSweepCmd(stdout, stderr), newReportCmd(stdout), newCompareCmd(stdout), newBenchCmd(stdout, stderr), newAttackCmd(stdout, stderr), newProxyBenchCmd(stdout, stderr), newStreamBenchCmd(stdout, stderr), newFlowCmd(stdout, stderr))
	return root
}
