// Package fleet starts and stops a set of simulated vLLM workers in-process,
// each on its own loopback address (127.0.0.2, 127.0.0.3, ...), so that one
// ZMQ port serves every worker as an llb rule's single kvZmqPort requires.
// Tests of other packages, the llbsim CLI and the make-run demo use it.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/worker"
)

// Sentinel errors; every error the package returns wraps one of them.
var (
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("fleet: invalid configuration")
	// ErrStart reports a worker that could not start.
	ErrStart = errors.New("fleet: worker failed to start")
	// ErrRunning reports a restart of a member that is still running.
	ErrRunning = errors.New("fleet: member still running")
)

// Config describes a fleet. Workers are laid out prefill first, then
// decode, then single-pool (role-less) workers, on consecutive addresses
// from BaseIP.
type Config struct {
	// Prefill, Decode and Single are how many workers of each kind to
	// start (P/D rules need at least one prefill and one decode).
	Prefill, Decode, Single int
	// BaseIP is the first worker's address. Default 127.0.0.2 (every
	// 127.0.0.0/8 address is loopback on Linux).
	BaseIP string
	// HTTPPort is every worker's API port; 0 gives each a free port.
	HTTPPort int
	// KVPort is the ZMQ PUB port shared by every worker that publishes; 0
	// picks one free port (the first worker's) for all of them.
	KVPort int
	// ReplayPort is the shared replay ROUTER port when Template.Replay; 0
	// picks one like KVPort.
	ReplayPort int
	// NIXLPort is every P/D worker's side-channel port; 0 gives each a
	// free port.
	NIXLPort int
	// BootstrapPort is every SGLang prefill worker's bootstrap port (the
	// rule's one pdBootstrapPort); 0 picks one (the first prefill's) for
	// all of them.
	BootstrapPort int
	// DPRanks is each publishing worker's data-parallel rank count (1–8;
	// 0 is 1): rank r is a worker of its own on the member's address with
	// its own engine and KV publisher on KVPort + r, behind rank 0 (the
	// member's worker), which spreads requests over the ranks in turn.
	DPRanks int
	// DecodeKVEvents makes decode workers publish KV events too (by default
	// they do not: decode endpoints are never KV-selection candidates).
	DecodeKVEvents bool
	// SameIP puts every worker on BaseIP itself, worker i on HTTPPort+100·i
	// (and NIXLPort+i): the layout of the seed page's examples, e.g. a
	// prefill on 127.0.0.1:8100 and a decode on 127.0.0.1:8200. Only one
	// worker may then publish KV events (one kvZmqPort per address).
	SameIP bool
	// Template is the configuration every worker starts from (its Name,
	// IP, ports and role are set by the fleet). Default worker.DefaultConfig.
	Template *worker.Config
	// Customize, when set, adjusts one worker's configuration after the
	// fleet filled it in (index in layout order, and its role).
	Customize func(index int, role ladder.Role, c *worker.Config)
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var errs []error
	if c.Prefill < 0 || c.Decode < 0 || c.Single < 0 {
		errs = append(errs, fmt.Errorf("worker counts %d/%d/%d (want >= 0)", c.Prefill, c.Decode, c.Single))
	}
	if c.Prefill+c.Decode+c.Single == 0 {
		errs = append(errs, errors.New("a fleet needs at least one worker"))
	}
	if (c.Prefill == 0) != (c.Decode == 0) {
		errs = append(errs, fmt.Errorf("P/D needs both roles: %d prefill, %d decode", c.Prefill, c.Decode))
	}
	if c.BaseIP != "" && !c.SameIP {
		if _, err := baseAddrs(c.BaseIP, c.Prefill+c.Decode+c.Single); err != nil {
			errs = append(errs, err)
		}
	}
	if c.SameIP {
		if c.HTTPPort == 0 {
			errs = append(errs, errors.New("same-ip needs a fixed http port (workers take port, port+100, ...)"))
		}
		publishers := c.Prefill + c.Single
		if c.DecodeKVEvents {
			publishers += c.Decode
		}
		if c.Template != nil && !c.Template.KVEvents {
			publishers = 0
		}
		if publishers > 1 {
			errs = append(errs, fmt.Errorf("same-ip: %d workers would publish KV events on one address; at most one can (one kvZmqPort per address)", publishers))
		}
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"http port", c.HTTPPort}, {"kv port", c.KVPort}, {"replay port", c.ReplayPort}, {"nixl port", c.NIXLPort}, {"bootstrap port", c.BootstrapPort}} {
		if p.v < 0 || p.v > 65535 {
			errs = append(errs, fmt.Errorf("%s %d (want 0..65535)", p.name, p.v))
		}
	}
	if c.DPRanks < 0 || c.DPRanks > 8 {
		errs = append(errs, fmt.Errorf("dp ranks %d (want 1..8)", c.DPRanks))
	}
	if c.DPRanks > 1 && (c.SameIP || c.Template != nil && c.Template.Replay) {
		errs = append(errs, errors.New("dp ranks need their own address per worker and no replay"))
	}
	if c.DPRanks > 1 && c.KVPort+c.DPRanks-1 > 65535 {
		errs = append(errs, fmt.Errorf("kv port %d with %d dp ranks needs ports beyond 65535", c.KVPort, c.DPRanks))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("fleet config: %w: %w", ErrConfig, errors.Join(errs...))
}

