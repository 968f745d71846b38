package main

import (
	"encoding/pem"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/restapi"
)

// tlsServer runs a restapi server with token "s3cret" over HTTPS and
// returns its URL with the path of a PEM file holding its certificate.
func tlsServer(t *testing.T) (url, caPath string) {
	t.Helper()
	h, _ := newHandler(t, func(c *restapi.Config) { c.Token = "s3cret" })
	hs := httptest.NewUnstartedServer(h)
	hs.Config.ErrorLog = log.New(io.Discard, "", 0) // handshake failures are the point of some cases
	hs.StartTLS()
	t.Cleanup(hs.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw})
	return hs.URL, writeTemp(t, "ca.pem", string(ca))
}

func TestTLSAndToken(t *testing.T) {
	url, ca := tlsServer(t)
	token := writeTemp(t, "token", "s3cret\n")
	wrong := writeTemp(t, "token", "nope")
	tests := []struct {
		name     string
		env      map[string]string
		give     []string
		wantCode int
		wantErr  string
	}{
		{"ca_and_token", nil, []string{"--server", url, "--tls-ca", ca, "--token-file", token}, exitOK, ""},
		{"insecure_and_token", nil, []string{"--server", url, "--insecure", "--token-file", token}, exitOK, ""},
		{"server_and_token_from_env", map[string]string{envServer: url, envTokenFile: token}, []string{"--tls-ca", ca}, exitOK, ""},
		{"flags_win_over_env", map[string]string{envServer: "http://127.0.0.1:1", envTokenFile: wrong}, []string{"--server", url, "--tls-ca", ca, "--token-file", token}, exitOK, ""},
		{"no_token", nil, []string{"--server", url, "--tls-ca", ca}, exitAPI, "llbd answered 401 Invalid authentication credentials"},
		{"wrong_token", nil, []string{"--server", url, "--tls-ca", ca, "--token-file", wrong}, exitAPI, "hint: llbd wants a bearer token: check --token-file or LLB_TOKEN_FILE"},
		{"unknown_ca", nil, []string{"--server", url, "--token-file", token}, exitUsage, "TLS certificate is signed by an unknown authority (pass the CA with --tls-ca FILE"},
		{"plain_http_to_https", nil, []string{"--server", strings.Replace(url, "https://", "http://", 1), "--token-file", token}, exitUsage, "llbd speaks HTTPS (use an https:// --server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, tt.env, "", append(tt.give, "get", "lb")...)
			if r.code != tt.wantCode {
				t.Fatalf("exit %d; want %d\nstderr: %s", r.code, tt.wantCode, r.stderr)
			}
			if !strings.Contains(r.stderr, tt.wantErr) {
				t.Errorf("stderr %q; want it to contain %q", r.stderr, tt.wantErr)
			}
		})
	}
}

func TestConnectionFailuresExit2WithAHint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedAddr := ln.Addr().String()
	ln.Close()

	silent := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(silent.Close)
	plain, _ := startServer(t)

	tests := []struct {
		name string
		give []string
		want string
	}{
		{"refused", []string{"--server", closedAddr}, "connection refused (is llbd running and listening there? set --server or LLB_SERVER)"},
		{"timeout", []string{"--server", silent.URL, "--timeout", "150ms"}, "no answer within 150ms"},
		{"https_to_plain_http", []string{"--server", strings.Replace(plain.URL, "http://", "https://", 1)}, "it did not answer TLS (llbd probably speaks plain HTTP: use an http:// --server)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, nil, "", append(tt.give, "get", "lb")...)
			if r.code != exitUsage {
				t.Fatalf("exit %d; want %d\nstderr: %s", r.code, exitUsage, r.stderr)
			}
			if !strings.HasPrefix(r.stderr, "llbctl: cannot talk to llbd at ") || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr %q; want a cannot-talk sentence containing %q", r.stderr, tt.want)
			}
		})
	}
}

