package worker

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/simulate/tokenizer"
	realtok "github.com/llbproject/llb/tokenizer"
)

// reqError is a client-facing failure: status and message; raw selects
// TensorRT-LLM's request-validation shape, {"error": msg}.
type reqError struct {
	status int
	msg    string
	raw    bool
	// anthropic selects Anthropic's shape (the Messages API's handler
	// errors): {"type":"error","error":{"type","message"}}.
	anthropic bool
}

// Error implements error.
func (e *reqError) Error() string { return fmt.Sprintf("%d: %s", e.status, e.msg) }

func badRequest(format string, args ...any) *reqError {
	return &reqError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// streamOptions is the OpenAI stream_options object.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
	// ContinuousUsageStats puts usage in every chunk (vLLM: only with
	// IncludeUsage).
	ContinuousUsageStats bool `json:"continuous_usage_stats"`
}

// completionWire is the part of a /v1/completions body the simulator reads;
// other fields are accepted and ignored.
type completionWire struct {
	Model            *string         `json:"model"`
	Prompt           json.RawMessage `json:"prompt"`
	MaxTokens        *int            `json:"max_tokens"`
	Stream           *bool           `json:"stream"`
	StreamOptions    *streamOptions  `json:"stream_options"`
	N                *int            `json:"n"`
	Echo             *bool           `json:"echo"`
	AddSpecialTokens *bool           `json:"add_special_tokens"`
	CacheSalt        *string         `json:"cache_salt"`
	KVTransferParams json.RawMessage `json:"kv_transfer_params"`
	dialectWire
}

// dialectWire are the P/D fields of the other engines' dialects.
type dialectWire struct {
	// SGLang's bootstrap triple.
	BootstrapHost *string      `json:"bootstrap_host"`
	BootstrapPort *int         `json:"bootstrap_port"`
	BootstrapRoom *json.Number `json:"bootstrap_room"`
	// TensorRT-LLM's disaggregated_params.
	DisaggregatedParams json.RawMessage `json:"disaggregated_params"`
}

// chatWire is the part of a /v1/chat/completions body the simulator reads.
type chatWire struct {
	Model                *string         `json:"model"`
	Messages             json.RawMessage `json:"messages"`
	MaxTokens            *int            `json:"max_tokens"`
	MaxCompletionTokens  *int            `json:"max_completion_tokens"`
	Stream               *bool           `json:"stream"`
	StreamOptions        *streamOptions  `json:"stream_options"`
	N                    *int            `json:"n"`
	AddGenerationPrompt  *bool           `json:"add_generation_prompt"`
	ContinueFinalMessage *bool           `json:"continue_final_message"`
	AddSpecialTokens     *bool           `json:"add_special_tokens"`
	Tools                json.RawMessage `json:"tools"`
	CacheSalt            *string         `json:"cache_salt"`
	KVTransferParams     json.RawMessage `json:"kv_transfer_params"`
	dialectWire
}

// kvParams is kv_transfer_params as the simulator reads it.
type kvParams struct {
	DoRemoteDecode  bool            `json:"do_remote_decode"`
	DoRemotePrefill bool            `json:"do_remote_prefill"`
	RemoteEngineID  *string         `json:"remote_engine_id"`
	RemoteRequestID *string         `json:"remote_request_id"`
	RemoteBlockIDs  json.RawMessage `json:"remote_block_ids"`
	RemoteHost      *string         `json:"remote_host"`
	RemotePort      *int            `json:"remote_port"`
	RemoteNumTokens *int            `json:"remote_num_tokens"`
	// QueueWait is the prefill leg's queue wait (seconds) a simulated
	// prefill with Config.ReportQueueWait adds; nil from anyone else.
	QueueWait *float64 `json:"llbsim_queue_wait_s"`
}

