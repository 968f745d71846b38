package gateway

import (
	"bytes"
	"net/http"
	"strconv"

	"github.com/llbproject/llb/ladder"
)

// The Responses API (POST /v1/responses): its prompt for routing.
//
// vLLM turns a Responses request into chat messages and renders them with
// the model's chat template (construct_input_messages in
// vllm/entrypoints/openai/responses/utils.py): the instructions become a
// system message, a string input one user message, and an input list
// becomes messages item by item — an assistant message item the text of its
// first part (the content of the assistant message before it when that has
// none), a function_call item a tool call of the assistant message before
// it, a function_call_output item a tool message, any other message item as
// it is. llb builds the same messages array (Request.RawMessages), so Tier 1
// renders it and Tier 1.5 tokenizes it through the chat template exactly as
// the engine will.
//
// A request with previous_response_id continues a conversation the engine
// keeps in its own memory (vLLM's response store): its prompt starts with
// turns llb never saw, so Tier 1.5 has nothing to hash (hash_contract
// guard) and the request goes to the endpoint that stored the response
// (RouteRequest.Pin).

// parseResponses fills r's chat form from a Responses request's input and
// instructions. Input shapes llb does not convert (reasoning items,
// built-in tool calls, ...) leave r without a prompt and a tokenize guard:
// the request still goes out as sent.
func (r *Request) parseResponses(input, instructions []byte) error {
	if len(input) == 0 || isNull(input) {
		return requestError(http.StatusBadRequest, CodeMissingField, "input", "a Responses API request needs an input")
	}
	if instructions != nil && !isNull(instructions) && instructions[0] != '"' {
		return fieldError("instructions", "instructions must be a string")
	}
	if r.PreviousResponseID != "" {
		r.guard = ladder.ReasonHashContract
	}
	b := make([]byte, 0, len(input)+len(instructions)+64)
	b = append(b, '[')
	if instructions != nil && !isNull(instructions) && len(instructions) > 2 {
		b = appendMessage(b, "system", instructions)
		b = append(b, '}')
	}
	switch input[0] {
	case '"':
		b = appendMessage(b, "user", input)
		b = append(b, '}')
	case '[':
		var ok bool
		if b, ok = appendResponseItems(b, input); !ok {
			r.guard = ladder.ReasonTokenize
			return nil
		}
	default:
		return fieldError("input", "input must be a string or a list of input items")
	}
	b = append(b, ']')
	return r.parseMessages(b)
}

// appendMessage appends {"role":role,"content":content} (content raw JSON)
// to the array being built in b.
func appendMessage(b []byte, role string, content []byte) []byte {
	if b[len(b)-1] != '[' {
		b = append(b, ',')
	}
	b = append(b, `{"role":`...)
	b = strconv.AppendQuote(b, role)
	b = append(b, `,"content":`...)
	return append(b, content...)
}

// responseItem is the part of one input item the conversion reads.
type responseItem struct {
	typ, role, callID, name string
	content, arguments, out []byte
}

func readResponseItem(e []byte) (responseItem, bool) {
	var it responseItem
	if e[0] != '{' {
		return it, false
	}
	ok := true
	_ = forEachMember(e, func(m *member) error {
		str := func(dst *string) {
			if m.val[0] == '"' {
				*dst = unquote(m.val)
			} else if !isNull(m.val) {
				ok = false
			}
		}
		switch string(m.key) {
		case "type":
			str(&it.typ)
		case "role":
			str(&it.role)
		case "call_id":
			str(&it.callID)
		case "name":
			str(&it.name)
		case "content":
			it.content = m.val
		case "arguments":
			it.arguments = m.val
		case "output":
			it.out = m.val
		}
		return nil
	})
	return it, ok
}

