package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/simulate/attack"
	"github.com/llbproject/llb/simulate/harness"
)

// attackFlags are the flags of "llbsim attack".
type attackFlags struct {
	llbd     string
	seed     uint64
	duration time.Duration
	families []string
	replay   int
	net      string
	workDir  string
	engine   string
}

// errDefects is the run error when the attacks found defects (exit 1).
var errDefects = errors.New("defects found")

func newAttackCmd(stdout, stderr io.Writer) *cobra.Command {
	f := &attackFlags{}
	cmd := &cobra.Command{
		Use:   "attack",
		Short: "Attack a real llbd on loopback and report what it refused and what broke",
		Long: `Run seeded, reproducible attack families against a fresh llbd each (issue 13):
rest (bad REST requests), dataplane (raw HTTP against a rule's VIP), kv (a
fake ZMQ KV-event publisher, vLLM's or SGLang's on two DP ranks; against
trtllm a hostile POST /kv_cache_events server) and faults (SIGKILL/SIGSTOP of worker processes). Each case has an
oracle; the report gives per family the cases tried, refused cleanly and
served, and every defect with its reproducer.

Every address is in one private loopback /24 (--net, drawn when not given).
Exit status 1 when any defect was found.`,
		Example: `  llbsim attack --duration 4m
  llbsim attack --engine trtllm --duration 2m
  llbsim attack --engine trtllm --family kv --duration 2m --seed 2
  llbsim attack --family dataplane --duration 2m --seed 7
  llbsim attack --family rest --seed 1 --net 127.201.4 --case 1234`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAttack(cmd.Context(), f, stdout, stderr)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.llbd, "llbd", "", "llbd binary (default: go build ./cmd/llbd into the work dir)")
	fl.Uint64Var(&f.seed, "seed", 1, "seed every case derives from")
	fl.DurationVar(&f.duration, "duration", attack.DefaultDuration, "budget of the whole run, shared by the families (setup comes on top)")
	fl.StringSliceVar(&f.families, "family", nil, "families to run (rest, dataplane, kv, faults; default all)")
	fl.IntVar(&f.replay, "case", -1, "run only this case of the one --family (a defect's reproducer)")
	fl.StringVar(&f.net, "net", "", "private loopback /24 as 127.a.b (default: drawn in 127.200–250)")
	fl.StringVar(&f.engine, "engine", "vllm", "engine the simulated workers speak and the rules name (vllm, sglang, trtllm); families it does not run are left out")
	fl.StringVar(&f.workDir, "work-dir", "", "directory for llbd state dirs and logs (default a temp dir, kept when a defect was found)")
	return cmd
}

// runAttack runs the attacks and prints the report.
func runAttack(ctx context.Context, f *attackFlags, stdout, stderr io.Writer) error {
	work, keep := f.workDir, f.workDir != ""
	if work == "" {
		var err error
		if work, err = os.MkdirTemp("", "llbsim-attack-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	cfg := attack.Config{LLBD: f.llbd, Seed: f.seed, Duration: f.duration, Families: f.families,
		Replay: f.replay >= 0, Case: f.replay, Net: f.net, WorkDir: work, Progress: stderr, Engine: f.engine}
	if cfg.LLBD == "" {
		fmt.Fprintln(stderr, "llbsim attack: building llbd")
		bin, err := harness.BuildDaemon(ctx, work, "")
		if err != nil {
			return err
		}
		cfg.LLBD = bin
	}
	if err := cfg.Validate(); err != nil {
		return &usageError{err}
	}
	rep, err := attack.Run(ctx, cfg)
	if rep != nil {
		rep.Write(stdout)
	}
	if err == nil && rep.Defects() > 0 {
		err = fmt.Errorf("%d %w; llbd logs and state in %s", rep.Defects(), errDefects, work)
		keep = true
	}
	if err != nil {
		keep = true
	}
	if !keep {
		_ = os.RemoveAll(work)
	}
	return err
}
