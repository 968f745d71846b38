package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/gateway"
)

func envOf(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

func TestParseConfig_FlagsWinOverEnvWhichWinsOverDefaults(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  []string
		want func(config) bool
	}{
		{"defaults", nil, nil, func(c config) bool {
			return c.Listen == ":11111" && c.LogLevel == zerolog.InfoLevel && c.LogFormat == "auto" &&
				c.DrainTimeout == 15*time.Second && c.BodyLimit == 1<<20 && !c.stateDirExplicit
		}},
		{"env fallback", nil, []string{"LLB_LISTEN", "127.0.0.1:9", "LLB_LOG_LEVEL", "debug", "LLB_DRAIN_TIMEOUT", "3s", "LLB_STATE_DIR", "/x"},
			func(c config) bool {
				return c.Listen == "127.0.0.1:9" && c.LogLevel == zerolog.DebugLevel && c.DrainTimeout == 3*time.Second && c.StateDir == "/x" && c.stateDirExplicit
			}},
		{"flag wins", []string{"--listen", "127.0.0.1:8", "--log-format", "json"}, []string{"LLB_LISTEN", "127.0.0.1:9", "LLB_LOG_FORMAT", "console"},
			func(c config) bool { return c.Listen == "127.0.0.1:8" && c.LogFormat == "json" }},
		{"level is case-insensitive", []string{"--log-level", "WARN"}, nil, func(c config) bool { return c.LogLevel == zerolog.WarnLevel }},
		{"single node by default", nil, nil, func(c config) bool { return c.Cluster.Name == "" && !c.DataBind.IsValid() }},
		{"cluster from the environment", []string{"--data-bind", "127.0.0.5"},
			[]string{"LLB_CLUSTER_NAME", "prod", "LLB_CLUSTER_ADVERTISE", "127.0.0.5:7946", "LLB_ETCD_ENDPOINTS", "http://127.0.0.9:2379, http://127.0.0.10:2379", "LLB_DATA_BIND", "127.0.0.6"},
			func(c config) bool {
				return c.Cluster.Name == "prod" && c.Cluster.Advertise == "127.0.0.5:7946" &&
					strings.Join(c.Cluster.Etcd.Endpoints, " ") == "http://127.0.0.9:2379 http://127.0.0.10:2379" && c.DataBind.String() == "127.0.0.5"
			}},
		{"data-plane bounds default", nil, nil, func(c config) bool {
			return c.BodyBufferBytes == gateway.DefaultBodyBufferBytes && c.MaxConns == gateway.DefaultMaxConns() && c.MaxConns > 0 &&
				c.ClientSendTimeout == gateway.DefaultClientSendTimeout
		}},
		{"data-plane bounds from env", nil, []string{"LLB_BODY_BUFFER_BYTES", "33554432", "LLB_MAX_CONNS", "8", "LLB_CLIENT_SEND_TIMEOUT", "5s"},
			func(c config) bool {
				return c.BodyBufferBytes == 32<<20 && c.MaxConns == 8 && c.ClientSendTimeout == 5*time.Second
			}},
		{"data-plane bounds off", []string{"--body-buffer-bytes", "0", "--max-conns", "0", "--client-send-timeout", "0"}, nil,
			func(c config) bool { return c.BodyBufferBytes == 0 && c.MaxConns == 0 && c.ClientSendTimeout == 0 }},
		{"decision deadline by default", nil, nil, func(c config) bool { return c.DecisionTimeout == actors.DefaultDecisionTimeout }},
		{"decision deadline from env", nil, []string{"LLB_DECISION_TIMEOUT", "250ms"}, func(c config) bool { return c.DecisionTimeout == 250*time.Millisecond }},
		{"a budget of exactly the body limit", []string{"--body-buffer-bytes", "16777216"}, nil,
			func(c config) bool { return c.BodyBufferBytes == gateway.DefaultBodyLimit }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig(tt.args, envOf(tt.env...), &bytes.Buffer{})
			if err != nil {
				t.Fatal(err)
			}
			if !tt.want(c) {
				t.Errorf("got %+v", c)
			}
		})
	}
}

