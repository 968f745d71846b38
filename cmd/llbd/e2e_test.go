package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The seed page's two curl examples (routing-hierarchy.txt, "Configuration"),
// with 127.0.0.1 for every address (testdata/seed, shared with restapi).
var (
	curlPD    = seedExample("pd-kv-exact.json")
	curlCHWBL = seedExample("chwbl.json")
)

// seedExample reads one of the repository's seed example rules.
func seedExample(name string) string {
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "seed", name))
	if err != nil {
		panic(err)
	}
	return strings.TrimSpace(string(b))
}

// daemon is a running llbd binary.
type daemon struct {
	t    *testing.T
	cmd  *exec.Cmd
	log  *logWatch
	addr string
	done chan error
}

// buildDaemon builds the llbd binary once per test binary and returns its
// path (a cgo build takes a while; every e2e test shares it).
func buildDaemon(t *testing.T) string {
	t.Helper()
	daemonBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "llbd-e2e-")
		if err != nil {
			daemonBuild.err = err
			return
		}
		daemonBuild.dir = dir
		bin := filepath.Join(dir, "llbd")
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
			daemonBuild.err = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		daemonBuild.bin = bin
	})
	if daemonBuild.err != nil {
		t.Fatal(daemonBuild.err)
	}
	return daemonBuild.bin
}

// daemonBuild is the shared llbd binary; TestMain removes its directory.
var daemonBuild struct {
	once     sync.Once
	bin, dir string
	err      error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if daemonBuild.dir != "" {
		_ = os.RemoveAll(daemonBuild.dir)
	}
	os.Exit(code)
}

// startDaemon starts bin and waits until it accepts configuration writes.
func startDaemon(t *testing.T, bin string, args ...string) *daemon {
	t.Helper()
	return startDaemonEnv(t, bin, nil, args...)
}

// startDaemonEnv is startDaemon with extra environment variables (K=V).
func startDaemonEnv(t *testing.T, bin string, env []string, args ...string) *daemon {
	t.Helper()
	d := &daemon{t: t, log: newLogWatch(), done: make(chan error, 1)}
	d.cmd = exec.Command(bin, args...)
	d.cmd.Env = append(os.Environ(), env...)
	// llbd never outlives the test binary, even when the test dies.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := d.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			_, _ = d.log.Write(append(sc.Bytes(), '\n'))
		}
		d.done <- d.cmd.Wait()
	}()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Kill()
			<-d.done
		}
	})
	d.addr = d.log.waitMsg(t, "rest api listening", 10*time.Second)["addr"].(string)
	d.log.waitMsg(t, "configuration writes accepted", 10*time.Second)
	return d
}

// signal sends sig and returns the exit code.
func (d *daemon) signal(sig os.Signal) int {
	d.t.Helper()
	if err := d.cmd.Process.Signal(sig); err != nil {
		d.t.Fatal(err)
	}
	select {
	case err := <-d.done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			d.t.Fatal(err)
		}
		return 0
	case <-time.After(20 * time.Second):
		d.t.Fatalf("llbd did not exit within 20s of %v; log:\n%s", sig, d.log.text())
		return -1
	}
}

