package lifecycle

import (
	"fmt"
	"net"
	"strconv"

	"github.com/llbproject/llb/gateway"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/tokenizer"
)

// ruleTokenizer is the Tier-1.5 tokenizer of a rule (tokenizer.New): the
// engines' /tokenize, prefill engines first, then unified, then decode,
// wrapped by an in-process tokenizer when the rule has a tokenizer
// directory.
func (rs *ruleSet) ruleTokenizer(c *rule.Compiled, met *gateway.Metrics) (tokenizer.Tokenizer, error) {
	var engines []string
	for _, role := range []ladder.Role{ladder.RolePrefill, ladder.RoleNone, ladder.RoleDecode} {
		for _, ep := range c.Endpoints {
			if ep.Role() == role {
				engines = append(engines, "http://"+net.JoinHostPort(ep.Addr.Addr().String(), strconv.Itoa(int(ep.Addr.Port()))))
			}
		}
	}
	tok, err := tokenizer.New(tokenizer.Options{
		Engines:  engines,
		Timeout:  rs.cfg.Options.TokenizeTimeout,
		Dir:      c.KV.TokenizerDir,
		Registry: rs.tokenizers,
		Counters: met.TokenizerCounters(),
		Log:      rs.cfg.Log.With().Str(logfield.Component, "tokenizer").Str(logfield.Rule, c.Key).Logger(),
	})
	if err != nil {
		return nil, fmt.Errorf("rule %s tokenizer: %w: %w", c.Key, gateway.ErrInvalidConfig, err)
	}
	return tok, nil
}
