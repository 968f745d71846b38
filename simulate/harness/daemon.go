package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// BuildDaemon builds llbd from the module's ./cmd/llbd into dir and returns
// the binary's path. It runs `go build` in the module containing the
// working directory (or moduleDir when set).
func BuildDaemon(ctx context.Context, dir, moduleDir string) (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
	}
	bin := filepath.Join(dir, "llbd")
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/llbproject/llb/cmd/llbd")
	cmd.Dir = moduleDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build llbd: %w: %w\n%s", ErrDaemon, err, out)
	}
	return bin, nil
}

// DaemonConfig starts one llbd process.
type DaemonConfig struct {
	// Bin is the llbd binary.
	Bin string
	// Env is added to the harness's environment after every LOXILB_* and
	// LLB_* variable of it was removed (so a variable set in the shell
	// cannot leak into a measured configuration).
	Env []string
	// StateDir is --state-dir (required; rules.json goes there).
	StateDir string
	// LogPath receives llbd's stderr ("" sends it to Stderr).
	LogPath string
	// Stderr receives llbd's stderr when LogPath is ""; nil discards it.
	Stderr io.Writer
	// LogFormat is --log-format; default "json".
	LogFormat string
	// LogLevel is --log-level. Default "warn": llbd's per-request access
	// log is at info, and writing it would cost CPU the fleet and the
	// harness share on a small machine.
	LogLevel string
	// StartTimeout bounds waiting for the REST API. Default 15s.
	StartTimeout time.Duration
	// Args are further llbd flags, after the harness's own (a flag given
	// twice takes the last value).
	Args []string
	// Listen is the REST API's host:port; "" picks a free port on
	// 127.0.0.1. A restart on the same state dir reuses the address.
	Listen string
}

// Daemon is a running (or attached) llbd.
type Daemon struct {
	// Addr is the REST API address (host:port).
	Addr string

	cmd    *exec.Cmd // nil when attached
	logf   *os.File
	done   chan struct{}
	waited error
	client *http.Client
}

// StartDaemon starts llbd on a free loopback REST port and waits until it
// accepts configuration writes.
func StartDaemon(ctx context.Context, cfg DaemonConfig) (*Daemon, error) {
	if cfg.Bin == "" || cfg.StateDir == "" {
		return nil, fmt.Errorf("daemon needs a binary and a state dir: %w", ErrConfig)
	}
	level := cfg.LogLevel
	if level == "" {
		level = "warn"
	}
	timeout := cfg.StartTimeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	addr := cfg.Listen
	if addr == "" {
		port, err := freePort("127.0.0.1")
		if err != nil {
			return nil, fmt.Errorf("daemon rest port: %w: %w", ErrDaemon, err)
		}
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	d := &Daemon{Addr: addr, done: make(chan struct{}), client: restClient()}
	format := cfg.LogFormat
	if format == "" {
		format = "json"
	}
	args := append([]string{"--listen", d.Addr, "--state-dir", cfg.StateDir, "--log-format", format, "--log-level", level}, cfg.Args...)
	d.cmd = exec.Command(cfg.Bin, args...)
	DieWithParent(d.cmd) // llbd never outlives the harness, even when the harness is killed
	d.cmd.Env = append(scrubbedEnv(os.Environ()), cfg.Env...)
	if cfg.LogPath != "" {
		var err error
		if d.logf, err = os.Create(cfg.LogPath); err != nil {
			return nil, fmt.Errorf("daemon log: %w: %w", ErrDaemon, err)
		}
		d.cmd.Stderr, d.cmd.Stdout = d.logf, d.logf
	} else if cfg.Stderr != nil {
		d.cmd.Stderr = cfg.Stderr
	}
	if err := d.cmd.Start(); err != nil {
		d.closeLog()
		return nil, fmt.Errorf("start %s: %w: %w", cfg.Bin, ErrDaemon, err)
	}
	go func() {
		d.waited = d.cmd.Wait()
		close(d.done)
	}()
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := d.waitReady(wctx); err != nil {
		d.Kill()
		return nil, err
	}
	return d, nil
}

// AttachDaemon uses an llbd that is already running at addr (host:port of
// its REST API). The harness then cannot set the process environment: only
// strategies whose environment the caller vouches for should be run.
func AttachDaemon(ctx context.Context, addr string) (*Daemon, error) {
	d := &Daemon{Addr: addr, client: restClient()}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := d.waitReady(wctx); err != nil {
		return nil, err
	}
	return d, nil
}

func restClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second}
}

