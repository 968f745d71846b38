package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/llbproject/llb/internal/pyjson"
)

// Anthropic's Messages API as vLLM serves it (vllm/entrypoints/anthropic/):
// the request becomes a chat completion request
// (_convert_anthropic_to_openai_request) rendered with the chat template;
// the answer is a message object, or a stream of message_start,
// content_block_start, content_block_delta…, content_block_stop,
// message_delta, message_stop events followed by "data: [DONE]". Errors
// take Anthropic's shape, {"type":"error","error":{"type","message"}}.

// messagesWire is the part of a /v1/messages body the simulator reads.
type messagesWire struct {
	Model     *string           `json:"model"`
	Messages  []json.RawMessage `json:"messages"`
	System    json.RawMessage   `json:"system"`
	MaxTokens *int              `json:"max_tokens"`
	Stream    *bool             `json:"stream"`
	Tools     []struct {
		Name        string          `json:"name"`
		Description *string         `json:"description"`
		InputSchema json.RawMessage `json:"input_schema"`
	} `json:"tools"`
}

// anthropicBlock is one content block as the conversion reads it.
type anthropicBlock struct {
	Type     string          `json:"type"`
	Text     string          `json:"text"`
	Thinking *string         `json:"thinking"`
	ID       string          `json:"id"`
	UseID    string          `json:"tool_use_id"`
	Name     string          `json:"name"`
	Input    json.RawMessage `json:"input"`
	Content  json.RawMessage `json:"content"`
	Source   json.RawMessage `json:"source"`
}

// parseMessages builds the engine request of a /v1/messages body.
func (w *Worker) parseMessages(c *genCtx, body []byte) *reqError {
	var wire messagesWire
	// Request validation fails before vLLM's handler runs: FastAPI's
	// handler answers in the OpenAI shape. The handler's own errors take
	// Anthropic's.
	if rerr := decodeBody(body, &wire); rerr != nil {
		return rerr
	}
	if wire.MaxTokens == nil {
		return badRequest("max_tokens: Field required")
	}
	if len(wire.Messages) == 0 {
		return badRequest("messages: Field required")
	}
	msgs, rerr := anthropicToChat(wire.System, wire.Messages)
	if rerr != nil {
		return anthropicErr(rerr)
	}
	var tools json.RawMessage
	if len(wire.Tools) > 0 {
		var ts []any
		for _, t := range wire.Tools {
			ts = append(ts, map[string]any{"type": "function", "function": map[string]any{"name": t.Name, "description": t.Description, "parameters": t.InputSchema}})
		}
		tools = mustJSON(ts)
	}
	g := &genRequest{chat: true}
	model, loraName, loraID, rerr := w.resolveModel(wire.Model)
	if rerr != nil {
		return anthropicErr(rerr)
	}
	g.model, g.loraID = model, loraID
	p, rerr := w.chatPrompt(mustJSON(msgs), chatFlags{tools: tools})
	if rerr != nil {
		return anthropicErr(rerr)
	}
	p.extra.LoRAName = loraName
	g.prompts = []prompt{p}
	if rerr := g.common(w, wire.MaxTokens, wire.Stream, nil, nil, nil); rerr != nil {
		return anthropicErr(rerr)
	}
	c.g = g
	return nil
}

// anthropicToChat converts the system prompt and messages as vLLM does.
func anthropicToChat(system json.RawMessage, messages []json.RawMessage) ([]map[string]any, *reqError) {
	var out []map[string]any
	if s := bytes.TrimSpace(system); len(s) > 0 && !bytes.Equal(s, []byte("null")) {
		var str string
		if json.Unmarshal(s, &str) == nil {
			if str != "" {
				out = append(out, map[string]any{"role": "system", "content": str})
			}
		} else {
			var blocks []anthropicBlock
			if err := json.Unmarshal(s, &blocks); err != nil {
				return nil, badRequest("system: %v", err)
			}
			if len(blocks) > 0 {
				var sb strings.Builder
				for _, b := range blocks {
					if b.Type == "text" && b.Text != "" {
						sb.WriteString(b.Text)
					}
				}
				out = append(out, map[string]any{"role": "system", "content": sb.String()})
			}
		}
	}
	for i, raw := range messages {
		var m struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(raw, &m); err != nil || m.Role == "" {
			return nil, badRequest("messages[%d]: a message needs a role and content", i)
		}
		msg := map[string]any{"role": m.Role}
		var str string
		if json.Unmarshal(m.Content, &str) == nil {
			msg["content"] = str
			out = append(out, msg)
			continue
		}
		var blocks []anthropicBlock
		if err := json.Unmarshal(m.Content, &blocks); err != nil {
			return nil, badRequest("messages[%d].content: %v", i, err)
		}
		var parts []map[string]any
		var calls []any
		var reasoning []string
		for _, b := range blocks {
			switch {
			case b.Type == "text" && b.Text != "":
				parts = append(parts, map[string]any{"type": "text", "text": b.Text})
			case b.Type == "image" && len(b.Source) > 0:
				return nil, badRequest("messages[%d]: the simulated model takes no images", i)
			case b.Type == "thinking" && b.Thinking != nil:
				reasoning = append(reasoning, *b.Thinking)
			case b.Type == "tool_use":
				// json.dumps(block.input or {}), in vLLM's key order.
				args := []byte("{}")
				if len(b.Input) > 0 && string(b.Input) != "null" {
					var err error
					if args, err = pyjson.Dumps(nil, b.Input); err != nil {
						return nil, badRequest("messages[%d]: tool_use input: %v", i, err)
					}
				}
				calls = append(calls, toolCall{ID: b.ID, Type: "function", Function: toolFunction{Name: b.Name, Arguments: string(args)}})
			case b.Type == "tool_result":
				var text string
				if len(b.Content) > 0 && string(b.Content) != "null" {
					if json.Unmarshal(b.Content, &text) != nil {
						text = string(b.Content)
					}
				}
				if m.Role == "user" {
					out = append(out, map[string]any{"role": "tool", "tool_call_id": b.UseID, "content": text})
				} else {
					parts = append(parts, map[string]any{"type": "text", "text": "Tool result: " + text})
				}
			}
		}
		if len(reasoning) > 0 {
			msg["reasoning"] = strings.Join(reasoning, "")
		}
		if len(calls) > 0 {
			msg["tool_calls"] = calls
		}
		switch {
		case len(parts) == 1 && parts[0]["type"] == "text":
			msg["content"] = parts[0]["text"]
		case len(parts) > 0:
			msg["content"] = parts
		case len(calls) == 0 && len(reasoning) == 0:
			continue
		}
		out = append(out, msg)
	}
	return out, nil
}

