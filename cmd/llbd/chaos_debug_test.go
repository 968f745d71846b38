package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule/ruletest"
)

// Unit tests of the debug listener (debug.go); the chaos tests drive it
// against the real daemon.

// debugTestService starts a one-endpoint round-robin service named key.
func debugTestService(t *testing.T, set *metrics.Set, key string) *actors.Service {
	t.Helper()
	sys := actors.NewSystem(zerolog.Nop(), set)
	t.Cleanup(sys.Shutdown)
	r := ruletest.SinglePool(netip.MustParseAddrPort("127.0.0.1:8000"))
	r.Key, r.Spec.Name = key, key
	cfg := actors.NewServiceConfig(r, ladder.DefaultEnv())
	svc, err := sys.Start(cfg, nil)
	if err != nil {
		t.Fatalf("start service: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = svc.Stop(ctx)
	})
	return svc
}

func TestDebugCrash_AnswersByWhatItCouldCrash(t *testing.T) {
	const key = "tcp:127.0.0.1:2020"
	set := metrics.NewSet()
	svc := debugTestService(t, set, key)
	h := debugHandler(func(rule string) *actors.Service {
		if rule == key {
			return svc
		}
		return nil
	}, zerolog.Nop())
	tests := []struct {
		name     string
		method   string
		give     string
		want     int
		wantBody string
	}{
		{"router", http.MethodPost, `{"rule":"tcp:127.0.0.1:2020","kind":"router","idx":0}`, 200, `"crashed":true`},
		{"endpoint", http.MethodPost, `{"rule":"tcp:127.0.0.1:2020","kind":"endpoint","idx":0}`, 200, `"crashed":true`},
		{"breaker", http.MethodPost, `{"rule":"tcp:127.0.0.1:2020","kind":"breaker","idx":0}`, 200, `"crashed":true`},
		{"session shard", http.MethodPost, `{"rule":"tcp:127.0.0.1:2020","kind":"session","idx":3}`, 200, `"crashed":true`},
		{"no inventory without KV", http.MethodPost, `{"rule":"tcp:127.0.0.1:2020","kind":"inventory","idx":0}`, 404, `no inventory actor 0`},
		{"endpoint out of range", http.MethodPost, `{"rule":"tcp:127.0.0.1:2020","kind":"endpoint","idx":1}`, 404, `no endpoint actor 1`},
		{"negative index", http.MethodPost, `{"rule":"tcp:127.0.0.1:2020","kind":"breaker","idx":-1}`, 404, `no breaker actor -1`},
		{"unknown rule", http.MethodPost, `{"rule":"tcp:127.0.0.1:9","kind":"router"}`, 404, `is not served`},
		{"unknown kind", http.MethodPost, `{"rule":"tcp:127.0.0.1:2020","kind":"gpu"}`, 400, `want router, endpoint`},
		{"unknown field", http.MethodPost, `{"rule":"tcp:127.0.0.1:2020","kind":"router","all":true}`, 400, `unknown field`},
		{"not JSON", http.MethodPost, `crash it`, 400, `body must be`},
		{"GET", http.MethodGet, ``, 405, `use POST`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, debugPathCrash, strings.NewReader(tt.give)))
			if rec.Code != tt.want || !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Fatalf("got %d %s; want %d containing %q", rec.Code, rec.Body.String(), tt.want, tt.wantBody)
			}
		})
	}
	// Four crashes were injected; each one is a supervised restart, and
	// the service still routes afterwards.
	restarts := func() bool {
		var b bytes.Buffer
		set.WritePrometheus(&b)
		return strings.Contains(b.String(), `llb_actor_restarts_total{service="`+key+`"} 4`)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !restarts() {
		if time.Now().After(deadline) {
			var b bytes.Buffer
			set.WritePrometheus(&b)
			t.Fatalf("want 4 supervised restarts; metrics:\n%s", b.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rt, err := svc.Route(ctx, &actors.RouteRequest{})
	if err != nil || !rt.Decision.Available() {
		t.Fatalf("route after the crashes: %v %s", err, rt.Decision.String())
	}
	svc.Finish(rt.Ticket, actors.Result{OK: true})
}

func TestDebugListen_AcceptsOnlyLoopback(t *testing.T) {
	tests := []struct {
		give    string
		wantErr string
	}{
		{"127.0.0.1:0", ""},
		{"127.9.8.7:6060", ""},
		{"[::1]:6060", ""},
		{"localhost:6060", ""},
		{":6060", "loopback"},
		{"0.0.0.0:6060", "loopback"},
		{"10.0.0.1:6060", "loopback"},
		{"example.com:6060", "loopback"},
		{"127.0.0.1", "missing port"},
		{"127.0.0.1:http", "not a number"},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			err := checkLoopback(tt.give)
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("checkLoopback(%q) = %v; want error containing %q", tt.give, err, tt.wantErr)
			}
		})
	}
}

func TestDebugListen_OffByDefaultAndRefusedBeyondLoopback(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	cfg, err := parseConfig(nil, env(nil), io.Discard)
	if err != nil || cfg.DebugListen != "" {
		t.Fatalf("default: DebugListen %q, %v; want off", cfg.DebugListen, err)
	}
	cfg, err = parseConfig(nil, env(map[string]string{"LLB_DEBUG_LISTEN": "127.0.0.1:6060"}), io.Discard)
	if err != nil || cfg.DebugListen != "127.0.0.1:6060" {
		t.Fatalf("LLB_DEBUG_LISTEN: DebugListen %q, %v; want 127.0.0.1:6060", cfg.DebugListen, err)
	}
	_, err = parseConfig([]string{"--debug-listen", "0.0.0.0:6060"}, env(nil), io.Discard)
	var ue usageError
	if err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), "--debug-listen") {
		t.Fatalf("--debug-listen 0.0.0.0:6060: %v; want a usage error naming the flag", err)
	}
}