func (d *daemon) do(method, path, body string) (int, string) {
	d.t.Helper()
	req, err := http.NewRequest(method, "http://"+d.addr+path, strings.NewReader(body))
	if err != nil {
		d.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		d.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

func (d *daemon) rules() []map[string]any {
	d.t.Helper()
	code, body := d.do(http.MethodGet, "/netlox/v1/config/loadbalancer/all", "")
	if code != 200 {
		d.t.Fatalf("GET all: %d %s", code, body)
	}
	var v struct {
		LbAttr []map[string]any `json:"lbAttr"`
	}
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		d.t.Fatalf("GET all: %v: %s", err, body)
	}
	return v.LbAttr
}

// TestE2E_Daemon builds the real llbd binary, posts the seed page's two curl
// examples, lists them, restarts the daemon and sees them again, deletes them,
// and checks the exit codes of SIGTERM, SIGINT and bad flags.
func TestE2E_Daemon(t *testing.T) {
	bin := buildDaemon(t)
	state := t.TempDir()
	// The control plane alone: endpoint states stay "inactive" whatever
	// probes would find, and the examples' ports 2020/2021 stay free. The
	// data plane's end-to-end tests start real workers (dataplane_e2e_test.go).
	args := []string{"--listen", "127.0.0.1:0", "--state-dir", state, "--log-format", "json", "--no-data-plane"}

	d := startDaemon(t, bin, args...)
	for _, body := range []string{curlPD, curlCHWBL} {
		if code, resp := d.do(http.MethodPost, "/netlox/v1/config/loadbalancer", body); code != 200 || resp != `{"result":"Success"}`+"\n" {
			t.Fatalf("POST: got %d %s; want 200 Success", code, resp)
		}
	}
	if code, resp := d.do(http.MethodPost, "/netlox/v1/config/loadbalancer", curlPD); code != 409 || !strings.Contains(resp, "lbrule-exists error") {
		t.Errorf("identical re-POST: got %d %s; want 409 lbrule-exists error", code, resp)
	}
	before := d.rules()
	if len(before) != 2 {
		t.Fatalf("rules listed: got %d; want 2", len(before))
	}
	pd, chwbl := before[0], before[1]
	pdArgs := pd["serviceArguments"].(map[string]any)
	if pdArgs["port"] != 2020.0 || pdArgs["pd_disagg_mode"] != true || pdArgs["kvExactMode"] != 1.0 || pdArgs["kvHashAlgo"] != "sha256_cbor" {
		t.Errorf("P/D rule: got %v", pdArgs)
	}
	if chwbl["serviceArguments"].(map[string]any)["sel"] != 8.0 || len(chwbl["endpoints"].([]any)) != 2 {
		t.Errorf("CHWBL rule: got %v", chwbl)
	}
	for _, r := range before {
		for _, ep := range r["endpoints"].([]any) {
			if st := ep.(map[string]any)["state"]; st != "inactive" {
				t.Errorf("endpoint state: got %v; want inactive (no data plane attached)", st)
			}
		}
	}
	if code := d.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit code %d; want 0; log:\n%s", code, d.log.text())
	}
	if !d.log.has("stopped") {
		t.Errorf("no clean-stop log line after SIGTERM")
	}
	for _, line := range strings.Split(d.log.text(), "\n") {
		if strings.Count(line, `"component"`) > 1 {
			t.Errorf("log line with a duplicate key: %s", line)
		}
	}

	d = startDaemon(t, bin, args...)
	if after := d.rules(); !reflect.DeepEqual(after, before) {
		t.Fatalf("after restart:\n got %v\nwant %v", after, before)
	}
	for _, path := range []string{
		"/netlox/v1/config/loadbalancer/hosturl/127.0.0.1/externalipaddress/127.0.0.1/port/2020/protocol/tcp",
		"/netlox/v1/config/loadbalancer/hosturl/127.0.0.1/externalipaddress/127.0.0.1/port/2021/protocol/tcp",
	} {
		if code, resp := d.do(http.MethodDelete, path, ""); code != 200 || !strings.Contains(resp, "Success") {
			t.Fatalf("DELETE %s: got %d %s", path, code, resp)
		}
		if code, resp := d.do(http.MethodDelete, path, ""); code != 404 || !strings.Contains(resp, "no-rule error") {
			t.Errorf("second DELETE %s: got %d %s; want 404 no-rule error", path, code, resp)
		}
	}
	if n := len(d.rules()); n != 0 {
		t.Fatalf("rules after delete: got %d; want 0", n)
	}
	if code := d.signal(syscall.SIGINT); code != 0 {
		t.Fatalf("SIGINT: exit code %d; want 0", code)
	}

	d = startDaemon(t, bin, args...)
	if n := len(d.rules()); n != 0 {
		t.Errorf("rules after delete and restart: got %d; want 0", n)
	}
	if code := d.signal(syscall.SIGTERM); code != 0 {
		t.Fatalf("SIGTERM: exit code %d; want 0", code)
	}

	t.Run("bad flag exits 2", func(t *testing.T) {
		out, err := exec.Command(bin, "--listen", "nowhere").CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), `--listen "nowhere"`) {
			t.Errorf("got %v, %q; want exit 2 naming --listen", err, out)
		}
	})
}