// toolCall is a chat tool call with the members in the order vLLM's
// conversion builds them (a template may render it whole).
type toolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function toolFunction `json:"function"`
}

type toolFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// anthropicErr marks a request error for Anthropic's error shape.
func anthropicErr(e *reqError) *reqError {
	e.anthropic = true
	return e
}

// stopReason maps the engine's finish to Anthropic's stop_reason.
func stopReason(finish string) string {
	if finish == "length" {
		return "max_tokens"
	}
	return "end_turn"
}

// serveMessages answers a /v1/messages request, whole or streamed.
func (c *genCtx) serveMessages() {
	run := c.runs[0]
	id := c.idBase + "-0"
	usage := func(out int) map[string]any {
		return map[string]any{"input_tokens": len(run.p.tokens), "output_tokens": out}
	}
	if !c.g.stream {
		if !c.waitDone() {
			return
		}
		p, _ := run.tr.get()
		writeJSON(c.rw, http.StatusOK, map[string]any{
			"id": id, "type": "message", "role": "assistant",
			"content": []any{map[string]any{"type": "text", "text": c.text(run, 0, p.Generated)}},
			"model":   c.g.model, "stop_reason": stopReason(p.Finish.String()), "usage": usage(p.Generated),
		})
		return
	}
	c.streamPieces(func() {
		c.writeEvent("message_start", map[string]any{"type": "message_start", "message": map[string]any{
			"id": id, "type": "message", "role": "assistant", "content": []any{}, "model": c.g.model,
			"stop_reason": nil, "stop_sequence": nil, "usage": usage(0)}})
	}, func(k int, piece string) {
		if k == 0 {
			c.writeEvent("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}})
		}
		c.writeEvent("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": piece}})
	}, func() {
		p, _ := run.tr.get()
		if p.Generated > 0 {
			c.writeEvent("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
		}
		c.writeEvent("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stopReason(p.Finish.String())}, "usage": usage(p.Generated)})
		c.writeEvent("message_stop", map[string]any{"type": "message_stop"})
		_, _ = fmt.Fprint(c.rw, "data: [DONE]\n\n")
	})
}

// countTokensWire is a /v1/messages/count_tokens body.
type countTokensWire struct {
	Model    *string           `json:"model"`
	Messages []json.RawMessage `json:"messages"`
	System   json.RawMessage   `json:"system"`
}

// handleCountTokens serves POST /v1/messages/count_tokens:
// {"input_tokens": n} for the rendered prompt.
func (w *Worker) handleCountTokens(rw http.ResponseWriter, r *http.Request) {
	_, body, ok := w.begin(rw, r)
	if !ok {
		return
	}
	var wire countTokensWire
	if rerr := decodeBody(body, &wire); rerr != nil {
		w.writeReqError(rw, rerr)
		return
	}
	if _, _, _, rerr := w.resolveModel(wire.Model); rerr != nil {
		w.writeReqError(rw, anthropicErr(rerr))
		return
	}
	msgs, rerr := anthropicToChat(wire.System, wire.Messages)
	if rerr != nil {
		w.writeReqError(rw, anthropicErr(rerr))
		return
	}
	p, rerr := w.chatPrompt(mustJSON(msgs), chatFlags{})
	if rerr != nil {
		w.writeReqError(rw, anthropicErr(rerr))
		return
	}
	writeJSON(rw, http.StatusOK, map[string]any{"input_tokens": len(p.tokens)})
}
