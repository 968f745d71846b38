package tokenizer

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/llbproject/llb/tokenizer/jinja"
)

// Chat requests: the model's chat template rendered as vLLM renders it
// (vLLM's message preprocessing, then transformers' apply_chat_template on
// Python jinja2), then encoded without special tokens by default. Only
// templates on verifiedTemplates render in process: each has passed make
// tokenizer-parity's render corpus (tools included) against Python
// jinja2. Any other template, a per-request chat_template, or a render
// error sends the request to the engine.

// verifiedTemplates maps the sha256 of a chat template's source to its
// name. Each entry has passed TestParity_ChatRenders (663 chats: tools,
// tool calls and results, reasoning, continue_final_message, kwargs,
// unicode; identical renders and ids), which also fails when an entry here
// was not among the templates it checked. The sources are the models'
// published templates (tokenizer_config.json or chat_template.jinja, byte
// for byte; see testdata/templates/README.md).
var verifiedTemplates = map[string]string{
	"87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5": "qwen3",
	"b48c47f6443892716176eb200bf4ef108f64e06ca26ed0fa8ebc0a4b3992fcb2": "llama3",
	"ba03a121d097859c7b5b9cd03af99aafe95275210d2876f642ad9929a150f122": "llama3.1-simple",
	"3b8267e54b67df6500f231ffa969955cc9d26b3444a291ced4eb96ca7d3ca1ea": "deepseek-v3",
	"45690185067ea25c073bff2d3e425a45ee2564d2bbf6cdf7d885e139d460b8e0": "deepseek-v3.1",
	"ecd6ae513fe103f0eb62e8ab5bfa8d0fe45c1074fa398b089c93a7e70c15cfd6": "gemma2",
	"7de1c58e208eda46e9c7f86397df37ec49883aeece39fb961e0a6b24088dd3c4": "gemma3",
	"e8d5b5a546d3f19df16a5320c614fab05bdc4edd50e850f1afd947b503ea41cf": "llama2-chat",
	"e16746b40344d6c5b5265988e0328a0bf7277be86f1c335156eae07e29c82826": "mistral-v0.3",
	"7a29791b46bd731f43fbe4994f23c7b689daaa36c4d0294485fab19825a2ec5d": "mistral-nemo",
	"a1041ee337c95a44e19be5f64497f9e9e2f191ffc93b8a385cb6f2bab746c6dc": "gpt-oss",
}

// VerifiedTemplates returns the names of the templates rendered in process
// by their sha256 (hex).
func VerifiedTemplates() map[string]string {
	out := make(map[string]string, len(verifiedTemplates))
	for k, v := range verifiedTemplates {
		out[k] = v
	}
	return out
}

// TemplateID is the sha256 (hex) of a chat template's source.
func TemplateID(src string) string { return templateID(src) }

// chatTemplate is a model's parsed, verified default chat template.
type chatTemplate struct {
	name string
	tmpl *jinja.Template
}

// templateID is the key of verifiedTemplates.
func templateID(src string) string {
	sum := sha256.Sum256([]byte(src))
	return fmt.Sprintf("%x", sum)
}

// setChat parses the configured chat template when it is verified.
func (t *Encoder) setChat() {
	name, ok := verifiedTemplates[templateID(t.config.ChatTemplate)]
	if !ok || t.config.ChatTemplate == "" {
		return
	}
	tmpl, err := jinja.Parse(t.config.ChatTemplate)
	if err != nil {
		return
	}
	t.chat = &chatTemplate{name: name, tmpl: tmpl}
}

// ChatPath says how tok's chat requests are tokenized: "local:<template>"
// (a verified template rendered in process) or "engine" (the engine's
// /tokenize).
func ChatPath(tok *Encoder) string {
	if tok.chat == nil {
		return "engine"
	}
	return "local:" + tok.chat.name
}

