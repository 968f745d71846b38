package worker

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/simulate/engine"
)

// TensorRT-LLM's dialect: trtllm-serve publishes no KV events. They wait in
// an engine-side ring (kv_cache_config.event_buffer_max_size) and POST
// /kv_cache_events hands them out and forgets them; its request models
// forbid unknown fields (pydantic extra="forbid": 400 {"error": ...}); P/D
// is context_only then generation_only through disaggregated_params.

// trtRing is the engine-side event ring, with the serializer's JSON shape
// (tensorrt_llm._utils.KVCacheEventSerializer; inventory's testdata/trtllm
// has real bodies).
type trtRing struct {
	mu      sync.Mutex
	max     int
	window  int
	events  [][]byte // rendered events, oldest first
	nextID  uint64
	created bool
	dropped uint64
	drains  uint64
}

func newTRTRing(max, window int) *trtRing { return &trtRing{max: max, window: window} }

type trtEventJSON struct {
	EventID    uint64 `json:"event_id"`
	Data       any    `json:"data"`
	WindowSize int    `json:"window_size"`
}

type trtCreatedJSON struct {
	Type      string `json:"type"`
	NumBlocks []int  `json:"num_blocks_per_cache_level"`
}

type trtStoredJSON struct {
	Type       string         `json:"type"`
	ParentHash *uint64        `json:"parent_hash"`
	Blocks     []trtBlockJSON `json:"blocks"`
}

type trtBlockJSON struct {
	Type       string         `json:"type"`
	BlockHash  uint64         `json:"block_hash"`
	Tokens     []trtTokenJSON `json:"tokens"`
	CacheLevel int            `json:"cache_level"`
	Priority   int            `json:"priority"`
}

type trtTokenJSON struct {
	Type         string `json:"type"`
	TokenID      uint32 `json:"token_id"`
	TokenExtraID int    `json:"token_extra_id"`
}

type trtRemovedJSON struct {
	Type        string   `json:"type"`
	BlockHashes []uint64 `json:"block_hashes"`
}

// trtDefaultPriority is TensorRT-LLM's default retention priority.
const trtDefaultPriority = 35

// Publish implements eventSink: the step's events join the ring, a fresh
// cache announcing itself with created first (TensorRT-LLM emits it on the
// first allocation). A cache reset is a fresh cache too.
func (r *trtRing) Publish(_ time.Time, events []inventory.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range events {
		ev := &events[i]
		if !r.created || ev.Kind == inventory.EventAllBlocksCleared {
			r.created = true
			r.add(trtCreatedJSON{Type: "created", NumBlocks: []int{0, 0}})
			if ev.Kind == inventory.EventAllBlocksCleared {
				continue
			}
		}
		switch ev.Kind {
		case inventory.EventBlockStored:
			if ev.Medium == inventory.MediumCPU {
				continue // the simulator's offload tier is vLLM's
			}
			bs := ev.BlockSize
			d := trtStoredJSON{Type: "stored", Blocks: make([]trtBlockJSON, 0, len(ev.BlockHashes))}
			if ev.HasParent {
				p := ev.Parent
				d.ParentHash = &p
			}
			for j, h := range ev.BlockHashes {
				b := trtBlockJSON{Type: "stored_block", BlockHash: h, Priority: trtDefaultPriority}
				if len(ev.TokenIDs) >= (j+1)*bs {
					for _, t := range ev.TokenIDs[j*bs : (j+1)*bs] {
						b.Tokens = append(b.Tokens, trtTokenJSON{Type: "unique_token", TokenID: t})
					}
				}
				d.Blocks = append(d.Blocks, b)
			}
			r.add(d)
		case inventory.EventBlockRemoved:
			if ev.Medium == inventory.MediumCPU {
				continue
			}
			r.add(trtRemovedJSON{Type: "removed", BlockHashes: slices.Clone(ev.BlockHashes)})
		}
	}
	return nil
}

// add renders one event into the ring, dropping the oldest when full (the
// engine's ring does: a consumer that drains too rarely sees an event_id
// gap).
func (r *trtRing) add(data any) {
	b, _ := json.Marshal(trtEventJSON{EventID: r.nextID, Data: data, WindowSize: r.window}) // plain values
	r.nextID++
	if len(r.events) >= r.max {
		r.events[0] = nil
		r.events = r.events[1:]
		r.dropped++
	}
	r.events = append(r.events, b)
}

