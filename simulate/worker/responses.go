package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// The Responses API as vLLM serves it (vllm/entrypoints/openai/responses/):
// POST /v1/responses renders its input as chat messages
// (construct_input_messages: instructions as a system message, a string
// input as a user message, input items converted) with the chat template;
// with store on (vLLM: VLLM_ENABLE_RESPONSES_API_STORE=1; here
// Config.NoResponseStore off) the response and its messages stay in this
// worker's memory, so a later request with previous_response_id continues
// the conversation — here, and nowhere else: another worker answers 404
// "Response with id '…' not found." GET /v1/responses/{id} returns a stored
// response, POST /v1/responses/{id}/cancel refuses a finished one.

// responsesWire is the part of a /v1/responses body the simulator reads.
type responsesWire struct {
	Model              *string         `json:"model"`
	Input              json.RawMessage `json:"input"`
	Instructions       *string         `json:"instructions"`
	PreviousResponseID *string         `json:"previous_response_id"`
	Store              *bool           `json:"store"`
	Stream             *bool           `json:"stream"`
	MaxOutputTokens    *int            `json:"max_output_tokens"`
	CacheSalt          *string         `json:"cache_salt"`
	User               *string         `json:"user"`
	Metadata           json.RawMessage `json:"metadata"`
	Temperature        *float64        `json:"temperature"`
	TopP               *float64        `json:"top_p"`
}

// responseStore is a worker's stored responses: the answer and the chat
// messages it was generated from (vLLM's response_store and msg_store).
type responseStore struct {
	mu   sync.Mutex
	resp map[string]*responseObj
	msgs map[string][]json.RawMessage
}

func (s *responseStore) get(id string) (*responseObj, []json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resp[id], s.msgs[id]
}

func (s *responseStore) put(r *responseObj, msgs []json.RawMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.resp == nil {
		s.resp, s.msgs = map[string]*responseObj{}, map[string][]json.RawMessage{}
	}
	s.resp[r.ID], s.msgs[r.ID] = r, msgs
}

// Len is how many responses the worker stores.
func (s *responseStore) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.resp)
}

// responseObj is vLLM's ResponsesResponse.
type responseObj struct {
	ID                 string           `json:"id"`
	CreatedAt          int64            `json:"created_at"`
	IncompleteDetails  any              `json:"incomplete_details"`
	Instructions       *string          `json:"instructions"`
	Metadata           json.RawMessage  `json:"metadata"`
	Model              string           `json:"model"`
	Object             string           `json:"object"`
	Output             []responseOutput `json:"output"`
	ParallelToolCalls  bool             `json:"parallel_tool_calls"`
	Temperature        float64          `json:"temperature"`
	ToolChoice         string           `json:"tool_choice"`
	Tools              []any            `json:"tools"`
	TopP               float64          `json:"top_p"`
	Background         bool             `json:"background"`
	MaxOutputTokens    int              `json:"max_output_tokens"`
	PreviousResponseID *string          `json:"previous_response_id"`
	Reasoning          any              `json:"reasoning"`
	ServiceTier        string           `json:"service_tier"`
	Status             string           `json:"status"`
	Text               any              `json:"text"`
	TopLogprobs        int              `json:"top_logprobs"`
	Truncation         string           `json:"truncation"`
	Usage              *responseUsage   `json:"usage"`
	User               *string          `json:"user"`
}

// responseOutput is an output message item.
type responseOutput struct {
	ID      string         `json:"id"`
	Content []responsePart `json:"content"`
	Role    string         `json:"role"`
	Status  string         `json:"status"`
	Type    string         `json:"type"`
}

// responsePart is an output_text part.
type responsePart struct {
	Annotations []any  `json:"annotations"`
	Text        string `json:"text"`
	Type        string `json:"type"`
	Logprobs    []any  `json:"logprobs"`
}

// responseUsage is the Responses API usage object.
type responseUsage struct {
	InputTokens         int            `json:"input_tokens"`
	InputTokensDetails  map[string]int `json:"input_tokens_details"`
	OutputTokens        int            `json:"output_tokens"`
	OutputTokensDetails map[string]int `json:"output_tokens_details"`
	TotalTokens         int            `json:"total_tokens"`
}

