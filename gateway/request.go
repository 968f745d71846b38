package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"

	"github.com/llbproject/llb/ladder"
)

// OpenAI request parsing. Only what routing needs is read; the body itself
// is forwarded byte-for-byte (except the P/D prefill rewrite). Keys are
// matched exactly (case-sensitive, as vLLM's pydantic models do; Go's
// encoding/json would also bind "Model" to model) and, like Python's json,
// the last of duplicate keys wins.

// HeaderConversationID is the client's conversation id header: the Tier-0
// key when present (it overrides user_id), and the CHWBL fallback key.
const HeaderConversationID = "X-Conversation-Id"

// DefaultBodyLimit bounds a request body when Options.BodyLimit is 0.
const DefaultBodyLimit = 16 << 20

// PromptForm is the shape of a completion's prompt field.
type PromptForm uint8

// Prompt forms (vllm-contract.md §8).
const (
	// PromptNone: no prompt (a chat request, or prompt_embeds only).
	PromptNone PromptForm = iota
	// PromptText: one string.
	PromptText
	// PromptTexts: an array of strings (a multi-prompt request when len > 1).
	PromptTexts
	// PromptTokens: one array of token ids.
	PromptTokens
	// PromptTokenLists: an array of token-id arrays.
	PromptTokenLists
)

// ChatMessage is one chat message as routing sees it.
type ChatMessage struct {
	// Role is the message's role ("system", "user", ...).
	Role string
	// Text is the content's text: the string content, or the text parts
	// concatenated; a non-text part contributes a "[type:ref]" marker so two
	// requests with different images do not render alike.
	Text string
	// Media is true when the content has a non-text part (image, audio,
	// video, file): Tier 1.5 cannot reproduce the engine's multimodal hashes
	// for it.
	Media bool
}

// Request is a parsed OpenAI generation request. It does not own Body
// exclusively: Body is the exact bytes the client sent.
type Request struct {
	// Kind is the API the request came in on.
	Kind APIKind
	// Body is the client's body, forwarded as-is on single-pool and decode
	// legs.
	Body []byte
	// Model is the model field; "" when absent.
	Model string
	// Stream is the stream field (false when absent or null).
	Stream bool
	// Form is the completion prompt's shape (PromptNone for chat).
	Form PromptForm
	// Texts holds the prompt strings (PromptText: one, PromptTexts: ≥ 1).
	Texts []string
	// Tokens holds the token-id prompts (PromptTokens: one, PromptTokenLists:
	// ≥ 1).
	Tokens [][]uint32
	// PromptEmbeds is true when the completion carries prompt_embeds (no
	// text or tokens to hash).
	PromptEmbeds bool
	// Messages are the chat messages, in order.
	Messages []ChatMessage
	// RawMessages is the messages array as sent, for /tokenize's chat form.
	RawMessages json.RawMessage
	// ChatTemplate, ChatTemplateKwargs, Tools, AddGenerationPrompt and
	// ContinueFinalMessage are the raw chat-template inputs, forwarded to
	// /tokenize so the engine renders exactly what it will serve; nil when
	// absent.
	ChatTemplate, ChatTemplateKwargs, Tools       json.RawMessage
	AddGenerationPrompt, ContinueFinalMessage     json.RawMessage
	MMProcessorKwargs, AddSpecialTokens, Truncate json.RawMessage
	// UserID is the user_id field (the seed page's Tier-0 key).
	UserID string
	// User is OpenAI's user field, a lower-priority fallback for UserID.
	User string
	// CacheSalt is vLLM's cache_salt (it changes every block hash).
	CacheSalt string
	// HasMaxCompletionTokens is true when the body has max_completion_tokens
	// (the prefill rewrite sets it to 1 only then).
	HasMaxCompletionTokens bool
	// ConversationID is the X-Conversation-Id header.
	ConversationID string
	// PreviousResponseID is a Responses API request's previous_response_id:
	// the stored response it continues ("" for none).
	PreviousResponseID string
	// Store is a Responses API request's store field (true when absent):
	// whether the engine keeps the response for later requests to name.
	Store bool

	// Cont is what migration needs to know of the request (migrate.go).
	Cont contInput

	// guard, when set, is the Tier-1.5 guard reason the request gets
	// whatever its prompt: llb cannot reproduce the engine's prompt (a
	// Responses API continuation, a shape the conversion does not take).
	guard ladder.Reason

	// bodyOwned: Body is this request's alone for good (nothing writes to
	// it again), so the prompt strings share its bytes instead of copying
	// them (see parse).
	bodyOwned bool
}

