package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/restapi"
	"github.com/llbproject/llb/rule"
)

// ran is the outcome of one llbctl invocation.
type ran struct {
	code           int
	stdout, stderr string
}

// runCLI runs llbctl in-process with env as its whole environment.
func runCLI(t *testing.T, env map[string]string, stdin string, args ...string) ran {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(k string) string { return env[k] }
	code := run(context.Background(), args, getenv, strings.NewReader(stdin), &out, &errb)
	return ran{code: code, stdout: out.String(), stderr: errb.String()}
}

// cli runs llbctl against server with extra args.
func cli(t *testing.T, server string, args ...string) ran {
	t.Helper()
	return runCLI(t, nil, "", append([]string{"--server", server}, args...)...)
}

// mustRun runs llbctl and fails the test unless it exits 0.
func mustRun(t *testing.T, server string, args ...string) string {
	t.Helper()
	r := cli(t, server, args...)
	if r.code != exitOK {
		t.Fatalf("llbctl %s: exit %d; want 0\nstderr: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// startServer runs a restored restapi server behind a real HTTP listener.
// The runtime is restapi.NoDataPlane unless mods replace it.
func startServer(t *testing.T, mods ...func(*restapi.Config)) (*httptest.Server, restapi.Config) {
	t.Helper()
	h, cfg := newHandler(t, mods...)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs, cfg
}

// newHandler builds a restored restapi server and returns its handler.
func newHandler(t *testing.T, mods ...func(*restapi.Config)) (http.Handler, restapi.Config) {
	t.Helper()
	cfg := restapi.Config{
		Logger:   zerolog.Nop(),
		Metrics:  metrics.NewSet(),
		Runtime:  restapi.NewNoDataPlane(),
		StateDir: t.TempDir(),
		Version:  "test-1.2.3",
	}
	for _, m := range mods {
		m(&cfg)
	}
	srv, err := restapi.New(cfg)
	if err != nil {
		t.Fatalf("restapi.New: %v", err)
	}
	if _, err := srv.Restore(context.Background()); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	return srv.Handler(), cfg
}

// writeTemp writes content to a file in a fresh temp dir.
func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// decodeEntry decodes a rule body with the REST layer's own decoder.
func decodeEntry(t *testing.T, body string) *rule.LoadbalanceEntry {
	t.Helper()
	e, err := restapi.DecodeEntry([]byte(body))
	if err != nil {
		t.Fatalf("DecodeEntry(%s): %v", body, err)
	}
	return e
}

// sameRule reports whether two rule bodies mean the same rule to llbd: both
// decode to equal LoadbalanceEntry values (so "sel":0 and an absent sel are
// the same, as are null and absent lists).
func sameRule(t *testing.T, got, want string) bool {
	t.Helper()
	g, w := decodeEntry(t, got), decodeEntry(t, want)
	return reflect.DeepEqual(canonicalLists(g), canonicalLists(w))
}

// canonicalLists makes empty lists nil, as the wire treats [] and null alike.
func canonicalLists(e *rule.LoadbalanceEntry) *rule.LoadbalanceEntry {
	c := *e
	if len(c.Endpoints) == 0 {
		c.Endpoints = nil
	}
	if len(c.SecondaryIPs) == 0 {
		c.SecondaryIPs = nil
	}
	if len(c.SecondaryVIPs) == 0 {
		c.SecondaryVIPs = nil
	}
	if len(c.AllowedSources) == 0 {
		c.AllowedSources = nil
	}
	if c.ServiceArguments != nil {
		sa := *c.ServiceArguments
		if len(sa.AlpnProtocols) == 0 {
			sa.AlpnProtocols = nil
		}
		if len(sa.TLSVersions) == 0 {
			sa.TLSVersions = nil
		}
		c.ServiceArguments = &sa
	}
	return &c
}

// compactJSON re-encodes a JSON document compactly, for messages.
func compactJSON(t *testing.T, s string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		t.Fatalf("compact %q: %v", s, err)
	}
	return buf.String()
}
