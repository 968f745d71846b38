package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llbproject/llb/simulate/fleet"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.b.Bytes()...)
}

func TestFleetCommand_PrintsTheRuleServesAndStopsOnSignal(t *testing.T) {
	var out, errOut syncBuffer
	root := newRootCmd(&out, &errOut)
	root.SetArgs([]string{"fleet", "--prefill", "1", "--decode", "1", "--base-ip", "127.0.6.2",
		"--http-port", "0", "--kv-port", "0", "--nixl-port", "0", "--time-scale", "0.01", "--replay", "--replay-port", "0"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()

	var rule fleet.RuleFragment
	deadline := time.Now().Add(10 * time.Second)
	for json.Unmarshal(out.Bytes(), &rule) != nil {
		select {
		case err := <-done:
			cancel()
			t.Fatalf("fleet exited early: %v\n%s", err, errOut.Bytes())
		default:
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("no rule printed; stderr:\n%s", errOut.Bytes())
		}
		time.Sleep(5 * time.Millisecond) // polling stdout with a deadline
	}
	if len(rule.Endpoints) != 2 || rule.Endpoints[0].EndpointIP != "127.0.6.2" || rule.Endpoints[0].EpRole != 1 ||
		rule.Endpoints[1].EpRole != 2 || rule.KVZmqPort == 0 || rule.KVHashAlgo != "sha256_cbor" || !rule.PDDisaggMode {
		t.Fatalf("rule %+v", rule)
	}
	tr := &http.Transport{Proxy: nil}
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	ep := rule.Endpoints[0]
	resp, err := c.Post("http://"+ep.EndpointIP+":"+itoa(ep.TargetPort)+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"hi","max_tokens":2}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	tr.CloseIdleConnections()
	if resp.StatusCode != 200 {
		t.Fatalf("worker answered %d %s", resp.StatusCode, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("fleet returned %v after the signal", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("fleet did not stop after the signal")
	}
	if !strings.Contains(string(errOut.Bytes()), "fleet stopping") {
		t.Fatalf("stderr lacks the stop transition:\n%s", errOut.Bytes())
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestCommands_BadFlagsAreUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"unknown flag", []string{"fleet", "--bogus"}},
		{"prefill without decode", []string{"fleet", "--prefill", "1"}},
		{"no workers", []string{"fleet"}},
		{"bad layout", []string{"fleet", "--single", "1", "--event-layout", "yaml"}},
		{"bad hash algo", []string{"fleet", "--single", "1", "--hash-algo", "sha256"}},
		{"bad log level", []string{"fleet", "--single", "1", "--log-level", "loud"}},
		{"bad error rate", []string{"fleet", "--single", "1", "--fault-error-rate", "2"}},
		{"bad time scale", []string{"fleet", "--single", "1", "--time-scale", "0"}},
		{"bad output", []string{"fleet", "--single", "1", "--output", "yaml"}},
		{"unknown workload", []string{"workload", "--kind", "chaos"}},
		{"bad mix", []string{"workload", "--kind", "mix", "--mix", "hot-prefix=x"}},
		{"bad arrivals", []string{"workload", "--arrivals", "bursty"}},
		{"bad rate", []string{"workload", "--rate", "0"}},
		{"bad zipf", []string{"workload", "--zipf-alpha", "-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			root := newRootCmd(&out, &errOut)
			root.SetArgs(tt.args)
			err := root.ExecuteContext(context.Background())
			var ue *usageError
			if !errors.As(err, &ue) {
				t.Fatalf("error %v; want a usage error", err)
			}
			if code := exitCode(err, &errOut); code != 2 {
				t.Fatalf("exit code %d; want 2", code)
			}
		})
	}
}

func TestExitCode_MapsErrors(t *testing.T) {
	tests := []struct {
		name string
		give error
		want int
	}{
		{"success", nil, 0},
		{"usage", &usageError{errors.New("bad flag")}, 2},
		{"runtime", errors.New("port in use"), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if got := exitCode(tt.give, &buf); got != tt.want {
				t.Fatalf("got %d; want %d", got, tt.want)
			}
		})
	}
}

func TestWorkloadCommand_PrintsTheSameStreamForASeed(t *testing.T) {
	run := func(seed string) []byte {
		var out bytes.Buffer
		root := newRootCmd(&out, io.Discard)
		root.SetArgs([]string{"workload", "--kind", "mix", "--seed", seed, "-n", "30", "--system-tokens", "40",
			"--question-tokens", "8", "--history-tokens", "20", "--prefix-tokens", "40", "--suffix-tokens", "4",
			"--output-tokens", "3", "--answer-tokens", "3", "--groups", "3", "--conversations", "2", "--clients", "3"})
		if err := root.ExecuteContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		return out.Bytes()
	}
	a, b, c := run("5"), run("5"), run("6")
	if !bytes.Equal(a, b) || bytes.Equal(a, c) {
		t.Fatal("workload output is not a function of the seed")
	}
	sc := bufio.NewScanner(bytes.NewReader(a))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	kinds := map[string]bool{}
	var n int
	var last map[string]any
	for sc.Scan() {
		last = map[string]any{}
		if err := json.Unmarshal(sc.Bytes(), &last); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if w, ok := last["workload"].(string); ok {
			kinds[w] = true
			n++
		}
	}
	if n != 30 || len(kinds) != 3 || last["summary"] != true || last["oracle_hit_rate"].(float64) <= 0 {
		t.Fatalf("%d requests of %v, summary %v", n, kinds, last)
	}
}

func TestFleetCommand_ExitOnCrashStopsTheFleet(t *testing.T) {
	var out, errOut syncBuffer
	root := newRootCmd(&out, &errOut)
	root.SetArgs([]string{"fleet", "--single", "2", "--base-ip", "127.0.7.2", "--http-port", "0", "--kv-port", "0",
		"--time-scale", "0.01", "--exit-on-crash", "--log-level", "error"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(context.Background()) }()
	var rule fleet.RuleFragment
	deadline := time.Now().Add(10 * time.Second)
	for json.Unmarshal(out.Bytes(), &rule) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("no rule printed; stderr:\n%s", errOut.Bytes())
		}
		time.Sleep(5 * time.Millisecond) // polling stdout with a deadline
	}
	tr := &http.Transport{Proxy: nil}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	ep := rule.Endpoints[1]
	resp, err := c.Post("http://"+ep.EndpointIP+":"+itoa(ep.TargetPort)+"/_sim/faults", "application/json", strings.NewReader(`{"crash":true}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "worker-1 crashed") || exitCode(err, io.Discard) != 1 {
			t.Fatalf("fleet returned %v; want worker-1 crashed (exit 1)", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("fleet kept running after a crash")
	}
}
