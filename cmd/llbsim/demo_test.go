package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/harness"
)

// lockedBuffer is a bytes.Buffer safe for a writer and a reader.
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

// The demo end to end: a real llbd (built here) in front of the simulated
// fleet, the rule created over REST, a completion through the VIP that the
// printed commands promise, then a clean stop.
func TestDemo_RunsARealLLBDInFrontOfTheFleet(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin, err := harness.BuildDaemon(ctx, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	a, b := 100+rand.IntN(100), rand.IntN(256)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rest := ln.Addr().String()
	ln.Close()
	f := demoFlags{bin: bin, listen: rest, logLevel: "warn", vip: fmt.Sprintf("127.%d.%d.1", a, b), port: 2020,
		baseIP: fmt.Sprintf("127.%d.%d.10", a, b)}
	var stdout, stderr lockedBuffer
	dctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runDemo(dctx, f, &stdout, &stderr) }()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(stdout.String(), "llb demo is running") {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("the demo did not start; stderr:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	url := fmt.Sprintf("http://%s:%d/v1/completions", f.vip, f.port)
	res, err := http.Post(url, "application/json", strings.NewReader(`{"model":"sim-model","prompt":"`+demoSystemPrompt+` Hi","max_tokens":4}`))
	if err != nil {
		stop()
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(res.Header.Get("X-Llb-Route"), "decode=") {
		t.Errorf("completion through the demo rule: %d %s (route %q)", res.StatusCode, body, res.Header.Get("X-Llb-Route"))
	}
	if !strings.Contains(stdout.String(), "curl -si "+fmt.Sprintf("http://%s:%d", f.vip, f.port)) {
		t.Errorf("the printed commands do not name the rule's address:\n%s", stdout.String())
	}
	// Every printed request is answered through the demo's rule.
	for _, e := range demoExamples() {
		if !strings.Contains(stdout.String(), e.body) {
			t.Errorf("%s: not printed", e.path)
		}
		req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://%s:%d%s", f.vip, f.port, e.path), strings.NewReader(e.body))
		req.Header.Set("Content-Type", "application/json")
		if k, v, ok := strings.Cut(e.header, ": "); ok {
			req.Header.Set(k, v)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Errorf("%s: %v", e.path, err)
			continue
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || res.Header.Get("X-Llb-Route") == "" {
			t.Errorf("%s through the demo rule: %d %s (route %q)", e.path, res.StatusCode, body, res.Header.Get("X-Llb-Route"))
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("demo: %v", err)
	}
}
