package proxybench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/llbproject/llb/gateway"
	"github.com/llbproject/llb/simulate/harness"
)

// completion is the fixed answer nginx gives (214 bytes, a vLLM-like
// non-streaming completion of one token).
const completion = `{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" world","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}`

// requestBody is the small completion request every throughput test sends.
const requestBody = `{"model":"m","prompt":"Hello, my name is","max_tokens":1}`

// env is the running set of processes.
type env struct {
	cfg     *Config
	dir     string
	a       addrs
	nginx   *exec.Cmd
	haproxy *exec.Cmd
	sseSrv  *http.Server
	llbd    *harness.Daemon
	llbdLog *harness.Daemon   // nil unless cfg.AccessLog
	before  *harness.Daemon   // nil unless cfg.Before
	plane   *gateway.Listener // the data plane alone, in this process
	bare    *bareProxy        // the bare fasthttp proxy, in this process
	debug   string            // llbd's --debug-listen address ("" without a profile)
	debugB  string            // the build before's
	logs    []*os.File        // the tools' output files
}

func startEnv(ctx context.Context, cfg *Config, dir string, a addrs) (e *env, err error) {
	e = &env{cfg: cfg, dir: dir, a: a}
	defer func() {
		if err != nil {
			e.stop()
		}
	}()
	cfg.progress("starting nginx on %s, haproxy on %s, the SSE backend on %s", a.nginx, a.haproxy, a.sse)
	if e.nginx, err = e.startNginx(); err != nil {
		return e, err
	}
	if e.haproxy, err = e.startHAProxy(); err != nil {
		return e, err
	}
	if e.sseSrv, err = startSSEBackend(a.sse, cfg.Tokens, cfg.TokenGap); err != nil {
		return e, err
	}
	for _, ad := range []string{a.nginx, a.haproxy, a.sse} {
		if err = waitHTTP(ctx, "http://"+ad+"/v1/completions", requestBody); err != nil {
			return e, err
		}
	}
	var args []string
	if cfg.ProfileDir != "" {
		if e.debug, err = freeAddr(); err != nil {
			return e, err
		}
		args = []string{"--debug-listen", e.debug}
	}
	cfg.progress("starting llbd (%s)", cfg.LLBD)
	if e.llbd, err = e.startLLBD(ctx, "llbd", cfg.LLBD, "warn", args); err != nil {
		return e, err
	}
	if err = e.rule(ctx, e.llbd, a.llbd, a.nginx); err != nil {
		return e, err
	}
	if err = e.rule(ctx, e.llbd, a.llbdSSE, a.sse); err != nil {
		return e, err
	}
	if e.plane, err = startDataPlane(a.dataPlane, a.nginx); err != nil {
		return e, err
	}
	if err = waitHTTP(ctx, "http://"+a.dataPlane+"/v1/completions", requestBody); err != nil {
		return e, err
	}
	if e.bare, err = startBare(a.bare, a.nginx); err != nil {
		return e, err
	}
	if err = waitHTTP(ctx, "http://"+a.bare+"/v1/completions", requestBody); err != nil {
		return e, err
	}
	if cfg.Before != "" {
		var args []string
		if cfg.ProfileDir != "" {
			if e.debugB, err = freeAddr(); err != nil {
				return e, err
			}
			args = []string{"--debug-listen", e.debugB}
		}
		cfg.progress("starting the llbd before (%s)", cfg.Before)
		if e.before, err = e.startLLBD(ctx, "llbd-before", cfg.Before, "warn", args); err != nil {
			return e, err
		}
		if err = e.rule(ctx, e.before, a.before, a.nginx); err != nil {
			return e, err
		}
	}
	if cfg.AccessLog {
		if e.llbdLog, err = e.startLLBD(ctx, "llbd-log", cfg.LLBD, "info", []string{"--access-log"}); err != nil {
			return e, err
		}
		if err = e.rule(ctx, e.llbdLog, a.llbdLog, a.nginx); err != nil {
			return e, err
		}
	}
	return e, nil
}

