package attack

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/llbproject/llb/simulate/harness"
)

// daemon is the llbd under attack: the process, its REST client and what
// the oracles read from it.
type daemon struct {
	*harness.Daemon
	cfg      harness.DaemonConfig
	client   *http.Client
	stateDir string
}

// restTimeout bounds one REST exchange: past it the call is a hang.
const restTimeout = 15 * time.Second

// startDaemon starts a fresh llbd for family name under dir, with env
// added to its environment and args to its flags.
func startDaemon(ctx context.Context, bin, dir, name string, env, args []string) (*daemon, error) {
	state := filepath.Join(dir, name+"-state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}
	cfg := harness.DaemonConfig{Bin: bin, StateDir: state, LogPath: filepath.Join(dir, name+"-llbd.log"),
		LogLevel: "info", Env: env, Args: args}
	d, err := harness.StartDaemon(ctx, cfg)
	if err != nil {
		return nil, err
	}
	cfg.Listen = d.Addr
	return &daemon{Daemon: d, cfg: cfg, client: &http.Client{Timeout: restTimeout}, stateDir: state}, nil
}

// restart SIGKILLs llbd and starts it again on the same state directory
// and address (its log goes to a new file).
func (d *daemon) restart(ctx context.Context) error {
	d.Kill()
	d.client.CloseIdleConnections()
	cfg := d.cfg
	cfg.LogPath = strings.TrimSuffix(cfg.LogPath, ".log") + "-restarted.log"
	nd, err := harness.StartDaemon(ctx, cfg)
	if err != nil {
		return err
	}
	d.Daemon = nd
	return nil
}

// reply is one REST answer.
type reply struct {
	code    int
	header  http.Header
	body    []byte
	elapsed time.Duration
}

// do sends one REST request (ctype "" sends no Content-Type).
func (d *daemon) do(ctx context.Context, method, path, ctype string, body []byte) (reply, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+d.Addr+path, bytes.NewReader(body))
	if err != nil {
		return reply{}, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	start := time.Now()
	res, err := d.client.Do(req)
	if err != nil {
		return reply{elapsed: time.Since(start)}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 8<<20))
	return reply{code: res.StatusCode, header: res.Header, body: b, elapsed: time.Since(start)}, err
}

// getJSON GETs path into v.
func (d *daemon) getJSON(ctx context.Context, path string, v any) error {
	r, err := d.do(ctx, http.MethodGet, path, "", nil)
	if err != nil {
		return err
	}
	if r.code != http.StatusOK {
		return fmt.Errorf("GET %s: %d %s", path, r.code, bytes.TrimSpace(r.body))
	}
	return json.Unmarshal(r.body, v)
}

// alive reports whether llbd is still running and answers GET
// /netlox/v1/version within the REST bound; the error says why not.
func (d *daemon) alive(ctx context.Context) error {
	if gone, err := d.Exited(); gone {
		return fmt.Errorf("llbd exited: %v", err)
	}
	var v struct {
		WritesAccepted bool `json:"writesAccepted"`
	}
	if err := d.getJSON(ctx, "/netlox/v1/version", &v); err != nil {
		return fmt.Errorf("GET /netlox/v1/version: %w", err)
	}
	if !v.WritesAccepted {
		return fmt.Errorf("GET /netlox/v1/version: writes not accepted")
	}
	return nil
}

// usage is what the resource oracles read: the process's open fds and
// RSS from /proc, and llbd's own go_goroutines.
type usage struct {
	fds, goroutines int
	rssKB           int64
}

func (u usage) String() string {
	return fmt.Sprintf("%d fds, %d goroutines, RSS %d MiB", u.fds, u.goroutines, u.rssKB>>10)
}

// usage reads the process's current usage.
func (d *daemon) usage(ctx context.Context) (usage, error) {
	var u usage
	pid := d.PID()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return u, err
	}
	u.fds = len(ents)
	if u.rssKB, err = procRSS(pid); err != nil {
		return u, err
	}
	m, err := d.metrics(ctx)
	if err != nil {
		return u, err
	}
	u.goroutines = int(m.sum("go_goroutines"))
	return u, nil
}

