package gateway

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"strconv"

	"github.com/valyala/fasthttp"
)

// Header hygiene as in net/http/httputil.ReverseProxy: hop-by-hop headers
// (RFC 9110 §7.6.1, plus the ones a Connection header names) never cross the
// proxy in either direction, and X-Forwarded-* describe llb's own view of
// the client. Request heads are written straight into a byte buffer from
// the client's parsed header; no header map is built.

// Loop detection. Every request llb forwards (and every HTTP probe) carries
// X-Llb-Hop, the list of llb instances it passed through, this one's id
// appended; a request that arrives with this instance's id in the list has
// looped back (an endpoint that is, through a NAT, a VIP or another llb, llb
// itself) and is answered 508 Loop Detected, never forwarded again. A list
// longer than MaxHops is refused the same way, so a loop through instances
// that each see the request once still ends.
const (
	// HeaderHop lists the llb instances a request passed through.
	HeaderHop = "X-Llb-Hop"
	// MaxHops is the most llb instances a request may pass through.
	MaxHops = 8
)

// NewHopID mints an instance id for the hop header (128 random bits).
func NewHopID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail
	return hex.EncodeToString(b[:])
}

// looped reports whether a request with header h has passed through the
// instance id already, or through more than MaxHops instances.
func looped(h *fasthttp.RequestHeader, id string) bool {
	if len(h.Peek(HeaderHop)) == 0 {
		return false
	}
	n := 0
	for _, v := range h.PeekAll(HeaderHop) {
		for tok := range listItems(v) {
			if n++; string(tok) == id || n > MaxHops {
				return true
			}
		}
	}
	return false
}

// listItems yields the items of a comma-separated header value, trimmed
// (empty ones too).
func listItems(v []byte) func(yield func([]byte) bool) {
	return func(yield func([]byte) bool) {
		for len(v) > 0 {
			var tok []byte
			tok, v = nextItem(v)
			if !yield(tok) {
				return
			}
		}
	}
}

// nextItem splits the first item (trimmed) off a comma-separated header
// value. Where the value is a buffer of the caller's stack, a loop over it
// keeps the buffer there: listItems' closure would move it to the heap.
func nextItem(v []byte) (item, rest []byte) {
	if i := bytes.IndexByte(v, ','); i >= 0 {
		return bytes.TrimSpace(v[:i]), v[i+1:]
	}
	return bytes.TrimSpace(v), nil
}

// hopHeaders are removed from every forwarded request and response.
var hopHeaders = [...]string{
	"Connection",
	"Proxy-Connection", // non-standard, sent by some clients
	"Keep-Alive",
	"Proxy-Authenticate",
	"Proxy-Authorization",
	"Te",      // canonicalised "TE"
	"Trailer", // canonicalised "Trailers"… the request's own announcement
	"Transfer-Encoding",
	"Upgrade",
}

// legHeaders names the client headers a leg sets itself.
type legHeaders uint8

const (
	// legSetsRequestID: the leg sends its own X-Request-Id (P/D legs).
	legSetsRequestID legHeaders = 1 << iota
	// legSetsJSON: the leg sends Content-Type: application/json and no
	// Accept-Encoding, because the gateway reads the answer itself (the P/D
	// prefill leg).
	legSetsJSON
)

// skipOutbound reports whether the client header k is not forwarded as
// is: hop-by-hop headers, framing (Host, Content-Length, Expect), the
// X-Forwarded-* and X-Llb-Hop llb writes itself, Forwarded and X-Real-IP
// unless trusted, and the headers the leg sets (own).
func skipOutbound(k []byte, own legHeaders, trust bool) bool {
	switch string(k) {
	case "Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Host", "Content-Length", "Expect",
		"X-Forwarded-For", "X-Forwarded-Proto", "X-Forwarded-Host", HeaderHop:
		return true
	case "Forwarded", "X-Real-Ip":
		return !trust
	case "X-Request-Id":
		return own&legSetsRequestID != 0
	case "Content-Type", "Accept-Encoding":
		return own&legSetsJSON != 0
	}
	return false
}

// connectionNames reports whether name is listed in one of the Connection
// header values conns (those headers are hop-by-hop too).
func connectionNames(conns [][]byte, name []byte) bool {
	for _, v := range conns {
		for tok := range listItems(v) {
			if bytes.EqualFold(tok, name) {
				return true
			}
		}
	}
	return false
}

