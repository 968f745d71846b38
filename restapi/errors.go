package restapi

import (
	"errors"
	"net/http"
	"strings"

	"github.com/llbproject/llb/catalog"
	"github.com/llbproject/llb/rule"
)

// Sentinel errors, classified with errors.Is. Their text is LoxiLB's wire
// vocabulary (clients match on "lbrule-exists error", "no-rule error", ...),
// which is why they are not prefixed with the package name.
var (
	// ErrRuleExists: a POST that would change nothing (LoxiLB's 409 for a
	// byte-identical re-POST), or an id already used by another rule.
	ErrRuleExists = catalog.ErrRuleExists
	// ErrImmutable: a replace that changes a field fixed at create time.
	ErrImmutable = rule.ErrImmutable
	// ErrNoRule: no rule has the given key.
	ErrNoRule = catalog.ErrNoRule
	// ErrNoEndpoint: a detach, a view or a controller update names an
	// endpoint the rule does not have.
	ErrNoEndpoint = catalog.ErrNoEndpoint
	// ErrMaintenance: writes are refused until the boot restore finishes.
	ErrMaintenance = catalog.ErrMaintenance
	// ErrStoreUnavailable: the shared rule store (etcd) cannot be reached,
	// or this replica has not read it yet; the change was not made. 503.
	ErrStoreUnavailable = catalog.ErrStoreUnavailable
	// ErrUnauthorized: a missing or wrong bearer token.
	ErrUnauthorized = errors.New("authentication failed: invalid token")
	// ErrBodyTooLarge: a request body over the configured limit.
	ErrBodyTooLarge = errors.New("request body too large")
	// ErrMalformedRequest: a body or path that cannot be parsed at all.
	ErrMalformedRequest = errors.New("malformed request")
)

// Sentinel errors of the data-plane views (KV inventory, controller). A
// Runtime's optional view methods wrap them, and restapi answers by class.
var (
	// ErrNotRunning: the rule is configured but its data plane is not
	// running it (an L4 mode, or a failed apply: GET …/status says why). 404.
	ErrNotRunning = errors.New("rule-not-running error: the data plane is not running this rule")
	// ErrNoInventory: the endpoint mirrors no KV inventory; the wrapping
	// message says why. 404.
	ErrNoInventory = errors.New("kv-inventory not found")
	// ErrStaleEpoch: a controller update whose epoch is older than the one
	// the endpoint has applied. 409.
	ErrStaleEpoch = catalog.ErrStaleEpoch
	// ErrDataPlaneBusy: the data plane did not answer in time, or the rule
	// is being replaced; the request may be retried. 503.
	ErrDataPlaneBusy = errors.New("data plane busy: it did not answer in time")
)

// Class messages of LoxiLB's error body, by HTTP status (handler/common.go).
const (
	msgMalformed    = "Malformed arguments for API call"
	msgUnauthorized = "Invalid authentication credentials"
	msgNotFound     = "Resource not found"
	msgConflict     = "Resource conflict: Resource already exists OR dependency not found"
	msgTooLarge     = "Request entity too large"
	msgMaintenance  = "Maintenance mode"
	msgInternal     = "Internal service error"
	msgNotAllowed   = "Method not allowed"
	msgUnavailable  = "Service unavailable"
	// msgStaleEpoch is the 409 of a controller update older than the
	// applied one (an llb route: LoxiLB's "already exists" text would
	// mislead).
	msgStaleEpoch = "Resource conflict: stale controller epoch"
)

// ResultBody is LoxiLB's success body: {"result":"Success"}.
type ResultBody struct {
	// Result is "Success".
	Result string `json:"result"`
}

// ErrorBody is LoxiLB's Error model as its handlers fill it:
// {"code":N,"message":"<class text>","result":"<detail>"}, where the HTTP
// status equals code, except for schema problems whose code is 6xx and whose
// status is 422. llb adds fields (the JSON paths of the problems), which the
// Error model declares but LoxiLB rarely fills.
type ErrorBody struct {
	// Code is the HTTP status, or a 6xx schema code for 422 answers.
	Code int `json:"code"`
	// Message is the class text, or for 422 the schema problems themselves.
	Message string `json:"message"`
	// Fields are the JSON paths the problems are about.
	Fields []string `json:"fields,omitempty"`
	// Result is the detail: every problem, joined with "; ".
	Result string `json:"result"`
}

// errorResponse maps an error to its HTTP status and body. It never answers
// 500 for a request problem: only errors no class claims are 500, and their
// text is not disclosed beyond what the caller already knows.
func errorResponse(err error) (int, ErrorBody) {
	var ve *rule.ValidationError
	if status, body, ok := aiKeyErrorResponse(err); ok {
		return status, body
	}
	switch {
	case errors.As(err, &ve):
		return validationResponse(ve)
	case errors.Is(err, ErrMalformedRequest):
		return http.StatusBadRequest, ErrorBody{Code: http.StatusBadRequest, Message: msgMalformed, Result: err.Error()}
	case errors.Is(err, ErrNoRule), errors.Is(err, ErrNoEndpoint), errors.Is(err, ErrNotRunning), errors.Is(err, ErrNoInventory):
		return http.StatusNotFound, ErrorBody{Code: http.StatusNotFound, Message: msgNotFound, Result: err.Error()}
	case errors.Is(err, ErrStaleEpoch):
		return http.StatusConflict, ErrorBody{Code: http.StatusConflict, Message: msgStaleEpoch, Result: err.Error()}
	case errors.Is(err, ErrRuleExists), errors.Is(err, ErrImmutable):
		return http.StatusConflict, ErrorBody{Code: http.StatusConflict, Message: msgConflict, Result: err.Error()}
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized, ErrorBody{Code: http.StatusUnauthorized, Message: msgUnauthorized, Result: err.Error()}
	case errors.Is(err, ErrBodyTooLarge):
		return http.StatusRequestEntityTooLarge, ErrorBody{Code: http.StatusRequestEntityTooLarge, Message: msgTooLarge, Result: err.Error()}
	case errors.Is(err, ErrStoreUnavailable):
		return http.StatusServiceUnavailable, ErrorBody{Code: http.StatusServiceUnavailable, Message: msgUnavailable, Result: err.Error()}
	case errors.Is(err, ErrDataPlaneBusy):
		return http.StatusServiceUnavailable, ErrorBody{Code: http.StatusServiceUnavailable, Message: msgUnavailable, Result: err.Error()}
	case errors.Is(err, ErrMaintenance):
		return http.StatusServiceUnavailable, ErrorBody{Code: http.StatusServiceUnavailable, Message: msgMaintenance,
			Result: "configuration writes are rejected until the boot config replay settles"}
	default:
		return http.StatusInternalServerError, ErrorBody{Code: http.StatusInternalServerError, Message: msgInternal, Result: err.Error()}
	}
}

// validationResponse renders every problem at once. For a 422 the code is the
// first schema problem's 6xx code and the message lists the schema problems
// (go-openapi puts the problem text in message); result always lists all.
func validationResponse(ve *rule.ValidationError) (int, ErrorBody) {
	status := ve.Status()
	body := ErrorBody{Code: status, Fields: ve.Fields(), Result: ve.Error()}
	switch status {
	case http.StatusUnprocessableEntity:
		schema := ve.OfStatus(http.StatusUnprocessableEntity)
		body.Code = schema[0].Code
		msgs := make([]string, len(schema))
		for i, p := range schema {
			msgs[i] = p.Msg
		}
		body.Message = strings.Join(msgs, "; ")
	case http.StatusConflict:
		body.Message = msgConflict
	default:
		body.Message = msgMalformed
	}
	return status, body
}