// blockIDs reads remote_block_ids, flat ([1,2]) or per KV group ([[1,2]]);
// only group 0 is used.
func (p *kvParams) blockIDs() ([]int, error) {
	raw := bytes.TrimSpace(p.RemoteBlockIDs)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	var flat []int
	if err := json.Unmarshal(raw, &flat); err == nil {
		return flat, nil
	}
	var groups [][]int
	if err := json.Unmarshal(raw, &groups); err != nil {
		return nil, fmt.Errorf("remote_block_ids must be a list of ints or of int lists: %w", err)
	}
	if len(groups) == 0 {
		return nil, nil
	}
	return groups[0], nil
}

// prompt is one sequence of a generation request.
type prompt struct {
	tokens []uint32
	// text is the prompt text (a completion's, echoed; a chat's rendered
	// template); "" for token-id prompts.
	text  string
	extra inventory.ExtraKeys
	// addSpecial is how text was tokenized (add_special_tokens).
	addSpecial bool
}

// genRequest is a parsed generation request.
type genRequest struct {
	chat         bool
	model        string
	loraID       int
	prompts      []prompt
	maxTokens    int
	stream       bool
	includeUsage bool
	// continuousUsage puts usage in every streamed chunk.
	continuousUsage bool
	echo            bool
	kv              *kvParams
	rawKV           json.RawMessage
	boot            *bootstrapTriple // SGLang P/D
	disagg          *disaggParams    // TensorRT-LLM P/D
}

// decodeBody unmarshals a JSON object body into v, classifying errors.
func decodeBody(body []byte, v any) *reqError {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return badRequest("request body must be a JSON object")
	}
	if err := json.Unmarshal(trimmed, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return badRequest("field %q: expected %s, got JSON %s", te.Field, te.Type, te.Value)
		}
		return badRequest("malformed JSON body: %v", err)
	}
	return nil
}

// parseKV reads kv_transfer_params (absent or null: none).
func parseKV(raw json.RawMessage) (*kvParams, *reqError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	if raw[0] != '{' {
		return nil, badRequest("kv_transfer_params must be an object")
	}
	var p kvParams
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, badRequest("kv_transfer_params: %v", err)
	}
	return &p, nil
}

// parseCompletion parses a /v1/completions body.
func (w *Worker) parseCompletion(body []byte) (*genRequest, *reqError) {
	var wire completionWire
	if rerr := decodeBody(body, &wire); rerr != nil {
		return nil, rerr
	}
	g := &genRequest{}
	model, loraName, loraID, rerr := w.resolveModel(wire.Model)
	if rerr != nil {
		return nil, rerr
	}
	g.model, g.loraID = model, loraID
	addSpecial := wire.AddSpecialTokens == nil || *wire.AddSpecialTokens
	texts, tokenPrompts, rerr := parsePrompt(wire.Prompt)
	if rerr != nil {
		return nil, rerr
	}
	extra := inventory.ExtraKeys{LoRAName: loraName}
	if wire.CacheSalt != nil {
		extra.CacheSalt = *wire.CacheSalt
	}
	for _, t := range texts {
		toks := w.encodeText(t, addSpecial)
		if len(toks) == 0 {
			return nil, badRequest("prompt cannot be empty")
		}
		g.prompts = append(g.prompts, prompt{tokens: toks, text: t, extra: extra, addSpecial: addSpecial})
	}
	for _, toks := range tokenPrompts {
		g.prompts = append(g.prompts, prompt{tokens: toks, extra: extra})
	}
	if rerr := g.common(w, wire.MaxTokens, wire.Stream, wire.StreamOptions, wire.N, wire.KVTransferParams); rerr != nil {
		return nil, rerr
	}
	if rerr := g.dialect(w, &wire.dialectWire); rerr != nil {
		return nil, rerr
	}
	g.echo = wire.Echo != nil && *wire.Echo
	return g, nil
}

