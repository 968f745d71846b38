package gateway

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/tokenizer"
)

// Tier-1.5 input: the prompt's block-key chain, computed in the request's
// own goroutine (so hashing runs in parallel across requests) before the
// router is asked. Every failure becomes a guard reason in KVInput.Guard —
// Tier 1.5 falls through and the request is still served.

// kvInput computes Tier-1.5 inputs for one rule.
type kvInput struct {
	hasher    inventory.ChainHasher // nil → every request is a hash_contract guard
	tokenizer tokenizer.Tokenizer   // nil → text prompts are tokenize guards
	timeout   time.Duration
	toks      sync.Pool // *[]uint32 scratch for token ids (hashed, then dropped)
}

func newKVInput(hasher inventory.ChainHasher, tok tokenizer.Tokenizer, timeout time.Duration) *kvInput {
	k := &kvInput{hasher: hasher, tokenizer: tok, timeout: timeout}
	k.toks.New = func() any { b := make([]uint32, 0, 4096); return &b }
	return k
}

// compute returns the chain and the KV input for req. pd selects P/D rules'
// multi-prompt policy (no chain: the request is served whole by the decode
// endpoint; see servePD).
func (k *kvInput) compute(ctx context.Context, req *Request, lora string, pd bool) ([]uint64, ladder.KVInput) {
	guard := func(r ladder.Reason) ([]uint64, ladder.KVInput) { return nil, ladder.KVInput{Guard: r} }
	if req.guard != ladder.ReasonNone {
		return guard(req.guard)
	}
	if k.hasher == nil || req.PromptEmbeds {
		return guard(ladder.ReasonHashContract)
	}
	if pd && (req.PromptCount() > 1 || !req.Kind.splitsOnPD()) {
		// Served whole by the decode endpoint: the prefill endpoints'
		// caches say nothing about it.
		return guard(ladder.ReasonHashContract)
	}
	extra := inventory.ExtraKeys{LoRAName: lora, CacheSalt: req.CacheSalt}
	var toks []uint32
	switch {
	case req.Form == PromptTokens || req.Form == PromptTokenLists:
		toks = req.Tokens[0]
	case req.chatForm():
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
		tr, ok := chatTokenizeRequest(req)
		if !ok {
			return guard(ladder.ReasonTokenize)
		}
		bp := k.toks.Get().(*[]uint32)
		defer k.putToks(bp)
		if toks, ok = k.tokenize(ctx, tr, (*bp)[:0]); !ok {
			return guard(ladder.ReasonTokenize)
		}
		*bp = toks
	case req.Form == PromptNone:
		return guard(ladder.ReasonEmptyText)
	default:
		if req.Texts[0] == "" {
			return guard(ladder.ReasonEmptyText)
		}
		if req.Model == "" {
			return guard(ladder.ReasonModelEmpty)
		}
		tr := tokenizer.Request{Model: req.Model, Prompt: req.Texts[0], AddSpecialTokens: rawBool(req.AddSpecialTokens)}
		bp := k.toks.Get().(*[]uint32)
		defer k.putToks(bp)
		var ok bool
		if toks, ok = k.tokenize(ctx, tr, (*bp)[:0]); !ok {
			return guard(ladder.ReasonTokenize)
		}
		*bp = toks
	}
	if len(toks) == 0 {
		return guard(ladder.ReasonEmptyText)
	}
	bs := k.hasher.BlockSize()
	chain := k.hasher.AppendBlockKeys(make([]uint64, 0, len(toks)/max(bs, 1)), toks, extra)
	return chain, ladder.KVInput{PromptBlocks: uint32(len(chain)), PromptTokens: uint32(len(toks))}
}

// putToks returns a token buffer to the pool unless it grew huge.
func (k *kvInput) putToks(bp *[]uint32) {
	if cap(*bp) <= 1<<20 {
		k.toks.Put(bp)
	}
}

// chatTokenizeRequest builds the chat form of /tokenize from the request's
// own template inputs. ok is false when an input has a shape the engine
// would reject anyway (the request still goes out; Tier 1.5 just misses).
func chatTokenizeRequest(req *Request) (tokenizer.Request, bool) {
	tr := tokenizer.Request{
		Model:               req.Model,
		Messages:            req.RawMessages,
		AddSpecialTokens:    rawBool(req.AddSpecialTokens),
		AddGenerationPrompt: rawBool(req.AddGenerationPrompt),
		ChatTemplateKwargs:  req.ChatTemplateKwargs,
		Tools:               req.Tools,
	}
	if c := rawBool(req.ContinueFinalMessage); c != nil {
		tr.ContinueFinalMessage = *c
	}
	if t := req.ChatTemplate; t != nil {
		if t[0] != '"' {
			return tr, false
		}
		tr.ChatTemplate = unquote(t)
	}
	if len(req.MMProcessorKwargs) > 0 {
		return tr, false // multimodal processing options: cannot reproduce
	}
	return tr, true
}

// rawBool reads a raw JSON true/false; nil for anything else (absent, null,
// or a shape the engine will reject).
func rawBool(v json.RawMessage) *bool {
	switch string(v) {
	case "true":
		b := true
		return &b
	case "false":
		b := false
		return &b
	}
	return nil
}

// tokenize calls the tokenizer under the rule's deadline, appending to dst;
// false on any failure (a guard, not a client error).
func (k *kvInput) tokenize(ctx context.Context, tr tokenizer.Request, dst []uint32) ([]uint32, bool) {
	if k.tokenizer == nil {
		return nil, false
	}
	tctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	toks, err := k.tokenizer.Tokenize(tctx, tr, dst)
	return toks, err == nil
}
