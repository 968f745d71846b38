package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/valyala/fasthttp"
)

// seenConn is the connection HeaderReceived found.
type seenConn struct{ c net.Conn }

// The HTTP/1.1 server hands HeaderReceived the head of the RequestCtx that
// serves the connection: ctxOfHeader finds that RequestCtx, and from it the
// connection, for every request of every connection served at once. This
// pins the layout the body budget relies on to the fasthttp in go.mod
// (under -race, checkptr also checks the pointer stays inside the
// allocation it came from).
func TestListener_HeaderReceivedSeesItsConnection(t *testing.T) {
	srv := &fasthttp.Server{
		HeaderReceived: func(hdr *fasthttp.RequestHeader) fasthttp.RequestConfig {
			rc := ctxOfHeader(hdr)
			rc.SetUserValue("hook-conn", seenConn{rc.Conn()}) // wrapped: fasthttp closes io.Closer user values
			rc.SetUserValue("hook-head", hdr)
			return fasthttp.RequestConfig{}
		},
		Handler: func(rc *fasthttp.RequestCtx) {
			if rc.UserValue("hook-conn") != (seenConn{rc.Conn()}) || rc.UserValue("hook-head") != &rc.Request.Header {
				rc.SetStatusCode(http.StatusTeapot)
				return
			}
			fmt.Fprintf(rc, "%s", rc.Request.Header.Peek("X-Conn"))
		},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var served sync.WaitGroup
	served.Add(1)
	go func() { // ServeConn per connection, as the Listener does
		defer served.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			served.Add(1)
			go func() { defer served.Done(); _ = srv.ServeConn(c) }()
		}
	}()
	defer served.Wait()
	defer ln.Close()
	var wg sync.WaitGroup
	for conn := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			for i := range 25 {
				if _, err := fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nX-Conn: %d\r\nContent-Length: 2\r\n\r\n{}", conn); err != nil {
					t.Error(err)
					return
				}
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Error(err)
					return
				}
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != fmt.Sprint(conn) {
					t.Errorf("connection %d request %d: %d %q; the hook saw another connection", conn, i, resp.StatusCode, b)
					return
				}
			}
		}()
	}
	wg.Wait()
}