// encodeChat renders a chat request with the model's template and encodes
// it. ok is false when the request needs the engine.
func encodeChat(tok *Encoder, req Request, dst []uint32) ([]uint32, bool, error) {
	if tok.chat == nil || req.ChatTemplate != "" {
		return dst, false, nil
	}
	text, err := tok.renderChat(tok.chat.tmpl, req, time.Now())
	if err != nil {
		return dst, false, nil // the engine decides (it may reject the request too)
	}
	add := false
	if req.AddSpecialTokens != nil {
		add = *req.AddSpecialTokens
	}
	return tok.Encode(text, add, dst), true, nil
}

// RenderChat renders req's messages with template src (the model's
// default when src is ""), as vLLM's /tokenize does, with now as
// strftime_now's clock. It renders any template, verified or not (the
// parity tests use it); the request path renders verified ones only.
func (t *Encoder) RenderChat(src string, req Request, now time.Time) (string, error) {
	if err := req.Validate(); err != nil {
		return "", err
	}
	if src == "" && t.chat != nil {
		return t.renderChat(t.chat.tmpl, req, now)
	}
	if src == "" {
		src = t.config.ChatTemplate
	}
	if src == "" {
		return "", fmt.Errorf("chat: %w: the model has no chat template", ErrUnsupported)
	}
	tmpl, err := jinja.Parse(src)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return t.renderChat(tmpl, req, now)
}

// reservedKwargs are names chat_template_kwargs may not override.
var reservedKwargs = map[string]bool{
	"messages": true, "tools": true, "documents": true, "add_generation_prompt": true,
	"continue_final_message": true, "chat_template": true, "tokenize": true, "conversation": true,
}

// renderChat renders a chat request; the request's JSON is checked by
// parsing it (the caller has checked the rest).
func (t *Encoder) renderChat(tmpl *jinja.Template, req Request, now time.Time) (string, error) {
	agp := !req.ContinueFinalMessage
	if req.AddGenerationPrompt != nil {
		agp = *req.AddGenerationPrompt
	}
	if agp && req.ContinueFinalMessage {
		return "", fmt.Errorf("chat: add_generation_prompt and continue_final_message both set: %w", ErrMalformed)
	}
	msgs, err := vllmMessages(req.Messages)
	if err != nil {
		return "", err
	}
	vars := map[string]jinja.Value{
		"messages":              msgs,
		"tools":                 nil,
		"documents":             nil,
		"add_generation_prompt": agp,
		"strftime_now":          jinja.StrftimeNow(func() time.Time { return now }),
	}
	if len(req.Tools) > 0 {
		if vars["tools"], err = vllmTools(req.Tools); err != nil {
			return "", err
		}
	}
	for name, v := range map[string]string{"bos_token": t.config.BOS, "eos_token": t.config.EOS, "unk_token": t.config.UNK, "pad_token": t.config.PAD} {
		if v != "" {
			vars[name] = v
		}
	}
	if len(t.config.AdditionalSpecial) > 0 {
		extra := make([]jinja.Value, len(t.config.AdditionalSpecial))
		for i, s := range t.config.AdditionalSpecial {
			extra[i] = s
		}
		vars["additional_special_tokens"] = extra
	}
	if len(req.ChatTemplateKwargs) > 0 {
		kw, err := jinja.ParseJSON(req.ChatTemplateKwargs)
		if err != nil {
			return "", fmt.Errorf("chat_template_kwargs: %w: %w", ErrMalformed, err)
		}
		d, ok := kw.(*jinja.Dict)
		if !ok {
			return "", fmt.Errorf("chat_template_kwargs: %w: not an object", ErrMalformed)
		}
		for _, k := range d.Keys() {
			if reservedKwargs[k] {
				return "", fmt.Errorf("chat_template_kwargs: %q: %w", k, ErrUnsupported)
			}
			vars[k], _ = d.Get(k)
		}
	}
	out, err := tmpl.Render(vars)
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	if req.ContinueFinalMessage {
		return continueFinal(out, msgs)
	}
	return out, nil
}