// appendRequestHead appends the head of leg lg's request carrying a body
// of bodyLen bytes: the client's method and URI, Host set to the leg's
// endpoint, the client's end-to-end headers, llb's X-Forwarded-For/-Proto/
// -Host and X-Real-IP (a trusted client's own X-Real-IP is kept),
// X-Llb-Hop with this instance appended, the leg's own headers and
// Content-Length.
func (x *exchange) appendRequestHead(dst []byte, lg *leg, bodyLen int) []byte {
	in := &x.in.Header
	addr, own := x.h.addrs[lg.ep], lg.own
	trust := x.h.opts.TrustForwardedHeaders
	dst = append(dst, in.Method()...)
	dst = append(dst, ' ')
	if uri := in.RequestURI(); len(uri) > 0 && uri[0] == '/' {
		dst = append(dst, uri...)
	} else {
		dst = append(dst, x.in.URI().RequestURI()...) // absolute-form → origin-form
	}
	dst = append(dst, " HTTP/1.1\r\nHost: "...)
	dst = append(dst, addr...)
	dst = append(dst, "\r\n"...)
	var conns [][]byte
	if len(in.Peek("Connection")) > 0 {
		conns = in.PeekAll("Connection")
	}
	for k, v := range in.All() {
		if skipOutbound(k, own, trust) || (conns != nil && connectionNames(conns, k)) || x.key != nil && isKeyHeader(k, v) {
			continue
		}
		dst = appendHeaderLine(dst, k, v)
	}
	dst = append(dst, "X-Forwarded-For: "...)
	if trust {
		for _, v := range in.PeekAll("X-Forwarded-For") {
			dst = append(dst, v...)
			dst = append(dst, ", "...)
		}
	}
	dst = append(dst, x.ip...)
	dst = append(dst, "\r\nX-Forwarded-Proto: "...)
	if x.tls {
		dst = append(dst, "https"...)
	} else {
		dst = append(dst, "http"...)
	}
	dst = append(dst, "\r\n"...)
	if host := in.Host(); len(host) > 0 {
		dst = appendHeaderLine(dst, []byte("X-Forwarded-Host"), host)
	}
	if !trust || len(in.Peek("X-Real-Ip")) == 0 {
		dst = append(dst, "X-Real-Ip: "...)
		dst = append(dst, x.ip...)
		dst = append(dst, "\r\n"...)
	}
	dst = append(dst, HeaderHop+": "...)
	if len(in.Peek(HeaderHop)) > 0 {
		for _, v := range in.PeekAll(HeaderHop) {
			dst = append(dst, v...)
			dst = append(dst, ", "...)
		}
	}
	dst = append(dst, x.h.hopID...)
	dst = append(dst, "\r\n"...)
	if own&legSetsRequestID != 0 {
		dst = append(dst, "X-Request-Id: "...)
		dst = append(dst, lg.id...)
		dst = append(dst, "\r\n"...)
	}
	if own&legSetsJSON != 0 {
		dst = append(dst, "Content-Type: application/json\r\n"...)
	}
	if bodyLen > 0 || !in.IsGet() && !in.IsHead() {
		dst = append(dst, "Content-Length: "...)
		dst = strconv.AppendInt(dst, int64(bodyLen), 10)
		dst = append(dst, "\r\n"...)
	}
	return append(dst, "\r\n"...)
}

func appendHeaderLine(dst, k, v []byte) []byte {
	dst = append(dst, k...)
	dst = append(dst, ": "...)
	dst = append(dst, v...)
	return append(dst, "\r\n"...)
}

// stripResponseHop removes the hop-by-hop headers of an upstream response
// (those a Connection header names first) before it is relayed, and keeps
// the backend's Connection: close from closing the client's connection. One
// pass finds which are present; most responses carry only Connection.
func stripResponseHop(h *fasthttp.ResponseHeader) {
	var found [len(hopHeaders)]bool
	present, named := false, false
	for k := range h.All() {
		for i, hk := range hopHeaders {
			if string(k) == hk {
				found[i], present = true, true
				named = named || i == 0
			}
		}
	}
	if !present {
		h.ResetConnectionClose()
		return
	}
	if named {
		var stack [256]byte
		names := stack[:0]
		for _, v := range h.PeekAll("Connection") {
			names = append(append(names, v...), ',')
		}
		for rest := names; len(rest) > 0; {
			var tok []byte
			tok, rest = nextItem(rest)
			if len(tok) > 0 && !bytes.EqualFold(tok, []byte("close")) && !bytes.EqualFold(tok, []byte("keep-alive")) {
				h.DelBytes(tok)
			}
		}
	}
	for i, k := range hopHeaders {
		if found[i] {
			h.Del(k)
		}
	}
	h.ResetConnectionClose()
}