// baseAddrs returns n consecutive IPv4 addresses from base.
func baseAddrs(base string, n int) ([]netip.Addr, error) {
	a, err := netip.ParseAddr(base)
	if err != nil || !a.Is4() {
		return nil, fmt.Errorf("base ip %q (want an IPv4 address such as 127.0.0.2)", base)
	}
	out := make([]netip.Addr, 0, n)
	for i := 0; i < n; i++ {
		if !a.IsValid() || (i > 0 && !a.Is4()) {
			return nil, fmt.Errorf("base ip %s leaves no room for %d workers", base, n)
		}
		out = append(out, a)
		a = a.Next()
	}
	return out, nil
}

// sameAddrs returns base n times.
func sameAddrs(base string, n int) ([]netip.Addr, error) {
	a, err := netip.ParseAddr(base)
	if err != nil {
		return nil, fmt.Errorf("base ip %q: %w", base, err)
	}
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = a
	}
	return out, nil
}

// Member is one worker of a fleet.
type Member struct {
	// Index is the position in layout order.
	Index int
	// Role is the member's endpoint role in the fleet's rule (RoleNone for
	// single-pool workers); its engine runs the matching kv_role
	// (engine.KVRoleFor) unless Config.Customize changed it.
	Role ladder.Role

	mu    sync.Mutex
	w     *worker.Worker
	ranks []*worker.Worker // data-parallel ranks 1.. behind w (not restarted)
	cfg   worker.Config    // with the ports actually bound, for restarts
}

// Ranks returns the member's data-parallel ranks after rank 0 (its
// Worker), each with its own engine and KV publisher.
func (m *Member) Ranks() []*worker.Worker { return m.ranks }

// Worker is the member's current worker (a new one after Restart).
func (m *Member) Worker() *worker.Worker {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.w
}

// Fleet is a running set of workers.
type Fleet struct {
	members  []*Member
	kvPort   int
	bootPort int
	dpRanks  int
	dialect  worker.Dialect
	hash     engine.HashConfig
	bs       int
	events   bool
}

// Start launches the fleet. On error every worker already started is
// crashed and nothing is left running.
//
// Ports the configuration leaves at 0 are picked by the first worker that
// binds them and shared by the others on their own addresses; another
// process may hold that port on a later address (loopback ports are taken
// per address), so a start that fails on a port the fleet picked itself is
// tried again from scratch with fresh ports.
func Start(cfg Config) (*Fleet, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	picked := cfg.KVPort == 0 || cfg.ReplayPort == 0 || cfg.BootstrapPort == 0
	for try := 1; ; try++ {
		f, err := start(cfg)
		if err == nil || !picked || try == startTries || !addrInUse(err) {
			return f, err
		}
	}
}

