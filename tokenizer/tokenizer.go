package tokenizer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"
)

// Tokenizer turns a request's prompt into the token ids the engine will
// hash. Implementations are safe for concurrent use. Every error is a
// *GuardError with Reason GuardTokenize: the router falls through Tier 1.5,
// the client never sees it.
type Tokenizer interface {
	// Tokenize appends the token ids of req to dst and returns the result.
	Tokenize(ctx context.Context, req Request, dst []uint32) ([]uint32, error)
}

// Request is one prompt in either of vLLM's /tokenize forms: the
// completion form (Prompt) or the chat form (Messages). Exactly one of the
// two must be set. Unset options take vLLM's defaults, which are the ones
// its generation endpoints use, so the ids equal what the engine hashes.
type Request struct {
	// Model is the served model name ("" lets the engine pick its only one).
	Model string
	// Prompt is the completion prompt text.
	Prompt string
	// Messages is the chat request's messages array, passed through as raw
	// JSON so the engine applies its chat template to exactly what the
	// client sent.
	Messages json.RawMessage
	// AddSpecialTokens overrides the engine default (true for Prompt,
	// false for Messages).
	AddSpecialTokens *bool
	// AddGenerationPrompt overrides the chat default (true, or false when
	// ContinueFinalMessage is set).
	AddGenerationPrompt *bool
	// ContinueFinalMessage continues the last message instead of opening a
	// new assistant turn (chat form).
	ContinueFinalMessage bool
	// ChatTemplate overrides the model's chat template (chat form).
	ChatTemplate string
	// ChatTemplateKwargs is passed through as raw JSON (chat form).
	ChatTemplateKwargs json.RawMessage
	// Tools is the request's tools array, raw JSON (chat form; templates
	// render tools into the prompt).
	Tools json.RawMessage
}

// Validate reports every problem with the request at once.
func (r Request) Validate() error {
	var errs []error
	chat := len(r.Messages) > 0
	switch {
	case chat && r.Prompt != "":
		errs = append(errs, errors.New("both prompt and messages set"))
	case !chat && r.Prompt == "":
		errs = append(errs, errors.New("neither prompt nor messages set"))
	}
	if chat && !isJSONArray(r.Messages) {
		errs = append(errs, errors.New("messages is not a JSON array"))
	}
	if len(r.Tools) > 0 && !isJSONArray(r.Tools) {
		errs = append(errs, errors.New("tools is not a JSON array"))
	}
	if len(r.ChatTemplateKwargs) > 0 && !(json.Valid(r.ChatTemplateKwargs) && firstByte(r.ChatTemplateKwargs) == '{') {
		errs = append(errs, errors.New("chat_template_kwargs is not a JSON object"))
	}
	if !chat && (r.AddGenerationPrompt != nil || r.ContinueFinalMessage || r.ChatTemplate != "" || len(r.Tools) > 0 || len(r.ChatTemplateKwargs) > 0) {
		errs = append(errs, errors.New("chat options set on a prompt request"))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("tokenize request: %w: %w", ErrMalformed, errors.Join(errs...))
}

func isJSONArray(raw json.RawMessage) bool { return json.Valid(raw) && firstByte(raw) == '[' }

func firstByte(raw []byte) byte {
	s := bytes.TrimLeft(raw, " \t\r\n")
	if len(s) == 0 {
		return 0
	}
	return s[0]
}

// tokenizeBody is the JSON sent to POST /tokenize. Field order is fixed, so
// equal requests give equal bytes (the cache key).
type tokenizeBody struct {
	Model                string          `json:"model,omitempty"`
	Prompt               *string         `json:"prompt,omitempty"`
	Messages             json.RawMessage `json:"messages,omitempty"`
	AddSpecialTokens     *bool           `json:"add_special_tokens,omitempty"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt,omitempty"`
	ContinueFinalMessage bool            `json:"continue_final_message,omitempty"`
	ChatTemplate         string          `json:"chat_template,omitempty"`
	ChatTemplateKwargs   json.RawMessage `json:"chat_template_kwargs,omitempty"`
	Tools                json.RawMessage `json:"tools,omitempty"`
}

// body builds the wire request.
func (r Request) body() ([]byte, error) {
	b := tokenizeBody{Model: r.Model, AddSpecialTokens: r.AddSpecialTokens}
	if len(r.Messages) > 0 {
		b.Messages = r.Messages
		agp := !r.ContinueFinalMessage
		if r.AddGenerationPrompt != nil {
			agp = *r.AddGenerationPrompt
		}
		b.AddGenerationPrompt = &agp
		b.ContinueFinalMessage = r.ContinueFinalMessage
		b.ChatTemplate, b.ChatTemplateKwargs, b.Tools = r.ChatTemplate, r.ChatTemplateKwargs, r.Tools
	} else {
		p := r.Prompt
		b.Prompt = &p
	}
	raw, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("tokenize body: %w: %w", ErrMalformed, err)
	}
	return raw, nil
}

// Options configures the tokenizer of one rule (New).
type Options struct {
	// Engines are the base URLs (http://host:port) of the rule's engines'
	// /tokenize, tried in this order, starting with the last one that
	// answered. Every engine of a rule serves the same model, so any may
	// tokenize. At least one is required.
	Engines []string
	// Timeout is each /tokenize call's deadline (0: DefaultRemoteTimeout).
	Timeout time.Duration
	// Dir is the rule's tokenizer directory (LocalConfig.Dir); "" sends
	// every request to the engines.
	Dir string
	// Registry, Counters and Log are the Local's (LocalConfig); unused
	// without Dir.
	Registry *Registry
	Counters Counters
	Log      zerolog.Logger
}

// New builds a rule's Tier-1.5 tokenizer: the engines' /tokenize with
// failover, wrapped by an in-process Local when Dir is set (the Local
// falls back to the engines for whatever it does not cover and checks a
// sample of its answers against them).
func New(o Options) (Tokenizer, error) {
	remote, err := newFailover(o.Engines, o.Timeout)
	if err != nil {
		return nil, err
	}
	if o.Dir == "" {
		return remote, nil
	}
	return NewLocal(LocalConfig{Dir: o.Dir, Remote: remote, Registry: o.Registry, Counters: o.Counters, Log: o.Log})
}
