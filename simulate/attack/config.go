package attack

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llbproject/llb/simulate/worker"
)

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("attack: invalid configuration")

// The attack families, in the order a run takes them.
const (
	FamilyREST      = "rest"
	FamilyDataPlane = "dataplane"
	FamilyKV        = "kv"
	FamilyFaults    = "faults"
)

// Families lists every family in run order.
var Families = []string{FamilyREST, FamilyDataPlane, FamilyKV, FamilyFaults}

// share is each family's part of the run's duration.
var share = map[string]float64{FamilyREST: 0.2, FamilyDataPlane: 0.35, FamilyKV: 0.2, FamilyFaults: 0.25}

// DefaultDuration is a run's default budget (make attack's ATTACKTIME).
const DefaultDuration = 4 * time.Minute

// Config configures a run.
type Config struct {
	// LLBD is the llbd binary to attack. Required.
	LLBD string
	// Seed derives every case (the same seed, family and case index give
	// the same bytes).
	Seed uint64
	// Duration is the whole run's budget, shared by the families run
	// (20 % rest, 35 % dataplane, 20 % kv, 25 % faults, renormalised over
	// the families selected); the setup of each family (its llbd, its
	// fleet) comes on top. Default DefaultDuration. The data-plane
	// family runs its slow-client cases (which need the 60 s body-read
	// bound to pass) only with a budget of at least SlowCasesBudget.
	Duration time.Duration
	// Families are the families to run; nil runs all, in run order.
	Families []string
	// Replay runs case Case alone, of the one family selected, to
	// reproduce a defect (cases of the rest and kv families that depend on
	// what ran before them — controller epochs, sentinels, sequence
	// numbers — start from a fresh state instead).
	Replay bool
	// Case is the case Replay runs.
	Case int
	// Net is the run's private loopback /24 as "127.a.b" (every address
	// the run binds or names lies in it); "" draws one in 127.200–250.x.
	Net string
	// WorkDir holds the daemons' state directories and logs. Required.
	WorkDir string
	// Progress receives one line per family and phase ("" lines are not
	// written); nil discards them.
	Progress io.Writer
	// Engine is the dialect the simulated workers speak and the rules'
	// kvEngineType: vllm (""), sglang or trtllm. Families an engine does
	// not run (engineFamilies) are left out of a run of all families and
	// refused when asked for.
	Engine string
}

// engineFamilies are the families each engine runs: every engine runs
// every family (the kv family's hostile publisher speaks vLLM's or
// SGLang's ZMQ wire, its hostile server TensorRT-LLM's POST
// /kv_cache_events).
var engineFamilies = map[worker.Dialect][]string{
	worker.DialectVLLM:   Families,
	worker.DialectTRTLLM: Families,
	worker.DialectSGLang: Families,
}

// dialect is the run's engine (vLLM when unset or invalid).
func (c *Config) dialect() worker.Dialect {
	d, err := worker.ParseDialect(c.Engine)
	if err != nil {
		return worker.DialectVLLM
	}
	return d
}

// engineRule adds the rule arguments of the run's engine to sa: its
// kvEngineType, and for TensorRT-LLM and SGLang the hash contract left to
// the engine's default.
func (c *Config) engineRule(sa map[string]any) map[string]any {
	d := c.dialect()
	if d == worker.DialectVLLM {
		return sa
	}
	sa["kvEngineType"] = string(d)
	delete(sa, "kvHashAlgo")
	delete(sa, "kvNoneHashSeed")
	if d == worker.DialectTRTLLM {
		delete(sa, "kvZmqPort") // drained over HTTP
	}
	return sa
}

