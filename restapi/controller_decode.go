package restapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/llbproject/llb/rule"
)

// controllerRequest is a decoded POST /config/ai/controller/endpoint body.
// Omitted optional fields are nil.
type controllerRequest struct {
	service string
	ep      int
	state   *string
	weight  *int
	epoch   *uint64
}

// Keys of the controller body.
const (
	ctrlKeyService = "service"
	ctrlKeyEpIdx   = "ep_idx"
	ctrlKeyState   = "state"
	ctrlKeyWeight  = "weight"
	ctrlKeyEpoch   = "epoch"
)

// controllerKeys lists the body's keys, in documentation order.
func controllerKeys() []string {
	return []string{ctrlKeyService, ctrlKeyEpIdx, ctrlKeyState, ctrlKeyWeight, ctrlKeyEpoch}
}

// controllerStates lists the accepted states.
func controllerStates() []string {
	return []string{CtrlActive, CtrlDraining, CtrlDisabled, CtrlNone}
}

// decodeControllerRequest decodes and checks a controller body
// {"service","ep_idx","state","weight","epoch"}, reporting every problem at
// once. Keys match case-insensitively as encoding/json matches them; unlike
// a rule body, an unknown key is refused (a misspelt "wieght" silently
// ignored would leave the endpoint at a weight nobody chose).
//
// Errors: a body that is not one JSON object wraps ErrMalformedRequest;
// field problems are a *ValidationError (422 for type, required, enum and
// range problems; 400 for unknown keys and an update that sets nothing).
func decodeControllerRequest(body []byte) (controllerRequest, error) {
	const want = `a JSON object {"service":"<rule key or id>","ep_idx":N,"state":"ACTIVE|DRAINING|DISABLED|NONE","weight":0-100,"epoch":N}`
	if len(bytes.TrimSpace(body)) == 0 {
		return controllerRequest{}, fmt.Errorf("%w: request body is empty; expected %s", ErrMalformedRequest, want)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return controllerRequest{}, malformedJSON(body, err, dec.InputOffset())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return controllerRequest{}, fmt.Errorf("%w: malformed JSON: unexpected data after the top-level object at %s",
			ErrMalformedRequest, position(body, dec.InputOffset()))
	}
	obj, ok := generic.(map[string]any)
	if !ok {
		return controllerRequest{}, fmt.Errorf("%w: body must be %s, got %s", ErrMalformedRequest, want, describeJSON(generic))
	}

	var c rule.Checker
	vals := make(map[string]any, len(obj))
	names := make([]string, 0, len(obj))
	for k := range obj {
		names = append(names, k)
	}
	slices.Sort(names) // deterministic problem order
	for _, k := range names {
		i := slices.IndexFunc(controllerKeys(), func(f string) bool { return strings.EqualFold(f, k) })
		if i < 0 {
			c.Semantic(k, "unknown key; the body takes %s", strings.Join(controllerKeys(), ", "))
			continue
		}
		f := controllerKeys()[i]
		if _, dup := vals[f]; dup {
			c.Semantic(f, "given twice (keys match case-insensitively)")
			continue
		}
		vals[f] = obj[k]
	}

	var req controllerRequest
	if v, ok := vals[ctrlKeyService]; !ok {
		c.Required(ctrlKeyService, false)
	} else if s, ok := str(&c, ctrlKeyService, v); ok {
		if strings.TrimSpace(s) == "" {
			c.Add(rule.SchemaProblem(ctrlKeyService, rule.CodeRequired, "is required: the rule key (e.g. tcp:10.10.10.254:2020@10.10.10.254) or the rule id"))
		}
		req.service = s
	}
	if v, ok := vals[ctrlKeyEpIdx]; !ok {
		c.Required(ctrlKeyEpIdx, false)
	} else if n, ok := integer(&c, ctrlKeyEpIdx, v); ok && c.Between(ctrlKeyEpIdx, n, 0, rule.MaxInt32) {
		req.ep = int(n)
	}
	if v, ok := vals[ctrlKeyState]; ok {
		if s, ok := str(&c, ctrlKeyState, v); ok {
			if slices.Contains(controllerStates(), s) {
				req.state = &s
			} else {
				c.Add(rule.SchemaProblem(ctrlKeyState, rule.CodeEnum, "should be one of %s, got %q", rule.EnumList(controllerStates()), s))
			}
		}
	}
	if v, ok := vals[ctrlKeyWeight]; ok {
		if n, ok := integer(&c, ctrlKeyWeight, v); ok && c.Between(ctrlKeyWeight, n, 0, 100) {
			w := int(n)
			req.weight = &w
		}
	}
	if v, ok := vals[ctrlKeyEpoch]; ok {
		if e, ok := epoch(&c, v); ok {
			req.epoch = &e
		}
	}
	_, hasState := vals[ctrlKeyState]
	_, hasWeight := vals[ctrlKeyWeight]
	if !hasState && !hasWeight {
		c.Semantic(ctrlKeyState, "the update sets nothing: give state, weight or both")
	}
	if err := c.Err(); err != nil {
		return controllerRequest{}, err
	}
	return req, nil
}

// str checks that v is a JSON string.
func str(c *rule.Checker, field string, v any) (string, bool) {
	s, ok := v.(string)
	if !ok {
		c.Add(rule.SchemaProblem(field, rule.CodeInvalidType, "must be of type string, got %s", describeJSON(v)))
	}
	return s, ok
}

// integer checks that v is a JSON integer within int64.
func integer(c *rule.Checker, field string, v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		c.Add(rule.SchemaProblem(field, rule.CodeInvalidType, "must be of type integer, got %s", describeJSON(v)))
		return 0, false
	}
	i, err := strconv.ParseInt(n.String(), 10, 64)
	if err != nil {
		c.Add(rule.SchemaProblem(field, rule.CodeInvalidType, "must be an integer within int64, got %s", n))
		return 0, false
	}
	return i, true
}

// epoch checks that v is a JSON integer in 0..2^64-1.
func epoch(c *rule.Checker, v any) (uint64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		c.Add(rule.SchemaProblem(ctrlKeyEpoch, rule.CodeInvalidType, "must be of type integer, got %s", describeJSON(v)))
		return 0, false
	}
	s := n.String()
	if strings.HasPrefix(s, "-") {
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			c.Add(rule.SchemaProblem(ctrlKeyEpoch, rule.CodeMin, "should be greater than or equal to 0, got %s", s))
			return 0, false
		}
	}
	e, err := strconv.ParseUint(s, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		c.Add(rule.SchemaProblem(ctrlKeyEpoch, rule.CodeMax, "should be less than or equal to %d, got %s", uint64(math.MaxUint64), s))
		return 0, false
	case err != nil:
		c.Add(rule.SchemaProblem(ctrlKeyEpoch, rule.CodeInvalidType, "must be of type integer, got %s", describeJSON(v)))
		return 0, false
	}
	return e, true
}