// scrubbedEnv drops every LOXILB_* and LLB_* variable.
func scrubbedEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if strings.HasPrefix(kv, "LOXILB_") || strings.HasPrefix(kv, "LLB_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// freePort asks the kernel for a free TCP port on ip.
func freePort(ip string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	return port, ln.Close()
}

// waitReady polls /netlox/v1/version until writesAccepted.
func (d *Daemon) waitReady(ctx context.Context) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		var v struct {
			WritesAccepted bool   `json:"writesAccepted"`
			DataPlane      string `json:"dataPlane"`
		}
		code, body, err := d.do(ctx, http.MethodGet, "/netlox/v1/version", nil)
		switch {
		case err != nil:
			last = err
		case code != http.StatusOK:
			last = fmt.Errorf("GET version: %d %s", code, body)
		case json.Unmarshal(body, &v) != nil:
			last = fmt.Errorf("GET version: unreadable %q", body)
		case v.DataPlane == "none":
			return fmt.Errorf("llbd at %s runs without a data plane: %w", d.Addr, ErrDaemon)
		case v.WritesAccepted:
			return nil
		}
		if d.done != nil {
			select {
			case <-d.done:
				return fmt.Errorf("llbd exited before it was ready (%v): %w", d.waited, ErrDaemon)
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("llbd at %s not ready (%v): %w: %w", d.Addr, last, ErrDaemon, ctx.Err())
		case <-tick.C:
		}
	}
}

// do sends one REST request.
func (d *Daemon) do(ctx context.Context, method, path string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+d.Addr+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := d.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	return res.StatusCode, b, err
}

// PostRule creates a rule (POST /netlox/v1/config/loadbalancer).
func (d *Daemon) PostRule(ctx context.Context, rule []byte) error {
	code, body, err := d.do(ctx, http.MethodPost, "/netlox/v1/config/loadbalancer", rule)
	if err != nil {
		return fmt.Errorf("POST rule: %w: %w", ErrDaemon, err)
	}
	if code != http.StatusOK {
		return fmt.Errorf("POST rule: %d %s: %w", code, bytes.TrimSpace(body), ErrDaemon)
	}
	return nil
}

// DeleteRule deletes the rule on vip:port.
func (d *Daemon) DeleteRule(ctx context.Context, vip string, port int) error {
	path := fmt.Sprintf("/netlox/v1/config/loadbalancer/externalipaddress/%s/port/%d/protocol/tcp", vip, port)
	code, body, err := d.do(ctx, http.MethodDelete, path, nil)
	if err != nil {
		return fmt.Errorf("DELETE rule: %w: %w", ErrDaemon, err)
	}
	if code != http.StatusOK {
		return fmt.Errorf("DELETE rule: %d %s: %w", code, bytes.TrimSpace(body), ErrDaemon)
	}
	return nil
}

// WaitActive waits until the rule on vip:port reports every endpoint
// active (its listener is up and the health probes passed).
func (d *Daemon) WaitActive(ctx context.Context, vip string, port int) error {
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	path := fmt.Sprintf("/netlox/v1/config/loadbalancer/externalipaddress/%s/port/%d/protocol/tcp/status", vip, port)
	var last string
	for {
		code, body, err := d.do(ctx, http.MethodGet, path, nil)
		if err == nil && code == http.StatusOK {
			var st struct {
				OperatingStatus string `json:"operatingStatus"`
				Endpoints       []struct {
					State string `json:"state"`
				} `json:"endpoints"`
			}
			if json.Unmarshal(body, &st) == nil && len(st.Endpoints) > 0 {
				all := true
				for _, e := range st.Endpoints {
					all = all && e.State == "active"
				}
				if all {
					return nil
				}
			}
			last = string(body)
		} else if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("%d %s", code, body)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("rule %s:%d never became active (last status %s): %w: %w", vip, port, last, ErrDaemon, ctx.Err())
		case <-tick.C:
		}
	}
}

// PID is the llbd process id (0 when attached).
func (d *Daemon) PID() int {
	if d.cmd == nil || d.cmd.Process == nil {
		return 0
	}
	return d.cmd.Process.Pid
}

// CPU returns the CPU time llbd has used so far (0 when attached or
// unreadable).
func (d *Daemon) CPU() time.Duration {
	if d.PID() == 0 {
		return 0
	}
	return procCPU(d.PID())
}

// Stop sends SIGTERM and waits up to timeout for llbd to exit, then kills
// it. Attached daemons are left running.
func (d *Daemon) Stop(timeout time.Duration) error {
	if d.cmd == nil {
		return nil
	}
	defer d.closeLog()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(timeout):
		_ = d.cmd.Process.Kill()
		<-d.done
		return fmt.Errorf("llbd did not exit within %v of SIGTERM: %w", timeout, ErrDaemon)
	}
	var ee *exec.ExitError
	if d.waited != nil && !errors.As(d.waited, &ee) {
		return fmt.Errorf("llbd: %w: %w", ErrDaemon, d.waited)
	}
	if ee != nil && ee.ExitCode() != 0 {
		return fmt.Errorf("llbd exited with status %d: %w", ee.ExitCode(), ErrDaemon)
	}
	return nil
}

// Kill kills a started llbd at once.
func (d *Daemon) Kill() {
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Kill()
	<-d.done
	d.closeLog()
}

func (d *Daemon) closeLog() {
	if d.logf != nil {
		_ = d.logf.Close()
		d.logf = nil
	}
}

// Exited reports whether a started llbd has exited, and its wait error
// (nil for exit status 0). An attached daemon never reports exited.
func (d *Daemon) Exited() (bool, error) {
	if d.done == nil {
		return false, nil
	}
	select {
	case <-d.done:
		return true, d.waited
	default:
		return false, nil
	}
}