// startTries bounds the fresh starts after a picked port was found taken.
const startTries = 5

// addrInUse reports whether a worker failed to bind a port already in use,
// whether the error came from Go's net package or from ZMQ's bind.
func addrInUse(err error) bool {
	return errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use")
}

func start(cfg Config) (*Fleet, error) {
	tmpl := worker.DefaultConfig()
	if cfg.Template != nil {
		tmpl = *cfg.Template
	}
	if cfg.BaseIP == "" {
		cfg.BaseIP = "127.0.0.2"
	}
	n := cfg.Prefill + cfg.Decode + cfg.Single
	addrs, err := baseAddrs(cfg.BaseIP, n)
	if cfg.SameIP {
		addrs, err = sameAddrs(cfg.BaseIP, n)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	dialect, err := worker.ParseDialect(string(tmpl.Dialect))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	f := &Fleet{kvPort: cfg.KVPort, bootPort: cfg.BootstrapPort, dpRanks: max(cfg.DPRanks, 1), dialect: dialect, hash: tmpl.Engine.Hash, bs: tmpl.Engine.BlockSize}
	replayPort := cfg.ReplayPort
	if f.dpRanks > 1 && f.kvPort == 0 && tmpl.KVEvents {
		if f.kvPort, err = freeRange(addrs, f.dpRanks); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrStart, err)
		}
	}
	for i := 0; i < n; i++ {
		role, name := roleAt(cfg, i)
		c := tmpl
		c.Name = name
		c.IP = addrs[i].String()
		c.HTTPPort = cfg.HTTPPort
		c.NIXLPort = cfg.NIXLPort
		if cfg.SameIP {
			c.HTTPPort = cfg.HTTPPort + 100*i
			if cfg.NIXLPort != 0 {
				c.NIXLPort = cfg.NIXLPort + i
			}
		}
		c.Engine.KVRole = engine.KVRoleFor(role)
		c.KVEvents = tmpl.KVEvents && (role != ladder.RoleDecode || cfg.DecodeKVEvents)
		c.Replay = tmpl.Replay && c.KVEvents
		c.KVPort = f.kvPort
		c.ReplayPort = replayPort
		c.BootstrapPort = f.bootPort
		if cfg.Customize != nil {
			cfg.Customize(i, role, &c)
		}
		var ranks []*worker.Worker
		if f.dpRanks > 1 && c.KVEvents {
			for r := 1; r < f.dpRanks; r++ {
				rc := c
				rc.Name = fmt.Sprintf("%s.dp%d", c.Name, r)
				rc.HTTPPort, rc.NIXLPort, rc.BootstrapPort = 0, 0, 0
				rc.KVPort, rc.DPRank = c.KVPort+r, r
				rw, err := worker.Start(rc)
				if err != nil {
					for _, x := range ranks {
						x.Crash()
					}
					f.crashAll()
					return nil, fmt.Errorf("start %s on %s: %w: %w", rc.Name, rc.IP, ErrStart, err)
				}
				ranks = append(ranks, rw)
				c.DPRoute = append(c.DPRoute, rw.URL())
			}
		}
		w, err := worker.Start(c)
		if err != nil {
			for _, x := range ranks {
				x.Crash()
			}
			f.crashAll()
			return nil, fmt.Errorf("start %s on %s: %w: %w", name, c.IP, ErrStart, err)
		}
		if f.bootPort == 0 && w.BootstrapAddr() != "" {
			f.bootPort = endpointPort(w.BootstrapAddr())
		}
		if c.KVEvents {
			f.events = true
			if f.kvPort == 0 {
				f.kvPort = endpointPort(w.KVEndpoint())
			}
			if c.Replay && replayPort == 0 {
				replayPort = endpointPort(w.ReplayEndpoint())
			}
		}
		bound := w.Config()
		bound.HTTPPort = w.HTTPPort()
		bound.KVPort = endpointPort(w.KVEndpoint())
		bound.ReplayPort = endpointPort(w.ReplayEndpoint())
		bound.NIXLPort = endpointPort(w.NIXLAddr())
		bound.Engine.EngineID = "" // a restarted engine gets a fresh id
		bound.Engine.Hash.NoneHash = nil
		f.members = append(f.members, &Member{Index: i, Role: role, w: w, ranks: ranks, cfg: bound})
	}
	return f, nil
}

