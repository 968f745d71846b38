package worker

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"net/http"
	"sort"

	"github.com/llbproject/llb/inventory"
)

// The pooling APIs as vLLM serves them (vllm/entrypoints/pooling/):
// /v1/embeddings, /pooling, /classify, /score (and /v1/score), /rerank
// (and /v1/rerank, /v2/rerank). Each input is one engine sequence that
// runs its prefill (one output token, not returned), so pooling requests
// queue, batch and fill the prefix cache like generation; the answer is a
// deterministic function of the input's tokens (the same input always
// embeds, classifies and scores alike).

// poolKind is which pooling API a request uses.
type poolKind uint8

const (
	poolEmbed poolKind = iota
	poolPooling
	poolClassify
	poolScore
	poolRerank
)

// idPrefix starts the API's response ids.
func (k poolKind) idPrefix() string {
	return [...]string{"embd", "pool", "classify", "score", "rerank"}[k]
}

// embedDim is the simulated embedding width.
const embedDim = 8

// poolingWire is the part of a pooling body the simulator reads.
type poolingWire struct {
	Model          *string         `json:"model"`
	Input          json.RawMessage `json:"input"`
	Messages       json.RawMessage `json:"messages"`
	EncodingFormat *string         `json:"encoding_format"`
	Text1          json.RawMessage `json:"text_1"`
	Text2          json.RawMessage `json:"text_2"`
	Queries        json.RawMessage `json:"queries"`
	Documents      json.RawMessage `json:"documents"`
	Query          *string         `json:"query"`
	TopN           *int            `json:"top_n"`
}

// poolState is what servePooling needs beyond the engine request.
type poolState struct {
	kind   poolKind
	base64 bool
	docs   []string // rerank: the documents, by index
	topN   int
}

// parsePooling builds the engine request of a pooling API body.
func (w *Worker) parsePooling(c *genCtx, k poolKind, body []byte) *reqError {
	var wire poolingWire
	if rerr := decodeBody(body, &wire); rerr != nil {
		return rerr
	}
	g := &genRequest{}
	model, loraName, loraID, rerr := w.resolveModel(wire.Model)
	if rerr != nil {
		return rerr
	}
	g.model, g.loraID = model, loraID
	st := &poolState{kind: k}
	if wire.EncodingFormat != nil {
		switch *wire.EncodingFormat {
		case "float":
		case "base64":
			st.base64 = true
		default:
			return badRequest("encoding_format must be float or base64, got %q", *wire.EncodingFormat)
		}
	}
	extra := inventory.ExtraKeys{LoRAName: loraName}
	addText := func(text string) {
		g.prompts = append(g.prompts, prompt{tokens: w.encodeText(text, true), text: text, extra: extra})
	}
	switch k {
	case poolEmbed, poolPooling, poolClassify:
		if hasJSON(wire.Messages) {
			p, rerr := w.chatPrompt(wire.Messages, chatFlags{})
			if rerr != nil {
				return rerr
			}
			p.extra = extra
			g.prompts = []prompt{p}
			break
		}
		if !hasJSON(wire.Input) {
			return badRequest("input is required")
		}
		texts, tokens, rerr := parsePrompt(wire.Input)
		if rerr != nil {
			return badRequest("input: %s", rerr.msg)
		}
		for _, t := range texts {
			addText(t)
		}
		for _, toks := range tokens {
			g.prompts = append(g.prompts, prompt{tokens: toks, extra: extra})
		}
	case poolScore:
		a, b := wire.Text1, wire.Text2
		if !hasJSON(a) {
			a, b = wire.Queries, wire.Documents
		}
		left, err1 := stringOrList(a)
		right, err2 := stringOrList(b)
		if err1 != nil || err2 != nil || len(left) == 0 || len(right) == 0 {
			return badRequest("score needs text_1 and text_2 (or queries and documents): strings or lists of strings")
		}
		if len(left) != 1 && len(left) != len(right) {
			return badRequest("text_1 has %d items and text_2 %d: give one text_1 or as many as text_2", len(left), len(right))
		}
		for i, r := range right {
			l := left[0]
			if len(left) > 1 {
				l = left[i]
			}
			addText(l + "\n" + r)
		}
	case poolRerank:
		if wire.Query == nil {
			return badRequest("query is required")
		}
		docs, err := stringOrList(wire.Documents)
		if err != nil || len(docs) == 0 {
			return badRequest("documents must be a non-empty list of strings")
		}
		st.docs, st.topN = docs, len(docs)
		if wire.TopN != nil && *wire.TopN > 0 && *wire.TopN < len(docs) {
			st.topN = *wire.TopN
		}
		for _, d := range docs {
			addText(*wire.Query + "\n" + d)
		}
	}
	for i := range g.prompts {
		if len(g.prompts[i].tokens) == 0 {
			return badRequest("input %d is empty", i)
		}
	}
	one := 1
	if rerr := g.common(w, &one, nil, nil, nil, nil); rerr != nil {
		return rerr
	}
	c.g, c.api = g, st
	return nil
}

