package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/llbproject/llb/simulate/workload"
)

// workloadFlags are the flags of "llbsim workload".
type workloadFlags struct {
	kind      string
	mix       string
	seed      uint64
	n         int
	rate      float64
	arrivals  string
	blockSize int

	model  string
	stream bool
	chat   bool

	groups, promptsPerGroup, systemTokens, questionTokens, outputTokens int
	zipfAlpha                                                           float64

	conversations, turns, historyTokens, answerTokens int
	headerSession                                     bool

	clients, prefixTokens, suffixTokens int
	sessions                            bool
}

func newWorkloadCmd(stdout io.Writer) *cobra.Command {
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
		RunE: func(cmd *cobra.Command, _ []string) error { return runWorkload(f, stdout) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.kind, "kind", "shared-prefix", "shared-prefix, multi-turn, hot-prefix or mix")
	fl.StringVar(&f.mix, "mix", "shared-prefix=1,multi-turn=1,hot-prefix=1", "for --kind mix: kind=weight,...")
	fl.Uint64Var(&f.seed, "seed", 1, "random seed (the same seed gives the same stream)")
	fl.IntVarP(&f.n, "requests", "n", 100, "number of requests")
	fl.Float64Var(&f.rate, "rate", 10, "arrival rate, requests per second")
	fl.StringVar(&f.arrivals, "arrivals", "poisson", "poisson or constant")
	fl.IntVar(&f.blockSize, "block-size", 16, "KV block size the oracle counts in")
	fl.StringVar(&f.model, "model", "", "model field (default sim-model)")
	fl.BoolVar(&f.stream, "stream", false, "ask for streamed responses")
	fl.BoolVar(&f.chat, "chat", false, "chat requests instead of completions (shared-prefix, hot-prefix)")
	fl.IntVar(&f.groups, "groups", 0, "shared-prefix: groups")
	fl.IntVar(&f.promptsPerGroup, "prompts-per-group", 0, "shared-prefix: questions per group")
	fl.IntVar(&f.systemTokens, "system-tokens", 0, "shared-prefix, multi-turn: system prompt tokens")
	fl.IntVar(&f.questionTokens, "question-tokens", 0, "shared-prefix, multi-turn: question tokens")
	fl.IntVar(&f.outputTokens, "output-tokens", 0, "shared-prefix, hot-prefix: max_tokens")
	fl.Float64Var(&f.zipfAlpha, "zipf-alpha", 0, "shared-prefix: group popularity skew (0 uniform)")
	fl.IntVar(&f.conversations, "conversations", 0, "multi-turn: active conversations")
	fl.IntVar(&f.turns, "turns", 0, "multi-turn: turns per conversation")
	fl.IntVar(&f.historyTokens, "history-tokens", 0, "multi-turn: per-user document tokens")
	fl.IntVar(&f.answerTokens, "answer-tokens", 0, "multi-turn: answer tokens (max_tokens)")
	fl.BoolVar(&f.headerSession, "header-session", false, "multi-turn: X-Conversation-Id instead of user_id")
	fl.IntVar(&f.clients, "clients", 0, "hot-prefix: clients")
	fl.IntVar(&f.prefixTokens, "prefix-tokens", 0, "hot-prefix: shared preamble tokens")
	fl.IntVar(&f.suffixTokens, "suffix-tokens", 0, "hot-prefix: unique suffix tokens")
	fl.BoolVar(&f.sessions, "sessions", false, "hot-prefix: a user_id per client")
	return cmd
}

// spec builds the workload spec of one kind from the flags.
func (f *workloadFlags) spec(kind string) (workload.Spec, error) {
	opts := workload.Options{Model: f.model, Stream: f.stream}
	switch kind {
	case "shared-prefix":
		return workload.SharedPrefix{Options: opts, Groups: f.groups, PromptsPerGroup: f.promptsPerGroup, SystemTokens: f.systemTokens,
			QuestionTokens: f.questionTokens, OutputTokens: f.outputTokens, ZipfAlpha: f.zipfAlpha, Chat: f.chat}, nil
	case "multi-turn":
		return workload.MultiTurn{Options: opts, Conversations: f.conversations, Turns: f.turns, SystemTokens: f.systemTokens,
			HistoryTokens: f.historyTokens, QuestionTokens: f.questionTokens, AnswerTokens: f.answerTokens, HeaderSession: f.headerSession}, nil
	case "hot-prefix":
		return workload.HotPrefix{Options: opts, Clients: f.clients, PrefixTokens: f.prefixTokens, SuffixTokens: f.suffixTokens,
			OutputTokens: f.outputTokens, Sessions: f.sessions, Chat: f.chat}, nil
	case "mix":
		var m workload.Mix
		for _, part := range strings.Split(f.mix, ",") {
			name, w, ok := strings.Cut(strings.TrimSpace(part), "=")
			weight, err := strconv.ParseFloat(w, 64)
			if !ok || err != nil || name == "mix" {
				return nil, fmt.Errorf("--mix part %q (want kind=weight)", part)
			}
			s, err := f.spec(name)
			if err != nil {
				return nil, err
			}
			m.Parts = append(m.Parts, workload.Part{Weight: weight, Spec: s})
		}
		return m, nil
	}
	return nil, fmt.Errorf("--kind %q (want shared-prefix, multi-turn, hot-prefix or mix)", kind)
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
	spec, err := f.spec(f.kind)
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