func TestRun_BadConfigurationExits2NamingEveryProblem(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty-token")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		env  []string
		want []string
	}{
		{"unknown flag", []string{"--bogus"}, nil, []string{"flag provided but not defined: -bogus"}},
		{"stray argument", []string{"serve"}, nil, []string{`unexpected arguments ["serve"]`}},
		{"bad env value", nil, []string{"LLB_DRAIN_TIMEOUT", "soon"}, []string{`LLB_DRAIN_TIMEOUT="soon" is not a valid value for --drain-timeout`}},
		{"every problem at once", []string{"--log-level", "loud", "--listen", "nowhere", "--log-format", "xml", "--drain-timeout", "0s", "--body-limit", "10"}, nil,
			[]string{`--log-level "loud"`, `--listen "nowhere"`, `--log-format "xml"`, "--drain-timeout 0s", "--body-limit 10"}},
		{"body budget below the body limit", []string{"--body-buffer-bytes", "1048576"}, nil,
			[]string{"--body-buffer-bytes 1048576: below the largest rule body limit (16777216 bytes)", "want 0 (no bound) or at least 16777216"}},
		{"negative data-plane bounds", nil, []string{"LLB_BODY_BUFFER_BYTES", "-1", "LLB_MAX_CONNS", "-5", "LLB_CLIENT_SEND_TIMEOUT", "-1s"},
			[]string{"--body-buffer-bytes -1", "--max-conns -5: want 0 (no bound) or a positive number", "--client-send-timeout -1s: want 0 (no bound) or at least 1s"}},
		{"decision deadlines out of range", []string{"--decision-timeout", "500us"}, nil, []string{"--decision-timeout 500µs: want 1ms to 1s"}},
		{"a decision deadline over a second", nil, []string{"LLB_DECISION_TIMEOUT", "2s"}, []string{"--decision-timeout 2s: want 1ms to 1s"}},
		{"a send bound under a second", []string{"--client-send-timeout", "100ms"}, nil, []string{"--client-send-timeout 100ms: want 0 (no bound) or at least 1s"}},
		{"a bound that is not a number", []string{"--max-conns", "many"}, nil, []string{`invalid value "many" for flag -max-conns`}},
		{"tls halves", []string{"--tls-cert", notDir}, nil, []string{"--tls-cert and --tls-key go together"}},
		{"missing token file", []string{"--token-file", filepath.Join(dir, "nope")}, nil, []string{"--token-file: open"}},
		{"empty token file", []string{"--token-file", empty, "--state-dir", dir}, nil, []string{"--token-file: restapi: token file " + empty + " is empty"}},
		{"garbage tls pair", []string{"--tls-cert", notDir, "--tls-key", notDir, "--state-dir", dir}, nil, []string{"--tls-cert/--tls-key"}},
		{"unwritable state dir", []string{"--state-dir", filepath.Join(notDir, "sub")}, nil, []string{"--state-dir " + filepath.Join(notDir, "sub")}},
		{"cluster settings without a cluster", []string{"--etcd-endpoints", "http://127.0.0.1:2379"}, []string{"LLB_CLUSTER_ADVERTISE", "127.0.0.1:7946"},
			[]string{"--cluster-advertise, --etcd-endpoints: cluster settings without --cluster-name (LLB_CLUSTER_NAME)"}},
		{"a cluster without its addresses", []string{"--cluster-name", "prod"}, nil,
			[]string{"--cluster-name needs --cluster-advertise HOST:PORT", "--cluster-name needs --etcd-endpoints URL,URL"}},
		{"bad cluster values", []string{"--cluster-name", "no spaces", "--cluster-advertise", "0.0.0.0:7946", "--etcd-endpoints", "127.0.0.1:2379", "--data-bind", "host.example"}, nil,
			[]string{"cluster name \"no spaces\"", "want an address peers can reach", `endpoint "127.0.0.1:2379" is not an http:// or https:// URL`, `--data-bind "host.example": want an IP address`}},
		{"a cluster without a data plane", []string{"--cluster-name", "prod", "--cluster-advertise", "127.0.0.1:7946", "--etcd-endpoints", "http://127.0.0.1:2379", "--no-data-plane"}, nil,
			[]string{"--cluster-name needs the data plane"}},
		{"etcd credentials in halves", []string{"--cluster-name", "prod", "--cluster-advertise", "127.0.0.1:7946", "--etcd-endpoints", "http://127.0.0.1:2379", "--etcd-username", "llb", "--etcd-cacert", filepath.Join(dir, "nope")}, nil,
			[]string{"--etcd-username and --etcd-password-file go together", "--etcd-cacert: open"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			err := run(t.Context(), tt.args, envOf(tt.env...), &bytes.Buffer{}, &stderr)
			if code := exitCode(err, &stderr); code != exitUsage {
				t.Fatalf("exit code: got %d; want 2 (err %v)", code, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q does not say %q", stderr.String(), w)
				}
			}
		})
	}
}

