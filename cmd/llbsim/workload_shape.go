package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/llbproject/llb/simulate/workload"
)

// defaultMix is --mix's default: every kind once, equally weighted.
const defaultMix = "shared-prefix=1,hot-prefix=1,multi-turn=1"

// shapeFlags are the workload-shape flags, declared once for every command
// that generates a workload ("llbsim workload" and "llbsim bench"): the same
// names, help and defaults in both. A zero size takes the generator's
// documented default, written out by spec so results describe the workload
// as run (TestShapeFlags_DefaultsAreTheGenerators holds them equal).
type shapeFlags struct {
	// shared-prefix (outputTokens and systemTokens, questionTokens also serve
	// the other kinds)
	groups, promptsPerGroup, systemTokens, questionTokens, outputTokens int
	zipfAlpha                                                           float64
	chat                                                                bool

	// hot-prefix
	clients, prefixTokens, suffixTokens int
	sessions                            bool

	// multi-turn; answerTokens 0 takes outputTokens
	conversations, turns, historyTokens, answerTokens int
	headerSession                                     bool

	// mix: kind=weight parts
	mix string
}

// register declares the shape flags on fl. --zipf is the deprecated
// spelling of --zipf-alpha ("llbsim bench" used it); it still works, hidden,
// and warnDeprecated says so on stderr. (pflag's MarkDeprecated would print
// the warning through cobra onto stdout, into "llbsim workload"'s JSON lines.)
func (s *shapeFlags) register(fl *pflag.FlagSet) {
	fl.IntVar(&s.groups, "groups", 0, "shared-prefix: system prompts (default 64)")
	fl.IntVar(&s.promptsPerGroup, "prompts-per-group", 0, "shared-prefix: questions per group (default 16)")
	fl.IntVar(&s.systemTokens, "system-tokens", 0, "shared-prefix / multi-turn: system prompt tokens (default 2048 / 1000)")
	fl.IntVar(&s.questionTokens, "question-tokens", 0, "shared-prefix / multi-turn: question tokens (default 128 / 100)")
	fl.IntVar(&s.outputTokens, "output-tokens", 0, "max_tokens (default 256 shared-prefix, 128 hot-prefix, 100 multi-turn)")
	fl.Float64Var(&s.zipfAlpha, "zipf-alpha", 0, "shared-prefix: Zipf alpha of group popularity (0 uniform)")
	fl.Float64Var(&s.zipfAlpha, "zipf", 0, "shared-prefix: Zipf alpha of group popularity (0 uniform)")
	_ = fl.MarkHidden("zipf") // the flag exists: cannot fail
	fl.BoolVar(&s.chat, "chat", false, "shared-prefix / hot-prefix: send chat requests instead of completions")
	fl.IntVar(&s.clients, "clients", 0, "hot-prefix: clients sharing the preamble (default 50)")
	fl.IntVar(&s.prefixTokens, "prefix-tokens", 0, "hot-prefix: shared preamble tokens (default 2048)")
	fl.IntVar(&s.suffixTokens, "suffix-tokens", 0, "hot-prefix: unique suffix tokens (default 64)")
	fl.BoolVar(&s.sessions, "sessions", false, "hot-prefix: a user_id per client")
	fl.IntVar(&s.conversations, "conversations", 0, "multi-turn: active conversations (default 10)")
	fl.IntVar(&s.turns, "turns", 0, "multi-turn: turns per conversation (default 5)")
	fl.IntVar(&s.historyTokens, "history-tokens", 0, "multi-turn: per-user document tokens (default 2000)")
	fl.IntVar(&s.answerTokens, "answer-tokens", 0, "multi-turn: answer tokens, max_tokens (default --output-tokens)")
	fl.BoolVar(&s.headerSession, "header-session", false, "multi-turn: session key as X-Conversation-Id instead of user_id")
	fl.StringVar(&s.mix, "mix", defaultMix, "mix: weighted parts kind=weight,... (kind:weight also accepted; weight default 1); each part takes the shape flags")
}

// zipfChanged reports whether the command line set the Zipf alpha under
// either spelling.
func (s *shapeFlags) zipfChanged(fs *pflag.FlagSet) bool {
	return fs.Changed("zipf-alpha") || fs.Changed("zipf")
}

// warnDeprecated writes a line to w for every deprecated spelling used.
func (s *shapeFlags) warnDeprecated(fs *pflag.FlagSet, w io.Writer) {
	if fs.Changed("zipf") {
		fmt.Fprintln(w, "llbsim: --zipf is deprecated; use --zipf-alpha")
	}
}

// spec builds a workload generator of kind from the shape flags, with opts
// (model, streaming) on every part.
func (s *shapeFlags) spec(kind string, opts workload.Options) (workload.Spec, error) {
	or := func(v, d int) int {
		if v == 0 {
			return d
		}
		return v
	}
	switch kind {
	case "shared-prefix":
		return workload.SharedPrefix{Options: opts, Groups: or(s.groups, 64), PromptsPerGroup: or(s.promptsPerGroup, 16),
			SystemTokens: or(s.systemTokens, 2048), QuestionTokens: or(s.questionTokens, 128), OutputTokens: or(s.outputTokens, 256),
			ZipfAlpha: s.zipfAlpha, Chat: s.chat}, nil
	case "hot-prefix":
		return workload.HotPrefix{Options: opts, Clients: or(s.clients, 50), PrefixTokens: or(s.prefixTokens, 2048),
			SuffixTokens: or(s.suffixTokens, 64), OutputTokens: or(s.outputTokens, 128), Sessions: s.sessions, Chat: s.chat}, nil
	case "multi-turn":
		return workload.MultiTurn{Options: opts, Conversations: or(s.conversations, 10), Turns: or(s.turns, 5),
			SystemTokens: or(s.systemTokens, 1000), HistoryTokens: or(s.historyTokens, 2000), QuestionTokens: or(s.questionTokens, 100),
			AnswerTokens: or(s.answerTokens, or(s.outputTokens, 100)), HeaderSession: s.headerSession}, nil
	case "mix":
		return s.mixSpec(opts)
	}
	return nil, fmt.Errorf("workload %q (want shared-prefix, hot-prefix, multi-turn or mix)", kind)
}

// mixSpec parses --mix: comma-separated kind=weight parts (kind:weight, the
// spelling "llbsim bench" took, is the same; a bare kind weighs 1).
func (s *shapeFlags) mixSpec(opts workload.Options) (workload.Spec, error) {
	var m workload.Mix
	for _, part := range strings.Split(s.mix, ",") {
		part = strings.TrimSpace(part)
		kind, weight := part, ""
		if i := strings.IndexAny(part, "=:"); i >= 0 {
			kind, weight = part[:i], part[i+1:]
		}
		w := 1.0
		if weight != "" {
			var err error
			if w, err = strconv.ParseFloat(weight, 64); err != nil {
				return nil, fmt.Errorf("--mix part %q: weight %q is not a number", part, weight)
			}
		}
		if kind == "mix" {
			return nil, fmt.Errorf("--mix part %q: a mix cannot contain a mix", part)
		}
		spec, err := s.spec(kind, opts)
		if err != nil {
			return nil, fmt.Errorf("--mix part %q: %w", part, err)
		}
		m.Parts = append(m.Parts, workload.Part{Weight: w, Spec: spec})
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("--mix: %w", err)
	}
	return m, nil
}
