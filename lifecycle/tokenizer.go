package lifecycle

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/llbproject/llb/gateway"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/tokenizer"
)

// ruleTokenizer is the Tier-1.5 tokenizer of a rule: the engines'
// /tokenize (failing over across the rule's endpoints), wrapped by an
// in-process tokenizer when the rule has a tokenizer directory. The local
// one falls back to /tokenize for whatever it does not cover and checks a
// sample of its answers against it (tokenizer.Local).
func (rs *ruleSet) ruleTokenizer(c *rule.Compiled, met *gateway.Metrics) (inventory.Tokenizer, error) {
	remote, err := newFailoverTokenizer(c, rs.cfg.Options.TokenizeTimeout)
	if err != nil || c.KV.TokenizerDir == "" {
		return remote, err
	}
	return tokenizer.NewLocal(tokenizer.LocalConfig{
		Dir:      c.KV.TokenizerDir,
		Remote:   remote,
		Registry: rs.tokenizers,
		Counters: met.TokenizerCounters(),
		Log:      rs.cfg.Log.With().Str(logfield.Component, "tokenizer").Str(logfield.Rule, c.Key).Logger(),
	})
}

// failoverTokenizer calls /tokenize on the rule's engines in order,
// starting with the last one that answered, until one answers or ctx ends.
// Every engine of a rule serves the same model, so any may tokenize.
type failoverTokenizer struct {
	toks []*inventory.RemoteTokenizer
	mu   sync.Mutex
	good int
}

func newFailoverTokenizer(c *rule.Compiled, timeout time.Duration) (*failoverTokenizer, error) {
	f := &failoverTokenizer{}
	for _, role := range []ladder.Role{ladder.RolePrefill, ladder.RoleNone, ladder.RoleDecode} {
		for _, ep := range c.Endpoints {
			if ep.Role() != role {
				continue
			}
			t, err := inventory.NewRemoteTokenizer(inventory.RemoteTokenizerConfig{
				BaseURL: "http://" + net.JoinHostPort(ep.Addr.Addr().String(), strconv.Itoa(int(ep.Addr.Port()))),
				Timeout: timeout,
			})
			if err != nil {
				return nil, fmt.Errorf("rule %s tokenizer: %w", c.Key, err)
			}
			f.toks = append(f.toks, t)
		}
	}
	if len(f.toks) == 0 {
		return nil, fmt.Errorf("rule %s has no endpoint to tokenize with: %w", c.Key, gateway.ErrInvalidConfig)
	}
	return f, nil
}

// Tokenize implements inventory.Tokenizer.
func (f *failoverTokenizer) Tokenize(ctx context.Context, req inventory.TokenizeRequest, dst []uint32) ([]uint32, error) {
	f.mu.Lock()
	start := f.good
	f.mu.Unlock()
	var err error
	for k := 0; k < len(f.toks); k++ {
		i := (start + k) % len(f.toks)
		var out []uint32
		if out, err = f.toks[i].Tokenize(ctx, req, dst); err == nil {
			if i != start {
				f.mu.Lock()
				f.good = i
				f.mu.Unlock()
			}
			return out, nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return dst, err
}