// hasJSON reports a present, non-null raw value.
func hasJSON(v json.RawMessage) bool {
	v = bytes.TrimSpace(v)
	return len(v) > 0 && !bytes.Equal(v, []byte("null"))
}

// stringOrList reads a string or a list of strings.
func stringOrList(v json.RawMessage) ([]string, error) {
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		return []string{s}, nil
	}
	var l []string
	err := json.Unmarshal(v, &l)
	return l, err
}

// unit returns n deterministic values in [-1, 1) for sequence run.
func unit(seed uint64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		x := seed ^ (uint64(i)+1)*0x9e3779b97f4a7c15
		x ^= x >> 31
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 29
		out[i] = float64(x%2000)/1000 - 1
	}
	return out
}

// servePooling waits for the sequences and answers in the API's shape.
func (c *genCtx) servePooling() {
	if !c.waitDone() {
		return
	}
	st := c.api.(*poolState)
	n := 0
	for _, run := range c.runs {
		n += len(run.p.tokens)
	}
	usage := map[string]any{"prompt_tokens": n, "total_tokens": n, "completion_tokens": 0, "prompt_tokens_details": nil}
	base := map[string]any{"id": c.idBase, "object": "list", "created": c.created, "model": c.g.model, "usage": usage}
	var data []any
	switch st.kind {
	case poolEmbed, poolPooling:
		for i, run := range c.runs {
			vec := unit(run.seed, embedDim)
			var norm float64
			for _, v := range vec {
				norm += v * v
			}
			norm = math.Sqrt(norm)
			f32 := make([]float32, len(vec))
			for j, v := range vec {
				f32[j] = float32(v / norm)
			}
			var emb any = f32
			if st.base64 {
				buf := make([]byte, 4*len(f32))
				for j, v := range f32 {
					binary.LittleEndian.PutUint32(buf[4*j:], math.Float32bits(v))
				}
				emb = base64.StdEncoding.EncodeToString(buf)
			}
			if st.kind == poolEmbed {
				data = append(data, map[string]any{"index": i, "object": "embedding", "embedding": emb})
			} else {
				data = append(data, map[string]any{"index": i, "object": "pooling", "data": emb})
			}
		}
	case poolClassify:
		for i, run := range c.runs {
			p := (unit(run.seed, 1)[0] + 1) / 2
			label := "LABEL_0"
			if p >= 0.5 {
				label = "LABEL_1"
			}
			data = append(data, map[string]any{"index": i, "label": label, "probs": []float64{1 - p, p}, "num_classes": 2})
		}
	case poolScore:
		for i, run := range c.runs {
			data = append(data, map[string]any{"index": i, "object": "score", "score": (unit(run.seed, 1)[0] + 1) / 2})
		}
	case poolRerank:
		type res struct {
			i     int
			score float64
		}
		var rs []res
		for i, run := range c.runs {
			rs = append(rs, res{i, (unit(run.seed, 1)[0] + 1) / 2})
		}
		sort.SliceStable(rs, func(a, b int) bool { return rs[a].score > rs[b].score })
		var results []any
		for _, r := range rs[:st.topN] {
			results = append(results, map[string]any{"index": r.i, "document": map[string]any{"text": st.docs[r.i]}, "relevance_score": r.score})
		}
		writeJSON(c.rw, http.StatusOK, map[string]any{"id": c.idBase, "model": c.g.model, "usage": map[string]any{"total_tokens": n}, "results": results})
		return
	}
	base["data"] = data
	writeJSON(c.rw, http.StatusOK, base)
}
