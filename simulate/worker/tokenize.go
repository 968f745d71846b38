package worker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/llbproject/llb/simulate/tokenizer"
)

// tokenizeWire is a /tokenize body: the completion form (prompt) or the
// chat form (messages), vllm-contract.md §5.
type tokenizeWire struct {
	Model                *string         `json:"model"`
	Prompt               *string         `json:"prompt"`
	Messages             json.RawMessage `json:"messages"`
	AddSpecialTokens     *bool           `json:"add_special_tokens"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage *bool           `json:"continue_final_message"`
	ReturnTokenStrs      *bool           `json:"return_token_strs"`
	Tools                json.RawMessage `json:"tools"`
}

// tokenizeResponse is vLLM's TokenizeResponse.
type tokenizeResponse struct {
	Count       int      `json:"count"`
	MaxModelLen int      `json:"max_model_len"`
	Tokens      []uint32 `json:"tokens"`
	TokenStrs   []string `json:"token_strs"`
}

// handleTokenize serves POST /tokenize with the same tokenizer and chat
// template the generation endpoints use, so the ids it returns are exactly
// the ids the worker hashes into its prefix cache.
func (w *Worker) handleTokenize(rw http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		writeError(rw, http.StatusMethodNotAllowed, "use POST")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, w.cfg.MaxBodyBytes))
	if err != nil {
		writeError(rw, http.StatusRequestEntityTooLarge, "request body too large or unreadable: "+err.Error())
		return
	}
	var wire tokenizeWire
	if rerr := decodeBody(body, &wire); rerr != nil {
		writeError(rw, rerr.status, rerr.msg)
		return
	}
	if _, _, _, rerr := w.resolveModel(wire.Model); rerr != nil {
		writeError(rw, rerr.status, rerr.msg)
		return
	}
	hasMessages := len(bytes.TrimSpace(wire.Messages)) > 0 && !bytes.Equal(bytes.TrimSpace(wire.Messages), []byte("null"))
	strs := wire.ReturnTokenStrs != nil && *wire.ReturnTokenStrs
	if strs && w.cfg.Tokenizer != nil {
		writeError(rw, http.StatusBadRequest, "return_token_strs is not supported with a real tokenizer")
		return
	}
	var resp tokenizeResponse
	switch {
	case hasMessages && wire.Prompt != nil:
		writeError(rw, http.StatusBadRequest, "give either prompt or messages, not both")
		return
	case hasMessages:
		p, rerr := w.chatPrompt(wire.Messages, chatFlags{
			addGenerationPrompt:  wire.AddGenerationPrompt,
			continueFinalMessage: wire.ContinueFinalMessage,
			addSpecialTokens:     wire.AddSpecialTokens,
			tools:                wire.Tools,
		})
		if rerr != nil {
			writeError(rw, rerr.status, rerr.msg)
			return
		}
		resp.Tokens = p.tokens
		if strs {
			_, resp.TokenStrs = tokenizer.EncodePieces(p.text, wire.AddSpecialTokens != nil && *wire.AddSpecialTokens)
		}
	case wire.Prompt != nil:
		add := wire.AddSpecialTokens == nil || *wire.AddSpecialTokens
		if strs {
			resp.Tokens, resp.TokenStrs = tokenizer.EncodePieces(*wire.Prompt, add)
		} else {
			resp.Tokens = w.encodeText(*wire.Prompt, add)
		}
	default:
		writeError(rw, http.StatusBadRequest, "prompt (a string) or messages is required")
		return
	}
	if resp.Tokens == nil {
		resp.Tokens = []uint32{}
	}
	resp.Count = len(resp.Tokens)
	resp.MaxModelLen = w.cfg.Engine.MaxModelLen
	if resp.Count > resp.MaxModelLen {
		writeError(rw, http.StatusBadRequest, fmt.Sprintf("This model's maximum context length is %d tokens. However, your request has %d input tokens.", resp.MaxModelLen, resp.Count))
		return
	}
	writeJSON(rw, http.StatusOK, resp)
}