// respState is what serveResponses needs beyond the engine request.
type respState struct {
	id    string // resp_<32 hex>
	wire  responsesWire
	msgs  []json.RawMessage
	store bool
}

// parseResponses builds the engine request of a /v1/responses body.
func (w *Worker) parseResponses(c *genCtx, body []byte) *reqError {
	var wire responsesWire
	if rerr := decodeBody(body, &wire); rerr != nil {
		return rerr
	}
	if len(bytes.TrimSpace(wire.Input)) == 0 || bytes.Equal(bytes.TrimSpace(wire.Input), []byte("null")) {
		return badRequest("input is required")
	}
	st := &respState{id: "resp_" + randomHex(32), wire: wire, store: !w.cfg.NoResponseStore && (wire.Store == nil || *wire.Store)}
	var msgs []json.RawMessage
	if wire.Instructions != nil && *wire.Instructions != "" {
		msgs = append(msgs, mustJSON(map[string]any{"role": "system", "content": *wire.Instructions}))
	}
	if id := wire.PreviousResponseID; id != nil && *id != "" {
		prev, prevMsgs := w.responses.get(*id)
		if prev == nil {
			return &reqError{status: http.StatusNotFound, msg: "Response with id '" + *id + "' not found."}
		}
		for _, m := range prevMsgs {
			var role struct{ Role string }
			_ = json.Unmarshal(m, &role)
			if role.Role != "system" {
				msgs = append(msgs, m)
			}
		}
		for _, o := range prev.Output {
			for _, p := range o.Content {
				msgs = append(msgs, mustJSON(map[string]any{"role": "assistant", "content": p.Text}))
			}
		}
	}
	in, rerr := responseInputMessages(wire.Input)
	if rerr != nil {
		return rerr
	}
	msgs = append(msgs, in...)
	st.msgs = msgs
	raw := mustJSON(msgs)
	g := &genRequest{chat: true}
	model, loraName, loraID, rerr := w.resolveModel(wire.Model)
	if rerr != nil {
		return rerr
	}
	g.model, g.loraID = model, loraID
	p, rerr := w.chatPrompt(raw, chatFlags{})
	if rerr != nil {
		return rerr
	}
	p.extra.LoRAName = loraName
	if wire.CacheSalt != nil {
		p.extra.CacheSalt = *wire.CacheSalt
	}
	g.prompts = []prompt{p}
	if rerr := g.common(w, wire.MaxOutputTokens, wire.Stream, nil, nil, nil); rerr != nil {
		return rerr
	}
	c.g, c.api = g, st
	return nil
}

// responseToolCall is a function_call item as vLLM's Responses conversion
// makes it a chat tool call.
type responseToolCall struct {
	ID       string       `json:"id"`
	Function toolFunction `json:"function"`
	Type     string       `json:"type"`
}

