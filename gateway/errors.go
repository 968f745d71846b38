package gateway

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
)

// Client-facing errors. Every error llb itself answers a client with is a
// *ClientError rendered in the current OpenAI shape
//
//	{"error":{"message":"…","type":"…","param":null|"…","code":"…"}}
//
// For data-plane failures (no endpoint, overload, timeouts, dead backends)
// type and code both carry LoxiLB's error string (loxilb-compat.md §2.3), so
// OpenAI clients and LoxiLB-minded operators read the same thing. Request
// problems use OpenAI's "invalid_request_error" type with a specific code.

// Codes of llb's client errors; the stable machine-readable part.
const (
	// CodeInvalidJSON: the body is not a JSON object (400).
	CodeInvalidJSON = "invalid_json"
	// CodeInvalidField: a field the gateway reads has the wrong type or an
	// out-of-range value (400); Param names the field.
	CodeInvalidField = "invalid_field"
	// CodeMissingField: a required field is absent (400); Param names it.
	CodeMissingField = "missing_field"
	// CodeBodyTooLarge: the body exceeds the rule's limit (413).
	CodeBodyTooLarge = "request_too_large"
	// CodeBodyRead: the body could not be read (400; a timeout or a broken
	// client upload).
	CodeBodyRead = "body_read_error"
	// CodeBodyTimeout: the client took longer than the body read bound
	// to send the request body, or than DefaultReadHeaderTimeout to send
	// its head (408; the connection is closed).
	CodeBodyTimeout = "request_timeout"
	// CodeHeadersTooLarge: the request head exceeds the read buffer (431).
	CodeHeadersTooLarge = "request_headers_too_large"
	// CodeBadRequest: the request is not valid HTTP/1.1 (400; the
	// connection is closed).
	CodeBadRequest = "bad_request"
	// CodeUnknownURL: no such path on this listener (404).
	CodeUnknownURL = "unknown_url"
	// CodeMethodNotAllowed: the path exists with another method (405).
	CodeMethodNotAllowed = "method_not_allowed"

	// CodeBackendUnreachable: no endpoint could be connected to, or the
	// chosen one broke before answering (502).
	CodeBackendUnreachable = "backend_unreachable"
	// CodeDecodeDied: the P/D decode leg died before the client got a byte
	// (502).
	CodeDecodeDied = "pd_decode_backend_died"
	// CodeNoHealthyBackend: a single pool has no available endpoint (503).
	CodeNoHealthyBackend = "no_healthy_backend"
	// CodePoolUnavailable: a P/D rule has no prefill/decode pair and no
	// rescue endpoint (503).
	CodePoolUnavailable = "pd_pool_unavailable"
	// CodeServiceUnavailable: the service is stopping, its router did not
	// answer in time, or the global in-flight valve is closed (503).
	CodeServiceUnavailable = "service_unavailable"
	// CodeBodyBufferFull: the request bodies in flight fill the process's
	// body buffer budget (llbd --body-buffer-bytes); answered 503 with
	// Retry-After before the body is read, the connection closed (HTTP/1.1)
	// or the stream ended (h2c).
	CodeBodyBufferFull = "body_buffer_full"
	// CodeTooManyConnections: the process serves its maximum of client
	// connections (llbd --max-conns); the new connection is answered 503
	// with Retry-After (h2c: GOAWAY) and closed.
	CodeTooManyConnections = "too_many_connections"
	// CodeOverloaded: every eligible endpoint is at its admission cap and
	// the request was shed (429, Retry-After).
	CodeOverloaded = "pd_overloaded"
	// CodePrefillTimeout: the P/D prefill leg exceeded its deadline (504).
	CodePrefillTimeout = "pd_prefill_timeout"
	// CodeParkTimeout: the request waited in an admission queue past its
	// deadline (504).
	CodeParkTimeout = "pd_admission_park_timeout"
	// CodeDecodeTimeout: a streamed P/D decode leg sent no event within
	// the decode bound, and no other pair could take the request (504).
	CodeDecodeTimeout = "pd_decode_timeout"
	// CodeIdleTimeout: the backend sent nothing for timeoutMemberData before
	// the first byte reached the client (504).
	CodeIdleTimeout = "pd_idle_timeout"
	// CodeLoopDetected: the request came back to the llb instance that had
	// already forwarded it (an endpoint that leads back to llb), or passed
	// through more than MaxHops instances (508, never forwarded).
	CodeLoopDetected = "loop_detected"
	// CodeStreamDuration: max_stream_duration_sec passed before the first
	// byte reached the client (504).
	CodeStreamDuration = "max_stream_duration_exceeded"
)