// procRSS reads VmRSS (kB) from /proc/<pid>/status.
func procRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// settle waits until usage is back within slack of base (fds and
// goroutines), or within passes; it returns the last reading and whether
// it settled.
func (d *daemon) settle(ctx context.Context, base usage, fdSlack, grSlack int, within time.Duration) (usage, bool) {
	deadline := time.Now().Add(within)
	for {
		u, err := d.usage(ctx)
		if err == nil && u.fds <= base.fds+fdSlack && u.goroutines <= base.goroutines+grSlack {
			return u, true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return u, false
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// sample is one Prometheus series value.
type sample struct {
	name, labels string
	value        float64
}

// prom is a scraped /metrics.
type prom []sample

// metrics scrapes llbd's /metrics.
func (d *daemon) metrics(ctx context.Context) (prom, error) {
	r, err := d.do(ctx, http.MethodGet, "/metrics", "", nil)
	if err != nil {
		return nil, err
	}
	if r.code != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %d", r.code)
	}
	return parseProm(r.body), nil
}

// parseProm reads a Prometheus text exposition (comments skipped).
func parseProm(b []byte) prom {
	var p prom
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		name, labels := line[:i], ""
		if j := strings.IndexByte(name, '{'); j >= 0 {
			name, labels = name[:j], name[j:]
		}
		p = append(p, sample{name, labels, v})
	}
	return p
}

// sum adds the series called name whose labels contain every one of
// want (e.g. `service="tcp:127.1.2.3:2020"`).
func (p prom) sum(name string, want ...string) float64 {
	var s float64
next:
	for _, x := range p {
		if x.name != name {
			continue
		}
		for _, w := range want {
			if !strings.Contains(x.labels, w) {
				continue next
			}
		}
		s += x.value
	}
	return s
}

// rankView is rank 0 of an endpoint as the KV inventory view shows it:
// its mirror's size and its feed's counters.
type rankView struct {
	Blocks   int
	Contract struct {
		State        string `json:"state"`
		Reason       string `json:"reason"`
		Mismatched   uint64 `json:"mismatched"`
		Unverifiable uint64 `json:"unverifiable"`
	}
	Feed struct {
		Connected   bool    `json:"connected"`
		Reconnects  uint64  `json:"reconnects"`
		RecvErrors  uint64  `json:"recv_errors"`
		Batches     uint64  `json:"batches"`
		Events      uint64  `json:"events"`
		LastSeq     *uint64 `json:"last_seq"`
		Gaps        uint64  `json:"gaps"`
		LostBatches uint64  `json:"lost_batches"`
		Duplicates  uint64  `json:"duplicates"`
		Restarts    uint64  `json:"restarts"`
		Resyncs     uint64  `json:"resyncs"`
	}
}

// inventoryRank reads endpoint ep's rank 0 from GET
// /netlox/v1/config/ai/kv/inventory of rule service.
func (d *daemon) inventoryRank(ctx context.Context, service string, ep int) (rankView, error) {
	return d.inventoryDPRank(ctx, service, ep, 0)
}

// inventoryDPRank reads endpoint ep's DP rank rank (the rank-th listed).
func (d *daemon) inventoryDPRank(ctx context.Context, service string, ep, rank int) (rankView, error) {
	var v struct {
		LLB struct {
			Ranks []struct {
				Mirror struct {
					Blocks   int             `json:"blocks"`
					Contract json.RawMessage `json:"contract"`
				} `json:"mirror"`
				Feed *json.RawMessage `json:"feed"`
			} `json:"ranks"`
		} `json:"llb"`
	}
	var r rankView
	path := fmt.Sprintf("/netlox/v1/config/ai/kv/inventory?limit=1&ep_idx=%d&service_id=%s", ep, url.QueryEscape(service))
	if err := d.getJSON(ctx, path, &v); err != nil {
		return r, err
	}
	if len(v.LLB.Ranks) <= rank || v.LLB.Ranks[rank].Feed == nil {
		return r, fmt.Errorf("the inventory view of %s endpoint %d shows no feed for rank %d", service, ep, rank)
	}
	rv := v.LLB.Ranks[rank]
	r.Blocks = rv.Mirror.Blocks
	if len(rv.Mirror.Contract) > 0 {
		if err := json.Unmarshal(rv.Mirror.Contract, &r.Contract); err != nil {
			return r, err
		}
	}
	return r, json.Unmarshal(*rv.Feed, &r.Feed)
}

// logProblems returns llbd's log lines at error level or above, and any
// line that is not a JSON log record (a Go panic or fatal error), from
// every log this daemon wrote (before and after a restart); at most max,
// with the count of all.
func (d *daemon) logProblems(max int) ([]string, int) {
	var out []string
	n := 0
	base := strings.TrimSuffix(d.cfg.LogPath, ".log")
	for _, p := range []string{base + ".log", base + "-restarted.log"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if line == "" {
				continue
			}
			var rec struct {
				Level string `json:"level"`
			}
			bad := json.Unmarshal([]byte(line), &rec) != nil || rec.Level == "error" || rec.Level == "fatal" || rec.Level == "panic"
			if !bad {
				continue
			}
			n++
			if len(out) < max {
				out = append(out, line)
			}
		}
	}
	return out, n
}

// checkLog is the family-level log oracle: no error-level line, no panic.
func (d *daemon) checkLog(t *Tally) {
	lines, n := d.logProblems(5)
	t.check("llbd_log", n == 0, fmt.Sprintf("%d error-level or non-JSON lines in llbd's log", n), strings.Join(lines, "\n"))
}