// responseInputMessages converts the input as construct_input_messages
// does (vllm/entrypoints/openai/responses/utils.py): a string is a user
// message; a function_call is a tool call of the assistant message before
// it (or of a new one); an assistant message item (an output message or a
// plain one) is the text of its first part, the content of the assistant
// message before it when that has none; a function_call_output is a tool
// message; any other message item is passed as it is.
func responseInputMessages(raw json.RawMessage) ([]json.RawMessage, *reqError) {
	raw = bytes.TrimSpace(raw)
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, badRequest("input: %v", err)
		}
		return []json.RawMessage{mustJSON(map[string]any{"role": "user", "content": s})}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, badRequest("input must be a string or a list of items: %v", err)
	}
	var out []any // json.RawMessage or *assistantMsg
	lastAssistant := func() *assistantMsg {
		if len(out) == 0 {
			return nil
		}
		a, _ := out[len(out)-1].(*assistantMsg)
		return a
	}
	for i, it := range items {
		var h struct {
			Type      string          `json:"type"`
			Role      string          `json:"role"`
			CallID    string          `json:"call_id"`
			Name      string          `json:"name"`
			Arguments string          `json:"arguments"`
			Output    json.RawMessage `json:"output"`
			Content   json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(it, &h); err != nil {
			return nil, badRequest("input[%d]: %v", i, err)
		}
		switch {
		case h.Type == "function_call":
			// ChatCompletionMessageToolCallParam(id=, function=, type=):
			// vLLM's member order, which a template rendering the call
			// whole shows.
			call := responseToolCall{ID: h.CallID, Function: toolFunction{Name: h.Name, Arguments: h.Arguments}, Type: "function"}
			a := lastAssistant()
			if a == nil {
				a = &assistantMsg{}
				out = append(out, a)
			}
			if a.ToolCalls == nil {
				a.order = append(a.order, "tool_calls")
			}
			a.ToolCalls = append(a.ToolCalls, call)
		case h.Type == "function_call_output":
			var o any
			_ = json.Unmarshal(h.Output, &o)
			out = append(out, json.RawMessage(mustJSON(toolMsg{Role: "tool", Content: o, ToolCallID: h.CallID})))
		case (h.Type == "" || h.Type == "message") && h.Role == "assistant":
			text, err := firstText(h.Content)
			if err != nil {
				return nil, badRequest("input[%d]: %v", i, err)
			}
			a := lastAssistant()
			if a == nil || a.Content != nil {
				a = &assistantMsg{}
				out = append(out, a)
			}
			a.Content = &text
			a.order = append(a.order, "content")
		case (h.Type == "" || h.Type == "message") && h.Role != "":
			out = append(out, it)
		default:
			return nil, badRequest("input[%d]: item type %q is not supported by the simulator", i, h.Type)
		}
	}
	msgs := make([]json.RawMessage, len(out))
	for i, m := range out {
		switch m := m.(type) {
		case json.RawMessage:
			msgs[i] = m
		case *assistantMsg:
			msgs[i] = m.marshal()
		}
	}
	return msgs, nil
}

// assistantMsg is an assistant chat message built from input items, its
// members in the order vLLM set them.
type assistantMsg struct {
	Content   *string
	ToolCalls []responseToolCall
	order     []string
}

func (a *assistantMsg) marshal() json.RawMessage {
	b := []byte(`{"role":"assistant"`)
	for _, k := range a.order {
		b = append(b, `,"`+k+`":`...)
		if k == "content" {
			b = append(b, mustJSON(*a.Content)...)
		} else {
			b = append(b, mustJSON(a.ToolCalls)...)
		}
	}
	return append(b, '}')
}

// toolMsg is ChatCompletionToolMessageParam(role=, content=, tool_call_id=).
type toolMsg struct {
	Role       string `json:"role"`
	Content    any    `json:"content"`
	ToolCallID string `json:"tool_call_id"`
}

