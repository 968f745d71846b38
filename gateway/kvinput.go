package gateway

import (
	"context"
	"encoding/json"
	"strconv"
	"time"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
)

// Tier-1.5 input: the prompt's block-key chain, computed in the request's
// own goroutine (so hashing runs in parallel across requests) before the
// router is asked. Every failure becomes a guard reason in KVInput.Guard —
// Tier 1.5 falls through and the request is still served.

// TokenizeInput is one /tokenize request (vllm-contract.md §5): the
// completion form (Prompt) or the chat form (Messages plus the template
// inputs), exactly as the generation request carried them, so the engine
// returns the ids it will hash.
type TokenizeInput struct {
	// Model is the request's model.
	Model string
	// Prompt is the completion prompt (completion form).
	Prompt string
	// Messages is the raw messages array (chat form); nil for the
	// completion form.
	Messages json.RawMessage
	// Raw optional fields copied from the generation request (nil when
	// absent): add_special_tokens (both forms), chat_template,
	// chat_template_kwargs, tools, add_generation_prompt,
	// continue_final_message, mm_processor_kwargs (chat form).
	AddSpecialTokens, ChatTemplate, ChatTemplateKwargs, Tools    json.RawMessage
	AddGenerationPrompt, ContinueFinalMessage, MMProcessorKwargs json.RawMessage
}

// IsChat reports whether this is the chat form.
func (in *TokenizeInput) IsChat() bool { return in.Messages != nil }

// AppendJSON appends the /tokenize request body for in.
func (in *TokenizeInput) AppendJSON(b []byte) []byte {
	b = append(b, `{"model":`...)
	b = strconv.AppendQuote(b, in.Model)
	if in.IsChat() {
		b = append(b, `,"messages":`...)
		b = append(b, in.Messages...)
		b = appendRaw(b, "chat_template", in.ChatTemplate)
		b = appendRaw(b, "chat_template_kwargs", in.ChatTemplateKwargs)
		b = appendRaw(b, "tools", in.Tools)
		b = appendRaw(b, "add_generation_prompt", in.AddGenerationPrompt)
		b = appendRaw(b, "continue_final_message", in.ContinueFinalMessage)
		b = appendRaw(b, "mm_processor_kwargs", in.MMProcessorKwargs)
	} else {
		b = append(b, `,"prompt":`...)
		pb, _ := json.Marshal(in.Prompt) // a string always marshals
		b = append(b, pb...)
	}
	b = appendRaw(b, "add_special_tokens", in.AddSpecialTokens)
	return append(b, '}')
}

func appendRaw(b []byte, key string, v json.RawMessage) []byte {
	if v == nil {
		return b
	}
	b = append(b, ',', '"')
	b = append(b, key...)
	b = append(b, '"', ':')
	return append(b, v...)
}

// Tokenizer is what the gateway needs from the engine's /tokenize client
// (inventory's client, adapted by the runtime). Implementations must honour
// ctx's deadline and be safe for concurrent use.
type Tokenizer interface {
	// Tokenize returns the token ids the engine computes for in.
	Tokenize(ctx context.Context, in *TokenizeInput) ([]uint32, error)
}

// kvInput computes Tier-1.5 inputs for one rule.
type kvInput struct {
	hasher    inventory.ChainHasher // nil → every request is a hash_contract guard
	tokenizer Tokenizer             // nil → text prompts are tokenize guards
	timeout   time.Duration
}

// compute returns the chain and the KV input for req. pd selects P/D rules'
// multi-prompt policy (no chain: the request is served whole by the decode
// endpoint; see servePD).
func (k *kvInput) compute(ctx context.Context, req *Request, lora string, pd bool) ([]uint64, ladder.KVInput) {
	guard := func(r ladder.Reason) ([]uint64, ladder.KVInput) { return nil, ladder.KVInput{Guard: r} }
	if k.hasher == nil || req.PromptEmbeds {
		return guard(ladder.ReasonHashContract)
	}
	if req.PromptCount() > 1 && pd {
		return guard(ladder.ReasonHashContract)
	}
	extra := inventory.ExtraKeys{LoRAName: lora, CacheSalt: req.CacheSalt}
	var toks []uint32
	switch {
	case req.Form == PromptTokens || req.Form == PromptTokenLists:
		toks = req.Tokens[0]
	case req.Kind == KindChat:
		empty := true
		for i := range req.Messages {
			if req.Messages[i].Media {
				return guard(ladder.ReasonHashContract)
			}
			if req.Messages[i].Text != "" {
				empty = false
			}
		}
		if empty {
			return guard(ladder.ReasonEmptyText)
		}
		if req.Model == "" {
			return guard(ladder.ReasonModelEmpty)
		}
		in := &TokenizeInput{
			Model: req.Model, Messages: req.RawMessages, AddSpecialTokens: req.AddSpecialTokens,
			ChatTemplate: req.ChatTemplate, ChatTemplateKwargs: req.ChatTemplateKwargs, Tools: req.Tools,
			AddGenerationPrompt: req.AddGenerationPrompt, ContinueFinalMessage: req.ContinueFinalMessage,
			MMProcessorKwargs: req.MMProcessorKwargs,
		}
		var ok bool
		if toks, ok = k.tokenize(ctx, in); !ok {
			return guard(ladder.ReasonTokenize)
		}
	default:
		if req.Texts[0] == "" {
			return guard(ladder.ReasonEmptyText)
		}
		if req.Model == "" {
			return guard(ladder.ReasonModelEmpty)
		}
		in := &TokenizeInput{Model: req.Model, Prompt: req.Texts[0], AddSpecialTokens: req.AddSpecialTokens}
		var ok bool
		if toks, ok = k.tokenize(ctx, in); !ok {
			return guard(ladder.ReasonTokenize)
		}
	}
	if len(toks) == 0 {
		return guard(ladder.ReasonEmptyText)
	}
	bs := k.hasher.BlockSize()
	chain := k.hasher.AppendBlockKeys(make([]uint64, 0, len(toks)/max(bs, 1)), toks, extra)
	return chain, ladder.KVInput{PromptBlocks: uint32(len(chain)), PromptTokens: uint32(len(toks))}
}

// tokenize calls the tokenizer under the rule's deadline; false on any
// failure (a guard, not a client error).
func (k *kvInput) tokenize(ctx context.Context, in *TokenizeInput) ([]uint32, bool) {
	if k.tokenizer == nil {
		return nil, false
	}
	tctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	toks, err := k.tokenizer.Tokenize(tctx, in)
	return toks, err == nil
}