func TestRun_HelpAndVersionExit0(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run(t.Context(), []string{"--help"}, envOf(), &out, &errOut); err != nil || !strings.Contains(errOut.String(), "-state-dir") {
		t.Errorf("--help: err %v, stderr %q", err, errOut.String())
	}
	out.Reset()
	if err := run(t.Context(), []string{"--version"}, envOf(), &out, &errOut); err != nil || !strings.HasPrefix(out.String(), version) {
		t.Errorf("--version: err %v, stdout %q", err, out.String())
	}
}

func TestResolveStateDir(t *testing.T) {
	dir := t.TempDir()
	blocked := filepath.Join(dir, "file")
	if err := os.WriteFile(blocked, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "state")
	got, fellBack, err := resolveStateDir(config{}, []string{filepath.Join(blocked, "llb"), good})
	if err != nil || got != good || !fellBack {
		t.Errorf("fallback: got %q, %t, %v; want %q after falling back", got, fellBack, err, good)
	}
	got, fellBack, err = resolveStateDir(config{}, []string{good})
	if err != nil || got != good || fellBack {
		t.Errorf("first candidate: got %q, %t, %v", got, fellBack, err)
	}
	if _, _, err := resolveStateDir(config{}, []string{filepath.Join(blocked, "a")}); err == nil {
		t.Error("no writable candidate: got no error")
	}
	if _, _, err := resolveStateDir(config{StateDir: filepath.Join(blocked, "x"), stateDirExplicit: true}, []string{good}); err == nil {
		t.Error("explicit unwritable dir: got no error; it must not fall back silently")
	}
}

func TestWarnExposure(t *testing.T) {
	tests := []struct {
		name      string
		ip        string
		auth, tls bool
		want      string
	}{
		{"loopback without token is quiet", "127.0.0.1", false, false, ""},
		{"ipv6 loopback is quiet", "::1", false, false, ""},
		{"all interfaces without token", "0.0.0.0", false, false, "WITHOUT authentication"},
		{"public address without token", "192.0.2.10", false, false, "WITHOUT authentication"},
		{"token in clear text", "0.0.0.0", true, false, "clear text"},
		{"token over tls is quiet", "0.0.0.0", true, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			warnExposure(zerolog.New(&buf), &net.TCPAddr{IP: net.ParseIP(tt.ip), Port: 11111}, tt.auth, tt.tls)
			if tt.want == "" && buf.Len() != 0 || !strings.Contains(buf.String(), tt.want) {
				t.Errorf("got %q; want %q", buf.String(), tt.want)
			}
		})
	}
}

func TestNewLogger_Formats(t *testing.T) {
	var buf bytes.Buffer
	lg := newLogger("json", zerolog.InfoLevel, &buf)
	lg.Debug().Msg("hidden")
	lg.Info().Msg("shown")
	if s := buf.String(); strings.Contains(s, "hidden") || !strings.Contains(s, `"message":"shown"`) {
		t.Errorf("json: got %q", s)
	}
	buf.Reset()
	lg = newLogger("auto", zerolog.InfoLevel, &buf) // a buffer is not a terminal: JSON
	lg.Info().Msg("x")
	if !strings.HasPrefix(buf.String(), "{") {
		t.Errorf("auto on a non-terminal: got %q; want JSON", buf.String())
	}
	buf.Reset()
	lg = newLogger("console", zerolog.InfoLevel, &buf)
	lg.Info().Msg("x")
	if strings.HasPrefix(buf.String(), "{") {
		t.Errorf("console: got %q; want the console format", buf.String())
	}
}
