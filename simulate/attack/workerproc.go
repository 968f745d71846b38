package attack

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/harness"
	"github.com/llbproject/llb/simulate/worker"
)

// Worker processes: the faults family SIGKILLs and SIGSTOPs simulated
// workers (vLLM's, SGLang's or TensorRT-LLM's), so each runs as its own
// process — the running binary (llbsim,
// or a test binary) re-executed with EnvWorker set, which must call
// ServeWorkerIfAsked first thing.

// EnvWorker carries a workerSpec (JSON) to a re-executed worker process.
const EnvWorker = "LLB_ATTACK_WORKER"

// ServeWorkerIfAsked runs a simulated worker and exits the process when
// EnvWorker is set; otherwise it returns at once. Call it at the start of
// main (and of TestMain) in every binary that runs the faults family.
func ServeWorkerIfAsked() {
	if spec := os.Getenv(EnvWorker); spec != "" {
		os.Exit(workerMain(spec))
	}
}

// Ports every worker process uses on its own address.
const (
	procHTTPPort = 8000
	procKVPort   = 5557
	procNIXLPort = 5600
	// procBootstrapPort is every SGLang prefill worker's bootstrap port
	// (the rule's pdBootstrapPort, SGLang's default).
	procBootstrapPort = 8998
)

// workerSpec describes one worker process.
type workerSpec struct {
	Name string `json:"name"`
	IP   string `json:"ip"`
	// Role is "prefill" or "decode".
	Role string `json:"role"`
	// KVEvents turns the ZMQ publisher on (on procKVPort).
	KVEvents bool `json:"kv_events"`
	// TimeScale scales the latency model.
	TimeScale float64 `json:"time_scale"`
	// Dialect is the engine the worker speaks as ("" is vLLM).
	Dialect worker.Dialect `json:"dialect,omitempty"`
}

// workerMain runs one simulated worker until SIGTERM or SIGINT; it prints
// "ready <addr>" once serving.
func workerMain(raw string) int {
	var s workerSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintln(os.Stderr, "attack worker spec:", err)
		return 2
	}
	c := worker.DefaultConfig()
	c.Name, c.IP, c.HTTPPort, c.NIXLPort = s.Name, s.IP, procHTTPPort, procNIXLPort
	c.KVEvents, c.KVPort, c.BootstrapPort = s.KVEvents, procKVPort, procBootstrapPort
	c.Engine.KVRole = engine.KVRoleFor(ladder.RoleDecode)
	if s.Role == ladder.RolePrefill.String() {
		c.Engine.KVRole = engine.KVRoleFor(ladder.RolePrefill)
	}
	c.Engine.Latency.TimeScale = s.TimeScale
	if s.Dialect != "" {
		c.Dialect = s.Dialect
	}
	return worker.ServeProcess(c, "attack worker")
}

// workerProc is a worker process that can be killed, frozen and started
// again on the same addresses.
type workerProc struct {
	spec workerSpec

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// startWorkerProc starts a worker process and waits until it serves.
func startWorkerProc(spec workerSpec) (*workerProc, error) {
	p := &workerProc{spec: spec}
	return p, p.start()
}

// start (re)starts the process and waits for its "ready" line.
func (p *workerProc) start() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	raw, _ := json.Marshal(p.spec)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), EnvWorker+"="+string(raw))
	harness.DieWithParent(cmd) // never outlives the attack
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr strings.Builder
	cmd.Stderr = &lockedWriter{w: &stderr}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start worker %s: %w", p.spec.Name, err)
	}
	exited := make(chan struct{})
	ready := make(chan struct{}, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready ") {
				ready <- struct{}{}
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	select {
	case <-ready:
	case <-exited:
		return fmt.Errorf("worker %s exited before serving: %s", p.spec.Name, cmd.Stderr.(*lockedWriter))
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		return fmt.Errorf("worker %s not ready within 15 s", p.spec.Name)
	}
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	return nil
}

// signal sends sig to the process.
func (p *workerProc) signal(sig syscall.Signal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_ = p.cmd.Process.Signal(sig)
}

// kill SIGKILLs the process and waits until it is gone.
func (p *workerProc) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	_ = cmd.Process.Kill()
	<-exited
}

// stop ends the process (SIGCONT in case it is frozen, SIGTERM, SIGKILL
// after 5 s).
func (p *workerProc) stop() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// lockedWriter is a writer safe for the process's stderr copier and a
// reader.
type lockedWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.String()
}