// chatForm reports whether the request's prompt is chat messages (chat,
// the Responses and Messages APIs, the chat form of the pooling APIs).
func (r *Request) chatForm() bool { return len(r.Messages) > 0 }

// PromptCount returns how many prompts a completion carries (1 for chat).
func (r *Request) PromptCount() int {
	switch r.Form {
	case PromptText, PromptTexts:
		return len(r.Texts)
	case PromptTokens, PromptTokenLists:
		return len(r.Tokens)
	}
	return 1
}

// SessionUser returns the user id routing keys on: user_id, else OpenAI's
// user. (X-Conversation-Id overrides both; see ladder.SessionKeyFor.)
func (r *Request) SessionUser() string {
	if r.UserID != "" {
		return r.UserID
	}
	return r.User
}

// ParseRequest parses body as a request of kind. Problems are returned as a
// *ClientError (400) naming the field; use errors.As.
func ParseRequest(kind APIKind, body []byte) (*Request, error) {
	r := new(Request)
	if err := r.parse(kind, body, false); err != nil {
		return nil, err
	}
	return r, nil
}

// parse is ParseRequest into r, which it resets first, keeping the
// capacity of its slices (the data plane reuses one Request per exchange).
// owned says that body is the request's alone for good: nothing will write
// to it again (the server does not pool a buffer over maxKeptBodyBuffer,
// and the h2c front end reads each body into a buffer of its own). The
// prompt texts then share the body's bytes where they need no unescaping,
// so a prompt as large as the body is not held twice.
func (r *Request) parse(kind APIKind, body []byte, owned bool) error {
	*r = Request{Kind: kind, Body: body, Texts: r.Texts[:0], Tokens: r.Tokens[:0], Messages: r.Messages[:0], bodyOwned: owned, Store: true,
		Cont: contInput{maxTokens: -1, maxCompletionTokens: -1, minTokens: -1}}
	if !validJSON(body) {
		return requestError(http.StatusBadRequest, CodeInvalidJSON, "", "the request body is not valid JSON")
	}
	var f bodyFields
	var err error
	it := memberIter{doc: body}
	for err == nil && it.next() {
		err = r.member(kind, &it.m, &f)
	}
	if err == nil {
		err = it.err
	}
	if err != nil {
		var ce *ClientError
		if errors.As(err, &ce) {
			return ce
		}
		return requestError(http.StatusBadRequest, CodeInvalidJSON, "", "the request body must be a JSON object")
	}
	return r.prompt(kind, &f)
}

// bodyFields are the raw values of the members that hold a request's
// prompt, by API (nil when absent or null).
type bodyFields struct {
	prompt, messages, input, instructions, system, tools, query, text1 []byte
}

