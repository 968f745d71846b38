package gateway

import (
	"net/http"
	"strconv"

	"github.com/llbproject/llb/internal/pyjson"
	"github.com/llbproject/llb/ladder"
)

// Anthropic's Messages API (POST /v1/messages) as vLLM serves it: its
// prompt for routing.
//
// vLLM converts the request to a chat completion request
// (AnthropicServingMessages._convert_anthropic_to_openai_request in
// vllm/entrypoints/anthropic/serving.py) and renders that with the chat
// template: the system prompt (a string, or its text blocks joined) becomes
// a system message; each message keeps a string content; of a list of
// blocks, text blocks become text parts (one alone becomes the content
// string), thinking blocks the message's reasoning, tool_use blocks
// assistant tool calls (their arguments json.dumps(block.input): Python's
// spacing and escapes, internal/pyjson), and a user's tool_result blocks
// tool messages (tool_call_id its tool_use_id) placed before it; a message
// left with nothing is dropped. The tools
// become chat tools. llb builds the same messages and tools
// (Request.RawMessages, Request.Tools) so Tier 1.5 tokenizes what the
// engine will. metadata.user_id is the Tier-0 user. Images, and shapes the
// conversion would render through Python's str() (a tool_result whose
// content is a list), get the tokenize guard.

// parseMessagesAPI fills r's chat form from an Anthropic request.
func (r *Request) parseMessagesAPI(messages, system, tools []byte) error {
	if messages == nil || isNull(messages) {
		return requestError(http.StatusBadRequest, CodeMissingField, "messages", "a Messages API request needs a messages array")
	}
	if messages[0] != '[' {
		return fieldError("messages", "messages must be an array of message objects")
	}
	b := make([]byte, 0, len(messages)+len(system)+64)
	b = append(b, '[')
	if system != nil && !isNull(system) {
		switch system[0] {
		case '"':
			if len(system) > 2 {
				b = appendMessage(b, "system", system)
				b = append(b, '}')
			}
		case '[':
			text, ok := joinTextBlocks(system)
			if !ok {
				return fieldError("system", "system must be a string or a list of text blocks")
			}
			if skipSpace(system, 1) < len(system) && system[skipSpace(system, 1)] != ']' {
				b = appendMessage(b, "system", strconv.AppendQuote(nil, string(text)))
				b = append(b, '}')
			}
		default:
			return fieldError("system", "system must be a string or a list of text blocks")
		}
	}
	ok := true
	err := forEachElement(messages, func(i int, e []byte) error {
		var good bool
		if b, good = appendAnthropicMessage(b, e); !good {
			ok = false
			return errContentShape
		}
		return nil
	})
	if err != nil || !ok {
		r.guard = ladder.ReasonTokenize
		if b, ok = messagesForTier1(messages); !ok {
			return fieldError("messages", "messages must be an array of message objects with a role")
		}
	}
	b = append(b, ']')
	if err := r.parseMessages(b); err != nil {
		return err
	}
	if tools != nil && !isNull(tools) {
		t, ok := anthropicTools(tools)
		if !ok {
			r.guard = ladder.ReasonTokenize
		}
		r.Tools = t
	}
	return nil
}

// joinTextBlocks concatenates the text of a block list's text blocks
// (nil when the list has none); false when the list holds a non-object.
func joinTextBlocks(list []byte) ([]byte, bool) {
	var out []byte
	ok := true
	_ = forEachElement(list, func(_ int, e []byte) error {
		if e[0] != '{' {
			ok = false
			return errContentShape
		}
		blk := readBlock(e)
		if blk.typ == "text" && blk.text != nil {
			if out == nil {
				out = []byte{}
			}
			out = append(out, unquote(blk.text)...)
		}
		return nil
	})
	return out, ok
}

// block is the part of a content block the conversion reads (raw values).
type block struct {
	typ                                              string
	text, thinking, id, toolUseID, name, input, body []byte
	image                                            bool
}

