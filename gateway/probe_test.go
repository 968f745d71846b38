package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/rule/ruletest"
)

func probeTarget(t *testing.T, h http.HandlerFunc) netip.AddrPort {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(srv.Listener.Addr().String())
}

func TestHTTPProbe_Outcomes(t *testing.T) {
	healthy := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health" && r.URL.Path != "/ready" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, "engine ok")
	}
	tests := []struct {
		name    string
		handler http.HandlerFunc
		closed  bool
		rule    rule.Probe
		ep      rule.EndpointProbe
		want    error
	}{
		{"default GET /health 2xx", healthy, false, pc(rule.Probe{}), rule.EndpointProbe{}, nil},
		{"custom path and body", healthy, false, pc(rule.Probe{Type: rule.ProbeHTTP, Request: "ready", Response: "ok"}), rule.EndpointProbe{}, nil},
		{"closed port", nil, true, pc(rule.Probe{}), rule.EndpointProbe{}, ErrProbeConnect},
		{"503", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }, false, pc(rule.Probe{}), rule.EndpointProbe{}, ErrProbeStatus},
		{"wrong path is 404", healthy, false, pc(rule.Probe{Request: "/nope"}), rule.EndpointProbe{}, ErrProbeStatus},
		{"wrong body", healthy, false, pc(rule.Probe{Response: "ready"}), rule.EndpointProbe{}, ErrProbeBody},
		{"hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, false,
			pc(rule.Probe{AttemptTimeout: 50 * time.Millisecond}), rule.EndpointProbe{}, ErrProbeTimeout},
		{"expected code list", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(202) }, false,
			pc(rule.Probe{}), rule.EndpointProbe{ExpectedCodes: "200,202"}, nil},
		{"expected code range excludes", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }, false,
			pc(rule.Probe{}), rule.EndpointProbe{ExpectedCodes: "200-203"}, ErrProbeStatus},
		{"endpoint path and method", func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodHead || r.URL.Path != "/ping" || r.Host != "svc.example" {
				w.WriteHeader(500)
			}
		}, false, pc(rule.Probe{}), rule.EndpointProbe{HTTPMethod: "HEAD", URLPath: "/ping", DomainName: "svc.example"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var addr netip.AddrPort
			if tt.closed {
				addr = closedAddr(t)
			} else {
				addr = probeTarget(t, tt.handler)
			}
			probe, err := NewProbe(tt.rule, &rule.CompiledEndpoint{Addr: addr, Probe: tt.ep}, "")
			if err != nil {
				t.Fatalf("NewProbe: %v", err)
			}
			err = probe(context.Background())
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("probe = %v; want %v", err, tt.want)
			}
			var pe *ProbeError
			if err != nil && (!errors.As(err, &pe) || pe.Target != addr.String()) {
				t.Errorf("probe error %v is not a *ProbeError naming %s", err, addr)
			}
		})
	}
}

func TestHTTPProbe_UsesProbePortAndMonitorAddress(t *testing.T) {
	target := probeTarget(t, func(w http.ResponseWriter, _ *http.Request) {})
	ep := &rule.CompiledEndpoint{Addr: netip.MustParseAddrPort("192.0.2.55:1"), Probe: rule.EndpointProbe{MonitorAddress: target.Addr().String()}}
	probe, err := NewProbe(pc(rule.Probe{Port: target.Port()}), ep, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := probe(context.Background()); err != nil {
		t.Errorf("probe via monitorAddress and probeport = %v", err)
	}
}

func TestHTTPSProbe_DoesNotVerifyTheCertificate(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	t.Cleanup(srv.Close)
	probe, err := NewProbe(pc(rule.Probe{Type: rule.ProbeHTTPS}), &rule.CompiledEndpoint{Addr: netip.MustParseAddrPort(srv.Listener.Addr().String())}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := probe(context.Background()); err != nil {
		t.Errorf("https probe of a self-signed server = %v", err)
	}
}

func TestTCPProbe_Outcomes(t *testing.T) {
	echo := func(c net.Conn) {
		buf := make([]byte, 64)
		n, _ := c.Read(buf)
		_, _ = c.Write(append([]byte("PONG:"), buf[:n]...))
	}
	silent := func(c net.Conn) { _, _ = io.Copy(io.Discard, c) }
	tests := []struct {
		name   string
		addr   func(t *testing.T) netip.AddrPort
		rule   rule.Probe
		want   error
		closed bool
	}{
		{"connect only", func(t *testing.T) netip.AddrPort { return serveTCP(t, silent) }, pc(rule.Probe{Type: rule.ProbeTCP}), nil, false},
		{"closed port", closedAddr, pc(rule.Probe{Type: rule.ProbeTCP}), ErrProbeConnect, true},
		{"send and expect", func(t *testing.T) netip.AddrPort { return serveTCP(t, echo) }, pc(rule.Probe{Type: rule.ProbeTCP, Request: "PING", Response: "PONG:PING"}), nil, false},
		{"wrong answer", func(t *testing.T) netip.AddrPort { return serveTCP(t, echo) }, pc(rule.Probe{Type: rule.ProbeTCP, Request: "PING", Response: "HELLO"}), ErrProbeBody, false},
		{"no answer", func(t *testing.T) netip.AddrPort { return serveTCP(t, silent) },
			pc(rule.Probe{Type: rule.ProbeTCP, Request: "PING", Response: "PONG", AttemptTimeout: 50 * time.Millisecond}), ErrProbeTimeout, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probe, err := NewProbe(tt.rule, &rule.CompiledEndpoint{Addr: tt.addr(t)}, "")
			if err != nil {
				t.Fatal(err)
			}
			if err := probe(context.Background()); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("probe = %v; want %v", err, tt.want)
			}
		})
	}
}

func TestNewProbe_OffAndRefusals(t *testing.T) {
	ep := rule.CompiledEndpoint{Addr: netip.MustParseAddrPort("127.0.0.1:8000")}
	if _, err := NewProbe(pc(rule.Probe{Type: rule.ProbeNone}), &ep, ""); !errors.Is(err, ErrProbeOff) {
		t.Errorf("probetype none = %v; want ErrProbeOff", err)
	}
	// rule.Validate refuses all of these; a hand-filled rule still gets an
	// error rather than a probe that can never pass.
	for _, bad := range []struct {
		rule rule.Probe
		ep   rule.EndpointProbe
	}{
		{pc(rule.Probe{Type: rule.ProbePing}), rule.EndpointProbe{}},
		{rule.Probe{Type: rule.ProbeHTTP}, rule.EndpointProbe{}}, // no period: not compiled
		{pc(rule.Probe{}), rule.EndpointProbe{ExpectedCodes: "2xx"}},
		{pc(rule.Probe{}), rule.EndpointProbe{MonitorAddress: "host.example"}},
	} {
		ep.Probe = bad.ep
		if _, err := NewProbe(bad.rule, &ep, ""); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewProbe(%+v, %+v) = %v; want ErrInvalidConfig", bad.rule, bad.ep, err)
		}
	}
}

// pc is p as rule.Compile leaves it: a mode:4 rule's probe type and
// bounds where p has none.
func pc(p rule.Probe) rule.Probe {
	d := ruletest.Rule(ruletest.Options{Probe: rule.ProbeHTTP, Extra: `"probeport":1`}, ruletest.Endpoint{Addr: netip.MustParseAddrPort("127.0.0.1:1")}).Probe
	if p.Type == "" {
		p.Type = d.Type
	}
	if p.Period == 0 {
		p.Period = d.Period
	}
	if p.AttemptTimeout == 0 {
		p.AttemptTimeout = d.AttemptTimeout
	}
	return p
}
