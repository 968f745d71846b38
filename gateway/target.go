package gateway

import (
	"net/http"
	"strconv"
)

// Request targets. The target a client sent goes upstream as is, in the
// request line llb writes (headers.go), so it must be one an HTTP/1.1
// request line can carry: origin-form (or absolute-form, which the
// HTTP/1.1 front end turns into origin-form), visible ASCII only, no
// fragment (RFC 9112 §3.2, RFC 9110 §4.1). The HTTP/1.1 server refuses a
// space or a control byte while parsing the request line; h2c's :path
// arrives in HPACK, where any byte can be sent, and raw bytes above 0x7E
// and a "#fragment" pass both servers. validTarget refuses all of them the
// same way on both front ends.

// badTargetByte returns the index of the first byte of target that an
// HTTP/1.1 request target cannot carry — a control byte, a space, DEL, a
// byte above 0x7E, or "#" (a fragment is the client's own, never sent) —
// or -1 when there is none.
func badTargetByte(target []byte) int {
	for i, c := range target {
		if c <= ' ' || c >= 0x7f || c == '#' {
			return i
		}
	}
	return -1
}

// refuseBadTarget answers 400 bad_request, and reports true, when the
// request's target is not one llb can forward (see badTargetByte). The
// HTTP/1.1 connection is closed after the answer, as after any request
// that could not be parsed; an h2c stream ends with the answer.
func (x *exchange) refuseBadTarget() bool {
	target := x.in.Header.RequestURI()
	i := badTargetByte(target)
	if i < 0 {
		return false
	}
	x.api = "unknown"
	if x.cc != nil {
		x.out.SetConnectionClose()
	}
	x.fail(requestError(http.StatusBadRequest, CodeBadRequest, "",
		"the request target has byte "+strconv.Quote(string(target[i:i+1]))+" at offset "+strconv.Itoa(i)+
			"; a target is visible ASCII without a space or a #fragment (percent-encode other bytes)"))
	return true
}