// continueFinal cuts the render after the final message's content, as
// transformers does for continue_final_message.
func continueFinal(rendered string, msgs []jinja.Value) (string, error) {
	if len(msgs) == 0 {
		return "", fmt.Errorf("chat: continue_final_message without messages: %w", ErrMalformed)
	}
	last, _ := msgs[len(msgs)-1].(*jinja.Dict)
	c, _ := last.Get("content")
	final, ok := c.(string)
	if !ok {
		return "", fmt.Errorf("chat: continue_final_message: final content is not text: %w", ErrUnsupported)
	}
	trimmed := strings.TrimSpace(final)
	at := strings.LastIndex(rendered, trimmed)
	if at < 0 {
		return "", fmt.Errorf("chat: continue_final_message: final message not in the render: %w", ErrMalformed)
	}
	lead := strings.TrimLeft(final, " \t\n\r\v\f")
	if strings.HasPrefix(rendered[at:], lead) {
		return rendered[:at+len(lead)], nil
	}
	return rendered[:at+len(trimmed)], nil
}

// vllmMessages applies vLLM's chat message parsing for templates that take
// string content (parse_chat_messages with content format "string"): text
// parts joined with "\n", only the keys vLLM keeps, tool-call arguments
// parsed from JSON (invalid → {}), empty tool_calls dropped.
func vllmMessages(raw json.RawMessage) ([]jinja.Value, error) {
	v, err := jinja.ParseJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("messages: %w: %w", ErrMalformed, err)
	}
	list, ok := v.([]jinja.Value)
	if !ok {
		return nil, fmt.Errorf("messages: %w: not a list", ErrMalformed)
	}
	out := make([]jinja.Value, 0, len(list))
	for i, m := range list {
		msg, ok := m.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("message %d: %w: not an object", i, ErrMalformed)
		}
		cm, err := conversationMessage(msg)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
		out = append(out, cm)
	}
	return out, nil
}

func conversationMessage(msg *jinja.Dict) (*jinja.Dict, error) {
	roleV, _ := msg.Get("role")
	role, ok := roleV.(string)
	if !ok {
		return nil, fmt.Errorf("%w: role is not a string", ErrMalformed)
	}
	text, err := contentText(msg)
	if err != nil {
		return nil, err
	}
	cm := jinja.NewDict()
	cm.Set("role", role)
	cm.Set("content", text)
	switch role {
	case "assistant":
		if tc, ok := msg.Get("tool_calls"); ok && tc != nil {
			calls, err := toolCalls(tc)
			if err != nil {
				return nil, err
			}
			if len(calls) > 0 {
				cm.Set("tool_calls", calls)
			}
		}
		if r, ok := msg.Get("reasoning"); ok && r != nil {
			cm.Set("reasoning", r)
			cm.Set("reasoning_content", r)
		}
	case "tool":
		if id, ok := msg.Get("tool_call_id"); ok {
			cm.Set("tool_call_id", id)
		}
	case "developer":
		return nil, fmt.Errorf("developer messages: %w", ErrUnsupported)
	}
	if n, ok := msg.Get("name"); ok {
		if s, isStr := n.(string); isStr {
			cm.Set("name", s)
		}
	}
	if n, ok := msg.Get("task"); ok {
		if s, isStr := n.(string); isStr {
			cm.Set("task", s)
		}
	}
	return cm, nil
}

// contentText is the message's content as one string: a string as is,
// text parts joined with "\n", none as "".
func contentText(msg *jinja.Dict) (string, error) {
	c, _ := msg.Get("content")
	switch x := c.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case []jinja.Value:
		var texts []string
		for _, p := range x {
			switch part := p.(type) {
			case string:
				texts = append(texts, part)
			case *jinja.Dict:
				typ, _ := part.Get("type")
				key := ""
				switch typ {
				case "text", "input_text", "output_text":
					key = "text"
				case "refusal":
					key = "refusal"
				default:
					return "", fmt.Errorf("content part %v: %w", typ, ErrUnsupported)
				}
				t, _ := part.Get(key)
				switch s := t.(type) {
				case nil:
				case string:
					texts = append(texts, s)
				default:
					return "", fmt.Errorf("content part text: %w", ErrMalformed)
				}
			default:
				return "", fmt.Errorf("content part: %w", ErrMalformed)
			}
		}
		return strings.Join(texts, "\n"), nil
	}
	return "", fmt.Errorf("content: %w", ErrMalformed)
}