func TestGlobalFlags_BadValuesAreUsageErrors(t *testing.T) {
	empty := writeTemp(t, "token", " \n")
	notPEM := writeTemp(t, "ca.pem", "hello")
	// Port 1 on loopback: a request would fail with "cannot talk to llbd",
	// so a passing case proves the problem was caught before any request.
	const nowhere = "http://127.0.0.1:1"
	tests := []struct {
		name string
		give []string
		want string
	}{
		{"output", []string{"--server", nowhere, "-o", "yaml", "get", "lb"}, `-o/--output "yaml": want table or json`},
		{"timeout_zero", []string{"--server", nowhere, "--timeout", "0", "get", "lb"}, "want a positive number of seconds"},
		{"timeout_garbage", []string{"--server", nowhere, "--timeout", "soon", "get", "lb"}, "want a duration like 10s"},
		{"server_scheme", []string{"--server", "ftp://127.0.0.1:11111", "get", "lb"}, "the scheme must be http or https"},
		{"server_credentials", []string{"--server", "http://user:pw@127.0.0.1:11111", "get", "lb"}, "use --token-file for credentials"},
		{"tls_ca_needs_https", []string{"--server", nowhere, "--insecure", "get", "lb"}, "--tls-ca and --insecure need an https:// --server"},
		{"tls_ca_and_insecure", []string{"--server", "https://127.0.0.1:1", "--insecure", "--tls-ca", notPEM, "get", "lb"}, "give --tls-ca or --insecure, not both"},
		{"tls_ca_not_pem", []string{"--server", "https://127.0.0.1:1", "--tls-ca", notPEM, "get", "lb"}, "holds no PEM certificate"},
		{"token_file_empty", []string{"--server", nowhere, "--token-file", empty, "get", "lb"}, "is empty"},
		{"token_file_missing", []string{"--server", nowhere, "--token-file", "/nonexistent/token", "get", "lb"}, "--token-file: restapi: read token file"},
		{"unknown_command", []string{"--server", nowhere, "frobnicate"}, `unknown command "frobnicate"`},
		{"group_without_subcommand", []string{"--server", nowhere, "get"}, "get needs a subcommand: apikey, cluster, controller, endpoints, kv, lb, ratelimit"},
		{"wrong_arg_count", []string{"--server", nowhere, "get", "lb", "127.0.0.1", "2020"}, "get lb: got 2 arguments"},
		{"bad_rule_ref", []string{"--server", nowhere, "get", "endpoints", "lb1", "99999", "http"},
			`"lb1" is not an IP address; port: 99999 is outside 0–65535; protocol "http"`},
		{"status_and_stats", []string{"--server", nowhere, "get", "lb", "127.0.0.1", "2020", "tcp", "--status", "--stats"}, "none of the others can be"},
		{"status_without_rule", []string{"--server", nowhere, "get", "lb", "--status"}, "--status and --stats need a rule"},
		{"kv_without_flags", []string{"--server", nowhere, "get", "kv", "inventory"}, "get kv inventory needs --service and --ep"},
		{"kv_bad_ep", []string{"--server", nowhere, "get", "kv", "inventory", "--service", "s", "--ep", "40"}, "--ep 40: endpoint indexes are 0–31"},
		{"controller_bad_values", []string{"--server", nowhere, "set", "controller", "--service", "s", "--ep", "0", "--state", "paused", "--weight", "101"},
			`--state "paused": want ACTIVE, DRAINING, DISABLED, NONE; --weight 101: want 0–100`},
		{"controller_nothing_to_set", []string{"--server", nowhere, "set", "controller", "--service", "s", "--ep", "0"}, "give --state, --weight or both"},
		{"delete_two_forms", []string{"--server", nowhere, "delete", "lb", "127.0.0.1", "--tcp=80", "--all"}, "delete lb takes exactly one of"},
		{"delete_no_form", []string{"--server", nowhere, "delete", "lb"}, "delete lb takes exactly one of"},
		{"delete_key_flags_without_ip", []string{"--server", nowhere, "delete", "lb", "--name", "x", "--tcp=80"}, "--tcp name a rule by key"},
		{"delete_target_port", []string{"--server", nowhere, "delete", "lb", "127.0.0.1", "--tcp=80:8000"}, "give the service port only"},
		{"delete_no_port", []string{"--server", nowhere, "delete", "lb", "127.0.0.1"}, "exactly one of --tcp, --udp, --sctp"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runCLI(t, nil, "", tt.give...)
			if r.code != exitUsage {
				t.Fatalf("exit %d; want %d\nstderr: %s", r.code, exitUsage, r.stderr)
			}
			if !strings.Contains(r.stderr, tt.want) {
				t.Errorf("stderr %q; want it to contain %q", r.stderr, tt.want)
			}
			if strings.Contains(r.stderr, "cannot talk to llbd") {
				t.Errorf("stderr %q: a usage error must be caught before any request", r.stderr)
			}
		})
	}
}

func TestClearTextTokenWarning(t *testing.T) {
	token := writeTemp(t, "token", "s3cret")
	tests := []struct {
		name   string
		server string
		want   bool
	}{
		{"remote_http_warns", "http://192.0.2.1:11111", true},
		{"loopback_http_is_quiet", "http://127.0.0.1:11111", false},
		{"https_is_quiet", "https://192.0.2.1:11111", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, warn, err := newClient(globalOpts{server: tt.server, tokenFile: token, timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if got := warn != ""; got != tt.want {
				t.Errorf("warning %q; want one: %v", warn, tt.want)
			}
		})
	}
}

func TestTimeoutValue(t *testing.T) {
	tests := []struct {
		give    string
		want    time.Duration
		wantErr bool
	}{
		{give: "10", want: 10 * time.Second},
		{give: "1.5", want: 1500 * time.Millisecond},
		{give: "500ms", want: 500 * time.Millisecond},
		{give: "2m", want: 2 * time.Minute},
		{give: "0", wantErr: true},
		{give: "-3", wantErr: true},
		{give: "soon", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.give, func(t *testing.T) {
			var v timeoutValue
			err := v.Set(tt.give)
			if (err != nil) != tt.wantErr || (!tt.wantErr && time.Duration(v) != tt.want) {
				t.Errorf("Set(%q) = %v, %v; want %v (error %v)", tt.give, time.Duration(v), err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseServer(t *testing.T) {
	tests := []struct{ give, want string }{
		{"127.0.0.1:11111", "http://127.0.0.1:11111"},
		{"https://lb.example:11111/", "https://lb.example:11111"},
		{"http://[::1]:11111/llb/", "http://[::1]:11111/llb"},
	}
	for _, tt := range tests {
		u, err := parseServer(tt.give)
		if err != nil || u.String() != tt.want {
			t.Errorf("parseServer(%q) = %v, %v; want %s", tt.give, u, err, tt.want)
		}
	}
}
