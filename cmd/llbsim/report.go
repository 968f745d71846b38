package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/simulate/report"
)

// reportFlags are the flags of "llbsim report".
type reportFlags struct {
	in  []string
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
	fl.StringSliceVar(&f.in, "in", []string{"report/" + ResultsFile}, "results file (JSON lines); several (repeated or comma-separated) of one seed are merged into one report, and the merged results are written beside it")
	fl.StringVar(&f.out, "out", "report", "directory for README.md and the SVG figures")
	return cmd
}

func runReport(f *reportFlags, stdout io.Writer) error {
	var all []*report.Dataset
	for _, in := range f.in {
		d, err := readResults(in)
		if err != nil {
			return err
		}
		all = append(all, d)
	}
	ds, err := report.Merge(all...)
	if err != nil {
		return err
	}
	if len(all) > 1 {
		if err := writeResults(f.out, ds); err != nil {
			return err
		}
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

// compareFlags are the flags of "llbsim compare".
type compareFlags struct {
	laws  []string
	worst int
}

func newCompareCmd(stdout io.Writer) *cobra.Command {
	f := &compareFlags{}
	cmd := &cobra.Command{
		Use:   "compare RESULTS...",
		Short: "Compare llb's laws with the best peer over several seeds' results",
		Long: `Read several results files (or directories holding results.jsonl), each one
seed of the same sweep, and compare each law with the best of the five peers:
per scenario and load the geometric mean over the seeds of the law's TTFT
p90 divided by that seed's best peer's, a win below 0.98, a tie up to 1.02.
Prints the tally per law and engine model and the first law's cells, worst
first.`,
		Example: `  for s in 1 2 3; do llbsim sweep --seed $s --out /tmp/v/s$s ...; done
  llbsim compare --laws headroom,auto,hard /tmp/v/s1 /tmp/v/s2 /tmp/v/s3`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runCompare(f, args, stdout) },
	}
	fl := cmd.Flags()
	fl.StringSliceVar(&f.laws, "laws", []string{"headroom", "auto", "hard"}, "llb strategies to compare with the peers (the first one's cells are listed)")
	fl.IntVar(&f.worst, "worst", 20, "how many of the first law's cells to list, worst first (-1: all)")
	return cmd
}

func runCompare(f *compareFlags, paths []string, stdout io.Writer) error {
	var ds []*report.Dataset
	for _, p := range paths {
		d, err := readResults(p)
		if err != nil {
			return err
		}
		ds = append(ds, d)
	}
	return report.WriteSeedComparison(stdout, ds, f.laws, f.worst)
}

// readResults reads a results file, or a directory's results.jsonl.
func readResults(p string) (*report.Dataset, error) {
	if st, err := os.Stat(p); err == nil && st.IsDir() {
		p = filepath.Join(p, ResultsFile)
	}
	fh, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("results: %w", err)
	}
	defer fh.Close()
	d, err := report.ReadJSONL(fh)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return d, nil
}