// member reads one top-level member of a request body.
func (r *Request) member(kind APIKind, m *member, f *bodyFields) error {
	raw := func() []byte {
		if isNull(m.val) {
			return nil
		}
		return m.val
	}
	switch string(m.key) {
	case "model":
		return decodeString(m, &r.Model)
	case "stream":
		return decodeBool(m, &r.Stream)
	case "stream_options":
		if err := expectObject(m); err != nil {
			return err
		}
		r.Cont.readStreamOptions(m.val)
	case "kv_transfer_params":
		return expectObject(m)
	case "max_tokens":
		var err error
		r.Cont.maxTokens, err = decodeCount(m)
		return err
	case "min_tokens":
		var err error
		r.Cont.minTokens, err = decodeCount(m)
		return err
	case "max_completion_tokens":
		r.HasMaxCompletionTokens = true
		var err error
		r.Cont.maxCompletionTokens, err = decodeCount(m)
		return err
	case "user_id":
		return decodeString(m, &r.UserID)
	case "user":
		return decodeString(m, &r.User)
	case "cache_salt":
		return decodeString(m, &r.CacheSalt)
	case "prompt":
		f.prompt = raw()
	case "prompt_embeds":
		r.PromptEmbeds = !isNull(m.val)
	case "messages":
		f.messages = raw()
	case "input":
		f.input = raw()
	case "instructions":
		f.instructions = raw()
	case "system":
		f.system = raw()
	case "query":
		f.query = raw()
	case "text_1", "queries":
		f.text1 = raw()
	case "previous_response_id":
		return decodeString(m, &r.PreviousResponseID)
	case "store":
		if isNull(m.val) {
			r.Store = true
			return nil
		}
		return decodeBool(m, &r.Store)
	case "metadata":
		return r.metadata(m)
	case "chat_template":
		r.ChatTemplate = keep(m.val)
	case "chat_template_kwargs":
		r.ChatTemplateKwargs = keep(m.val)
	case "tools":
		r.Tools = keep(m.val)
		f.tools = raw()
	case "add_generation_prompt":
		r.AddGenerationPrompt = keep(m.val)
		gen := true
		_ = decodeBool(m, &gen)
		r.Cont.noGenPrompt = !gen && !isNull(m.val)
	case "continue_final_message":
		r.ContinueFinalMessage = keep(m.val)
		_ = decodeBool(m, &r.Cont.continueFinal)
	case "mm_processor_kwargs":
		r.MMProcessorKwargs = keep(m.val)
	case "add_special_tokens":
		r.AddSpecialTokens = keep(m.val)
	case "truncate_prompt_tokens":
		r.Truncate = keep(m.val)
	default:
		if c := contField(string(m.key)); c != 0 {
			r.Cont.readField(c, kind, m)
		}
	}
	return nil
}

// metadata reads Anthropic's metadata.user_id (the Tier-0 user of a
// Messages API request); other APIs' metadata is not read.
func (r *Request) metadata(m *member) error {
	if r.Kind != KindMessages || isNull(m.val) {
		return nil
	}
	if m.val[0] != '{' {
		return fieldError("metadata", "metadata must be an object")
	}
	var err error
	_ = forEachMember(m.val, func(u *member) error {
		if string(u.key) == "user_id" {
			if u.val[0] == '"' {
				r.User = unquote(u.val)
			} else if !isNull(u.val) {
				err = fieldError("metadata.user_id", "metadata.user_id must be a string")
			}
		}
		return nil
	})
	return err
}

// prompt reads the request's prompt from the members of its API.
func (r *Request) prompt(kind APIKind, f *bodyFields) error {
	switch kind {
	case KindCompletion:
		if f.prompt != nil {
			return r.parsePrompt(f.prompt)
		} else if !r.PromptEmbeds {
			return requestError(http.StatusBadRequest, CodeMissingField, "prompt", "a completion request needs a prompt (or prompt_embeds)")
		}
	case KindChat:
		if f.messages == nil {
			return requestError(http.StatusBadRequest, CodeMissingField, "messages", "a chat completion request needs a messages array")
		}
		return r.parseMessages(f.messages)
	case KindResponses:
		r.Tools = nil // Responses tools are not chat tools; with tools the template differs
		if f.tools != nil && len(f.tools) > 2 {
			r.guard = ladder.ReasonTokenize
		}
		return r.parseResponses(f.input, f.instructions)
	case KindMessages:
		r.Tools = nil
		return r.parseMessagesAPI(f.messages, f.system, f.tools)
	case KindEmbeddings, KindPooling, KindClassify:
		// vLLM's chat form (messages) or its input: the shapes of a
		// completion prompt. Other shapes are the engine's to judge.
		if f.messages != nil {
			if err := r.parseMessages(f.messages); err != nil {
				return err
			}
			return nil
		}
		r.loosePrompt(f.input)
	case KindScore:
		r.loosePrompt(f.text1)
	case KindRerank:
		r.loosePrompt(f.query)
	}
	return nil
}