// toolCalls validates an assistant's tool_calls as vLLM's request model
// does (id, function{arguments, name}, type; the keys in that order) and
// parses each arguments string.
func toolCalls(v jinja.Value) ([]jinja.Value, error) {
	list, ok := v.([]jinja.Value)
	if !ok {
		return nil, fmt.Errorf("tool_calls: %w: not a list", ErrMalformed)
	}
	out := make([]jinja.Value, 0, len(list))
	for _, it := range list {
		call, ok := it.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("tool_call: %w", ErrMalformed)
		}
		fnV, _ := call.Get("function")
		fn, ok := fnV.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("tool_call function: %w", ErrMalformed)
		}
		id, okID := call.Get("id")
		typ, okType := call.Get("type")
		name, okName := fn.Get("name")
		args, okArgs := fn.Get("arguments")
		if !okID || !okType || !okName || !okArgs {
			return nil, fmt.Errorf("tool_call without id, type, function.name or function.arguments: %w", ErrMalformed)
		}
		switch a := args.(type) {
		case string:
			parsed, err := jinja.ParseJSON([]byte(a))
			if err != nil {
				parsed = jinja.NewDict()
			}
			args = parsed
		case *jinja.Dict, []jinja.Value:
		default:
			args = jinja.NewDict()
		}
		f := jinja.NewDict()
		f.Set("arguments", args)
		f.Set("name", name)
		c := jinja.NewDict()
		c.Set("id", id)
		c.Set("function", f)
		c.Set("type", typ)
		out = append(out, c)
	}
	return out, nil
}

// vllmTools is the request's tools as vLLM passes them to the template:
// each tool model_dump()ed (type, function{name, description, parameters,
// extras}, extras), absent optional fields as None.
func vllmTools(raw json.RawMessage) ([]jinja.Value, error) {
	v, err := jinja.ParseJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("tools: %w: %w", ErrMalformed, err)
	}
	list, ok := v.([]jinja.Value)
	if !ok {
		return nil, fmt.Errorf("tools: %w: not a list", ErrMalformed)
	}
	out := make([]jinja.Value, 0, len(list))
	for _, it := range list {
		tool, ok := it.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("tool: %w", ErrMalformed)
		}
		fnV, _ := tool.Get("function")
		fn, ok := fnV.(*jinja.Dict)
		if !ok {
			return nil, fmt.Errorf("tool function: %w", ErrMalformed)
		}
		if n, ok := fn.Get("name"); !ok || n == nil {
			return nil, fmt.Errorf("tool function without a name: %w", ErrMalformed)
		}
		typ := jinja.Value("function")
		if tv, ok := tool.Get("type"); ok {
			if tv != "function" {
				return nil, fmt.Errorf("tool type %v: %w", tv, ErrUnsupported)
			}
			typ = tv
		}
		f := jinja.NewDict()
		for _, k := range []string{"name", "description", "parameters"} {
			fv, _ := fn.Get(k)
			f.Set(k, fv)
		}
		for _, k := range fn.Keys() {
			if k != "name" && k != "description" && k != "parameters" {
				fv, _ := fn.Get(k)
				f.Set(k, fv)
			}
		}
		d := jinja.NewDict()
		d.Set("type", typ)
		d.Set("function", f)
		for _, k := range tool.Keys() {
			if k != "type" && k != "function" {
				tv, _ := tool.Get(k)
				d.Set(k, tv)
			}
		}
		out = append(out, d)
	}
	return out, nil
}