func readBlock(e []byte) block {
	var blk block
	_ = forEachMember(e, func(m *member) error {
		switch string(m.key) {
		case "type":
			if m.val[0] == '"' {
				blk.typ = unquote(m.val)
			}
		case "text":
			if m.val[0] == '"' && len(m.val) > 2 {
				blk.text = m.val
			}
		case "thinking":
			if !isNull(m.val) {
				blk.thinking = m.val
			}
		case "id":
			if m.val[0] == '"' && len(m.val) > 2 {
				blk.id = m.val
			}
		case "tool_use_id":
			if m.val[0] == '"' && len(m.val) > 2 {
				blk.toolUseID = m.val
			}
		case "name":
			blk.name = m.val
		case "input":
			blk.input = m.val
		case "content":
			blk.body = m.val
		case "source":
			blk.image = !isNull(m.val)
		}
		return nil
	})
	return blk
}

// appendAnthropicMessage appends the chat message(s) of one Anthropic
// message; false for a shape llb does not convert.
func appendAnthropicMessage(b, e []byte) ([]byte, bool) {
	if e[0] != '{' {
		return b, false
	}
	var role string
	var content []byte
	_ = forEachMember(e, func(m *member) error {
		switch string(m.key) {
		case "role":
			if m.val[0] == '"' {
				role = unquote(m.val)
			}
		case "content":
			content = m.val
		}
		return nil
	})
	if role == "" || content == nil {
		return b, false
	}
	if content[0] == '"' {
		b = appendMessage(b, role, content)
		return append(b, '}'), true
	}
	if content[0] != '[' {
		return b, false
	}
	var parts, calls, reasoning []byte
	nparts, texts := 0, 0
	var lastText []byte
	ok := true
	_ = forEachElement(content, func(_ int, e []byte) error {
		if e[0] != '{' {
			ok = false
			return errContentShape
		}
		blk := readBlock(e)
		switch blk.typ {
		case "text":
			if blk.text == nil {
				return nil
			}
			parts = appendSep(parts)
			parts = append(parts, `{"type":"text","text":`...)
			parts = append(parts, blk.text...)
			parts = append(parts, '}')
			nparts++
			texts++
			lastText = blk.text
		case "image":
			if blk.image {
				ok = false // multimodal: Tier 1.5 cannot reproduce the engine's hashes
				return errContentShape
			}
		case "thinking":
			if blk.thinking != nil {
				if blk.thinking[0] != '"' {
					ok = false
					return errContentShape
				}
				reasoning = append(reasoning, unquote(blk.thinking)...)
				if reasoning == nil {
					reasoning = []byte{}
				}
			}
		case "tool_use":
			if blk.id == nil || (blk.name != nil && blk.name[0] != '"' && !isNull(blk.name)) {
				ok = false // vLLM mints call_<time> for a missing id
				return errContentShape
			}
			calls = appendSep(calls)
			calls = append(calls, `{"id":`...)
			calls = append(calls, blk.id...)
			calls = append(calls, `,"type":"function","function":{"name":`...)
			if blk.name == nil || isNull(blk.name) {
				calls = append(calls, `""`...)
			} else {
				calls = append(calls, blk.name...)
			}
			calls = append(calls, `,"arguments":`...)
			// vLLM's arguments are json.dumps(block.input or {}): Python's
			// spacing and escapes, not the client's.
			args := []byte("{}")
			if blk.input != nil && !isNull(blk.input) {
				if blk.input[0] != '{' {
					ok = false
					return errContentShape
				}
				var err error
				if args, err = pyjson.Dumps(nil, blk.input); err != nil {
					ok = false
					return errContentShape
				}
			}
			calls = strconv.AppendQuote(calls, string(args))
			calls = append(calls, "}}"...)
		case "tool_result":
			if blk.body != nil && !isNull(blk.body) && blk.body[0] != '"' {
				ok = false // str() of a list: not reproduced
				return errContentShape
			}
			body := blk.body
			if body == nil || isNull(body) {
				body = []byte(`""`)
			}
			if role != "user" {
				text := append([]byte("Tool result: "), unquote(body)...)
				parts = appendSep(parts)
				parts = append(parts, `{"type":"text","text":`...)
				parts = strconv.AppendQuote(parts, string(text))
				parts = append(parts, '}')
				nparts++
				texts++
				lastText = strconv.AppendQuote(nil, string(text))
				return nil
			}
			id := blk.toolUseID
			if id == nil {
				id = []byte(`""`)
			}
			b = appendSep(b)
			b = append(b, `{"role":"tool","tool_call_id":`...)
			b = append(b, id...)
			b = append(b, `,"content":`...)
			b = append(b, body...)
			b = append(b, '}')
		}
		return nil
	})
	if !ok {
		return b, false
	}
	if nparts == 0 && calls == nil && reasoning == nil {
		return b, true // vLLM drops the empty message
	}
	b = appendSep(b)
	b = append(b, `{"role":`...)
	b = strconv.AppendQuote(b, role)
	if reasoning != nil {
		b = append(b, `,"reasoning":`...)
		b = strconv.AppendQuote(b, string(reasoning))
	}
	if calls != nil {
		b = append(b, `,"tool_calls":[`...)
		b = append(b, calls...)
		b = append(b, ']')
	}
	switch {
	case nparts == 1 && texts == 1:
		b = append(b, `,"content":`...)
		b = append(b, lastText...)
	case nparts > 0:
		b = append(b, `,"content":[`...)
		b = append(b, parts...)
		b = append(b, ']')
	}
	return append(b, '}'), true
}

