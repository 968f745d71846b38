package gateway

import (
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/tokenizer"
)

// ruleTokenizer is the Tier-1.5 tokenizer of a rule: the engines'
// /tokenize (failing over across the rule's endpoints), wrapped by an
// in-process tokenizer when the rule has a tokenizer directory. The local
// one falls back to /tokenize for whatever it does not cover and checks a
// sample of its answers against it (tokenizer.Local).
func (rt *Runtime) ruleTokenizer(live *liveRule, r Rule) (inventory.Tokenizer, error) {
	remote, err := newFailoverTokenizer(r.Gateway, r.Gateway.tokenizeTimeout())
	if err != nil || r.Gateway.TokenizerDir == "" {
		return remote, err
	}
	return tokenizer.NewLocal(tokenizer.LocalConfig{
		Dir:      r.Gateway.TokenizerDir,
		Remote:   remote,
		Registry: rt.tokenizers,
		Counters: live.met.tokenizerCounters(),
		Log:      rt.cfg.Log.With().Str(logfield.Component, "tokenizer").Str(logfield.Rule, r.Key).Logger(),
	})
}

// tokenizerCounters registers the in-process tokenizer's series (only for
// rules that have one):
//
//	llb_tokenizer_requests_total{path}   Tier-1.5 tokenizations by path: local or engine
//	llb_tokenizer_checks_total           local answers re-checked against the engine
//	llb_tokenizer_mismatch_total         checks whose ids differed (the model then uses the engine)
//	llb_tokenizer_check_errors_total     checks the engine did not answer
func (m *Metrics) tokenizerCounters() tokenizer.Counters {
	return tokenizer.Counters{
		Local:       m.counter("llb_tokenizer_requests_total", `path="local"`),
		Remote:      m.counter("llb_tokenizer_requests_total", `path="engine"`),
		Checks:      m.counter("llb_tokenizer_checks_total", ""),
		Mismatches:  m.counter("llb_tokenizer_mismatch_total", ""),
		CheckErrors: m.counter("llb_tokenizer_check_errors_total", ""),
	}
}
