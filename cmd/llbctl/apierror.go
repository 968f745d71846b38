package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/llbproject/llb/restapi"
)

// maxRawErrorBytes bounds how much of a non-JSON error body is echoed.
const maxRawErrorBytes = 512

// apiError is a non-2xx answer from llbd (exit 1). It echoes the server's
// LoxiLB error body: the class message and the detailed result.
type apiError struct {
	// op names what llbctl was doing, e.g. "create lb".
	op string
	// status is the HTTP status.
	status int
	// body is the decoded error body; zero when the body was not one.
	body restapi.ErrorBody
	// raw is the body when it was not LoxiLB's error shape.
	raw string
	// notFound replaces the message of a 404 with an empty body (GET by
	// key/id, /status, /stats answer so on a miss).
	notFound string
	// hint suggests a fix; may be empty.
	hint string
}

// Error renders "op: llbd answered <status> <message>: <result>", one
// problem per line when llbd reported several.
func (e *apiError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: llbd answered %d", e.op, e.status)
	switch {
	case e.body.Message != "" || e.body.Result != "":
		msg := e.body.Message
		r := e.body.Result
		problems := []string{r}
		if len(e.body.Fields) > 1 {
			problems = strings.Split(r, "; ")
		}
		if msg == "" || (len(problems) > 1 && strings.Contains(r, msg)) {
			// A 422's message is its first schema problem, listed below.
			msg = http.StatusText(e.status)
		}
		b.WriteString(" " + msg)
		if r != "" && r != msg {
			if len(problems) == 1 {
				b.WriteString(": " + problems[0])
			} else {
				b.WriteString(":")
				for _, p := range problems {
					b.WriteString("\n  - " + p)
				}
			}
		}
	case e.raw != "":
		fmt.Fprintf(&b, " %s: %s", http.StatusText(e.status), e.raw)
	case e.status == http.StatusNotFound && e.notFound != "":
		b.WriteString(": " + e.notFound)
	default:
		b.WriteString(" " + http.StatusText(e.status))
	}
	if e.hint != "" {
		b.WriteString("\n  hint: " + e.hint)
	}
	return b.String()
}

// notFoundError is a request llbctl did not send because what it names does
// not exist (exit 1, as llbd's own 404s).
type notFoundError struct{ msg string }

// Error is the sentence.
func (e *notFoundError) Error() string { return e.msg }

// answerError is a 2xx answer llbctl cannot read (exit 1).
type answerError struct{ err error }

// Error is the underlying message.
func (e *answerError) Error() string { return e.err.Error() }

// Unwrap returns the underlying error.
func (e *answerError) Unwrap() error { return e.err }

// errorOpts tune how a non-2xx answer is explained.
type errorOpts struct {
	// notFound is the sentence for a 404 with an empty body.
	notFound string
	// noRoute is the hint when llbd does not serve the route at all.
	noRoute string
	// hint404 is the hint for any other 404 with a body.
	hint404 string
}

// check returns nil for a 2xx answer and an *apiError otherwise.
func check(op string, res *response, o errorOpts) error {
	if res.status >= 200 && res.status < 300 {
		return nil
	}
	e := &apiError{op: op, status: res.status, notFound: o.notFound}
	if len(res.body) > 0 {
		if err := json.Unmarshal(res.body, &e.body); err != nil || (e.body.Message == "" && e.body.Result == "") {
			e.body = restapi.ErrorBody{}
			e.raw = clip(strings.TrimSpace(string(res.body)), maxRawErrorBytes)
		}
	}
	switch {
	case res.status == http.StatusNotFound && strings.HasPrefix(e.body.Result, "no route "):
		e.hint = o.noRoute
		if e.hint == "" {
			e.hint = "this llbd does not serve that route; it may be older than llbctl " + version
		}
	case res.status == http.StatusNotFound && len(res.body) > 0:
		e.hint = o.hint404
	case res.status == http.StatusUnauthorized:
		e.hint = "llbd wants a bearer token: check --token-file or " + envTokenFile
	case res.status == http.StatusServiceUnavailable && res.header.Get("Retry-After") != "" && e.body.Message == "Maintenance mode":
		e.hint = "llbd is not accepting writes yet; retry in " + res.header.Get("Retry-After") + " s"
	case res.status == http.StatusServiceUnavailable && res.header.Get("Retry-After") != "":
		e.hint = "retry in " + res.header.Get("Retry-After") + " s"
	case res.status == http.StatusRequestEntityTooLarge:
		e.hint = "the request is larger than llbd's --body-limit"
	}
	return e
}

// clip shortens s to at most n bytes on a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
