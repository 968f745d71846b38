package gateway

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

// runtimeRule is a single-pool RR rule over the given backends on vip:port.
func runtimeRule(port uint16, backends ...netip.AddrPort) Rule {
	r := Rule{Key: fmt.Sprintf("tcp:127.0.0.1:%d", port)}
	r.Gateway = singlePool(backends...)
	r.Gateway.Port = port
	r.Gateway.Probe = ProbeConfig{Type: ProbeNone}
	c := &rule.Compiled{Key: r.Key, Spec: ladder.ServiceSpec{Name: r.Key}}
	for _, b := range backends {
		c.Endpoints = append(c.Endpoints, rule.CompiledEndpoint{Addr: b, Spec: ladder.EndpointSpec{Addr: b.String(), Weight: 1}})
	}
	r.Service.Rule = c
	r.Service.Env = ladder.DefaultEnv()
	return r
}

func newTestRuntime(t *testing.T) *Runtime {
	t.Helper()
	sys := actors.NewSystem(zerolog.Nop(), nil)
	rt, err := NewRuntime(RuntimeConfig{System: sys, Metrics: metrics.NewSet(), BindRetry: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rt.Close(ctx)
		sys.Shutdown()
	})
	return rt
}

func eventuallyT(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5s: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func completion(t *testing.T, port uint16) (int, string) {
	t.Helper()
	res, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/completions", port),
		"application/json", strings.NewReader(`{"model":"m","prompt":"hi"}`))
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	return res.StatusCode, res.Header.Get(HeaderRoute)
}

func TestRuntime_BusyAddressIsReportedAndBoundOnceFree(t *testing.T) {
	be := newFakeVLLM(t)
	squat, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(squat.Addr().(*net.TCPAddr).Port)
	rt := newTestRuntime(t)
	r := runtimeRule(port, be.addr())
	if err := rt.Apply(context.Background(), r); err != nil {
		t.Fatalf("Apply: %v (a busy address is a status, not an error)", err)
	}
	st, ok := rt.Status(r.Key)
	if !ok || st.BindError == nil || st.Addr != "" {
		t.Fatalf("status %+v; want a bind error and no address", st)
	}
	squat.Close()
	eventuallyT(t, "rule bound after the address freed", func() bool {
		st, _ := rt.Status(r.Key)
		return st.BindError == nil && st.Addr != ""
	})
	if code, _ := completion(t, port); code != 200 {
		t.Fatalf("after binding: status %d; want 200", code)
	}
}

func TestRuntime_ReplaceSwapsTheHandlerOnTheSameListener(t *testing.T) {
	a, b := newFakeVLLM(t), newFakeVLLM(t)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	rt := newTestRuntime(t)
	r := runtimeRule(port, a.addr())
	if err := rt.Apply(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	if code, route := completion(t, port); code != 200 || !strings.Contains(route, a.addr().String()) {
		t.Fatalf("before replace: %d %q; want 200 via %s", code, route, a.addr())
	}
	before := rt.Service(r.Key)
	r2 := runtimeRule(port, b.addr())
	if err := rt.Apply(context.Background(), r2); err != nil {
		t.Fatalf("replace: %v", err)
	}
	if rt.Service(r.Key) == before {
		t.Fatal("replace kept the old service")
	}
	for i := 0; i < 3; i++ {
		if code, route := completion(t, port); code != 200 || !strings.Contains(route, b.addr().String()) {
			t.Fatalf("after replace: %d %q; want 200 via %s", code, route, b.addr())
		}
	}
	if err := rt.Remove(context.Background(), r.Key); err != nil {
		t.Fatal(err)
	}
	if code, _ := completion(t, port); code != 0 {
		t.Fatalf("after remove: status %d; want the port closed", code)
	}
}