// dialect reads the P/D fields of the worker's dialect; another engine's
// fields are ignored (vLLM and SGLang ignore unknown fields; TensorRT-LLM
// refused them before parsing).
func (g *genRequest) dialect(w *Worker, wire *dialectWire) *reqError {
	var rerr *reqError
	switch w.cfg.Dialect {
	case DialectSGLang:
		g.kv = nil // SGLang knows no kv_transfer_params
		if g.boot, rerr = parseBootstrap(wire.BootstrapHost, wire.BootstrapPort, wire.BootstrapRoom); rerr != nil {
			return rerr
		}
		if g.boot != nil && len(g.prompts) > 1 {
			return badRequest("a bootstrap room with %d prompts: send one prompt per room", len(g.prompts))
		}
	case DialectTRTLLM:
		g.kv = nil
		if g.disagg, rerr = parseDisagg(wire.DisaggregatedParams); rerr != nil {
			return rerr
		}
		if g.disagg != nil && len(g.prompts) > 1 {
			return badRequest("disaggregated_params with %d prompts: one prompt per request", len(g.prompts))
		}
		if g.disagg != nil && g.disagg.RequestType == trtContextOnly && g.stream {
			return badRequest("context_only requests do not support streaming")
		}
	}
	return nil
}

// parsePrompt reads "prompt": a string, strings, token ids, or lists of
// token ids.
func parsePrompt(raw json.RawMessage) (texts []string, tokens [][]uint32, rerr *reqError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil, badRequest("prompt is required")
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, nil, badRequest("prompt: %v", err)
		}
		return []string{s}, nil, nil
	case '[':
	default:
		return nil, nil, badRequest("prompt must be a string, a list of strings, a list of token ids or a list of token-id lists")
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, nil, badRequest("prompt: %v", err)
	}
	if len(items) == 0 {
		return nil, nil, badRequest("prompt cannot be empty")
	}
	switch first := bytes.TrimSpace(items[0]); {
	case len(first) > 0 && first[0] == '"':
		if err := json.Unmarshal(raw, &texts); err != nil {
			return nil, nil, badRequest("prompt: a list of strings must hold only strings")
		}
		return texts, nil, nil
	case len(first) > 0 && first[0] == '[':
		var lists [][]int64
		if err := json.Unmarshal(raw, &lists); err != nil {
			return nil, nil, badRequest("prompt: a list of token-id lists must hold only lists of ints")
		}
		for _, l := range lists {
			toks, rerr := checkTokenIDs(l)
			if rerr != nil {
				return nil, nil, rerr
			}
			tokens = append(tokens, toks)
		}
		return nil, tokens, nil
	default:
		var ids []int64
		if err := json.Unmarshal(raw, &ids); err != nil {
			return nil, nil, badRequest("prompt: a list of token ids must hold only ints")
		}
		toks, rerr := checkTokenIDs(ids)
		if rerr != nil {
			return nil, nil, rerr
		}
		return nil, [][]uint32{toks}, nil
	}
}

// checkTokenIDs validates token ids against the vocabulary.
func checkTokenIDs(ids []int64) ([]uint32, *reqError) {
	if len(ids) == 0 {
		return nil, badRequest("prompt cannot be empty")
	}
	out := make([]uint32, len(ids))
	for i, id := range ids {
		if id < 0 || id >= tokenizer.VocabSize {
			return nil, badRequest("Token id %d is out of vocabulary (0..%d)", id, tokenizer.VocabSize-1)
		}
		out[i] = uint32(id)
	}
	return out, nil
}

// common handles the fields shared by both endpoints.
func (g *genRequest) common(w *Worker, maxTokens *int, stream *bool, so *streamOptions, n *int, rawKV json.RawMessage) *reqError {
	g.maxTokens = w.cfg.DefaultMaxTokens
	if maxTokens != nil {
		if *maxTokens < 1 {
			return badRequest("max_tokens must be at least 1, got %d", *maxTokens)
		}
		g.maxTokens = *maxTokens
	}
	if n != nil && *n != 1 {
		return badRequest("n must be 1 (the simulator generates one choice per prompt), got %d", *n)
	}
	g.stream = stream != nil && *stream
	if so != nil {
		if !g.stream {
			return badRequest("stream_options can only be set when stream is true")
		}
		g.includeUsage = so.IncludeUsage
		g.continuousUsage = so.IncludeUsage && so.ContinuousUsageStats
	}
	kv, rerr := parseKV(rawKV)
	if rerr != nil {
		return rerr
	}
	if kv != nil && len(g.prompts) > 1 {
		return badRequest("kv_transfer_params with %d prompts: split multi-prompt requests into one request per prompt for P/D", len(g.prompts))
	}
	g.kv, g.rawKV = kv, rawKV
	return nil
}

