package worker

import (
	"encoding/json"

	"github.com/llbproject/llb/simulate/engine"
)

// usage is the OpenAI usage object with vLLM's cached-token detail.
type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	TotalTokens      int `json:"total_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	// PromptTokensDetails is null unless the worker reports details, as
	// vLLM without --enable-prompt-tokens-details.
	PromptTokensDetails *promptDetails `json:"prompt_tokens_details"`
	// QueueWait is the simulator-only engine queue wait in seconds
	// (Config.ReportQueueWait); absent otherwise.
	QueueWait *float64 `json:"llbsim_queue_wait_s,omitempty"`
}

// newUsage starts a usage object: with cached-token details unless the
// worker is configured like a vLLM without --enable-prompt-tokens-details.
func (w *Worker) newUsage() *usage {
	u := &usage{}
	if !w.cfg.NoPromptTokensDetails {
		u.PromptTokensDetails = &promptDetails{}
	}
	return u
}

type promptDetails struct {
	CachedTokens int `json:"cached_tokens"`
}

// choice is one sequence of a (streaming or not) response.
type choice struct {
	Index        int        `json:"index"`
	Text         *string    `json:"text,omitempty"`
	Message      *chatDelta `json:"message,omitempty"`
	Delta        *chatDelta `json:"delta,omitempty"`
	Logprobs     any        `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
	StopReason   any        `json:"stop_reason"`
	// DisaggregatedParams is a TensorRT-LLM context_only leg's answer.
	DisaggregatedParams json.RawMessage `json:"disaggregated_params,omitempty"`
}

// chatDelta is a chat message or a streamed delta.
type chatDelta struct {
	Role    string  `json:"role,omitempty"`
	Content *string `json:"content,omitempty"`
}

// response is a completion, chat completion, or one of their chunks.
type response struct {
	ID               string          `json:"id"`
	Object           string          `json:"object"`
	Created          int64           `json:"created"`
	Model            string          `json:"model"`
	Choices          []choice        `json:"choices"`
	Usage            *usage          `json:"usage,omitempty"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params,omitempty"`
}

// transferParams renders a prefill leg's kv_transfer_params the way the
// current NIXL pull connector does; with Config.ReportQueueWait they also
// carry the leg's queue wait (seconds) to the decode side.
func (w *Worker) transferParams(r *engine.RemoteParams, queueWait float64) json.RawMessage {
	ids := r.BlockIDs
	if ids == nil {
		ids = []int{}
	}
	v := map[string]any{
		"do_remote_prefill":         true,
		"do_remote_decode":          false,
		"remote_block_ids":          [][]int{ids},
		"remote_engine_id":          r.EngineID,
		"remote_request_id":         r.RequestID,
		"remote_host":               w.cfg.IP,
		"remote_port":               w.nixlPort(),
		"tp_size":                   1,
		"dcp_size":                  1,
		"pp_size":                   1,
		"remote_num_tokens":         r.NumTokens,
		"remote_blocks_expiry_time": nil,
		"transfer_mode":             "pull",
	}
	if w.cfg.ReportQueueWait {
		v[queueWaitKey] = queueWait
	}
	b, _ := json.Marshal(v) // plain values: cannot fail
	return b
}
