package main

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/simulate/report"
)

// reportFlags are the flags of "llbsim report".
type reportFlags struct {
	in  string
	out string
}

func newReportCmd(stdout io.Writer) *cobra.Command {
	f := &reportFlags{}
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Rebuild the markdown report and SVG figures from a results file",
		Long: `Read a results file (JSON lines: one meta line, one line per scenario, one
per run; written by "llbsim sweep" or by a load harness driving the real
llbd) and write README.md and the SVG figures into --out, then print the
summary table and the issue-7 targets.`,
		Example: `  llbsim report --in report/results.jsonl --out report`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runReport(f, stdout) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.in, "in", "report/"+ResultsFile, "results file (JSON lines)")
	fl.StringVar(&f.out, "out", "report", "directory for README.md and the SVG figures")
	return cmd
}

func runReport(f *reportFlags, stdout io.Writer) error {
	fh, err := os.Open(f.in)
	if err != nil {
		return fmt.Errorf("results: %w", err)
	}
	ds, err := report.ReadJSONL(fh)
	cerr := fh.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", f.in, err)
	}
	if cerr != nil {
		return fmt.Errorf("results: %w", cerr)
	}
	files, err := report.Write(f.out, ds, report.DefaultTargets())
	if err != nil {
		return err
	}
	if err := report.WriteSummary(stdout, ds, report.DefaultTargets()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %d report files into %s\n", len(files), f.out)
	return nil
}