// parseChat parses a /v1/chat/completions body.
func (w *Worker) parseChat(body []byte) (*genRequest, *reqError) {
	var wire chatWire
	if rerr := decodeBody(body, &wire); rerr != nil {
		return nil, rerr
	}
	g := &genRequest{chat: true}
	model, loraName, loraID, rerr := w.resolveModel(wire.Model)
	if rerr != nil {
		return nil, rerr
	}
	g.model, g.loraID = model, loraID
	p, rerr := w.chatPrompt(wire.Messages, chatFlags{
		addGenerationPrompt:  wire.AddGenerationPrompt,
		continueFinalMessage: wire.ContinueFinalMessage,
		addSpecialTokens:     wire.AddSpecialTokens,
		tools:                wire.Tools,
	})
	if rerr != nil {
		return nil, rerr
	}
	p.extra.LoRAName = loraName
	if wire.CacheSalt != nil {
		p.extra.CacheSalt = *wire.CacheSalt
	}
	g.prompts = []prompt{p}
	mt := wire.MaxTokens
	if wire.MaxCompletionTokens != nil {
		mt = wire.MaxCompletionTokens
	}
	if rerr := g.common(w, mt, wire.Stream, wire.StreamOptions, wire.N, wire.KVTransferParams); rerr != nil {
		return nil, rerr
	}
	if rerr := g.dialect(w, &wire.dialectWire); rerr != nil {
		return nil, rerr
	}
	return g, nil
}

// chatFlags are the template switches as sent (nil = default).
type chatFlags struct {
	addGenerationPrompt  *bool
	continueFinalMessage *bool
	addSpecialTokens     *bool
	tools                json.RawMessage
}

// chatPrompt renders and tokenizes chat messages exactly as both the chat
// endpoint and the messages form of /tokenize do: defaults
// add_generation_prompt true, add_special_tokens false. Multimodal parts
// become one pad token each, hashed with an (identifier, offset) extra key.
func (w *Worker) chatPrompt(rawMessages json.RawMessage, f chatFlags) (prompt, *reqError) {
	if real := w.cfg.Tokenizer; real != nil {
		req := realtok.Request{Messages: rawMessages, AddGenerationPrompt: f.addGenerationPrompt, Tools: f.tools}
		req.ContinueFinalMessage = f.continueFinalMessage != nil && *f.continueFinalMessage
		text, err := real.RenderChat("", req, time.Now())
		if err != nil {
			return prompt{}, badRequest("%v", err)
		}
		addSpecial := f.addSpecialTokens != nil && *f.addSpecialTokens
		return prompt{tokens: real.Encode(text, addSpecial, nil), text: text, addSpecial: addSpecial}, nil
	}
	msgs, err := tokenizer.ParseMessages(rawMessages)
	if err != nil {
		return prompt{}, badRequest("%v", strings.TrimSuffix(err.Error(), ": "+tokenizer.ErrInvalidChat.Error()))
	}
	opts := tokenizer.ChatOptions{
		AddGenerationPrompt:  f.addGenerationPrompt == nil || *f.addGenerationPrompt,
		ContinueFinalMessage: f.continueFinalMessage != nil && *f.continueFinalMessage,
		Tools:                f.tools,
	}
	if f.addGenerationPrompt == nil && opts.ContinueFinalMessage {
		opts.AddGenerationPrompt = false // continuing a message implies no new turn
	}
	r, err := tokenizer.RenderChat(msgs, opts)
	if err != nil {
		return prompt{}, badRequest("%v", err)
	}
	addSpecial := f.addSpecialTokens != nil && *f.addSpecialTokens
	toks := tokenizer.Encode(nil, r.Text, addSpecial)
	p := prompt{tokens: toks, text: r.Text, addSpecial: addSpecial}
	k := 0
	for i, t := range toks {
		if (t == tokenizer.ImagePad || t == tokenizer.AudioPad) && k < len(r.MM) {
			p.extra.MM = append(p.extra.MM, inventory.MMItem{Identifier: r.MM[k], Offset: i, Length: 1})
			k++
		}
	}
	return p, nil
}

