package lifecycle

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/llbproject/llb/gateway"
	"github.com/llbproject/llb/internal/logfield"
)

// Listeners shared by rules. Rules whose keys differ only in host,
// path_prefix/path_match_mode or model_name share their VIP:port (LoxiLB's
// model routing): one listener per address, serving a gateway.RuleTable of
// the rules' handlers in creation order, each request going to the rule
// its host, path and model select. An address that cannot be bound is
// retried every BindRetry for as long as a rule wants it.

// addrGroup is the rules on one VIP:port and their listener. Guarded by
// ruleSet.mu.
type addrGroup struct {
	addr    netip.AddrPort
	ln      *gateway.Listener // nil while the address cannot be bound
	bindErr error
	rules   []*liveRule   // in creation order
	stop    chan struct{} // closed when the group ends (the bind retry stops)
}

// addrOf is the address a rule listens on.
func addrOf(l *liveRule) netip.AddrPort {
	return netip.AddrPortFrom(l.spec.rule.VIP, l.spec.rule.Port)
}

// table is the group's rule table.
func (g *addrGroup) table() *gateway.RuleTable {
	hs := make([]*gateway.Handler, len(g.rules))
	for i, r := range g.rules {
		hs[i] = r.h
	}
	return gateway.NewRuleTable(hs)
}

// join adds live (its handler built) to its address's group, binding the
// address when live is the first rule there (rs.mu held).
func (rs *ruleSet) join(live *liveRule) {
	a := addrOf(live)
	g := rs.addrs[a]
	if g == nil {
		g = &addrGroup{addr: a, stop: make(chan struct{})}
		rs.addrs[a] = g
		g.rules = []*liveRule{live}
		rs.bind(g)
		return
	}
	g.rules = append(g.rules, live)
	if g.ln != nil {
		g.ln.SetTable(g.table())
	}
	rs.log.Info().Str(logfield.Rule, live.key()).Str(logfield.Addr, a.String()).Int(logfield.Count, len(g.rules)).
		Msg("rule shares its address with other rules")
}

// swap replaces old by next (same key, same address) in its group.
func (rs *ruleSet) swap(old, next *liveRule) {
	g := rs.addrs[addrOf(old)]
	for i, r := range g.rules {
		if r == old {
			g.rules[i] = next
		}
	}
	if g.ln != nil {
		g.ln.SetTable(g.table())
	}
}

// leave takes live out of its group (rs.mu held). It returns the
// listener to shut down when live was the group's last rule (nil when the
// address was never bound), or, when other rules stay, nil and true: the
// caller then drains live's handler alone.
func (rs *ruleSet) leave(live *liveRule) (ln *gateway.Listener, shared bool) {
	a := addrOf(live)
	g := rs.addrs[a]
	if g == nil {
		return nil, false
	}
	for i, r := range g.rules {
		if r == live {
			g.rules = append(g.rules[:i:i], g.rules[i+1:]...)
			break
		}
	}
	if len(g.rules) > 0 {
		if g.ln != nil {
			g.ln.SetTable(g.table())
		}
		return nil, true
	}
	delete(rs.addrs, a)
	close(g.stop)
	return g.ln, false
}

// bind binds the group's address, or records the error and retries in
// the background until it binds or the group ends (rs.mu held).
func (rs *ruleSet) bind(g *addrGroup) {
	if err := rs.startGroup(g); err == nil {
		return
	}
	rs.log.Warn().Err(g.bindErr).Str(logfield.Addr, g.addr.String()).Str(logfield.Rule, g.rules[0].key()).
		Msg("rule address cannot be bound; retrying")
	go func() {
		t := time.NewTicker(rs.cfg.BindRetry)
		defer t.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-t.C:
			}
			rs.mu.Lock()
			if rs.addrs[g.addr] != g || g.ln != nil {
				rs.mu.Unlock()
				return
			}
			err := rs.startGroup(g)
			if err == nil {
				rs.log.Info().Str(logfield.Addr, g.addr.String()).Msg("rule address bound")
			}
			rs.mu.Unlock()
			if err == nil {
				return
			}
		}
	}()
}

// startGroup starts a listener serving the group's table.
func (rs *ruleSet) startGroup(g *addrGroup) error {
	ln := gateway.NewListener(g.rules[0].h)
	ln.SetTable(g.table())
	if err := ln.Start(); err != nil {
		g.bindErr = err
		return err
	}
	g.ln, g.bindErr = ln, nil
	return nil
}

// groupOf returns live's listener and bind error (rs.mu held).
func (rs *ruleSet) groupOf(live *liveRule) (*gateway.Listener, error) {
	g := rs.addrs[addrOf(live)]
	if g == nil {
		return nil, fmt.Errorf("lifecycle: rule %s has no listener", live.key())
	}
	return g.ln, g.bindErr
}

// drainHandler waits until ctx ends for the requests inside h (a rule that
// left a listener other rules keep).
func drainHandler(ctx context.Context, h *gateway.Handler) error {
	if h == nil {
		return nil
	}
	return h.Drain(ctx)
}
