package worker

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
)

// Sentinel errors; every error the package returns wraps one of them.
var (
	// ErrConfig reports an invalid Config.
	ErrConfig = errors.New("worker: invalid configuration")
	// ErrListen reports a socket the worker could not bind.
	ErrListen = errors.New("worker: cannot listen")
	// ErrStopped reports a request that was in flight when the worker
	// stopped or crashed.
	ErrStopped = errors.New("worker: stopped")
)

// apiError is vLLM's current error body: {"error": {...}}.
type apiError struct {
	Error apiErrorBody `json:"error"`
}

// apiErrorBody is the inner object.
type apiErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// errorType is vLLM's error type name for a status.
func errorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusRequestEntityTooLarge:
		return "RequestEntityTooLarge"
	case http.StatusMethodNotAllowed:
		return "MethodNotAllowed"
	case http.StatusConflict:
		return "ConflictError"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailableError"
	}
	if status >= 500 {
		return "InternalServerError"
	}
	return "BadRequestError"
}

// writeError writes vLLM's error shape with status.
func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{Error: apiErrorBody{Message: msg, Type: errorType(status), Code: status}})
}

// flatError is SGLang's and TensorRT-LLM's ErrorResponse.
type flatError struct {
	Object  string  `json:"object"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// writeReqError writes a client error in the worker's dialect: vLLM's
// {"error": {...}}, SGLang's and TensorRT-LLM's flat ErrorResponse, or
// TensorRT-LLM's request-validation {"error": "..."}.
func (w *Worker) writeReqError(rw http.ResponseWriter, e *reqError) {
	switch {
	case e.raw:
		writeJSON(rw, e.status, map[string]string{"error": e.msg})
	case e.anthropic:
		writeJSON(rw, e.status, map[string]any{"type": "error", "error": map[string]string{"type": errorType(e.status), "message": e.msg}})
	case w.cfg.Dialect == DialectVLLM:
		writeError(rw, e.status, e.msg)
	default:
		writeJSON(rw, e.status, flatError{Object: "error", Message: e.msg, Type: errorType(e.status), Code: e.status})
	}
}

// writeJSON writes v as a JSON response.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		body = []byte(`{"error":{"message":"response encoding failed","type":"InternalServerError","param":null,"code":500}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body) // a client that went away is not our error
}
