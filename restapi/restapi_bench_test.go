package restapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/catalog/statefs"
	"github.com/llbproject/llb/catalog/statefs/memfs"
	"github.com/llbproject/llb/rule"
)

func benchEntry(b *testing.B, eps int) string {
	e := pd(b)
	list := []any{}
	for i := range eps {
		role := 1 + i%2
		list = append(list, map[string]any{"endpointIP": fmt.Sprintf("10.0.%d.%d", i/250, i%250+1), "targetPort": 8000, "weight": 1, "ep_role": role, "nixl_port": 5600})
	}
	return e.Set("endpoints", list).JSON(b)
}

// BenchmarkDecodeValidateNormalize is the CPU cost of turning a POST body
// into a Rule, by endpoint count.
func BenchmarkDecodeValidateNormalize(b *testing.B) {
	for _, eps := range []int{2, 8, 32} {
		body := []byte(benchEntry(b, eps))
		b.Run(fmt.Sprintf("endpoints=%d", eps), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				e, err := DecodeEntry(body)
				if err != nil {
					b.Fatal(err)
				}
				if err := rule.Validate(e); err != nil {
					b.Fatal(err)
				}
				if _, err := rule.NormalizeEntry(e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchServer(b *testing.B, fsys statefs.FS, dir string, rules int) *Server {
	srv, err := New(Config{Logger: zerolog.Nop(), Metrics: metrics.NewSet(), Runtime: NewNoDataPlane(), StateDir: dir, FS: fsys})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := srv.Restore(context.Background()); err != nil {
		b.Fatal(err)
	}
	for i := range rules {
		body := single(b).Set("serviceArguments.port", 1000+i).JSON(b)
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, lbPath, strings.NewReader(body)))
		if rec.Code != 200 {
			b.Fatalf("seed rule %d: %d %s", i, rec.Code, rec.Body)
		}
	}
	return srv
}

// BenchmarkPOSTReplace is one accepted replace through the handler (no
// network), by table size: decode, validate, merge, persist, apply. fs=mem
// measures the CPU path; fs=disk adds the real fsyncs.
func BenchmarkPOSTReplace(b *testing.B) {
	for _, rules := range []int{1, 32, 256} {
		for _, disk := range []bool{false, true} {
			name := fmt.Sprintf("rules=%d/fs=mem", rules)
			var fsys statefs.FS = memfs.New()
			dir := memDir
			if disk {
				name, fsys, dir = fmt.Sprintf("rules=%d/fs=disk", rules), statefs.OSFS{}, b.TempDir()
			}
			b.Run(name, func(b *testing.B) {
				srv := benchServer(b, fsys, dir, rules)
				bodies := []string{single(b).Set("serviceArguments.port", 1000).Set("endpoints.0.weight", 2).JSON(b),
					single(b).Set("serviceArguments.port", 1000).Set("endpoints.0.weight", 3).JSON(b)}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					rec := httptest.NewRecorder()
					srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, lbPath, strings.NewReader(bodies[i%2])))
					if rec.Code != 200 {
						b.Fatalf("%d %s", rec.Code, rec.Body)
					}
					i++
				}
			})
		}
	}
}

// BenchmarkGETAll lists every rule with endpoint states, by table size.
func BenchmarkGETAll(b *testing.B) {
	for _, rules := range []int{1, 32, 256} {
		b.Run(fmt.Sprintf("rules=%d", rules), func(b *testing.B) {
			srv := benchServer(b, memfs.New(), memDir, rules)
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				srv.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, lbPath+"/all", nil))
				if rec.Code != 200 {
					b.Fatal(rec.Code)
				}
			}
		})
	}
}