// encodeText tokenizes a text prompt with the configured tokenizer.
func (w *Worker) encodeText(text string, addSpecial bool) []uint32 {
	if w.cfg.Tokenizer != nil {
		return w.cfg.Tokenizer.Encode(text, addSpecial, nil)
	}
	return tokenizer.Encode(nil, text, addSpecial)
}

// outputSeed derives the deterministic "sampling" seed of a prompt: the
// same prompt always generates the same text.
func outputSeed(tokens []uint32) uint64 {
	buf := make([]byte, 4*len(tokens))
	for i, t := range tokens {
		binary.LittleEndian.PutUint32(buf[4*i:], t)
	}
	return xxh3.Hash(buf)
}

// Generated text is built from a quarter of the synthetic vocabulary, the
// words whose hash is 0 mod 4, so that a prompt which ends with generated
// text — a request a router migrated to this worker after another one
// died mid-answer, the prompt extended with what that one had generated —
// can be told from another prompt cheaply (only a trailing run of such
// words is a candidate) and continued exactly where the dead worker
// stopped (outputStart).
var (
	// outputPieces are " "+word for the output words, each one token.
	outputPieces = func() []string {
		seen := map[string]bool{}
		var out []string
		for k := 0; k < tokenizer.NumWords; k++ {
			w := tokenizer.Word(uint64(k))
			if !seen[w] && isOutputWord(w) {
				seen[w] = true
				out = append(out, " "+w)
			}
		}
		return out
	}()
)

// isOutputWord reports whether w is one of the words output is made of.
func isOutputWord(w string) bool { return w != "" && xxh3.HashString(w)%4 == 0 }

// outputPiece is the text of output token k for a prompt seed: one word,
// so one token of the worker's tokenizer.
func outputPiece(seed uint64, k int) string {
	x := seed ^ (uint64(k)+1)*0x9e3779b97f4a7c15
	x ^= x >> 31
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 29
	return outputPieces[x%uint64(len(outputPieces))]
}

// outputStart returns the seed a prompt generates from and how many of its
// output tokens the prompt already holds: a prompt P followed by the first
// k pieces P generates (a migrated request: completions append the text to
// the prompt; chat continues the partial assistant message, which renders
// as the original template followed by the text) goes on from piece k of
// P's output, so that the two legs' text is exactly what one worker would
// have generated. encode tokenizes a prefix of the text as the prompt was.
func outputStart(p prompt, encode func(string) []uint32) (seed uint64, k int) {
	text := p.text
	// Candidate starts of generated text: the spaces before a trailing run
	// of output words, latest first.
	var cands []int
	for end := len(text); ; {
		i := strings.LastIndexByte(text[:end], ' ')
		if i < 0 || !isOutputWord(text[i+1:end]) {
			break
		}
		cands = append(cands, i)
		end = i
	}
	for c := len(cands) - 1; c >= 0; c-- { // the longest continuation first
		j := cands[c]
		s := outputSeed(encode(text[:j]))
		rest, n := text[j:], 0
		for rest != "" {
			piece := outputPiece(s, n)
			if !strings.HasPrefix(rest, piece) {
				break
			}
			rest, n = rest[len(piece):], n+1
		}
		if rest == "" {
			return s, n
		}
	}
	return outputSeed(p.tokens), 0
}
