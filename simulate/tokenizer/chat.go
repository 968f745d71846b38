package tokenizer

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/zeebo/xxh3"
)

// ErrInvalidChat reports chat messages (or chat options) the template cannot
// render; the HTTP layer answers it with 400.
var ErrInvalidChat = errors.New("tokenizer: invalid chat request")

// Placeholders rendered for multimodal content parts. Each holds exactly one
// pad token, which is where the item's extra key applies.
const (
	imagePlaceholder = "<|vision_start|><|image_pad|><|vision_end|>"
	audioPlaceholder = "<|audio_bos|><|AUDIO|><|audio_eos|>"
)

// Pad token ids of the placeholders.
const (
	// ImagePad is <|image_pad|>, one per image or video part.
	ImagePad uint32 = 151655
	// AudioPad is <|AUDIO|>, one per audio part.
	AudioPad uint32 = 151646
)

// Message is one OpenAI chat message, decoded. Content is what the template
// renders (text parts joined, multimodal parts as placeholders).
type Message struct {
	// Role is "system", "user", "assistant", "tool", ... (required).
	Role string
	// Content is the rendered content.
	Content string
	// MM lists the identifiers of the message's multimodal parts in order
	// (a hash of the part's JSON, standing in for vLLM's mm hash).
	MM []string
	// ToolCalls is the raw tool_calls JSON (nil when absent).
	ToolCalls json.RawMessage
}

// wireMessage is a chat message as the OpenAI API sends it.
type wireMessage struct {
	Role       *string         `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCalls  json.RawMessage `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

// wirePart is one element of an array content.
type wirePart struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

// ParseMessages decodes the "messages" array of a chat request. It rejects a
// missing or empty array, a message without a string role, and content that
// is neither a string, null, nor an array of known parts.
func ParseMessages(raw json.RawMessage) ([]Message, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, fmt.Errorf("messages is required: %w", ErrInvalidChat)
	}
	var wire []wireMessage
	if err := json.Unmarshal(raw, &wire); err != nil {
		return nil, fmt.Errorf("messages must be an array of message objects: %w: %w", ErrInvalidChat, err)
	}
	if len(wire) == 0 {
		return nil, fmt.Errorf("messages must not be empty: %w", ErrInvalidChat)
	}
	out := make([]Message, 0, len(wire))
	for i, w := range wire {
		if w.Role == nil || *w.Role == "" {
			return nil, fmt.Errorf("messages[%d].role is required: %w", i, ErrInvalidChat)
		}
		m := Message{Role: *w.Role}
		if len(w.ToolCalls) > 0 && !bytes.Equal(bytes.TrimSpace(w.ToolCalls), []byte("null")) {
			m.ToolCalls = w.ToolCalls
		}
		if err := parseContent(&m, w.Content); err != nil {
			return nil, fmt.Errorf("messages[%d].content: %w", i, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// parseContent fills m.Content and m.MM from a string, null or part array.
func parseContent(m *Message, raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil
	}
	switch raw[0] {
	case '"':
		if err := json.Unmarshal(raw, &m.Content); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidChat, err)
		}
		return nil
	case '[':
	default:
		return fmt.Errorf("must be a string, null or an array of parts: %w", ErrInvalidChat)
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(raw, &parts); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidChat, err)
	}
	var sb strings.Builder
	for j, p := range parts {
		var wp wirePart
		if err := json.Unmarshal(p, &wp); err != nil {
			return fmt.Errorf("part %d: %w: %w", j, ErrInvalidChat, err)
		}
		switch wp.Type {
		case "text", "input_text", "output_text": // the Responses API's part types render as text (vLLM chat_utils)
			if wp.Text == nil {
				return fmt.Errorf("part %d: text part without text: %w", j, ErrInvalidChat)
			}
			sb.WriteString(*wp.Text)
		case "image_url", "video_url", "image_pil", "image_embeds":
			sb.WriteString(imagePlaceholder)
			m.MM = append(m.MM, partHash(p))
		case "input_audio", "audio_url":
			sb.WriteString(audioPlaceholder)
			m.MM = append(m.MM, partHash(p))
		default:
			return fmt.Errorf("part %d: unsupported content part type %q: %w", j, wp.Type, ErrInvalidChat)
		}
	}
	m.Content = sb.String()
	return nil
}

// partHash stands in for vLLM's multimodal hash: a stable digest of the
// part's JSON.
func partHash(p json.RawMessage) string {
	h := xxh3.Hash128(bytes.TrimSpace(p)).Bytes()
	return hex.EncodeToString(h[:])
}

// ChatOptions are the template switches of a chat request (and of the
// messages form of /tokenize).
type ChatOptions struct {
	// AddGenerationPrompt appends "<|im_start|>assistant\n" (default true in
	// both the chat endpoint and /tokenize).
	AddGenerationPrompt bool
	// ContinueFinalMessage leaves the last message open (no <|im_end|>) so
	// generation continues it; exclusive with AddGenerationPrompt.
	ContinueFinalMessage bool
	// Tools is the request's raw "tools" JSON, rendered into a leading
	// system section when present.
	Tools json.RawMessage
}

// Rendered is a chat prompt after the template.
type Rendered struct {
	// Text is the prompt text.
	Text string
	// MM lists the multimodal identifiers in prompt order; the i-th one
	// belongs to the i-th pad token (ImagePad or AudioPad) of the encoding.
	MM []string
}

// RenderChat applies the ChatML-like template: for every message
// "<|im_start|>{role}\n{content}<|im_end|>\n" (tool calls appended to the
// content as JSON), a leading "<|im_start|>system\n# Tools\n{tools}" section
// when tools are given, then the generation prompt.
func RenderChat(msgs []Message, opts ChatOptions) (Rendered, error) {
	if len(msgs) == 0 {
		return Rendered{}, fmt.Errorf("messages must not be empty: %w", ErrInvalidChat)
	}
	if opts.AddGenerationPrompt && opts.ContinueFinalMessage {
		return Rendered{}, fmt.Errorf("continue_final_message cannot be combined with add_generation_prompt: %w", ErrInvalidChat)
	}
	var sb strings.Builder
	var out Rendered
	tools := bytes.TrimSpace(opts.Tools)
	if len(tools) > 0 && !bytes.Equal(tools, []byte("null")) {
		sb.WriteString("<|im_start|>system\n# Tools\n")
		sb.Write(tools)
		sb.WriteString("<|im_end|>\n")
	}
	for i, m := range msgs {
		sb.WriteString("<|im_start|>")
		sb.WriteString(m.Role)
		sb.WriteString("\n")
		sb.WriteString(m.Content)
		if len(m.ToolCalls) > 0 {
			sb.WriteString("\n<tool_call>\n")
			sb.Write(bytes.TrimSpace(m.ToolCalls))
			sb.WriteString("\n</tool_call>")
		}
		out.MM = append(out.MM, m.MM...)
		if opts.ContinueFinalMessage && i == len(msgs)-1 {
			break
		}
		sb.WriteString("<|im_end|>\n")
	}
	if opts.AddGenerationPrompt {
		sb.WriteString("<|im_start|>assistant\n")
	}
	out.Text = sb.String()
	return out, nil
}
