package harness

import (
	"encoding/json"
	"fmt"

	"github.com/llbproject/llb/simulate/worker"
	"github.com/llbproject/llb/simulate/workload"
)

// The harness runs llbd in front of simulated vLLM, SGLang or TensorRT-LLM
// workers (FleetConfig.Dialect). What differs for the harness itself: the
// rule names the engine (RuleJSON), TensorRT-LLM's completions go as token
// ids, and the workers' own TTFT histogram has each engine's name.

// tokenIDPrompts returns tr as a TensorRT-LLM client sends it. Every
// completion's prompt goes as its token ids: TensorRT-LLM has no
// /tokenize, so llbd (without a tokenizer directory) can key only token-id
// prompts, as TensorRT-LLM's docs tell its users. The ids are exactly what
// the worker would have tokenized the text into, so the engines do the same
// work. Chat requests stay text: their blocks are not keyed (tokenize-guard
// misses, routed by Tier 2). A session's user_id, a field trtllm-serve
// refuses, goes as OpenAI's user, which llbd reads as the session key too.
// tr must carry its tokens (TraceConfig.KeepTokens); the copy does not.
func tokenIDPrompts(tr *workload.Trace) (*workload.Trace, error) {
	out := *tr
	out.Requests = make([]workload.TraceRequest, len(tr.Requests))
	for i, r := range tr.Requests {
		r.Tokens = nil
		var body map[string]json.RawMessage
		if err := json.Unmarshal(r.Body, &body); err != nil {
			return nil, fmt.Errorf("request %d body: %w", r.Seq, err)
		}
		if r.Path == workload.PathCompletions {
			if tr.Requests[i].Tokens == nil {
				return nil, fmt.Errorf("request %d: no prompt tokens to send as ids: %w", r.Seq, ErrConfig)
			}
			ids, err := json.Marshal(tr.Requests[i].Tokens)
			if err != nil {
				return nil, fmt.Errorf("request %d prompt ids: %w", r.Seq, err)
			}
			body["prompt"] = ids
		}
		if u, ok := body["user_id"]; ok {
			body["user"] = u
			delete(body, "user_id")
		}
		if r.Path == workload.PathCompletions || body["user"] != nil {
			var err error
			if r.Body, err = json.Marshal(body); err != nil {
				return nil, fmt.Errorf("request %d body: %w", r.Seq, err)
			}
		}
		out.Requests[i] = r
	}
	return &out, nil
}

// ttftSource is where a worker of dialect d exposes its own TTFT
// histogram: the metrics path and the series name.
func ttftSource(d worker.Dialect) (path, series string) {
	switch d {
	case worker.DialectSGLang:
		return "/metrics", "sglang:time_to_first_token_seconds"
	case worker.DialectTRTLLM:
		// trtllm-serve's GET /metrics is JSON iteration stats; its
		// Prometheus set carries no TTFT the simulator mirrors, so the
		// simulator's own series is read.
		return "/prometheus/metrics", "llbsim_time_to_first_token_seconds"
	}
	return "/metrics", "vllm:time_to_first_token_seconds"
}