// typeInvalidRequest is OpenAI's type for request problems.
const typeInvalidRequest = "invalid_request_error"

// DefaultRetryAfter is the Retry-After llb sends with 429 and valve 503s.
const DefaultRetryAfter = time.Second

// ClientError is an error answered to the client. It implements error so it
// can travel through the request path and be classified with errors.As.
type ClientError struct {
	// Status is the HTTP status.
	Status int
	// Type is the OpenAI error type: "invalid_request_error" for request
	// problems, LoxiLB's error string for data-plane failures.
	Type string
	// Code is the stable machine code (the Code* constants).
	Code string
	// Param names the offending request field, or "".
	Param string
	// Message is a sentence a person can act on.
	Message string
	// RetryAfter, when positive, is sent as a Retry-After header (seconds,
	// rounded up).
	RetryAfter time.Duration
	// Shape is the body's shape: llb's own (the zero value), or the
	// engine's when llb answers for it (a model no endpoint serves).
	Shape ErrorShape
}

// ErrorShape is the JSON shape of a client error.
type ErrorShape uint8

// Error shapes.
const (
	// ShapeLLB is llb's: OpenAI's, with a string code.
	ShapeLLB ErrorShape = iota
	// ShapeVLLM is vLLM's ErrorResponse: code is the HTTP status.
	ShapeVLLM
	// ShapeAnthropic is Anthropic's, as vLLM's /v1/messages answers:
	// {"type":"error","error":{"type","message"}}.
	ShapeAnthropic
)

// errModelNotServed answers a request whose model no endpoint serves
// with vLLM's own 404 (Anthropic's shape on the Messages API), as the
// engine would have.
func errModelNotServed(kind APIKind, model string) *ClientError {
	e := &ClientError{Status: http.StatusNotFound, Type: "NotFoundError", Code: "model_not_served", Param: "model",
		Message: "The model `" + model + "` does not exist.", Shape: ShapeVLLM}
	if kind == KindMessages || kind == KindCountTokens {
		e.Shape = ShapeAnthropic
	}
	return e
}

// Error returns "code: message".
func (e *ClientError) Error() string { return e.Code + ": " + e.Message }

func requestError(status int, code, param, msg string) *ClientError {
	return &ClientError{Status: status, Type: typeInvalidRequest, Code: code, Param: param, Message: msg}
}

func planeError(status int, code, msg string) *ClientError {
	return &ClientError{Status: status, Type: code, Code: code, Message: msg}
}

// AppendJSON appends the error body in its shape.
func (e *ClientError) AppendJSON(b []byte) []byte {
	switch e.Shape {
	case ShapeVLLM:
		b = append(b, `{"error":{"message":`...)
		b = strconv.AppendQuote(b, e.Message)
		b = append(b, `,"type":`...)
		b = strconv.AppendQuote(b, e.Type)
		b = append(b, `,"param":`...)
		b = strconv.AppendQuote(b, e.Param)
		b = append(b, `,"code":`...)
		b = strconv.AppendInt(b, int64(e.Status), 10)
		return append(b, "}}\n"...)
	case ShapeAnthropic:
		b = append(b, `{"type":"error","error":{"type":`...)
		b = strconv.AppendQuote(b, e.Type)
		b = append(b, `,"message":`...)
		b = strconv.AppendQuote(b, e.Message)
		return append(b, "}}\n"...)
	}
	b = append(b, `{"error":{"message":`...)
	b = strconv.AppendQuote(b, e.Message)
	b = append(b, `,"type":`...)
	b = strconv.AppendQuote(b, e.Type)
	b = append(b, `,"param":`...)
	if e.Param == "" {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendQuote(b, e.Param)
	}
	b = append(b, `,"code":`...)
	b = strconv.AppendQuote(b, e.Code)
	return append(b, "}}\n"...)
}

// write sends the error as r's answer and returns the body length. Headers
// already set on r (X-Llb-Route, Allow) are kept. scratch is a buffer the
// body may be built in.
func (e *ClientError) write(r *fasthttp.Response, scratch []byte) int {
	body := e.AppendJSON(scratch[:0])
	r.ResetBody()
	r.SetStatusCode(e.Status)
	r.Header.SetContentType("application/json")
	if e.RetryAfter > 0 {
		secs := int64((e.RetryAfter + time.Second - 1) / time.Second)
		r.Header.Set("Retry-After", strconv.FormatInt(secs, 10))
	}
	r.SetBody(body)
	return len(body)
}

