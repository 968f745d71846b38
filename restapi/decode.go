package restapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/llbproject/llb/rule"
)

// DecodeEntry decodes a POST body into a LoadbalanceEntry with LoxiLB's
// decoding behaviour (plain encoding/json: case-insensitive keys, significant
// underscores, unknown keys ignored).
//
// Errors: a body that is not one well-formed JSON object wraps
// ErrMalformedRequest and names the byte offset; values of the wrong JSON type
// give a *ValidationError listing every one of them (422), not only the first
// as encoding/json would.
func DecodeEntry(body []byte) (*rule.LoadbalanceEntry, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, fmt.Errorf("%w: request body is empty; expected a JSON LoadbalanceEntry object", ErrMalformedRequest)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, malformedJSON(body, err, dec.InputOffset())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: malformed JSON: unexpected data after the top-level object at %s",
			ErrMalformedRequest, position(body, dec.InputOffset()))
	}
	if _, ok := generic.(map[string]any); !ok {
		return nil, fmt.Errorf("%w: body must be a JSON object (a LoadbalanceEntry), got %s",
			ErrMalformedRequest, describeJSON(generic))
	}
	var problems []rule.Problem
	checkShape(generic, entryShape, "", &problems)
	if len(problems) > 0 {
		return nil, &rule.ValidationError{Problems: problems}
	}
	var e rule.LoadbalanceEntry
	if err := json.Unmarshal(body, &e); err != nil {
		// Unreachable when checkShape and encoding/json agree; answered as a
		// schema problem rather than a 500 if they ever do not.
		return nil, &rule.ValidationError{Problems: []rule.Problem{rule.SchemaProblem("body", rule.CodeInvalidType, "does not decode: %v", err)}}
	}
	return &e, nil
}

// malformedJSON describes a syntax error with its position.
func malformedJSON(body []byte, err error, offset int64) error {
	var syn *json.SyntaxError
	if errors.As(err, &syn) {
		return fmt.Errorf("%w: malformed JSON at %s: %v", ErrMalformedRequest, position(body, syn.Offset), err)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: malformed JSON: the body ends early, at %s", ErrMalformedRequest, position(body, offset))
	}
	return fmt.Errorf("%w: malformed JSON at %s: %v", ErrMalformedRequest, position(body, offset), err)
}

// position renders a byte offset (as encoding/json counts it: the bytes read
// up to and including the offending one) with its line and column.
func position(body []byte, offset int64) string {
	offset = min(max(offset, 0), int64(len(body)))
	line := 1 + bytes.Count(body[:offset], []byte("\n"))
	col := offset - int64(bytes.LastIndexByte(body[:offset], '\n')+1)
	return fmt.Sprintf("byte offset %d (line %d, column %d)", offset, line, col)
}
