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
	"github.com/llbproject/llb/simulate/worker"
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

// The demo end to end, for each engine: a real llbd (built here) in front
// of the simulated fleet, the rule created over REST, the completion the
// printed commands promise through the VIP (a Tier-1.5 hit for its
// follow-up), every other printed request answered, then a clean stop.
func TestDemo_RunsARealLLBDInFrontOfTheFleet(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	bin, err := harness.BuildDaemon(ctx, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, engine := range []worker.Dialect{worker.DialectVLLM, worker.DialectTRTLLM, worker.DialectSGLang} {
		t.Run(string(engine), func(t *testing.T) { runDemoOnce(ctx, t, bin, engine) })
	}
}

func runDemoOnce(ctx context.Context, t *testing.T, bin string, engine worker.Dialect) {
	a, b := 100+rand.IntN(100), rand.IntN(256)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rest := ln.Addr().String()
	ln.Close()
	f := demoFlags{bin: bin, listen: rest, logLevel: "warn", vip: fmt.Sprintf("127.%d.%d.1", a, b), port: 2020,
		baseIP: fmt.Sprintf("127.%d.%d.10", a, b), engine: string(engine)}
	var stdout, stderr lockedBuffer
	dctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runDemo(dctx, f, &stdout, &stderr) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Fatalf("demo: %v", err)
		}
	}()
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(stdout.String(), "llb demo is running") {
		if time.Now().After(deadline) {
			t.Fatalf("the demo did not start; stderr:\n%s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(demoWarmupSec * time.Second)
	vip := fmt.Sprintf("http://%s:%d", f.vip, f.port)
	examples := demoExamples(engine)
	var route string
	for i := 0; ; i++ {
		// The first two printed requests: the first question, then the
		// second until Tier 1.5 routes it by the first one's cached blocks.
		res, err := http.Post(vip+examples[min(i, 1)].path, "application/json", strings.NewReader(examples[min(i, 1)].body))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		route = res.Header.Get("X-Llb-Route")
		if res.StatusCode != 200 {
			t.Fatalf("completion through the demo rule: %d %s (route %q)", res.StatusCode, body, route)
		}
		if i > 0 && strings.Contains(route, "tier=1.5 ") {
			break
		}
		if i == 100 {
			t.Fatalf("the follow-up was never routed by Tier 1.5; last route %q", route)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if strings.Contains(route, "decode=-1") {
		t.Errorf("route %q; want a P/D pair", route)
	}
	if wantEngine := engine != worker.DialectVLLM; strings.Contains(route, "engine="+string(engine)) != wantEngine {
		t.Errorf("route %q; want engine=%s named: %v", route, engine, wantEngine)
	}
	if !strings.Contains(stdout.String(), "curl -si "+vip) {
		t.Errorf("the printed commands do not name the rule's address:\n%s", stdout.String())
	}
	// Every printed request is answered through the demo's rule.
	for _, e := range examples {
		if !strings.Contains(stdout.String(), e.body) {
			t.Errorf("%s: not printed", e.path)
		}
		req, _ := http.NewRequest(http.MethodPost, vip+e.path, strings.NewReader(e.body))
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
}
