package deploy

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// daemonDirs are the packages llbd is built from (ARCHITECTURE.md): the
// metric names, labels and environment knobs the packaging files may use are
// the ones these define. Simulators and the CLI are not the daemon.
var daemonDirs = []string{"ladder", "inventory", "actors", "gateway", "rule", "catalog", "lifecycle", "restapi", "internal", "cmd/llbd"}

// sourceFacts is what the daemon's non-test sources spell out.
type sourceFacts struct {
	// literals are every string literal, unquoted.
	literals []string
	// histograms are the string literals passed first to a call whose name
	// contains "istogram" (m.histogram("x"), GetOrCreatePrometheusHistogram("x")).
	histograms map[string]bool
}

// moduleRoot is the repository root, the parent of this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root %s: %v", root, err)
	}
	return root
}

// scanSources parses the daemon packages' non-test Go files.
func scanSources(t *testing.T) sourceFacts {
	t.Helper()
	root := moduleRoot(t)
	facts := sourceFacts{histograms: map[string]bool{}}
	fset := token.NewFileSet()
	files := 0
	for _, dir := range daemonDirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			files++
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.BasicLit:
					if n.Kind == token.STRING {
						if s, err := strconv.Unquote(n.Value); err == nil {
							facts.literals = append(facts.literals, s)
						}
					}
				case *ast.CallExpr:
					if strings.Contains(callName(n), "istogram") && len(n.Args) > 0 {
						if lit, ok := n.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							if s, err := strconv.Unquote(lit.Value); err == nil {
								facts.histograms[s] = true
							}
						}
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatalf("scanning %s: %v", dir, err)
		}
	}
	if files < 20 {
		t.Fatalf("scanned only %d source files under %v; the layout changed?", files, daemonDirs)
	}
	return facts
}

// callName is the called function's name (the selector for x.f()).
func callName(c *ast.CallExpr) string {
	switch f := c.Fun.(type) {
	case *ast.Ident:
		return f.Name
	case *ast.SelectorExpr:
		return f.Sel.Name
	}
	return ""
}

var (
	metricNameRE = regexp.MustCompile(`\b(?:loxilb|llb)_[a-z0-9_]*[a-z0-9]\b`)
	labelDeclRE  = regexp.MustCompile(`\b([a-z_][a-z0-9_]*)="`)
	envNameRE    = regexp.MustCompile(`^(?:LLB|LOXILB)_[A-Za-z0-9_]+$`)
)

// metricNames are the metric names the daemon registers: every loxilb_*/llb_*
// token in its string literals.
func (f sourceFacts) metricNames() map[string]bool {
	out := map[string]bool{}
	for _, s := range f.literals {
		for _, m := range metricNameRE.FindAllString(s, -1) {
			out[m] = true
		}
	}
	return out
}

// labelNames are the label names the daemon writes (`name="` in literals).
func (f sourceFacts) labelNames() map[string]bool {
	out := map[string]bool{}
	for _, s := range f.literals {
		for _, m := range labelDeclRE.FindAllStringSubmatch(s, -1) {
			out[m[1]] = true
		}
	}
	return out
}

// envNames are the environment variables the daemon's packages name.
func (f sourceFacts) envNames() map[string]bool {
	out := map[string]bool{}
	for _, s := range f.literals {
		if envNameRE.MatchString(s) {
			out[s] = true
		}
	}
	return out
}

func TestScanSources_FindsKnownFacts(t *testing.T) {
	f := scanSources(t)
	metrics, labels, envs := f.metricNames(), f.labelNames(), f.envNames()
	for _, want := range []string{"llb_route_tier_total", "loxilb_pd_kv_blocks", "llb_breaker_state", "llb_rules"} {
		if !metrics[want] {
			t.Errorf("metric %s not found in the daemon's sources", want)
		}
	}
	for _, want := range []string{"service", "ep_idx", "tier", "code"} {
		if !labels[want] {
			t.Errorf("label %s not found in the daemon's sources", want)
		}
	}
	if !f.histograms["loxilb_ai_pd_decode_ttft_seconds"] {
		t.Errorf("histogram loxilb_ai_pd_decode_ttft_seconds not found; histograms: %v", f.histograms)
	}
	for _, want := range []string{"LLB_LISTEN", "LOXILB_KV_LB_MODE", "LLB_PD_PREFILL_TIMEOUT_SEC"} {
		if !envs[want] {
			t.Errorf("environment variable %s not found in the daemon's sources", want)
		}
	}
}
