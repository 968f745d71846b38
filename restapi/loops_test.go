package restapi

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

func ruleWith(vip string, port int, epIP string, epPort int) string {
	other := "10.9.9.9"
	if strings.Contains(vip, ":") {
		other = "fd00::9"
	}
	return fmt.Sprintf(`{"serviceArguments":{"externalIP":%q,"port":%d,"protocol":"tcp","mode":4},`+
		`"endpoints":[{"endpointIP":%q,"targetPort":8000,"weight":1},{"endpointIP":%q,"targetPort":%d,"weight":1}]}`, vip, port, other, epIP, epPort)
}

func TestLoops_AnEndpointWhereLLBListensIsRefused(t *testing.T) {
	self := netip.MustParseAddrPort("[::]:11111")
	rest := netip.MustParseAddrPort("127.0.0.1:11112")
	local := func(a netip.Addr) bool { return a == netip.MustParseAddr("10.0.0.5") }
	tests := []struct {
		name      string
		stored    string // posted first ("" = none)
		give      string
		wantField string // "" = accepted
		wantMsg   string
	}{
		{name: "own vip and port", give: ruleWith("127.0.1.44", 32080, "127.0.1.44", 32080),
			wantField: "endpoints.1.endpointIP", wantMsg: "reaches the listener of rule tcp:127.0.1.44:32080"},
		{name: "own vip, other port", give: ruleWith("127.0.1.44", 32080, "127.0.1.44", 8000)},
		{name: "the rest api on the unspecified address, by loopback", give: ruleWith("10.1.1.1", 80, "127.0.0.1", 11111),
			wantField: "endpoints.1.endpointIP", wantMsg: "llbd's own listener [::]:11111"},
		{name: "the rest api on the unspecified address, by a host address", give: ruleWith("10.1.1.1", 80, "10.0.0.5", 11111),
			wantField: "endpoints.1.endpointIP", wantMsg: "llbd's own listener"},
		{name: "the rest api port on another host", give: ruleWith("10.1.1.1", 80, "10.0.0.6", 11111)},
		{name: "the rest api on loopback, by the unspecified address", give: ruleWith("10.1.1.1", 80, "0.0.0.0", 11112),
			wantField: "endpoints.1.endpointIP", wantMsg: "llbd's own listener 127.0.0.1:11112"},
		{name: "the rest api on loopback, by the unspecified IPv6 address", give: ruleWith("fd00::1", 80, "::", 11112),
			wantField: "endpoints.1.endpointIP", wantMsg: "llbd's own listener 127.0.0.1:11112"},
		{name: "a rule on ::1, by the unspecified address", stored: ruleWith("::1", 9000, "fd00::2", 8000), give: ruleWith("fd00::1", 80, "::", 9000),
			wantField: "endpoints.1.endpointIP", wantMsg: "reaches the listener of rule tcp:[::1]:9000"},
		{name: "the unspecified address, where nothing listens on loopback", give: ruleWith("10.1.1.1", 80, "0.0.0.0", 11113)},
		{name: "another rule's vip", stored: ruleWith("10.2.2.2", 9000, "10.9.9.8", 8000), give: ruleWith("10.1.1.1", 80, "10.2.2.2", 9000),
			wantField: "endpoints.1.endpointIP", wantMsg: "reaches the listener of rule tcp:10.2.2.2:9000"},
		{name: "a new vip that a stored rule sends to", stored: ruleWith("10.2.2.2", 9000, "10.1.1.1", 80), give: ruleWith("10.1.1.1", 80, "10.9.9.8", 8000),
			wantField: "serviceArguments.externalIP", wantMsg: "is an endpoint of rule tcp:10.2.2.2:9000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := started(t, func(c *Config) { c.SelfAddrs = []netip.AddrPort{self, rest}; c.LocalAddr = local })
			if tt.stored != "" {
				ts.mustPost(tt.stored)
			}
			r := ts.post(tt.give)
			if tt.wantField == "" {
				if r.status != http.StatusOK {
					t.Fatalf("got %d %s; want 200", r.status, r.body)
				}
				return
			}
			if r.status != http.StatusBadRequest {
				t.Fatalf("got %d %s; want 400", r.status, r.body)
			}
			if b := r.errBody(t); len(b.Fields) != 1 || b.Fields[0] != tt.wantField || !strings.Contains(b.Result, tt.wantMsg) {
				t.Fatalf("error %+v; want field %s and %q", b, tt.wantField, tt.wantMsg)
			}
		})
	}
}