// drain takes every buffered event as trtllm-serve's JSON body.
func (r *trtRing) drain() []byte {
	r.mu.Lock()
	evs := r.events
	r.events = nil
	r.drains++
	r.mu.Unlock()
	var b bytes.Buffer
	b.WriteByte('[')
	for i, e := range evs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(e)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// stats reports events produced, dropped at the cap and drains served.
func (r *trtRing) stats() (next, dropped, drains uint64, pending int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nextID, r.dropped, r.drains, len(r.events)
}

// handleKVCacheEvents serves POST /kv_cache_events: every buffered event,
// gone for the next caller.
func (w *Worker) handleKVCacheEvents(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeJSONRaw(rw, http.StatusMethodNotAllowed, []byte(`{"detail":"Method Not Allowed"}`))
		return
	}
	writeJSONRaw(rw, http.StatusOK, w.ring.drain())
}

// writeJSONRaw writes a JSON body as is.
func writeJSONRaw(rw http.ResponseWriter, status int, body []byte) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	_, _ = rw.Write(body)
}

// trtCompletionFields and trtChatFields are the fields trtllm-serve's
// CompletionRequest and ChatCompletionRequest declare
// (tensorrt_llm/serve/openai_protocol.py); anything else is refused.
var (
	trtCompletionFields = fieldSet("model prompt best_of echo frequency_penalty logit_bias logprobs max_tokens n presence_penalty seed stop stream stream_options suffix temperature top_p user lora_request prompt_ignore_length use_beam_search top_k top_p_min min_p repetition_penalty length_penalty early_stopping stop_token_ids include_stop_str_in_output ignore_eos min_tokens skip_special_tokens spaces_between_special_tokens truncate_prompt_tokens return_context_logits detokenize add_special_tokens response_format disaggregated_params")
	trtChatFields       = fieldSet("messages prompt_token_ids model frequency_penalty logit_bias logprobs top_logprobs max_completion_tokens max_tokens n presence_penalty response_format seed stop stream stream_options temperature top_p tools tool_choice user reasoning_effort prompt_ignore_length best_of use_beam_search top_k top_p_min min_p repetition_penalty length_penalty early_stopping stop_token_ids include_stop_str_in_output ignore_eos min_tokens skip_special_tokens spaces_between_special_tokens truncate_prompt_tokens lora_request echo add_generation_prompt add_special_tokens documents chat_template chat_template_kwargs disaggregated_params cache_salt")
	trtDisaggFields     = fieldSet("request_type first_gen_tokens first_gen_log_probs first_gen_logits ctx_request_id encoded_opaque_state draft_tokens disagg_request_id ctx_dp_rank ctx_info_endpoint schedule_style conversation_id ctx_usage")
)

// trtStreamOptionFields are StreamOptions' fields (extra="forbid" too).
var trtStreamOptionFields = fieldSet("include_usage continuous_usage_stats")

// modelName is the pydantic model a request body is validated as.
func modelName(chat bool) string {
	if chat {
		return "ChatCompletionRequest"
	}
	return "CompletionRequest"
}

func isJSONNull(raw json.RawMessage) bool { return bytes.Equal(bytes.TrimSpace(raw), []byte("null")) }

func fieldSet(names string) map[string]bool {
	m := map[string]bool{}
	for _, n := range strings.Fields(names) {
		m[n] = true
	}
	return m
}

