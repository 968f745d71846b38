package gateway

import "testing"

// The completion's token bound that the router charges to the endpoint's
// KV-usage estimate: max_completion_tokens, else max_tokens, else vLLM's
// default of 16 for a completion; a chat completion without either has
// none.
func TestContInput_CompletionBound(t *testing.T) {
	tests := []struct {
		name string
		kind APIKind
		body string
		want uint32
	}{
		{"completion max_tokens", KindCompletion, `{"model":"m","prompt":"p","max_tokens":256}`, 256},
		{"completion default", KindCompletion, `{"model":"m","prompt":"p"}`, 16},
		{"completion null", KindCompletion, `{"model":"m","prompt":"p","max_tokens":null}`, 16},
		{"chat max_completion_tokens first", KindChat, `{"model":"m","messages":[{"role":"user","content":"q"}],"max_tokens":50,"max_completion_tokens":20}`, 20},
		{"chat max_tokens", KindChat, `{"model":"m","messages":[{"role":"user","content":"q"}],"max_tokens":50}`, 50},
		{"chat unbounded", KindChat, `{"model":"m","messages":[{"role":"user","content":"q"}]}`, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req Request
			if err := req.parse(tt.kind, []byte(tt.body), false); err != nil {
				t.Fatal(err)
			}
			if got := req.Cont.completionBound(tt.kind); got != tt.want {
				t.Fatalf("completionBound = %d; want %d", got, tt.want)
			}
		})
	}
}
