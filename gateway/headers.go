package gateway

import (
	"net/http"
	"net/textproto"
	"strings"
)

// Header hygiene as in net/http/httputil.ReverseProxy: hop-by-hop headers
// (RFC 9110 §7.6.1, plus the ones a Connection header names) never cross the
// proxy in either direction, and X-Forwarded-* describe llb's own view of
// the client.

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

// removeHopHeaders deletes the hop-by-hop headers from h, including every
// header a Connection header names.
func removeHopHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}

// outboundHeader builds the header of an upstream request from the client's:
// a copy without hop-by-hop headers, Expect (the body is already read),
// Content-Length (set from the body), Forwarded and client-sent
// X-Forwarded-* (unless trusted), then llb's X-Forwarded-For/-Proto/-Host.
func outboundHeader(in *http.Request, trust bool) http.Header {
	h := in.Header.Clone()
	if h == nil {
		h = make(http.Header, 4)
	}
	removeHopHeaders(h)
	delete(h, "Expect")
	delete(h, "Content-Length")
	prior := h["X-Forwarded-For"]
	if !trust {
		delete(h, "Forwarded")
		prior = nil
	}
	vals := make([]string, 3) // one allocation for the three values
	vals[0] = clientIP(in)
	if len(prior) > 0 {
		vals[0] = strings.Join(prior, ", ") + ", " + vals[0]
	}
	h["X-Forwarded-For"] = vals[0:1:1]
	vals[1] = "http"
	if in.TLS != nil {
		vals[1] = "https"
	}
	h["X-Forwarded-Proto"] = vals[1:2:2]
	if in.Host != "" {
		vals[2] = in.Host
		h["X-Forwarded-Host"] = vals[2:3:3]
	} else {
		delete(h, "X-Forwarded-Host")
	}
	return h
}

// copyResponseHeader copies an upstream response header to the client's,
// without hop-by-hop headers. It removes from src in place and shares the
// value slices (src belongs to the upstream response, which the proxy owns
// and no longer reads).
func copyResponseHeader(dst, src http.Header) {
	removeHopHeaders(src)
	for k, vv := range src {
		dst[k] = vv
	}
}
