package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"testing"
	"time"
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
		rule    ProbeConfig
		ep      EndpointProbe
		want    error
	}{
		{"default GET /health 2xx", healthy, false, ProbeConfig{}, EndpointProbe{}, nil},
		{"custom path and body", healthy, false, ProbeConfig{Type: ProbeHTTP, Request: "ready", Response: "ok"}, EndpointProbe{}, nil},
		{"closed port", nil, true, ProbeConfig{}, EndpointProbe{}, ErrProbeConnect},
		{"503", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }, false, ProbeConfig{}, EndpointProbe{}, ErrProbeStatus},
		{"wrong path is 404", healthy, false, ProbeConfig{Request: "/nope"}, EndpointProbe{}, ErrProbeStatus},
		{"wrong body", healthy, false, ProbeConfig{Response: "ready"}, EndpointProbe{}, ErrProbeBody},
		{"hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, false,
			ProbeConfig{AttemptTimeout: 50 * time.Millisecond}, EndpointProbe{}, ErrProbeTimeout},
		{"expected code list", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(202) }, false,
			ProbeConfig{}, EndpointProbe{ExpectedCodes: "200,202"}, nil},
		{"expected code range excludes", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }, false,
			ProbeConfig{}, EndpointProbe{ExpectedCodes: "200-203"}, ErrProbeStatus},
		{"endpoint path and method", func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodHead || r.URL.Path != "/ping" || r.Host != "svc.example" {
				w.WriteHeader(500)
			}
		}, false, ProbeConfig{}, EndpointProbe{HTTPMethod: "HEAD", URLPath: "/ping", DomainName: "svc.example"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var addr netip.AddrPort
			if tt.closed {
				addr = closedAddr(t)
			} else {
				addr = probeTarget(t, tt.handler)
			}
			probe, err := NewProbe(tt.rule, EndpointConfig{Addr: addr, Probe: tt.ep})
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
	ep := EndpointConfig{Addr: netip.MustParseAddrPort("192.0.2.55:1"), Probe: EndpointProbe{MonitorAddress: target.Addr().String()}}
	probe, err := NewProbe(ProbeConfig{Port: target.Port()}, ep)
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
	probe, err := NewProbe(ProbeConfig{Type: ProbeHTTPS}, EndpointConfig{Addr: netip.MustParseAddrPort(srv.Listener.Addr().String())})
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
		rule   ProbeConfig
		want   error
		closed bool
	}{
		{"connect only", func(t *testing.T) netip.AddrPort { return serveTCP(t, silent) }, ProbeConfig{Type: ProbeTCP}, nil, false},
		{"closed port", closedAddr, ProbeConfig{Type: ProbeTCP}, ErrProbeConnect, true},
		{"send and expect", func(t *testing.T) netip.AddrPort { return serveTCP(t, echo) }, ProbeConfig{Type: ProbeTCP, Request: "PING", Response: "PONG:PING"}, nil, false},
		{"wrong answer", func(t *testing.T) netip.AddrPort { return serveTCP(t, echo) }, ProbeConfig{Type: ProbeTCP, Request: "PING", Response: "HELLO"}, ErrProbeBody, false},
		{"no answer", func(t *testing.T) netip.AddrPort { return serveTCP(t, silent) },
			ProbeConfig{Type: ProbeTCP, Request: "PING", Response: "PONG", AttemptTimeout: 50 * time.Millisecond}, ErrProbeTimeout, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			probe, err := NewProbe(tt.rule, EndpointConfig{Addr: tt.addr(t)})
			if err != nil {
				t.Fatal(err)
			}
			if err := probe(context.Background()); !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Errorf("probe = %v; want %v", err, tt.want)
			}
		})
	}
}

func TestNewProbe_Settings(t *testing.T) {
	ep := EndpointConfig{Addr: netip.MustParseAddrPort("127.0.0.1:8000")}
	if _, err := NewProbe(ProbeConfig{Type: ProbeNone}, ep); !errors.Is(err, ErrProbeOff) {
		t.Errorf("probetype none = %v; want ErrProbeOff", err)
	}
	for _, bad := range []struct {
		rule ProbeConfig
		ep   EndpointProbe
	}{
		{ProbeConfig{Type: "ping"}, EndpointProbe{}},
		{ProbeConfig{Retries: 101}, EndpointProbe{}},
		{ProbeConfig{}, EndpointProbe{ExpectedCodes: "2xx"}},
		{ProbeConfig{}, EndpointProbe{ExpectedCodes: "204-200"}},
		{ProbeConfig{}, EndpointProbe{MonitorAddress: "host.example"}},
		{ProbeConfig{}, EndpointProbe{HTTPVersion: "2"}},
	} {
		ep.Probe = bad.ep
		if _, err := NewProbe(bad.rule, ep); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("NewProbe(%+v, %+v) = %v; want ErrInvalidConfig", bad.rule, bad.ep, err)
		}
	}
	c := ProbeConfig{}
	if c.PeriodOrDefault() != 60*time.Second || c.RetriesOrDefault() != 2 || c.attemptTimeout() != 5*time.Second {
		t.Errorf("defaults: period %v retries %d timeout %v", c.PeriodOrDefault(), c.RetriesOrDefault(), c.attemptTimeout())
	}
	c.Period = time.Second
	if c.attemptTimeout() != time.Second {
		t.Errorf("attempt timeout %v; want capped at the 1 s period", c.attemptTimeout())
	}
}

func TestParseExpectedCodes(t *testing.T) {
	got, err := parseExpectedCodes("200, 202,300-302")
	want := []codeRange{{200, 200}, {202, 202}, {300, 302}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, %v; want %v", got, err, want)
	}
}
