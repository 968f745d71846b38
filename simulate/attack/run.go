package attack

import (
	"context"
	"fmt"
	"time"
)

// Run runs the selected families one after the other, each against a
// fresh llbd, and returns their tallies. An error means a family could
// not be set up or the run was interrupted; the report then holds what
// ran. Defects are in the report, not in the error.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := drawNet()
	if cfg.Net != "" {
		n, _ = parseNet(cfg.Net)
	}
	rep := &Report{Seed: cfg.Seed, Net: n.String(), Engine: string(cfg.dialect())}
	start := time.Now()
	defer func() { rep.Elapsed = time.Since(start) }()
	for _, fam := range cfg.families() {
		budget := cfg.budget(fam)
		if cfg.Replay {
			cfg.progress("%s: case %d on net %s (seed %d)", fam, cfg.Case, n, cfg.Seed)
		} else {
			cfg.progress("%s: %v of attacks on net %s (seed %d)", fam, budget.Round(time.Second), n, cfg.Seed)
		}
		fstart := time.Now()
		var t *Tally
		var err error
		switch fam {
		case FamilyREST:
			t, err = runREST(ctx, &cfg, n, budget)
		case FamilyDataPlane:
			t, err = runDataPlane(ctx, &cfg, n, budget)
		case FamilyKV:
			t, err = runKV(ctx, &cfg, n, budget)
		case FamilyFaults:
			t, err = runFaults(ctx, &cfg, n, budget)
		}
		t.Elapsed = time.Since(fstart)
		rep.Tallies = append(rep.Tallies, t)
		cfg.progress("%s: %d tried, %d refused, %d served, %d defects (%v)", fam, t.Tried, t.Refused, t.Accepted, t.DefectsSeen, t.Elapsed.Round(time.Second))
		if err != nil {
			return rep, fmt.Errorf("attack %s: %w", fam, err)
		}
	}
	return rep, nil
}

func (c *Config) progress(format string, a ...any) {
	if c.Progress != nil {
		fmt.Fprintf(c.Progress, "llbsim attack: "+format+"\n", a...)
	}
}