// roleAt is the role and name of the i-th worker in layout order.
func roleAt(cfg Config, i int) (ladder.Role, string) {
	switch {
	case i < cfg.Prefill:
		return ladder.RolePrefill, "prefill-" + strconv.Itoa(i)
	case i < cfg.Prefill+cfg.Decode:
		return ladder.RoleDecode, "decode-" + strconv.Itoa(i-cfg.Prefill)
	}
	return ladder.RoleNone, "worker-" + strconv.Itoa(i-cfg.Prefill-cfg.Decode)
}

// endpointPort is the port of "tcp://ip:port" or "ip:port" (0 when empty).
func endpointPort(ep string) int {
	if ep == "" {
		return 0
	}
	_, port, err := net.SplitHostPort(strings.TrimPrefix(ep, "tcp://"))
	if err != nil {
		return 0
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return 0
	}
	return p
}

// Members returns the fleet's members in layout order.
func (f *Fleet) Members() []*Member { return f.members }

// Workers returns the current workers in layout order.
func (f *Fleet) Workers() []*worker.Worker {
	out := make([]*worker.Worker, len(f.members))
	for i, m := range f.members {
		out[i] = m.Worker()
	}
	return out
}

// KVZmqPort is the ZMQ port every publishing worker binds (0 when none
// publishes).
func (f *Fleet) KVZmqPort() int { return f.kvPort }

// Stop stops every worker gracefully and in parallel, returning the first
// error (ctx ended before in-flight requests finished).
func (f *Fleet) Stop(ctx context.Context) error {
	errs := make([]error, len(f.members))
	var wg sync.WaitGroup
	for i, m := range f.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.Worker().Stop(ctx)
			for _, r := range m.ranks {
				errs[i] = errors.Join(errs[i], r.Stop(ctx))
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// crashAll crashes every member (Start failed half way).
func (f *Fleet) crashAll() {
	for _, m := range f.members {
		m.Worker().Crash()
		for _, r := range m.ranks {
			r.Crash()
		}
	}
}

// freeRange finds a port p such that p..p+n-1 can be bound on every
// address (each member's DP ranks publish on consecutive ports).
func freeRange(addrs []netip.Addr, n int) (int, error) {
	for try := 0; try < 50; try++ {
		probe, err := net.Listen("tcp", net.JoinHostPort(addrs[0].String(), "0"))
		if err != nil {
			return 0, fmt.Errorf("probe a free port: %w", err)
		}
		base := probe.Addr().(*net.TCPAddr).Port
		_ = probe.Close() // only its number is wanted
		if base+n-1 > 65535 {
			continue
		}
		ok := true
		for _, a := range addrs {
			for p := base; p < base+n && ok; p++ {
				l, err := net.Listen("tcp", net.JoinHostPort(a.String(), strconv.Itoa(p)))
				if err != nil {
					ok = false
					break
				}
				_ = l.Close()
			}
		}
		if ok {
			return base, nil
		}
	}
	return 0, errors.New("no range of free ports for the dp ranks")
}

// Restart starts a fresh worker for a member whose worker has stopped or
// crashed, on the same addresses and ports (a restarted vLLM process: a new
// engine id, an empty cache, KV sequence numbers from 0 again).
func (f *Fleet) Restart(index int) (*worker.Worker, error) {
	if index < 0 || index >= len(f.members) {
		return nil, fmt.Errorf("restart member %d of %d: %w", index, len(f.members), ErrConfig)
	}
	m := f.members[index]
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.w.Done():
	default:
		return nil, fmt.Errorf("restart %s: %w", m.cfg.Name, ErrRunning)
	}
	w, err := worker.Start(m.cfg)
	if err != nil {
		return nil, fmt.Errorf("restart %s: %w: %w", m.cfg.Name, ErrStart, err)
	}
	m.w = w
	return w, nil
}
