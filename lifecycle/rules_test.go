package lifecycle

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/internal/testwait"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/gateway"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule/ruletest"
)

// backend is a vLLM-like completion server over real HTTP.
func backend(t *testing.T) netip.AddrPort {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"c","object":"text_completion","choices":[{"index":0,"text":"ok","finish_reason":"stop"}]}`))
	}))
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(srv.Listener.Addr().String())
}

// rrSpec is a single-pool RR rule over backends on 127.0.0.1:port.
func rrSpec(port uint16, backends ...netip.AddrPort) runSpec {
	eps := make([]ruletest.Endpoint, len(backends))
	for i, b := range backends {
		eps[i] = ruletest.Endpoint{Addr: b}
	}
	c := ruletest.Rule(ruletest.Options{Port: port}, eps...)
	return runSpec{rule: c, service: actors.NewServiceConfig(c, ladder.DefaultEnv())}
}

func newTestRuleSet(t *testing.T) *ruleSet {
	t.Helper()
	sys := actors.NewSystem(zerolog.Nop(), nil)
	rs, err := newRuleSet(ruleSetConfig{System: sys, Metrics: metrics.NewSet(), BindRetry: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = rs.close(ctx)
		sys.Shutdown()
	})
	return rs
}

func completion(t *testing.T, port uint16) (int, string) {
	t.Helper()
	res, err := http.Post(fmt.Sprintf("http://127.0.0.1:%d/v1/completions", port),
		"application/json", strings.NewReader(`{"model":"m","prompt":"hi"}`))
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	return res.StatusCode, res.Header.Get(gateway.HeaderRoute)
}

func freePort(t *testing.T) uint16 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

func TestRuleSet_BusyAddressIsReportedAndBoundOnceFree(t *testing.T) {
	be := backend(t)
	squat, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(squat.Addr().(*net.TCPAddr).Port)
	rs := newTestRuleSet(t)
	s := rrSpec(port, be)
	if err := rs.apply(context.Background(), s); err != nil {
		t.Fatalf("apply: %v (a busy address is a status, not an error)", err)
	}
	st, ok := rs.status(s.rule.Key)
	if !ok || st.BindError == nil || st.Addr != "" {
		t.Fatalf("status %+v; want a bind error and no address", st)
	}
	squat.Close()
	testwait.Eventually(t, "rule bound after the address freed", func() bool {
		st, _ := rs.status(s.rule.Key)
		return st.BindError == nil && st.Addr != ""
	})
	if code, _ := completion(t, port); code != 200 {
		t.Fatalf("after binding: status %d; want 200", code)
	}
}

func TestRuleSet_ReplaceSwapsTheHandlerOnTheSameListener(t *testing.T) {
	a, b := backend(t), backend(t)
	port := freePort(t)
	rs := newTestRuleSet(t)
	s := rrSpec(port, a)
	if err := rs.apply(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if code, route := completion(t, port); code != 200 || !strings.Contains(route, a.String()) {
		t.Fatalf("before replace: %d %q; want 200 via %s", code, route, a)
	}
	before := rs.service(s.rule.Key)
	if err := rs.apply(context.Background(), rrSpec(port, b)); err != nil {
		t.Fatalf("replace: %v", err)
	}
	if rs.service(s.rule.Key) == before {
		t.Fatal("replace kept the old service")
	}
	for i := 0; i < 3; i++ {
		if code, route := completion(t, port); code != 200 || !strings.Contains(route, b.String()) {
			t.Fatalf("after replace: %d %q; want 200 via %s", code, route, b)
		}
	}
	if err := rs.remove(context.Background(), s.rule.Key); err != nil {
		t.Fatal(err)
	}
	if code, _ := completion(t, port); code != 0 {
		t.Fatalf("after remove: status %d; want the port closed", code)
	}
}

func TestRuleSet_ReplaceKeepsTheHasherWhileTheKeysAreTheSame(t *testing.T) {
	a := backend(t)
	port := freePort(t)
	rs := newTestRuleSet(t)
	kv := func(extra string) runSpec {
		c := ruletest.Rule(ruletest.Options{Port: port, Extra: `"kvExactMode":3,"kvHashAlgo":"sha256_cbor"` + extra}, ruletest.Endpoint{Addr: a})
		return runSpec{rule: c, service: actors.NewServiceConfig(c, ladder.DefaultEnv())}
	}
	hasher := func() any {
		rs.mu.Lock()
		defer rs.mu.Unlock()
		return rs.rules[kv("").rule.Key].hasher
	}
	if err := rs.apply(context.Background(), kv("")); err != nil {
		t.Fatal(err)
	}
	first := hasher()
	if err := rs.apply(context.Background(), kv(`,"kvWarmupSec":5`)); err != nil {
		t.Fatal(err)
	}
	if hasher() != first {
		t.Error("a replace with the same hash contract built a new hasher (the mirrors would go cold)")
	}
	if err := rs.apply(context.Background(), kv(`,"kvBlockSize":32`)); err != nil {
		t.Fatal(err)
	}
	if hasher() == first {
		t.Error("a replace with another block size kept the old hasher")
	}
}