// firstText is an assistant item's text as vLLM takes it: a string
// content, the first part's "text" ("" without one), "" for none.
func firstText(content json.RawMessage) (string, error) {
	content = bytes.TrimSpace(content)
	if len(content) == 0 || string(content) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(content, &s) == nil {
		return s, nil
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(content, &parts); err != nil {
		return "", fmt.Errorf("assistant content: %w", err)
	}
	if len(parts) == 0 {
		return "", nil
	}
	if json.Unmarshal(parts[0], &s) == nil {
		return s, nil
	}
	var p struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(parts[0], &p); err != nil {
		return "", fmt.Errorf("assistant content part: %w", err)
	}
	return p.Text, nil
}

// newResponse builds the response object of c (status and output set by
// the caller).
func (c *genCtx) newResponse(st *respState, status string) *responseObj {
	w := st.wire
	r := &responseObj{
		ID: st.id, CreatedAt: c.created, Instructions: w.Instructions,
		Metadata: w.Metadata, Model: c.g.model, Object: "response", Output: []responseOutput{},
		ParallelToolCalls: true, Temperature: 1, ToolChoice: "auto", Tools: []any{}, TopP: 1,
		MaxOutputTokens: c.g.maxTokens, PreviousResponseID: w.PreviousResponseID, ServiceTier: "auto",
		Status: status, Truncation: "disabled", User: w.User,
	}
	if w.Temperature != nil {
		r.Temperature = *w.Temperature
	}
	if w.TopP != nil {
		r.TopP = *w.TopP
	}
	if len(r.Metadata) == 0 {
		r.Metadata = json.RawMessage("null")
	}
	return r
}

// finishResponse completes r with the generated message and usage, and
// stores it.
func (c *genCtx) finishResponse(st *respState, r *responseObj) {
	run := c.runs[0]
	p, _ := run.tr.get()
	r.Output = []responseOutput{c.outputMessage(c.text(run, 0, p.Generated), "completed")}
	r.Status = "completed"
	r.Usage = &responseUsage{
		InputTokens: len(run.p.tokens), InputTokensDetails: map[string]int{"cached_tokens": p.CachedTokens},
		OutputTokens: p.Generated, OutputTokensDetails: map[string]int{"reasoning_tokens": 0},
		TotalTokens: len(run.p.tokens) + p.Generated,
	}
	if st.store {
		c.w.responses.put(r, st.msgs)
	}
}

// outputMessage is the response's message item.
func (c *genCtx) outputMessage(text, status string) responseOutput {
	o := responseOutput{ID: "msg_" + c.rid, Role: "assistant", Status: status, Type: "message", Content: []responsePart{}}
	if status == "completed" {
		o.Content = []responsePart{{Annotations: []any{}, Text: text, Type: "output_text", Logprobs: []any{}}}
	}
	return o
}

// serveResponses answers a /v1/responses request, whole or streamed.
func (c *genCtx) serveResponses() {
	st := c.api.(*respState)
	if !c.g.stream {
		if !c.waitDone() {
			return
		}
		r := c.newResponse(st, "completed")
		c.finishResponse(st, r)
		writeJSON(c.rw, http.StatusOK, r)
		return
	}
	seq := 0
	event := func(typ string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		c.writeEvent(typ, fields)
	}
	r := c.newResponse(st, "in_progress")
	itemID := "msg_" + c.rid
	var text strings.Builder
	part := func(t string) responsePart {
		return responsePart{Annotations: []any{}, Text: t, Type: "output_text", Logprobs: []any{}}
	}
	c.streamPieces(func() {
		event("response.created", map[string]any{"response": r})
		event("response.in_progress", map[string]any{"response": r})
		event("response.output_item.added", map[string]any{"item": c.outputMessage("", "in_progress"), "output_index": 0})
		event("response.content_part.added", map[string]any{"content_index": 0, "item_id": itemID, "output_index": 0, "part": part("")})
	}, func(_ int, piece string) {
		text.WriteString(piece)
		event("response.output_text.delta", map[string]any{"content_index": 0, "delta": piece, "item_id": itemID, "output_index": 0, "logprobs": []any{}})
	}, func() {
		t := text.String()
		event("response.output_text.done", map[string]any{"content_index": 0, "item_id": itemID, "output_index": 0, "text": t, "logprobs": []any{}})
		event("response.content_part.done", map[string]any{"content_index": 0, "item_id": itemID, "output_index": 0, "part": part(t)})
		event("response.output_item.done", map[string]any{"item": c.outputMessage(t, "completed"), "output_index": 0})
		c.finishResponse(st, r)
		event("response.completed", map[string]any{"response": r})
	})
}

// handleGetResponse serves GET /v1/responses/{id}.
func (w *Worker) handleGetResponse(rw http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !strings.HasPrefix(id, "resp") {
		writeError(rw, http.StatusBadRequest, "Invalid 'response_id': '"+id+"'. Expected an ID that begins with 'resp'.")
		return
	}
	resp, _ := w.responses.get(id)
	if resp == nil {
		writeError(rw, http.StatusNotFound, "Response with id '"+id+"' not found.")
		return
	}
	writeJSON(rw, http.StatusOK, resp)
}

// handleCancelResponse serves POST /v1/responses/{id}/cancel: the
// simulator runs no background responses, so a stored one is finished.
func (w *Worker) handleCancelResponse(rw http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	resp, _ := w.responses.get(id)
	if resp == nil {
		writeError(rw, http.StatusNotFound, "Response with id '"+id+"' not found.")
		return
	}
	writeError(rw, http.StatusBadRequest, "Cannot cancel a synchronous response.")
}

// mustJSON marshals v, one of the simulator's own values.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("worker: marshal: " + err.Error()) // our own values: a bug
	}
	return b
}

// StoredResponses is how many Responses API responses the worker keeps.
func (w *Worker) StoredResponses() int { return w.responses.Len() }
