package gateway

import (
	"net/http"
	"strings"
	"testing"
)

// A single endpoint that refuses the connection: the retry finds no other
// endpoint, and the client gets the failure of the attempt that ran (502
// backend_unreachable). X-Llb-Route tells the same story: the attempt's
// decision and the error, never the retry's "no healthy backend" (issue
// 31: the header said unavailable=no_healthy_backend on a 502
// backend_unreachable body).
func TestRouteHeader_AgreesWithTheBodyWhenTheOnlyEndpointFails(t *testing.T) {
	c := singlePool(closedAddr(t))
	url, _ := startGateway(t, c, Deps{Router: newFakeRouter(firstAllowed(c))})
	resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"hi"}`)
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status %d (%s); want 502", resp.StatusCode, body)
	}
	if got := decodeError(t, body).Error.Code; got != CodeBackendUnreachable {
		t.Fatalf("error code %q; want %q", got, CodeBackendUnreachable)
	}
	route := resp.Header.Get(HeaderRoute)
	if strings.Contains(route, "unavailable=") || !strings.Contains(route, "prefill=0") || !strings.Contains(route, " error="+CodeBackendUnreachable) {
		t.Fatalf("%s: %q; want the failed attempt's decision (prefill=0) and error=%s, no unavailable=", HeaderRoute, route, CodeBackendUnreachable)
	}
}
