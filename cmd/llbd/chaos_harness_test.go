package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/simulate/engine"
	"github.com/llbproject/llb/simulate/worker"
)

// The chaos harness: the real llbd binary (with its loopback debug
// listener) in front of simulated vLLM, SGLang or TensorRT-LLM workers
// (procSpec.Dialect) that each run as their own process, so a test can
// SIGKILL one mid-request and start it again. The worker process is this
// test binary re-executed with LLB_CHAOS_WORKER set (see init). Every test draws its own 127.x.y.0/24 so concurrent test
// binaries on the machine never share an address.
//
// The short version of each scenario runs in go test; LLB_CHAOS_LONG=1
// (make chaos) runs the soaks.

// envChaosLong selects the long soaks.
const envChaosLong = "LLB_CHAOS_LONG"

// envChaosWorker carries a procSpec (JSON) to a re-executed worker process.
const envChaosWorker = "LLB_CHAOS_WORKER"

func init() {
	if spec := os.Getenv(envChaosWorker); spec != "" {
		os.Exit(chaosWorkerMain(spec))
	}
}

// chaosLong reports whether the long soaks run (make chaos).
func chaosLong() bool { return os.Getenv(envChaosLong) == "1" }

// soak picks the short or the long value.
func soak[T any](short, long T) T {
	if chaosLong() {
		return long
	}
	return short
}

// waitUntil polls cond every 10 ms until it holds or within passes.
func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ---- addresses -------------------------------------------------------------

// chaosNet is one test's private loopback /24: 127.a.b.0.
type chaosNet struct{ a, b int }

func newChaosNet() chaosNet { return chaosNet{a: 100 + rand.IntN(100), b: rand.IntN(256)} }

// ip returns host h of the net (the VIP is host 1, workers 10 and up).
func (n chaosNet) ip(h int) string { return fmt.Sprintf("127.%d.%d.%d", n.a, n.b, h) }

// Ports every worker uses on its own address.
const (
	chaosHTTPPort = 8000
	chaosKVPort   = 5557
	chaosNIXLPort = 5600
	chaosVIPPort  = 2020
	// chaosBootstrapPort is every SGLang prefill worker's bootstrap port
	// (the rule's pdBootstrapPort).
	chaosBootstrapPort = 8998
)

// ---- worker processes ------------------------------------------------------

// procSpec describes one worker process.
type procSpec struct {
	Name string `json:"name"`
	IP   string `json:"ip"`
	// Role is "prefill", "decode" or "none" (a single pool's worker).
	Role string `json:"role"`
	// KVEvents turns the ZMQ publisher on (on chaosKVPort).
	KVEvents bool `json:"kv_events"`
	// TimeScale scales the latency model.
	TimeScale float64 `json:"time_scale"`
	// LatencyMS is a fault latency added to every generation request.
	LatencyMS float64 `json:"latency_ms"`
	// Seed is the engine's PYTHONHASHSEED (nil: the default "0").
	Seed *string `json:"seed,omitempty"`
	// BlockSize is the engine's --block-size (0: 16).
	BlockSize int `json:"block_size,omitempty"`
	// NumBlocks is the GPU cache size in blocks (0: the default).
	NumBlocks int `json:"num_blocks,omitempty"`
	// OffloadBlocks turns CPU KV offloading on with that many blocks.
	OffloadBlocks int `json:"offload_blocks,omitempty"`
	// LeanEvents publishes BlockStored without extra_keys, group_idx and
	// spec kind (LoxiLB's CI publisher, vLLM before mid-2025).
	LeanEvents bool `json:"lean_events,omitempty"`
	// Dialect is the engine the worker speaks as ("" is vllm).
	Dialect string `json:"dialect,omitempty"`
}

