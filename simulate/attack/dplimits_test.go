package attack

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/worker"
)

func TestJudge_ProcessBoundOracles(t *testing.T) {
	json := http.Header{"Content-Type": {"application/json"}}
	ok200 := rawResponse{status: 200, header: json, body: []byte(`{}`), at: 3 * time.Second}
	full := rawResponse{status: 503, header: http.Header{"Retry-After": {"1"}}, body: []byte(`{"error":{"code":"body_buffer_full"}}`), at: time.Millisecond}
	many := rawResponse{status: 503, header: http.Header{"Retry-After": {"1"}}, body: []byte(`{"error":{"code":"too_many_connections"}}`), at: time.Millisecond}
	own404 := rawResponse{status: 404, header: json, body: []byte(`{"error":{"code":"unknown_url"}}`)}
	late := full
	late.at = dpBudgetHold + time.Second
	noRetry := full
	noRetry.header = http.Header{}
	tests := []struct {
		name  string
		judge func(rawResult) Outcome
		res   rawResult
		want  Verdict
	}{
		{"budget: served", judgeBudget, rawResult{responses: []rawResponse{ok200}, closed: true}, Accepted},
		{"budget: refused from the head", judgeBudget, rawResult{responses: []rawResponse{full}, closed: true}, Refused},
		{"budget: refused after the body", judgeBudget, rawResult{responses: []rawResponse{late}, closed: true}, Defective},
		{"budget: no Retry-After", judgeBudget, rawResult{responses: []rawResponse{noRetry}, closed: true}, Defective},
		{"budget: kept open", judgeBudget, rawResult{responses: []rawResponse{full}, timedOut: true}, Defective},
		{"budget: another 503", judgeBudget, rawResult{responses: []rawResponse{many}, closed: true}, Defective},
		{"budget: no answer", judgeBudget, rawResult{closed: true}, Defective},
		{"flood: served", judgeFlood, rawResult{responses: []rawResponse{own404}, closed: true}, Accepted},
		{"flood: refused", judgeFlood, rawResult{responses: []rawResponse{many}, reset: true}, Refused},
		{"flood: the body's 503", judgeFlood, rawResult{responses: []rawResponse{full}, closed: true}, Defective},
		{"flood: kept open", judgeFlood, rawResult{responses: []rawResponse{many}, timedOut: true}, Defective},
	}
	for _, tt := range tests {
		if got := tt.judge(tt.res); got.Verdict != tt.want {
			t.Errorf("%s: verdict %v (%s); want %v", tt.name, got.Verdict, got.Why, tt.want)
		}
	}
}

// The body-budget bodies are valid for each engine, of the size asked.
func TestBudgetBody_IsValidForEachEngine(t *testing.T) {
	for _, d := range []worker.Dialect{worker.DialectVLLM, worker.DialectTRTLLM} {
		b := budgetBody(3, 1<<20, d)
		var v map[string]any
		if len(b) != 1<<20 || json.Unmarshal(b, &v) != nil || v["prompt"] != "budget 3" {
			t.Errorf("%s: %d bytes, valid %v", d, len(b), json.Valid(b))
		}
		if _, padded := v["padding"]; padded == (d == worker.DialectTRTLLM) {
			t.Errorf("%s body keys %v", d, len(v))
		}
	}
}
