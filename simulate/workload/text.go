package workload

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/llbproject/llb/simulate/tokenizer"
)

// text returns n single-token words drawn from r: " w1 w2 ... wn", exactly
// n tokens of the worker tokenizer and about four characters per token.
func text(r *rand.Rand, n int) string {
	var sb strings.Builder
	sb.Grow(5 * n)
	for range n {
		sb.WriteByte(' ')
		sb.WriteString(tokenizer.Word(r.Uint64()))
	}
	return sb.String()
}

// contentRand is a generator for one piece of content (a group's system
// prompt, a question): seeded from the source's seed and the content's
// coordinates, so the same content is the same text however often and in
// whatever order it is drawn.
func contentRand(seed uint64, coords ...uint64) *rand.Rand {
	h := seed
	for _, c := range coords {
		h = h*0x9e3779b97f4a7c15 + c + 1
		h ^= h >> 29
	}
	return rand.New(rand.NewPCG(seed, h))
}

// zipf samples ranks 0..n-1 with P(k) proportional to 1/(k+1)^alpha;
// alpha 0 is uniform. Unlike math/rand's Zipf it accepts any alpha >= 0
// (SGLang uses alphas below 1).
type zipf struct {
	cdf []float64
}

func newZipf(n int, alpha float64) zipf {
	cdf := make([]float64, n)
	sum := 0.0
	for k := range n {
		sum += 1 / math.Pow(float64(k+1), alpha)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	return zipf{cdf: cdf}
}

func (z zipf) sample(r *rand.Rand) int {
	u := r.Float64()
	k := sort.SearchFloat64s(z.cdf, u)
	return min(k, len(z.cdf)-1)
}

// chatMessage is an OpenAI chat message with string content.
type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Options are the request fields every spec shares.
type Options struct {
	// Model is the "model" field. Default "sim-model".
	Model string
	// Stream asks for SSE responses with usage in the last event.
	Stream bool
}

func (c Options) model() string {
	if c.Model == "" {
		return "sim-model"
	}
	return c.Model
}

// completionItem builds a completions request and its prompt tokens.
func (c Options) completionItem(prompt string, maxTokens int, extra map[string]any) (Item, error) {
	raw, err := c.completionBody(prompt, maxTokens, extra)
	if err != nil {
		return Item{}, err
	}
	return Item{Path: PathCompletions, Body: raw, OutputTokens: maxTokens, Tokens: tokenizer.Encode(nil, prompt, true)}, nil
}

// completionBody is the JSON body of a completions request.
func (c Options) completionBody(prompt string, maxTokens int, extra map[string]any) ([]byte, error) {
	body := map[string]any{"model": c.model(), "prompt": prompt, "max_tokens": maxTokens, "ignore_eos": true}
	c.addStream(body)
	for k, v := range extra {
		body[k] = v
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode completion body: %w", err)
	}
	return raw, nil
}

// chatItem builds a chat request; its tokens go through the exact parse
// and template path the worker uses.
func (c Options) chatItem(msgs []chatMessage, maxTokens int, extra map[string]any) (Item, error) {
	body := map[string]any{"model": c.model(), "messages": msgs, "max_tokens": maxTokens, "ignore_eos": true}
	c.addStream(body)
	for k, v := range extra {
		body[k] = v
	}
	raw, err := json.Marshal(body)
	if err != nil {
		return Item{}, fmt.Errorf("encode chat body: %w", err)
	}
	rawMsgs, err := json.Marshal(msgs)
	if err != nil {
		return Item{}, fmt.Errorf("encode messages: %w", err)
	}
	parsed, err := tokenizer.ParseMessages(rawMsgs)
	if err != nil {
		return Item{}, fmt.Errorf("chat messages: %w", err)
	}
	rendered, err := tokenizer.RenderChat(parsed, tokenizer.ChatOptions{AddGenerationPrompt: true})
	if err != nil {
		return Item{}, fmt.Errorf("chat template: %w", err)
	}
	return Item{Path: PathChat, Body: raw, OutputTokens: maxTokens, Tokens: tokenizer.Encode(nil, rendered.Text, false)}, nil
}

func (c Options) addStream(body map[string]any) {
	if c.Stream {
		body["stream"] = true
		body["stream_options"] = map[string]any{"include_usage": true}
	}
}
