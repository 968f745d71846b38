package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/textproto"
	"strings"
)

// Header hygiene as in net/http/httputil.ReverseProxy: hop-by-hop headers
// (RFC 9110 §7.6.1, plus the ones a Connection header names) never cross the
// proxy in either direction, and X-Forwarded-* describe llb's own view of
// the client.

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

// newHopID mints an instance id for the hop header (128 random bits).
func newHopID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand does not fail
	return hex.EncodeToString(b[:])
}

// looped reports whether a request carrying hdr has passed through the
// instance id already, or through more than MaxHops instances.
func looped(hdr http.Header, id string) bool {
	n := 0
	for _, v := range hdr[HeaderHop] {
		for f := range strings.SplitSeq(v, ",") {
			n++
			if textproto.TrimString(f) == id || n > MaxHops {
				return true
			}
		}
	}
	return false
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
// X-Forwarded-* and X-Real-IP (unless trusted), then llb's
// X-Forwarded-For/-Proto/-Host and X-Real-IP, and X-Llb-Hop with hopID
// appended.
func outboundHeader(in *http.Request, trust bool, hopID string) http.Header {
	h := in.Header.Clone()
	if h == nil {
		h = make(http.Header, 4)
	}
	removeHopHeaders(h)
	delete(h, "Expect")
	delete(h, "Content-Length")
	prior := h["X-Forwarded-For"]
	if !trust || len(h["X-Real-Ip"]) == 0 {
		// X-Real-IP, like X-Forwarded-For, is llb's view of the client
		// unless the client's own headers are trusted.
		h["X-Real-Ip"] = []string{clientIP(in)}
	}
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
	if prior := h[HeaderHop]; len(prior) > 0 {
		h[HeaderHop] = []string{strings.Join(prior, ", ") + ", " + hopID}
	} else {
		h[HeaderHop] = []string{hopID}
	}
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
