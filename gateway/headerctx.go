package gateway

import (
	"unsafe"

	"github.com/valyala/fasthttp"
)

// fasthttp's Server.HeaderReceived hook is the one point between a
// request's head and its body, but it is handed the head alone: not the
// connection, which the body budget must charge (and release when the
// connection goes idle or closes, whatever happens to the body read). The
// head it is handed is always &ctx.Request.Header of the connection's
// RequestCtx (fasthttp server.go, serveConn: the hook's one call site), so
// the RequestCtx, and from it the connection, is found at a fixed offset
// before it.
//
// Invariant: only a *fasthttp.RequestHeader the HTTP/1.1 server passes to
// HeaderReceived goes through ctxOfHeader. TestListener_HeaderReceivedSeesItsConnection
// proves the layout against the fasthttp version in go.mod (and the race
// detector's checkptr that the result stays inside the header's own
// allocation); a fasthttp upgrade that broke it fails there.

// headerOffset is the offset of Request.Header inside a RequestCtx.
const headerOffset = unsafe.Offsetof((*fasthttp.RequestCtx)(nil).Request) + unsafe.Offsetof((*fasthttp.Request)(nil).Header)

// ctxOfHeader returns the RequestCtx whose Request.Header is hdr.
func ctxOfHeader(hdr *fasthttp.RequestHeader) *fasthttp.RequestCtx {
	return (*fasthttp.RequestCtx)(unsafe.Add(unsafe.Pointer(hdr), -int(headerOffset)))
}