// appendSep appends the comma before a list element (none after '[' or at
// the start).
func appendSep(b []byte) []byte {
	if len(b) > 0 && b[len(b)-1] != '[' {
		b = append(b, ',')
	}
	return b
}

// messagesForTier1 renders what Tier 1 can still use of messages the
// conversion does not take: each message's role and text blocks.
func messagesForTier1(messages []byte) ([]byte, bool) {
	b := []byte{'['}
	ok := true
	_ = forEachElement(messages, func(_ int, e []byte) error {
		if e[0] != '{' {
			ok = false
			return errContentShape
		}
		var role, content []byte
		_ = forEachMember(e, func(m *member) error {
			switch string(m.key) {
			case "role":
				role = m.val
			case "content":
				content = m.val
			}
			return nil
		})
		if role == nil || role[0] != '"' {
			ok = false
			return errContentShape
		}
		text := content
		if content != nil && content[0] == '[' {
			t, _ := joinTextBlocks(content)
			text = strconv.AppendQuote(nil, string(t))
		} else if content == nil || content[0] != '"' {
			text = []byte(`""`)
		}
		b = appendSep(b)
		b = append(b, `{"role":`...)
		b = append(b, role...)
		b = append(b, `,"content":`...)
		b = append(b, text...)
		b = append(b, '}')
		return nil
	})
	return b, ok
}

// anthropicTools converts Anthropic tools ({name, description,
// input_schema}) to chat tools as vLLM does; false for a tool without a
// string name.
func anthropicTools(tools []byte) ([]byte, bool) {
	if tools[0] != '[' {
		return nil, false
	}
	b := []byte{'['}
	ok := true
	_ = forEachElement(tools, func(_ int, e []byte) error {
		if e[0] != '{' {
			ok = false
			return errContentShape
		}
		var name, desc, schema []byte
		_ = forEachMember(e, func(m *member) error {
			switch string(m.key) {
			case "name":
				name = m.val
			case "description":
				desc = m.val
			case "input_schema":
				schema = m.val
			}
			return nil
		})
		if name == nil || name[0] != '"' {
			ok = false
			return errContentShape
		}
		if desc == nil {
			desc = []byte("null")
		}
		if schema == nil {
			schema = []byte("null")
		}
		b = appendSep(b)
		b = append(b, `{"type":"function","function":{"name":`...)
		b = append(b, name...)
		b = append(b, `,"description":`...)
		b = append(b, desc...)
		b = append(b, `,"parameters":`...)
		b = append(b, schema...)
		b = append(b, "}}"...)
		return nil
	})
	return append(b, ']'), ok
}
