package lifecycle

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"

	"github.com/llbproject/llb/rule"
)

func modelsServer(t *testing.T, body *atomic.Value) netip.AddrPort {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := body.Load().(string)
		if b == "" {
			http.Error(w, "loading", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte(b))
	}))
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(srv.Listener.Addr().String())
}

func TestModelCatalog_LearnsEachEndpointsModelsAndKeepsThemThroughOutages(t *testing.T) {
	var a, b atomic.Value
	a.Store(`{"object":"list","data":[
		{"id":"base","object":"model","root":"base","parent":null},
		{"id":"sql-lora","object":"model","root":"/adapters/sql","parent":"base"},
		{"id":"self","parent":"self"}]}`)
	b.Store(`{"object":"list","data":[{"id":"base","object":"model","root":"base"},{"id":"other","object":"model"}]}`)
	dead := netip.MustParseAddrPort("127.0.0.1:1") // nothing listens on port 1
	c := newModelCatalog([]rule.CompiledEndpoint{{Addr: modelsServer(t, &a)}, {Addr: dead}, {Addr: modelsServer(t, &b)}}, http.DefaultClient)
	if got := c.loraOf("sql-lora"); got != "" || c.modelsBody() != nil {
		t.Fatalf("before a refresh: adapter %q body %s; want nothing known", got, c.modelsBody())
	}
	c.refresh(context.Background())
	for _, tt := range []struct{ give, want string }{{"sql-lora", "sql-lora"}, {"base", ""}, {"self", ""}, {"unknown", ""}} {
		if got := c.loraOf(tt.give); got != tt.want {
			t.Errorf("loraOf(%q) = %q; want %q", tt.give, got, tt.want)
		}
	}
	s := c.served()
	if set, _ := s.Eligible("other", 3); set != 0b110 {
		t.Errorf("other on %03b; want endpoint 2 and the unread endpoint 1", set)
	}
	var union struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(c.modelsBody(), &union); err != nil {
		t.Fatalf("union %s: %v", c.modelsBody(), err)
	}
	var ids []string
	for _, d := range union.Data {
		ids = append(ids, d.ID)
	}
	if want := []string{"base", "sql-lora", "self", "other"}; len(ids) != len(want) || ids[0] != want[0] || ids[3] != want[3] {
		t.Errorf("union ids %v; want %v (each once, endpoint order)", ids, want)
	}
	a.Store("")
	c.refresh(context.Background())
	if got := c.loraOf("sql-lora"); got != "sql-lora" {
		t.Fatalf("after a failed refresh: %q; want the adapter still known", got)
	}
	a.Store(`{"object":"list","data":[{"id":"base","object":"model"}]}`)
	c.refresh(context.Background())
	if got := c.loraOf("sql-lora"); got != "" {
		t.Errorf("after the adapter was unloaded: %q; want it gone", got)
	}
}
