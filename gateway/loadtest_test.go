package gateway

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/ladder"
)

// TestServeForLoadTest serves a fast vLLM-like backend and/or the gateway on
// fixed ports for an external load generator (wrk, hey) and a reference
// proxy (HAProxy) — the req/s comparison of issue 5. It runs only when
// LLB_LOADTEST is set:
//
//	LLB_LOADTEST=backend=127.0.0.1:18000                          # one process
//	LLB_LOADTEST=gateway=127.0.0.1:18001,backend=127.0.0.1:18000  # another
//	LLB_LOADTEST_SECONDS=60 (how long to serve; default 60)
//
// With both keys the gateway proxies to that backend address; a backend is
// started only when "gateway" is absent.
func TestServeForLoadTest(t *testing.T) {
	spec := os.Getenv("LLB_LOADTEST")
	if spec == "" {
		t.Skip("set LLB_LOADTEST to serve for an external load generator")
	}
	kv := map[string]string{}
	for f := range strings.SplitSeq(spec, ",") {
		k, v, _ := strings.Cut(f, "=")
		kv[k] = v
	}
	secs, _ := strconv.Atoi(os.Getenv("LLB_LOADTEST_SECONDS"))
	if secs <= 0 {
		secs = 60
	}
	if gw := kv["gateway"]; gw != "" {
		ap := netip.MustParseAddrPort(gw)
		cfg := singlePool(netip.MustParseAddrPort(kv["backend"]))
		cfg.VIP, cfg.Port = ap.Addr(), ap.Port()
		h, err := NewHandler(cfg, Options{}, Deps{Router: &instantRouter{d: decision(ladder.TierSelector, 0, -1)}})
		if err != nil {
			t.Fatal(err)
		}
		l := NewListener(h)
		if err := l.Start(); err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		t.Logf("gateway on %s → %s", gw, kv["backend"])
	} else {
		ln, err := net.Listen("tcp", kv["backend"])
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(fastCompletion)}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		t.Logf("backend on %s", kv["backend"])
	}
	<-time.After(time.Duration(secs) * time.Second) // serving time, not synchronisation
}

// fastCompletion answers a completion instantly with a small JSON body.
func fastCompletion(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if bytes.Contains(body, []byte(`"stream":true`)) {
		w.Header().Set("Content-Type", "text/event-stream")
		for range 8 {
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"text\":\"tok\"}]}\n\n")
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(benchCompletion)))
	_, _ = io.WriteString(w, benchCompletion)
}