// Validate reports every problem at once.
func (c *Config) Validate() error {
	var errs []error
	if c.LLBD == "" {
		errs = append(errs, errors.New("the llbd binary is required"))
	}
	if c.WorkDir == "" {
		errs = append(errs, errors.New("a work directory is required"))
	}
	if c.Duration < 0 {
		errs = append(errs, fmt.Errorf("duration %v is negative", c.Duration))
	}
	d, err := worker.ParseDialect(c.Engine)
	if err != nil {
		errs = append(errs, err)
	}
	for _, f := range c.Families {
		switch {
		case !slices.Contains(Families, f):
			errs = append(errs, fmt.Errorf("family %q (want one of %s)", f, strings.Join(Families, ", ")))
		case err == nil && !slices.Contains(engineFamilies[d], f):
			errs = append(errs, fmt.Errorf("family %q does not run against engine %s (it runs %s)", f, d, strings.Join(engineFamilies[d], ", ")))
		}
	}
	if c.Replay && (len(c.Families) != 1 || c.Case < 0) {
		errs = append(errs, fmt.Errorf("replaying case %d needs a case >= 0 and exactly one family", c.Case))
	}
	if c.Net != "" {
		if _, err := parseNet(c.Net); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
}

// families is the selected families in run order (all the engine runs
// when none is selected).
func (c *Config) families() []string {
	if len(c.Families) == 0 {
		return engineFamilies[c.dialect()]
	}
	var out []string
	for _, f := range Families {
		if slices.Contains(c.Families, f) {
			out = append(out, f)
		}
	}
	return out
}

// budget is family f's part of the run's duration.
func (c *Config) budget(f string) time.Duration {
	total := 0.0
	for _, g := range c.families() {
		total += share[g]
	}
	d := c.Duration
	if d == 0 {
		d = DefaultDuration
	}
	return time.Duration(float64(d) * share[f] / total)
}

// loopNet is a private loopback /24, 127.a.b.0.
type loopNet struct{ a, b int }

// parseNet reads "127.a.b".
func parseNet(s string) (loopNet, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 || parts[0] != "127" {
		return loopNet{}, fmt.Errorf("net %q (want 127.a.b)", s)
	}
	a, err1 := strconv.Atoi(parts[1])
	b, err2 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil || a < 0 || a > 255 || b < 0 || b > 255 || (a == 0 && b == 0) {
		return loopNet{}, fmt.Errorf("net %q (want 127.a.b with a, b in 0–255, not 127.0.0)", s)
	}
	return loopNet{a, b}, nil
}

// drawNet picks a /24 in 127.200.0–127.250.255: clear of the chaos tests'
// 127.100–199 and of 127.0.0.x, where make run and the fleets listen.
func drawNet() loopNet { return loopNet{200 + rand.IntN(51), rand.IntN(256)} }

// String is "127.a.b".
func (n loopNet) String() string { return fmt.Sprintf("127.%d.%d", n.a, n.b) }

// ip is host h of the net.
func (n loopNet) ip(h int) string { return fmt.Sprintf("127.%d.%d.%d", n.a, n.b, h) }

// Hosts of the net each family uses (one family runs at a time, but a
// host stays with one role so a reproducer names the same addresses).
const (
	hostRESTVIPLo   = 2   // rest: rule VIPs .2–.99
	hostRESTVIPHi   = 99  //
	hostRESTEPLo    = 100 // rest: endpoints .100–.149 (nothing listens)
	hostRESTEPHi    = 149 //
	hostRESTCtl     = 150 // rest: the controller target rule's VIP
	hostRESTSent    = 151 // rest: sentinel rules' VIP
	hostDPVIP       = 160 // dataplane: the rule's VIP
	hostDPWorker    = 161 // dataplane: workers .161–.162
	hostKVVIP       = 170 // kv: the rule's VIP
	hostKVWorker    = 171 // kv: the worker (HTTP) and the fake publisher
	hostFaultVIP    = 180 // faults: the rule's VIP
	hostFaultWorker = 181 // faults: worker processes .181–.186
)

// attackSpan is the part of a family's budget its cases may take: the
// rest is left for the closing checks (resources settling, the last
// recovery), at most tail.
func attackSpan(budget, tail time.Duration) time.Duration {
	return budget - min(tail, budget/3)
}

// shortRun is a budget too small for the expensive cases (multi-second
// recoveries, slow clients): they are left out.
func shortRun(budget time.Duration) bool { return budget < 30*time.Second }

// caseRand is case i of family f's random source: a function of the seed,
// the family and i alone.
func caseRand(seed uint64, family string, i int) *rand.Rand {
	h := uint64(14695981039346656037)
	for _, c := range []byte(family) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return rand.New(rand.NewPCG(seed, h^uint64(i)*0x9e3779b97f4a7c15))
}

// eachCase runs case i = 0, 1, … of family, each with its caseRand, until
// deadline passes or ctx ends; a replay runs cfg.Case alone.
func eachCase(ctx context.Context, cfg *Config, family string, deadline time.Time, run func(i int, rng *rand.Rand)) {
	for i := 0; ; i++ {
		if cfg.Replay {
			i = cfg.Case
		}
		run(i, caseRand(cfg.Seed, family, i))
		if cfg.Replay || time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
	}
}