func (e *env) stop() {
	if e.plane != nil {
		_ = e.plane.Close()
	}
	if e.bare != nil {
		e.bare.close()
	}
	if e.llbd != nil {
		_ = e.llbd.Stop(10 * time.Second)
	}
	if e.llbdLog != nil {
		_ = e.llbdLog.Stop(10 * time.Second)
	}
	if e.before != nil {
		_ = e.before.Stop(10 * time.Second)
	}
	if e.sseSrv != nil {
		_ = e.sseSrv.Close()
	}
	for _, c := range []*exec.Cmd{e.haproxy, e.nginx} {
		if c != nil && c.Process != nil {
			_ = syscall.Kill(-c.Process.Pid, syscall.SIGTERM) // the process group: nginx's workers too
			done := make(chan struct{})
			go func() { _ = c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
				<-done
			}
		}
	}
	for _, f := range e.logs {
		_ = f.Close()
	}
}

func (e *env) startNginx() (*exec.Cmd, error) {
	conf := fmt.Sprintf(`worker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path %[1]s/client_body;
  proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fastcgi;
  uwsgi_temp_path %[1]s/uwsgi;
  scgi_temp_path %[1]s/scgi;
  keepalive_requests 10000000;
  keepalive_timeout 300s;
  server {
    listen %[2]s backlog=4096;
    location / {
      default_type application/json;
      return 200 '%[3]s';
    }
  }
}
`, e.dir, e.a.nginx, completion)
	path := filepath.Join(e.dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return e.spawn("nginx", "-c", path, "-p", e.dir)
}

func (e *env) startHAProxy() (*exec.Cmd, error) {
	// maxconn stays below the file-descriptor limit: HAProxy refuses to
	// start when its maxconn needs more descriptors than it may open.
	conf := fmt.Sprintf(`global
  maxconn 8000
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  option http-keep-alive
  http-reuse always
frontend fe
  bind %s
  default_backend be
backend be
  balance roundrobin
  server s1 %s
`, e.a.haproxy, e.a.nginx)
	path := filepath.Join(e.dir, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return e.spawn("haproxy", "-f", path, "-db")
}

// spawn starts a tool in a process group of its own, its output in
// <dir>/<name>.log.
func (e *env) spawn(name string, args ...string) (*exec.Cmd, error) {
	bin, err := lookTool(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTool, err)
	}
	logf, err := os.Create(filepath.Join(e.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, fmt.Errorf("start %s: %w: %w", name, ErrTool, err)
	}
	e.logs = append(e.logs, logf)
	return cmd, nil
}

func (e *env) startLLBD(ctx context.Context, name, bin, level string, args []string) (*harness.Daemon, error) {
	state := filepath.Join(e.dir, name+"-state")
	if err := os.MkdirAll(state, 0o755); err != nil {
		return nil, err
	}
	d, err := harness.StartDaemon(ctx, harness.DaemonConfig{
		Bin: bin, StateDir: state, LogPath: filepath.Join(e.dir, name+".log"), LogLevel: level, Args: args,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTool, err)
	}
	return d, nil
}

// rule creates a single-pool round-robin rule on vip with one endpoint,
// without health probes (the backends are up; probes would only add
// traffic), and waits until it answers.
func (e *env) rule(ctx context.Context, d *harness.Daemon, vip, endpoint string) error {
	vh, vp, _ := net.SplitHostPort(vip)
	eh, ep, _ := net.SplitHostPort(endpoint)
	body := fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":%s,"protocol":"tcp","sel":0,"mode":4,"probetype":"none"},`+
		`"endpoints":[{"endpointIP":%q,"targetPort":%s,"weight":1}]}`, vh, vp, eh, ep)
	if err := d.PostRule(ctx, []byte(body)); err != nil {
		return fmt.Errorf("%w: %w", ErrTool, err)
	}
	return waitHTTP(ctx, "http://"+vip+"/v1/completions", requestBody)
}

// waitHTTP waits until url answers a POST with 200.
func waitHTTP(ctx context.Context, url, body string) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c := &http.Client{Timeout: 2 * time.Second}
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s never answered 200 (%v): %w", url, last, ErrTool)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// freeAddr returns a loopback address whose port is free now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)), nil
}

// pidCPU returns a process's CPU time so far (0 when unknown).
func pidCPU(c *exec.Cmd) time.Duration {
	if c == nil || c.Process == nil {
		return 0
	}
	return harness.ProcCPU(c.Process.Pid)
}

var errNoRequests = errors.New("proxybench: a run completed no request")
