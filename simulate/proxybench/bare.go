package proxybench

import (
	"bytes"
	"fmt"
	"net"
	"time"

	"github.com/valyala/fasthttp"
)

// The "bare fasthttp" path: the smallest Go reverse proxy that does what a
// router's data plane must — read the whole body and check it names a model
// and a prompt, forward it, relay the answer — on fasthttp's server and
// HostClient, with none of llbd's bounds, logs, metrics or cancellation. It
// runs in this process beside the data plane alone and is the floor a Go
// proxy reaches on this machine: the data plane's distance to it is llbd's
// own cost, its distance to HAProxy the runtime's.

// hopHeaders are the hop-by-hop headers a proxy does not forward.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// bareProxy is a running bare fasthttp proxy.
type bareProxy struct {
	srv *fasthttp.Server
	ln  net.Listener
}

// startBare serves the bare proxy on addr in front of backend.
func startBare(addr, backend string) (*bareProxy, error) {
	hc := &fasthttp.HostClient{
		Addr:         backend,
		MaxConns:     8192,
		ReadTimeout:  60 * time.Second,
		WriteTimeout: 60 * time.Second,
		// A keep-alive connection the backend closed fails the POST sent on
		// it before any byte came back: send it again on a new one.
		RetryIfErr: func(*fasthttp.Request, int, error) (bool, bool) { return true, true },
	}
	srv := &fasthttp.Server{
		NoDefaultServerHeader: true,
		NoDefaultContentType:  true,
		Handler: func(rc *fasthttp.RequestCtx) {
			body := rc.PostBody()
			if !bytes.Contains(body, []byte(`"model"`)) || !bytes.Contains(body, []byte(`"prompt"`)) {
				rc.Error(`{"error":"bad request"}`, fasthttp.StatusBadRequest)
				return
			}
			for _, h := range hopHeaders {
				rc.Request.Header.Del(h)
			}
			if err := hc.Do(&rc.Request, &rc.Response); err != nil {
				rc.Error(`{"error":"bad gateway"}`, fasthttp.StatusBadGateway)
				return
			}
			for _, h := range hopHeaders {
				rc.Response.Header.Del(h)
			}
		},
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("bare fasthttp proxy: %w: %w", ErrTool, err)
	}
	go func() { _ = srv.Serve(ln) }()
	return &bareProxy{srv: srv, ln: ln}, nil
}

func (b *bareProxy) close() { _ = b.srv.Shutdown() }