// chaosWorkerMain runs one simulated worker until SIGTERM/SIGINT (graceful)
// or SIGKILL (not graceful at all, which is the point).
func chaosWorkerMain(raw string) int {
	var s procSpec
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		fmt.Fprintln(os.Stderr, "chaos worker spec:", err)
		return 2
	}
	c := worker.DefaultConfig()
	c.Name, c.IP, c.HTTPPort, c.NIXLPort = s.Name, s.IP, chaosHTTPPort, chaosNIXLPort
	c.KVEvents, c.KVPort = s.KVEvents, chaosKVPort
	c.Engine.KVRole = engine.KVRoleFor(ladder.RoleDecode)
	switch s.Role {
	case ladder.RolePrefill.String():
		c.Engine.KVRole = engine.KVRoleFor(ladder.RolePrefill)
	case "none":
		c.Engine.KVRole = engine.KVRoleFor(ladder.RoleNone)
	}
	c.Engine.Latency.TimeScale = s.TimeScale
	if s.Seed != nil {
		c.Engine.Hash.Seed = *s.Seed
	}
	if s.BlockSize > 0 {
		c.Engine.BlockSize = s.BlockSize
	}
	if s.NumBlocks > 0 {
		c.Engine.NumBlocks = s.NumBlocks
	}
	c.Engine.OffloadBlocks = s.OffloadBlocks
	c.LeanEvents = s.LeanEvents
	d, err := worker.ParseDialect(s.Dialect)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos worker spec:", err)
		return 2
	}
	c.Dialect, c.BootstrapPort = d, chaosBootstrapPort
	c.Faults.Latency = time.Duration(s.LatencyMS * float64(time.Millisecond))
	return worker.ServeProcess(c, "chaos worker")
}

// procWorker is a worker process the test can kill and start again on the
// same addresses.
type procWorker struct {
	t    *testing.T
	spec procSpec

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *lockedBuffer
}

// startProcWorker starts a worker process and waits until it serves.
func startProcWorker(t *testing.T, spec procSpec) *procWorker {
	t.Helper()
	p := &procWorker{t: t, spec: spec}
	p.start()
	t.Cleanup(p.stop)
	return p
}

// start (re)starts the process and waits for its "ready" line.
func (p *procWorker) start() {
	p.t.Helper()
	exe, err := os.Executable()
	if err != nil {
		p.t.Fatal(err)
	}
	raw, _ := json.Marshal(p.spec)
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), envChaosWorker+"="+string(raw))
	// A worker never outlives the test binary, even when the test dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		p.t.Fatal(err)
	}
	errBuf := &lockedBuffer{}
	cmd.Stderr = errBuf
	if err := cmd.Start(); err != nil {
		p.t.Fatalf("start worker %s: %v", p.spec.Name, err)
	}
	exited := make(chan struct{})
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ready ") {
				ready <- sc.Text()
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	select {
	case <-ready:
	case <-exited:
		p.t.Fatalf("worker %s exited before serving: %s", p.spec.Name, errBuf.String())
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		p.t.Fatalf("worker %s not ready within 15s: %s", p.spec.Name, errBuf.String())
	}
	p.mu.Lock()
	p.cmd, p.exited, p.stderr = cmd, exited, errBuf
	p.mu.Unlock()
}

// kill SIGKILLs the process and waits until it is gone.
func (p *procWorker) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	_ = cmd.Process.Kill()
	<-exited
}

// stop ends the process gracefully (SIGTERM), killing it after 5 s.
func (p *procWorker) stop() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// addr is the worker's OpenAI API address.
func (p *procWorker) addr() string { return p.spec.IP + ":" + strconv.Itoa(chaosHTTPPort) }

// debug reads the worker's /_sim/debug.
func (p *procWorker) debug() worker.Debug {
	p.t.Helper()
	res, err := http.Get("http://" + p.addr() + "/_sim/debug")
	if err != nil {
		p.t.Fatalf("worker %s debug: %v", p.spec.Name, err)
	}
	defer res.Body.Close()
	var d worker.Debug
	if err := json.NewDecoder(res.Body).Decode(&d); err != nil {
		p.t.Fatalf("worker %s debug: %v", p.spec.Name, err)
	}
	return d
}

// lockedBuffer is a bytes.Buffer safe for a writer goroutine and readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
