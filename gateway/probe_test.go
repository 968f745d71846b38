package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
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
		sa      string        // the rule's probe fields (probeport is the target's)
		ep      string        // the endpoint's health-monitor fields
		timeout time.Duration // overrides the compiled attempt timeout
		want    error
	}{
		{"default GET /health 2xx", healthy, false, "", "", 0, nil},
		{"custom path and body", healthy, false, `"probetype":"http","probereq":"ready","proberesp":"ok"`, "", 0, nil},
		{"closed port", nil, true, "", "", 0, ErrProbeConnect},
		{"503", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(503) }, false, "", "", 0, ErrProbeStatus},
		{"wrong path is 404", healthy, false, `"probetype":"http","probereq":"/nope"`, "", 0, ErrProbeStatus},
		{"wrong body", healthy, false, `"probetype":"http","proberesp":"ready"`, "", 0, ErrProbeBody},
		{"hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, false,
			"", "", 50 * time.Millisecond, ErrProbeTimeout},
		{"expected code list", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(202) }, false,
			"", `"expectedCodes":"200,202"`, 0, nil},
		{"expected code range excludes", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }, false,
			"", `"expectedCodes":"200-203"`, 0, ErrProbeStatus},
		{"endpoint path and method", func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodHead || r.URL.Path != "/ping" || r.Host != "svc.example" {
				w.WriteHeader(500)
			}
		}, false, "", `"httpMethod":"HEAD","urlPath":"/ping","domainName":"svc.example"`, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var addr netip.AddrPort
			if tt.closed {
				addr = closedAddr(t)
			} else {
				addr = probeTarget(t, tt.handler)
			}
			p, ep := compiledProbe(addr, tt.sa, tt.ep)
			if tt.timeout > 0 {
				p.AttemptTimeout = tt.timeout
			}
			probe, err := NewProbe(p, ep, "")
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
	p, ep := compiledProbe(netip.MustParseAddrPort("192.0.2.55:1"),
		fmt.Sprintf(`"probetype":"http","probeport":%d`, target.Port()), fmt.Sprintf(`"monitorAddress":%q`, target.Addr()))
	probe, err := NewProbe(p, ep, "")
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
	addr := netip.MustParseAddrPort(srv.Listener.Addr().String())
	p, ep := compiledProbe(addr, `"probetype":"https"`, "")
	probe, err := NewProbe(p, ep, "")
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
		name    string
		addr    func(t *testing.T) netip.AddrPort
		sa      string        // the rule's probe fields beside probetype tcp
		timeout time.Duration // overrides the compiled attempt timeout
		want    error
		closed  bool
	}{
		{"connect only", func(t *testing.T) netip.AddrPort { return serveTCP(t, silent) }, "", 0, nil, false},
		{"closed port", closedAddr, "", 0, ErrProbeConnect, true},
		{"send and expect", func(t *testing.T) netip.AddrPort { return serveTCP(t, echo) }, `"probereq":"PING","proberesp":"PONG:PING"`, 0, nil, false},
		{"wrong answer", func(t *testing.T) netip.AddrPort { return serveTCP(t, echo) }, `"probereq":"PING","proberesp":"HELLO"`, 0, ErrProbeBody, false},
		{"no answer", func(t *testing.T) netip.AddrPort { return serveTCP(t, silent) },
			`"probereq":"PING","proberesp":"PONG"`, 50 * time.Millisecond, ErrProbeTimeout, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := tt.addr(t)
			sa := `"probetype":"tcp"`
			if tt.sa != "" {
				sa += "," + tt.sa
			}
			p, ep := compiledProbe(addr, sa, "")
			if tt.timeout > 0 {
				p.AttemptTimeout = tt.timeout
			}
			probe, err := NewProbe(p, ep, "")
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
	addr := netip.MustParseAddrPort("127.0.0.1:8000")
	p, ep := compiledProbe(addr, `"probetype":"none"`, "")
	if _, err := NewProbe(p, ep, ""); !errors.Is(err, ErrProbeOff) {
		t.Errorf("probetype none = %v; want ErrProbeOff", err)
	}
	// rule.Validate refuses all of these; a hand-filled rule still gets an
	// error rather than a probe that can never pass.
	for _, bad := range []struct {
		name string
		edit func(p *rule.Probe, ep *rule.CompiledEndpoint)
	}{
		{"probetype ping", func(p *rule.Probe, _ *rule.CompiledEndpoint) { p.Type = rule.ProbePing }},
		{"no period: not compiled", func(p *rule.Probe, _ *rule.CompiledEndpoint) { p.Period = 0 }},
		{"expectedCodes 2xx", func(_ *rule.Probe, ep *rule.CompiledEndpoint) { ep.Probe.ExpectedCodes = "2xx" }},
		{"no target: not compiled", func(_ *rule.Probe, ep *rule.CompiledEndpoint) { ep.Probe.Target = netip.AddrPort{} }},
	} {
		p, ep := compiledProbe(addr, "", "")
		bad.edit(&p, ep)
		if _, err := NewProbe(p, ep, ""); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: NewProbe = %v; want ErrInvalidConfig", bad.name, err)
		}
	}
}

// compiledProbe compiles a rule with one endpoint at addr, the rule's probe
// fields sa and the endpoint's health-monitor fields ep (JSON members
// without braces), and returns its probe settings and endpoint. A probetype
// without a probeport probes addr's port (rule.Validate wants the port
// named).
func compiledProbe(addr netip.AddrPort, sa, ep string) (rule.Probe, *rule.CompiledEndpoint) {
	if strings.Contains(sa, "probetype") && !strings.Contains(sa, `"none"`) && !strings.Contains(sa, "probeport") {
		sa += fmt.Sprintf(`,"probeport":%d`, addr.Port())
	}
	if sa != "" {
		sa = "," + sa
	}
	if ep != "" {
		ep = "," + ep
	}
	c := ruletest.Compile(fmt.Sprintf(`{"serviceArguments":{"externalIP":"127.0.0.1","port":2020,"protocol":"tcp","mode":4%s},`+
		`"endpoints":[{"endpointIP":%q,"targetPort":%d,"weight":1%s}]}`, sa, addr.Addr(), addr.Port(), ep), rule.Defaults{})
	return c.Probe, &c.Endpoints[0]
}