// loosePrompt reads v as a prompt when it has one of a completion
// prompt's shapes, and leaves the request without a prompt otherwise.
func (r *Request) loosePrompt(v []byte) {
	if v == nil {
		return
	}
	if r.parsePrompt(v) != nil {
		r.Form, r.Texts, r.Tokens = PromptNone, r.Texts[:0], r.Tokens[:0]
	}
}

// forget drops what r references of its request — the body, the prompt
// strings and token arrays, the raw chat inputs — so that a pooled
// exchange does not keep a large body alive. Small slices keep their
// storage for the next parse; large ones (a request with many prompts or
// messages) are dropped.
func (r *Request) forget() {
	*r = Request{Texts: emptied(r.Texts), Tokens: emptied(r.Tokens), Messages: emptied(r.Messages)}
}

// maxKeptElems is the largest slice capacity forget keeps.
const maxKeptElems = 64

// emptied returns s cleared to length 0 with its storage zeroed, or nil
// when its storage is over maxKeptElems.
func emptied[T any](s []T) []T {
	if cap(s) > maxKeptElems {
		return nil
	}
	clear(s[:cap(s)])
	return s[:0]
}

// keep returns a raw value, or nil for JSON null.
func keep(v []byte) json.RawMessage {
	if isNull(v) {
		return nil
	}
	return v
}

func fieldError(param, msg string) *ClientError {
	return requestError(http.StatusBadRequest, CodeInvalidField, param, msg)
}

func decodeString(m *member, dst *string) error {
	if isNull(m.val) {
		*dst = ""
		return nil
	}
	if m.val[0] != '"' {
		return fieldError(string(m.key), string(m.key)+" must be a string")
	}
	*dst = unquote(m.val)
	return nil
}

// decodeBool reads a boolean the way vLLM's pydantic models do in lax mode:
// true/false, 0/1, and the strings "true"/"false", "yes"/"no", "on"/"off",
// "1"/"0", "t"/"f", "y"/"n" in any case; null is false.
func decodeBool(m *member, dst *bool) error {
	v := m.val
	if len(v) > 1 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 {
		v = bytes.ToLower(v[1 : len(v)-1])
		switch string(v) {
		case "true", "yes", "on", "1", "t", "y":
			*dst = true
			return nil
		case "false", "no", "off", "0", "f", "n":
			*dst = false
			return nil
		}
		return fieldError(string(m.key), string(m.key)+" must be a boolean")
	}
	switch string(v) {
	case "true", "1":
		*dst = true
	case "false", "null", "0":
		*dst = false
	default:
		return fieldError(string(m.key), string(m.key)+" must be a boolean")
	}
	return nil
}

func expectObject(m *member) error {
	if isNull(m.val) || (len(m.val) > 0 && m.val[0] == '{') {
		return nil
	}
	return fieldError(string(m.key), string(m.key)+" must be an object or null")
}

// decodeCount checks a token-count field: null or a whole non-negative
// number below 2^32 (10, 1e1 and 10.0 are all 10, as pydantic accepts them).
// It returns the number, or -1 for null.
func decodeCount(m *member) (int64, error) {
	if isNull(m.val) {
		return -1, nil
	}
	if n, ok := jsonCount(m.val); ok && n < 1<<32 {
		return n, nil
	}
	if len(m.val) > 0 && (m.val[0] == '-' || (m.val[0] >= '0' && m.val[0] <= '9')) {
		f, err := strconv.ParseFloat(string(m.val), 64)
		if err == nil && f >= 0 && f < 1<<32 && f == math.Trunc(f) {
			return int64(f), nil
		}
	}
	return -1, fieldError(string(m.key), string(m.key)+" must be a whole non-negative number below 2^32")
}
