package lifecycle

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/llbproject/llb/rule"
)

func TestLoRACatalog_LearnsAdaptersFromModelsAndKeepsThemThroughOutages(t *testing.T) {
	var down atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "loading", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(`{"object":"list","data":[
			{"id":"base","object":"model","root":"base","parent":null},
			{"id":"sql-lora","object":"model","root":"/adapters/sql","parent":"base"},
			{"id":"self","parent":"self"}]}`))
	}))
	defer srv.Close()
	dead := netip.MustParseAddrPort("127.0.0.1:1") // nothing listens on port 1
	c := newLoRACatalog([]rule.CompiledEndpoint{{Addr: dead}, {Addr: netip.MustParseAddrPort(srv.Listener.Addr().String())}}, srv.Client())
	if got := c.loraOf("sql-lora"); got != "" {
		t.Fatalf("before a refresh: %q; want no adapters known", got)
	}
	c.refresh(context.Background()) // the first engine is down: the second answers
	tests := []struct{ give, want string }{{"sql-lora", "sql-lora"}, {"base", ""}, {"self", ""}, {"unknown", ""}}
	for _, tt := range tests {
		if got := c.loraOf(tt.give); got != tt.want {
			t.Errorf("loraOf(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
	down.Store(true)
	c.refresh(context.Background())
	if got := c.loraOf("sql-lora"); got != "sql-lora" {
		t.Fatalf("after a failed refresh: %q; want the adapter still known", got)
	}
}