// trtStrict refuses fields trtllm-serve's request model does not declare,
// with its validation handler's shape (400 {"error": "..."}).
func trtStrict(body []byte, chat bool) *reqError {
	var obj map[string]json.RawMessage
	if json.Unmarshal(bytes.TrimSpace(body), &obj) != nil {
		return nil // the regular parser reports malformed bodies
	}
	allowed, model := trtCompletionFields, modelName(chat)
	if chat {
		allowed = trtChatFields
	}
	var bad []string
	for k := range obj {
		if !allowed[k] {
			bad = append(bad, k)
		}
	}
	if raw, ok := obj["stream_options"]; ok && !isJSONNull(raw) {
		var so map[string]json.RawMessage
		if json.Unmarshal(raw, &so) != nil {
			bad = append(bad, "stream_options")
		}
		for k := range so {
			if !trtStreamOptionFields[k] {
				bad = append(bad, "stream_options."+k)
			}
		}
		// StreamOptions' validator: only with stream true.
		if stream, ok := obj["stream"]; len(so) > 0 && (!ok || !bytes.Equal(bytes.TrimSpace(stream), []byte("true"))) {
			return &reqError{status: http.StatusBadRequest, msg: "1 validation error for " + modelName(chat) +
				"\n  Value error, Stream options can only be defined when stream is true. [type=value_error]", raw: true}
		}
	}
	if raw, ok := obj["disaggregated_params"]; ok && !isJSONNull(raw) {
		var dp map[string]json.RawMessage
		if json.Unmarshal(raw, &dp) != nil {
			bad = append(bad, "disaggregated_params")
		}
		for k := range dp {
			if !trtDisaggFields[k] {
				bad = append(bad, "disaggregated_params."+k)
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d validation error", len(bad))
	if len(bad) > 1 {
		sb.WriteString("s")
	}
	fmt.Fprintf(&sb, " for %s", model)
	for _, k := range bad {
		fmt.Fprintf(&sb, "\n%s\n  Extra inputs are not permitted [type=extra_forbidden]", k)
	}
	return &reqError{status: http.StatusBadRequest, msg: sb.String(), raw: true}
}

// disaggParams is disaggregated_params as the simulator reads it.
type disaggParams struct {
	RequestType        string `json:"request_type"`
	FirstGenTokens     []int  `json:"first_gen_tokens"`
	CtxRequestID       *int64 `json:"ctx_request_id"`
	EncodedOpaqueState string `json:"encoded_opaque_state"`
}

// TensorRT-LLM request types.
const (
	trtContextOnly    = "context_only"
	trtGenerationOnly = "generation_only"
	trtContextAndGen  = "context_and_generation"
)

// trtOpaque is what the simulated context worker puts in
// encoded_opaque_state (TensorRT-LLM's is the transceiver's state): where
// the generation worker reads the leased blocks.
type trtOpaque struct {
	EngineID  string `json:"e"`
	RequestID string `json:"r"`
	BlockIDs  []int  `json:"b"`
	Host      string `json:"h"`
	Port      int    `json:"p"`
}

// parseDisagg reads disaggregated_params (absent or null: none).
func parseDisagg(raw json.RawMessage) (*disaggParams, *reqError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var p disaggParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, badRequest("disaggregated_params: %v", err)
	}
	switch p.RequestType {
	case trtContextOnly, trtGenerationOnly, trtContextAndGen:
	default:
		return nil, badRequest("disaggregated_params.request_type %q (want context_only, generation_only or context_and_generation)", p.RequestType)
	}
	return &p, nil
}

// kvFromOpaque turns a generation_only leg's encoded_opaque_state into the
// pull the NIXL path performs.
func kvFromOpaque(s string) (*kvParams, *reqError) {
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, badRequest("disaggregated_params.encoded_opaque_state is not base64: %v", err)
	}
	var o trtOpaque
	if err := json.Unmarshal(raw, &o); err != nil {
		return nil, badRequest("disaggregated_params.encoded_opaque_state: %v", err)
	}
	ids, _ := json.Marshal(o.BlockIDs)
	return &kvParams{DoRemotePrefill: true, RemoteEngineID: &o.EngineID, RemoteRequestID: &o.RequestID,
		RemoteBlockIDs: ids, RemoteHost: &o.Host, RemotePort: &o.Port}, nil
}

// contextParams renders a finished context_only leg's disaggregated_params.
func (w *Worker) contextParams(r *engine.RemoteParams, firstToken int, ctxID int64) json.RawMessage {
	ids := r.BlockIDs
	if ids == nil {
		ids = []int{}
	}
	state, _ := json.Marshal(trtOpaque{EngineID: r.EngineID, RequestID: r.RequestID, BlockIDs: ids, Host: w.cfg.IP, Port: w.nixlPort()})
	b, _ := json.Marshal(map[string]any{
		"request_type":         trtContextOnly,
		"first_gen_tokens":     []int{firstToken},
		"ctx_request_id":       ctxID,
		"encoded_opaque_state": base64.StdEncoding.EncodeToString(state),
		"draft_tokens":         nil,
	})
	return b
}