// errorForDecision maps a decision that did not admit the request to the
// client error it names. It is the one place where ladder outcomes become
// HTTP statuses. Callers pass only decisions with Available() == false.
func errorForDecision(d *ladder.Decision) *ClientError {
	switch d.Admission {
	case ladder.Shed:
		msg := "all prefill endpoints are at capacity; retry later"
		switch d.Trace.Reason(ladder.TierAdmission) {
		case ladder.ReasonSheddable:
			msg = "all prefill endpoints are at capacity and the request's class is sheddable, so it was not queued; retry later"
		case ladder.ReasonDisplaced:
			msg = "all prefill endpoints are at capacity and a request of a higher class took this one's place in the admission queue; retry later"
		}
		code := CodeOverloaded
		if d.Trace.Reason(ladder.TierAdmission) == ladder.ReasonTTFTObjective {
			code, msg = CodeTTFTObjective, "no endpoint is predicted to give the first token within the request's TTFT objective and its class is sheddable, so it was not queued; retry later or with a longer objective"
		}
		e := planeError(http.StatusTooManyRequests, code, msg)
		e.RetryAfter = DefaultRetryAfter
		return e
	case ladder.Refuse:
		e := planeError(http.StatusServiceUnavailable, CodeServiceUnavailable, "the service's total in-flight bound is reached; retry later")
		e.RetryAfter = DefaultRetryAfter
		return e
	case ladder.Park:
		// Route blocks while a request is parked and answers Admit or
		// ErrParkTimeout; a Park decision reaching the gateway is a
		// contract violation, answered as a retriable 503.
		e := planeError(http.StatusServiceUnavailable, CodeServiceUnavailable, "the request was parked but not resumed; retry later")
		e.RetryAfter = DefaultRetryAfter
		return e
	}
	switch d.Unavailable {
	case ladder.ReasonPDPoolUnavailable:
		return planeError(http.StatusServiceUnavailable, CodePoolUnavailable, "no healthy prefill/decode pair and no rescue endpoint is available")
	case ladder.ReasonNoHealthyBackend:
		return planeError(http.StatusServiceUnavailable, CodeNoHealthyBackend, "no healthy endpoint is available")
	}
	return planeError(http.StatusServiceUnavailable, CodeNoHealthyBackend, "the router selected no endpoint ("+d.String()+")")
}

// errorForRouteErr maps an error from Router.Route. ctx errors (the client
// left) are not mapped: the caller checks the request context first.
func errorForRouteErr(err error) *ClientError {
	switch {
	case errors.Is(err, actors.ErrParkTimeout):
		return planeError(http.StatusGatewayTimeout, CodeParkTimeout, "the request waited for admission longer than the park deadline")
	case errors.Is(err, actors.ErrStopped):
		e := planeError(http.StatusServiceUnavailable, CodeServiceUnavailable, "the service is stopping")
		e.RetryAfter = DefaultRetryAfter
		return e
	case errors.Is(err, actors.ErrRouterTimeout):
		e := planeError(http.StatusServiceUnavailable, CodeServiceUnavailable, "the router did not answer in time; retry later")
		e.RetryAfter = DefaultRetryAfter
		return e
	case errors.Is(err, context.DeadlineExceeded):
		return planeError(http.StatusGatewayTimeout, CodeStreamDuration, "the request's deadline passed while it was being routed")
	}
	e := planeError(http.StatusServiceUnavailable, CodeServiceUnavailable, "routing failed: "+err.Error())
	e.RetryAfter = DefaultRetryAfter
	return e
}

// Errors for failures of the upstream legs.
func errBackendUnreachable(detail string) *ClientError {
	return planeError(http.StatusBadGateway, CodeBackendUnreachable, "no backend could serve the request: "+detail)
}

func errDecodeDied(detail string) *ClientError {
	return planeError(http.StatusBadGateway, CodeDecodeDied, "the decode backend failed before sending a response: "+detail)
}

func errPrefillTimeout(d time.Duration) *ClientError {
	return planeError(http.StatusGatewayTimeout, CodePrefillTimeout, "the prefill leg did not finish within "+d.String())
}

func errDecodeTimeout(d time.Duration) *ClientError {
	return planeError(http.StatusGatewayTimeout, CodeDecodeTimeout, "the decode backend sent no event within "+d.String())
}

func errIdleTimeout(d time.Duration) *ClientError {
	return planeError(http.StatusGatewayTimeout, CodeIdleTimeout, "the backend sent nothing for "+d.String())
}

func errStreamDuration(d time.Duration) *ClientError {
	return planeError(http.StatusGatewayTimeout, CodeStreamDuration, "the request exceeded the maximum stream duration of "+d.String())
}