// appendResponseItems converts an input list as vLLM's
// construct_chat_messages_with_tool_call does; false for an item it does
// not convert. Items merge into the assistant message before them: a
// function_call adds a tool call to it, an assistant message item gives it
// its content when it has none (else each starts a new assistant message).
func appendResponseItems(b, input []byte) ([]byte, bool) {
	var msgs []chatItem
	ok := true
	err := forEachElement(input, func(_ int, e []byte) error {
		it, good := readResponseItem(e)
		if !good {
			ok = false
			return errContentShape
		}
		var last *chatItem
		if n := len(msgs); n > 0 && msgs[n-1].assistant {
			last = &msgs[n-1]
		}
		switch {
		case it.typ == "function_call":
			if it.arguments == nil || it.arguments[0] != '"' {
				ok = false
				return errContentShape
			}
			call := append([]byte(`{"id":`), strconv.Quote(it.callID)...)
			call = append(call, `,"function":{"name":`...)
			call = strconv.AppendQuote(call, it.name)
			call = append(call, `,"arguments":`...)
			call = append(call, it.arguments...)
			call = append(call, `},"type":"function"}`...)
			if last == nil {
				msgs = append(msgs, chatItem{assistant: true})
				last = &msgs[len(msgs)-1]
			}
			if last.calls == nil {
				last.order = append(last.order, 't')
			}
			last.calls = append(last.calls, call)
		case it.typ == "function_call_output":
			out := it.out
			if out == nil {
				out = []byte("null")
			}
			m := append([]byte(`{"role":"tool","content":`), out...)
			m = append(m, `,"tool_call_id":`...)
			m = strconv.AppendQuote(m, it.callID)
			msgs = append(msgs, chatItem{raw: append(m, '}')})
		case (it.typ == "" || it.typ == "message") && it.role == "assistant":
			// An output message, or an assistant message item: the text
			// of its first part (or its string content).
			text := assistantText(it.content)
			if text == nil {
				ok = false
				return errContentShape
			}
			if last == nil || last.content != nil {
				msgs = append(msgs, chatItem{assistant: true})
				last = &msgs[len(msgs)-1]
			}
			last.content = text
			last.order = append(last.order, 'c')
		case (it.typ == "" || it.typ == "message") && it.role != "":
			msgs = append(msgs, chatItem{raw: e})
		default:
			ok = false
			return errContentShape
		}
		return nil
	})
	if err != nil || !ok {
		return b, false
	}
	for _, m := range msgs {
		if b[len(b)-1] != '[' {
			b = append(b, ',')
		}
		b = m.append(b)
	}
	return b, true
}

// chatItem is one chat message built from Responses input items: an item
// passed as it is (raw), or an assistant message with its members in the
// order vLLM set them (order: 'c' content, 't' tool_calls).
type chatItem struct {
	raw       []byte
	assistant bool
	content   []byte // a raw JSON string
	calls     [][]byte
	order     []byte
}

func (m *chatItem) append(b []byte) []byte {
	if !m.assistant {
		return append(b, m.raw...)
	}
	b = append(b, `{"role":"assistant"`...)
	for _, k := range m.order {
		switch k {
		case 'c':
			b = append(b, `,"content":`...)
			b = append(b, m.content...)
		case 't':
			b = append(b, `,"tool_calls":[`...)
			for i, c := range m.calls {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, c...)
			}
			b = append(b, ']')
		}
	}
	return append(b, '}')
}

// assistantText is an assistant item's text as vLLM takes it: a string
// content, the "text" of the first part of a list ("" when it has none or
// the list is empty), "" for no content; nil for a shape it would not read.
func assistantText(content []byte) []byte {
	if content == nil || isNull(content) {
		return []byte(`""`)
	}
	switch content[0] {
	case '"':
		return content
	case '[':
	default:
		return nil
	}
	text := []byte(`""`)
	bad := false
	_ = forEachElement(content, func(i int, part []byte) error {
		if part[0] != '{' {
			bad = part[0] != '"'
			if part[0] == '"' {
				text = part // a bare string part is its own text
			}
			return errContentShape
		}
		_ = forEachMember(part, func(m *member) error {
			if string(m.key) == "text" {
				if m.val[0] == '"' {
					text = m.val
				} else if !isNull(m.val) {
					bad = true
				}
			}
			return nil
		})
		return errContentShape // only the first part
	})
	if bad {
		return nil
	}
	return text
}

// responseID finds a Responses API response's id in the first bytes of
// its answer: the "id" of a whole response, or of the response a stream's
// first event (response.created) carries. vLLM's ids start with "resp".
// It returns "" until the id is complete in b.
func responseID(b []byte) string {
	const key = `"id"`
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(key))
		if i < 0 {
			return ""
		}
		j := skipSpace(b, off+i+len(key))
		if j < len(b) && b[j] == ':' {
			j = skipSpace(b, j+1)
			if j < len(b) && b[j] == '"' {
				end, ok := scanString(b, j)
				if !ok {
					return ""
				}
				if id := unquote(b[j:end]); len(id) >= 4 && id[:4] == "resp" {
					return id
				}
			}
		}
		off += i + len(key)
	}
}
