package gateway

import (
	"errors"
	"strconv"
)

// Prompt and chat-message parsing: the parts of a generation request that
// routing reads in depth. Values are decoded with the fast scanner
// (jsonscan.go); every problem is a 400 naming the field.

const promptShapes = "prompt must be a string, an array of strings, an array of token ids or an array of token-id arrays"

func (r *Request) parsePrompt(v []byte) error {
	const param = "prompt"
	switch v[0] {
	case '"':
		r.Form, r.Texts = PromptText, append(r.Texts, unquoteBody(v, r.bodyOwned))
		return nil
	case '[':
	default:
		return fieldError(param, promptShapes)
	}
	i := skipSpace(v, 1)
	if v[i] == ']' {
		return fieldError(param, "prompt must not be an empty array")
	}
	switch v[i] {
	case '"':
		err := forEachElement(v, func(_ int, e []byte) error {
			if e[0] != '"' {
				return fieldError(param, "a prompt array that starts with a string must hold only strings")
			}
			r.Texts = append(r.Texts, unquoteBody(e, r.bodyOwned))
			return nil
		})
		if err != nil {
			return err
		}
		r.Form = PromptTexts
	case '[':
		err := forEachElement(v, func(_ int, e []byte) error {
			if e[0] != '[' {
				return errNotTokenIDs
			}
			toks, err := appendTokenIDs(nil, e)
			if err != nil || len(toks) == 0 {
				return errNotTokenIDs
			}
			r.Tokens = append(r.Tokens, toks)
			return nil
		})
		if err != nil {
			return fieldError(param, "a prompt of token-id arrays must hold only non-empty arrays of token ids (integers 0–4294967295)")
		}
		r.Form = PromptTokenLists
	default:
		toks, err := appendTokenIDs(make([]uint32, 0, len(v)/4), v)
		if err != nil {
			return fieldError(param, "a prompt of token ids must hold only integers 0–4294967295")
		}
		r.Form, r.Tokens = PromptTokens, append(r.Tokens, toks)
	}
	return nil
}

func (r *Request) parseMessages(v []byte) error {
	const param = "messages"
	if v[0] != '[' {
		return fieldError(param, "messages must be an array of message objects")
	}
	err := forEachElement(v, func(i int, e []byte) error {
		if e[0] != '{' {
			return fieldError("messages["+strconv.Itoa(i)+"]", "every message must be an object")
		}
		var msg ChatMessage
		var content []byte
		_ = forEachMember(e, func(m *member) error {
			switch string(m.key) {
			case "role":
				if m.val[0] == '"' {
					msg.Role = unquote(m.val)
				} else {
					msg.Role = ""
				}
			case "content":
				content = m.val
			}
			return nil
		})
		if msg.Role == "" {
			return fieldError("messages["+strconv.Itoa(i)+"].role", "every message needs a non-empty string role")
		}
		var err error
		if msg.Text, msg.Media, err = renderContent(content, r.bodyOwned); err != nil {
			return fieldError("messages["+strconv.Itoa(i)+"].content", err.Error())
		}
		r.Messages = append(r.Messages, msg)
		return nil
	})
	if err != nil {
		return err
	}
	if len(r.Messages) == 0 {
		return fieldError(param, "messages must not be empty")
	}
	r.RawMessages = v
	return nil
}

var errContentShape = errors.New("content must be a string, an array of content parts, or null")

// renderContent renders a message's content for routing; a string
// content shares the body's bytes when owned (see Request.parse).
func renderContent(c []byte, owned bool) (string, bool, error) {
	if len(c) == 0 || isNull(c) {
		return "", false, nil
	}
	switch c[0] {
	case '"':
		return unquoteBody(c, owned), false, nil
	case '[':
	default:
		return "", false, errContentShape
	}
	var b []byte
	media := false
	err := forEachElement(c, func(_ int, part []byte) error {
		if part[0] != '{' {
			return errContentShape
		}
		var typ string
		var text, image []byte
		_ = forEachMember(part, func(m *member) error {
			switch string(m.key) {
			case "type":
				if m.val[0] == '"' {
					typ = unquote(m.val)
				}
			case "text":
				text = m.val
			case "image_url":
				image = m.val
			}
			return nil
		})
		if text != nil && !isNull(text) && text[0] != '"' {
			return errContentShape
		}
		switch {
		// vLLM's chat_utils parses the Responses API's part types as text.
		case typ == "text" || typ == "input_text" || typ == "output_text" || typ == "refusal" || (typ == "" && text != nil):
			if text != nil && !isNull(text) {
				b = append(b, unquote(text)...)
			}
		default:
			media = true
			b = append(b, '[')
			b = append(b, typ...)
			if image != nil {
				b = append(b, ':')
				b = append(b, image...)
			}
			b = append(b, ']')
		}
		return nil
	})
	if err != nil {
		return "", false, err
	}
	return string(b), media, nil
}
