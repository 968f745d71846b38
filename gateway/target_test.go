package gateway

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
)

func TestBadTargetByte(t *testing.T) {
	tests := []struct {
		give string
		want int
	}{
		{"/v1/models", -1},
		{"/v1/completions?a=b&c=%20d", -1},
		{"http://example.com/v1/models", -1},
		{"*", -1},
		{"/v1/models?a=b c", 14},
		{"/v1/models?a=\xff\xfe", 13},
		{"/v1/models#frag", 10},
		{"/v1/mo\tdels", 6},
		{"/v1/models\x7f", 10},
	}
	for _, tt := range tests {
		if got := badTargetByte([]byte(tt.give)); got != tt.want {
			t.Errorf("badTargetByte(%q) = %d; want %d", tt.give, got, tt.want)
		}
	}
}

// A target an HTTP/1.1 request line cannot carry is refused 400
// bad_request on both front ends, and never reaches an endpoint (h2c
// copied a :path with a space, raw 0xFF 0xFE or a fragment into the
// upstream request line; issue 23).
func TestListener_RefusesTargetsARequestLineCannotCarry(t *testing.T) {
	be := newFakeVLLM(t)
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	base, _ := startGateway(t, singlePool(be.addr()), Deps{Router: fr})
	host := strings.TrimPrefix(base, "http://")
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &protos}
	t.Cleanup(tr.CloseIdleConnections)
	h2 := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for _, target := range []string{"/v1/models?a=b c", "/v1/models?a=\xff\xfe", "/v1/models#frag", "/v1/completions#frag"} {
		t.Run("h2c "+target, func(t *testing.T) {
			// Opaque carries the target to :path byte for byte.
			req := &http.Request{Method: http.MethodGet, URL: &url.URL{Scheme: "http", Host: host, Opaque: target}, Host: host, Header: http.Header{}}
			resp, err := h2.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if e := decodeError(t, body); resp.ProtoMajor != 2 || resp.StatusCode != http.StatusBadRequest || e.Error.Code != CodeBadRequest {
				t.Errorf("HTTP/%d %d %s; want HTTP/2 400 %s", resp.ProtoMajor, resp.StatusCode, body, CodeBadRequest)
			}
		})
	}
	for _, target := range []string{"/v1/models?a=\xff\xfe", "/v1/models#frag"} {
		t.Run("HTTP/1.1 "+target, func(t *testing.T) {
			resp, body, _ := rawExchange(t, rawConn(t, base), "GET "+target+" HTTP/1.1\r\nHost: x\r\n\r\n")
			if e := decodeError(t, body); resp.StatusCode != http.StatusBadRequest || e.Error.Code != CodeBadRequest || !resp.Close {
				t.Errorf("%d %s (close %v); want 400 %s and the connection closed", resp.StatusCode, body, resp.Close, CodeBadRequest)
			}
		})
	}
	if reqs := be.requests(); len(reqs) != 0 {
		t.Errorf("the backend saw %d requests (first %q); want none", len(reqs), reqs[0].Path)
	}
}
