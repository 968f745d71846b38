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
// becomes messages item by item — a message item as it is, a
// function_call item an assistant tool call (merged into the assistant
// message before it), a function_call_output item a tool message. llb
// builds the same messages array (Request.RawMessages), so Tier 1 renders
// it and Tier 1.5 tokenizes it through the chat template exactly as the
// engine will.
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
	hasStatus               bool
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
		case "status":
			it.hasStatus = !isNull(m.val)
		}
		return nil
	})
	return it, ok
}

// appendResponseItems converts an input list as vLLM's
// construct_chat_messages_with_tool_call does; false for an item it does
// not convert.
func appendResponseItems(b, input []byte) ([]byte, bool) {
	// open is the start of the last message appended when it is an
	// assistant tool-call message still open for more calls (its closing
	// "]}" not yet written), else -1.
	open := -1
	ok := true
	err := forEachElement(input, func(_ int, e []byte) error {
		it, good := readResponseItem(e)
		if !good {
			ok = false
			return errContentShape
		}
		switch {
		case it.typ == "function_call":
			if it.arguments == nil || it.arguments[0] != '"' {
				ok = false
				return errContentShape
			}
			if open < 0 {
				if b[len(b)-1] != '[' {
					b = append(b, ',')
				}
				open = len(b)
				b = append(b, `{"role":"assistant","tool_calls":[`...)
			} else {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = strconv.AppendQuote(b, it.callID)
			b = append(b, `,"function":{"name":`...)
			b = strconv.AppendQuote(b, it.name)
			b = append(b, `,"arguments":`...)
			b = append(b, it.arguments...)
			b = append(b, `},"type":"function"}`...)
			return nil
		case it.typ == "function_call_output":
			b = closeToolCalls(b, &open)
			if b[len(b)-1] != '[' {
				b = append(b, ',')
			}
			b = append(b, `{"role":"tool","content":`...)
			if it.out == nil {
				b = append(b, "null"...)
			} else {
				b = append(b, it.out...)
			}
			b = append(b, `,"tool_call_id":`...)
			b = strconv.AppendQuote(b, it.callID)
			b = append(b, '}')
			return nil
		case (it.typ == "" || it.typ == "message") && it.role != "":
			b = closeToolCalls(b, &open)
			if it.role == "assistant" && it.hasStatus && len(it.content) > 0 && it.content[0] == '[' {
				// A ResponseOutputMessage: vLLM keeps its first part's text.
				text := firstPartText(it.content)
				if text == nil {
					ok = false
					return errContentShape
				}
				b = appendMessage(b, "assistant", text)
				b = append(b, '}')
				return nil
			}
			if b[len(b)-1] != '[' {
				b = append(b, ',')
			}
			b = append(b, e...)
			return nil
		}
		ok = false
		return errContentShape
	})
	if err != nil || !ok {
		return b, false
	}
	return closeToolCalls(b, &open), true
}

// closeToolCalls ends an open assistant tool-call message.
func closeToolCalls(b []byte, open *int) []byte {
	if *open >= 0 {
		b = append(b, "]}"...)
		*open = -1
	}
	return b
}

// firstPartText returns the raw "text" of an output message's first
// content part, or nil.
func firstPartText(content []byte) []byte {
	var text []byte
	_ = forEachElement(content, func(i int, part []byte) error {
		if i > 0 || part[0] != '{' {
			return errContentShape
		}
		_ = forEachMember(part, func(m *member) error {
			if string(m.key) == "text" && m.val[0] == '"' {
				text = m.val
			}
			return nil
		})
		return errContentShape // only the first part
	})
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
