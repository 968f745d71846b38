package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/llbproject/llb/restapi"
	"github.com/llbproject/llb/rule"
)

func TestExampleRules_PassTheRESTValidation(t *testing.T) {
	paths, err := filepath.Glob("examples/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < 2 {
		t.Fatalf("examples: %v; want the P/D KV-exact and the CHWBL rule", paths)
	}
	for _, p := range paths {
		t.Run(filepath.Base(p), func(t *testing.T) {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			e, err := restapi.DecodeEntry(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if err := rule.Validate(e); err != nil {
				t.Fatalf("llbd would refuse it: %v", err)
			}
			if e.ServiceArguments.Mode != rule.ModeFullProxy || e.ServiceArguments.Name == "" {
				t.Errorf("mode %d, name %q; want a named fullproxy rule", e.ServiceArguments.Mode, e.ServiceArguments.Name)
			}
		})
	}
}

var envLineRE = regexp.MustCompile(`(?m)^#?([A-Z][A-Za-z0-9_]*)=`)

func TestEnvExample_ListsExactlyTheDaemonsKnobs(t *testing.T) {
	b, err := os.ReadFile("llbd.env.example")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range envLineRE.FindAllStringSubmatch(string(b), -1) {
		listed[m[1]] = true
	}
	read := scanSources(t).envNames()
	for v := range read {
		if !listed[v] {
			t.Errorf("the daemon reads %s; llbd.env.example does not list it", v)
		}
	}
	for v := range listed {
		if !read[v] {
			t.Errorf("llbd.env.example lists %s, which no daemon package reads", v)
		}
	}
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "export ") || (envLineRE.MatchString(line) && strings.ContainsAny(line, `"'`)) {
			t.Errorf("line %d %q: an EnvironmentFile takes VAR=value without export or quotes", i+1, line)
		}
	}
}

// unitSettings reads a systemd unit into section → key → values.
func unitSettings(t *testing.T, path string) map[string]map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]string{}
	section := ""
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			out[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: %q is not key=value inside a section", path, i+1, line)
			}
			out[section][k] = append(out[section][k], v)
		}
	}
	return out
}

func TestSystemdUnit_IsHardenedAndRunsLlbd(t *testing.T) {
	u := unitSettings(t, "llbd.service")
	svc := u["Service"]
	if svc == nil || u["Unit"] == nil || u["Install"] == nil {
		t.Fatalf("sections %v; want Unit, Service and Install", u)
	}
	want := map[string]string{
		"ExecStart":                "/usr/local/bin/llbd",
		"User":                     "llb",
		"StateDirectory":           "llb",
		"ProtectSystem":            "strict",
		"NoNewPrivileges":          "yes",
		"Restart":                  "on-failure",
		"EnvironmentFile":          "-/etc/llb/llbd.env",
		"RestartPreventExitStatus": "2",
		"PrivateTmp":               "yes",
		"ProtectHome":              "yes",
	}
	for k, v := range want {
		if got := svc[k]; len(got) == 0 || got[len(got)-1] != v {
			t.Errorf("[Service] %s = %v; want %s", k, got, v)
		}
	}
	if env := strings.Join(svc["Environment"], " "); !strings.Contains(env, "LLB_STATE_DIR=/var/lib/llb") {
		t.Errorf("[Service] Environment %q; want LLB_STATE_DIR on the StateDirectory", env)
	}
	if !regexp.MustCompile(`(?m)^u llb `).MatchString(readFile(t, "llb.sysusers")) {
		t.Errorf("llb.sysusers does not create the llb user the unit runs as")
	}
}

func TestDockerfile_BuildsWithCgoAndRunsUnprivileged(t *testing.T) {
	df := readFile(t, "Dockerfile")
	for _, want := range []string{
		"FROM golang:${GO_VERSION}-bookworm AS build",
		"libzmq3-dev pkg-config",
		"CGO_ENABLED=1",
		"./cmd/llbd ./cmd/llbctl",
		"FROM debian:bookworm-slim",
		"libzmq5 ca-certificates",
		"USER llb:llb",
		"EXPOSE 11111",
		`ENTRYPOINT ["/usr/local/bin/llbd"]`,
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	// The version stamp must reach both binaries' main.version.
	for _, path := range []string{"../cmd/llbd/main.go", "../cmd/llbctl/main.go"} {
		if !strings.Contains(readFile(t, path), "var version = ") {
			t.Errorf("%s has no main.version for -X main.version", path)
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
