package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/simulate/workload"
)

// workloadFlags are the flags of "llbsim workload".
type workloadFlags struct {
	kind      string
	seed      uint64
	n         int
	rate      float64
	arrivals  string
	blockSize int

	model  string
	stream bool

	shape shapeFlags
}

func newWorkloadCmd(stdout, stderr io.Writer) *cobra.Command {
	f := &workloadFlags{}
	cmd := &cobra.Command{
		Use:   "workload",
		Short: "Print a generated request stream as JSON lines",
		Long: `Generate a seeded request stream and print one JSON object per request:
seq, at_ms (arrival offset), path, header, workload, group, session,
prompt_tokens, reusable_tokens (the oracle), output_tokens and body. The
last line is a summary with the oracle hit rate. Lengths are in tokens of
the simulated workers' tokenizer; zero sizes take each workload's defaults.`,
		Example: `  llbsim workload --kind shared-prefix --groups 150 --prompts-per-group 5 --system-tokens 6000 -n 1000 --rate 20
  llbsim workload --kind mix --mix shared-prefix=2,multi-turn=1,hot-prefix=1 -n 200`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.shape.warnDeprecated(cmd.Flags(), stderr)
			return runWorkload(f, stdout)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kind, "kind", "shared-prefix", "shared-prefix, multi-turn, hot-prefix or mix")
	fl.Uint64Var(&f.seed, "seed", 1, "random seed (the same seed gives the same stream)")
	fl.IntVarP(&f.n, "requests", "n", 100, "number of requests")
	fl.Float64Var(&f.rate, "rate", 10, "arrival rate, requests per second")
	fl.StringVar(&f.arrivals, "arrivals", "poisson", "poisson or constant")
	fl.IntVar(&f.blockSize, "block-size", 16, "KV block size the oracle counts in")
	fl.StringVar(&f.model, "model", "", "model field (default sim-model)")
	fl.BoolVar(&f.stream, "stream", false, "ask for streamed responses")
	f.shape.register(fl)
	return cmd
}

// line is one printed request.
type line struct {
	Seq            int               `json:"seq"`
	AtMS           float64           `json:"at_ms"`
	Path           string            `json:"path"`
	Header         map[string]string `json:"header,omitempty"`
	Workload       string            `json:"workload"`
	Group          int               `json:"group"`
	Session        string            `json:"session,omitempty"`
	PromptTokens   int               `json:"prompt_tokens"`
	ReusableTokens int               `json:"reusable_tokens"`
	OutputTokens   int               `json:"output_tokens"`
	Body           json.RawMessage   `json:"body"`
}

// runWorkload generates and prints the stream.
func runWorkload(f *workloadFlags, stdout io.Writer) error {
	spec, err := f.shape.spec(f.kind, workload.Options{Model: f.model, Stream: f.stream})
	if err != nil {
		return &usageError{err}
	}
	var arr workload.Arrivals
	switch f.arrivals {
	case "poisson":
		arr = workload.Poisson{Rate: f.rate}
	case "constant":
		arr = workload.Constant{Rate: f.rate}
	default:
		return &usageError{fmt.Errorf("--arrivals %q (want poisson or constant)", f.arrivals)}
	}
	r := rand.New(rand.NewPCG(f.seed, f.seed^0x5eed))
	reqs, err := workload.Generate(r, spec, arr, f.blockSize, f.n)
	if err != nil {
		return &usageError{err}
	}
	w := bufio.NewWriter(stdout)
	enc := json.NewEncoder(w)
	for _, q := range reqs {
		if err := enc.Encode(line{Seq: q.Seq, AtMS: float64(q.At.Microseconds()) / 1000, Path: q.Path, Header: q.Header,
			Workload: q.Workload, Group: q.Group, Session: q.Session, PromptTokens: q.PromptTokens,
			ReusableTokens: q.ReusableTokens, OutputTokens: q.OutputTokens, Body: q.Body}); err != nil {
			return fmt.Errorf("write request %d: %w", q.Seq, err)
		}
	}
	summary := map[string]any{"summary": true, "requests": len(reqs), "oracle_hit_rate": workload.OracleHitRate(reqs)}
	if err := enc.Encode(summary); err != nil {
		return fmt.Errorf("write summary: %w", err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	return nil
}
