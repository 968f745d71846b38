package worker

import (
	"bytes"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"

	"github.com/zeebo/xxh3"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/simulate/tokenizer"
)

// Audio transcription and translation as vLLM serves them
// (vllm/entrypoints/speech_to_text/): a multipart form with the audio file
// and fields (model, language, prompt, response_format, temperature,
// stream). The simulated encoder turns the file into one token per 320
// bytes (Whisper's 1500 frames for 30 s at most), the prompt field's text
// after it; the answer is {"text": …} (response_format json), the bare
// text (text), or a stream of transcription.chunk (translation.chunk)
// events ended by "data: [DONE]".

// maxAudioTokens bounds an audio prompt (Whisper's encoder length).
const maxAudioTokens = 1500

// audioState is what serveAudio needs beyond the engine request.
type audioState struct {
	translate bool
	format    string
	seconds   float64
}

// audioHandler serves /v1/audio/transcriptions (translate false) and
// /v1/audio/translations.
func (w *Worker) audioHandler(translate bool) http.HandlerFunc {
	prefix := "trsc"
	if translate {
		prefix = "trsl"
	}
	return w.apiHandler(prefix, func(c *genCtx, body []byte) *reqError {
		return w.parseAudio(c, translate, body)
	}, (*genCtx).serveAudio)
}

// parseAudio builds the engine request of an audio form.
func (w *Worker) parseAudio(c *genCtx, translate bool, body []byte) *reqError {
	mt, params, err := mime.ParseMediaType(c.r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return badRequest("the request must be multipart/form-data")
	}
	mr := multipart.NewReader(bytes.NewReader(body), params["boundary"])
	fields := map[string]string{}
	var file []byte
	for {
		p, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return badRequest("cannot read the form: %v", err)
		}
		v, err := io.ReadAll(p)
		if err != nil {
			return badRequest("cannot read the form: %v", err)
		}
		if p.FormName() == "file" {
			file = v
			continue
		}
		fields[p.FormName()] = string(v)
	}
	if len(file) == 0 {
		return badRequest("file: Field required")
	}
	st := &audioState{translate: translate, format: "json", seconds: float64(len(file)) / 32000}
	if f := fields["response_format"]; f != "" {
		st.format = f
	}
	if st.format != "json" && st.format != "text" {
		return badRequest("Currently only support response_format `text` or `json`")
	}
	g := &genRequest{}
	var model *string
	if m, ok := fields["model"]; ok {
		model = &m
	}
	name, loraName, loraID, rerr := w.resolveModel(model)
	if rerr != nil {
		return rerr
	}
	g.model, g.loraID = name, loraID
	n := min(max(len(file)/320, 1), maxAudioTokens)
	toks := make([]uint32, 0, n+64)
	step := max(len(file)/n, 1)
	for i := 0; i < n; i++ {
		end := min((i+1)*step, len(file))
		toks = append(toks, uint32(xxh3.Hash(file[i*step:end])%uint64(tokenizer.VocabSize)))
	}
	toks = append(toks, w.encodeText(fields["prompt"], false)...)
	g.prompts = []prompt{{tokens: toks, extra: inventory.ExtraKeys{LoRAName: loraName}}}
	var stream *bool
	if s := strings.ToLower(fields["stream"]); s != "" {
		b := s == "true" || s == "1"
		stream = &b
	}
	if rerr := g.common(w, nil, stream, nil, nil, nil); rerr != nil {
		return rerr
	}
	c.g, c.api = g, st
	return nil
}

// serveAudio answers an audio request, whole or streamed.
func (c *genCtx) serveAudio() {
	st := c.api.(*audioState)
	run := c.runs[0]
	if !c.g.stream {
		if !c.waitDone() {
			return
		}
		p, _ := run.tr.get()
		text := strings.TrimSpace(c.text(run, 0, p.Generated))
		if st.format == "text" {
			c.rw.Header().Set("Content-Type", "text/plain; charset=utf-8")
			_, _ = io.WriteString(c.rw, text)
			return
		}
		writeJSON(c.rw, http.StatusOK, map[string]any{"text": text, "usage": map[string]any{"type": "duration", "seconds": st.seconds}})
		return
	}
	obj := "transcription.chunk"
	if st.translate {
		obj = "translation.chunk"
	}
	chunk := func(content *string, finish any) {
		delta := map[string]any{}
		if content != nil {
			delta["content"] = *content
		}
		c.writeData(map[string]any{"id": c.idBase, "object": obj, "created": c.created, "model": c.g.model,
			"choices": []any{map[string]any{"delta": delta, "finish_reason": finish, "stop_reason": nil}}})
	}
	c.streamPieces(func() {}, func(_ int, piece string) {
		chunk(&piece, nil)
	}, func() {
		p, _ := run.tr.get()
		chunk(nil, p.Finish.String())
		_, _ = io.WriteString(c.rw, "data: [DONE]\n\n")
	})
}

// detokenizeWire is a /detokenize body.
type detokenizeWire struct {
	Model  *string  `json:"model"`
	Tokens []uint32 `json:"tokens"`
}

// handleDetokenize serves POST /detokenize: {"prompt": text}.
func (w *Worker) handleDetokenize(rw http.ResponseWriter, r *http.Request) {
	_, body, ok := w.begin(rw, r)
	if !ok {
		return
	}
	var wire detokenizeWire
	if rerr := decodeBody(body, &wire); rerr != nil {
		w.writeReqError(rw, rerr)
		return
	}
	if _, _, _, rerr := w.resolveModel(wire.Model); rerr != nil {
		w.writeReqError(rw, rerr)
		return
	}
	// The simulated tokenizer hashes pieces into ids and cannot invert
	// them: a special token decodes to its literal, any other id to
	// " <id>" (the count and order of tokens are what a router sees).
	var b strings.Builder
	for _, id := range wire.Tokens {
		if id >= tokenizer.VocabSize {
			w.writeReqError(rw, badRequest("Token id %d is out of vocabulary", id))
			return
		}
		if s, ok := tokenizer.SpecialText(id); ok {
			b.WriteString(s)
			continue
		}
		b.WriteString(" <" + strconv.FormatUint(uint64(id), 10) + ">")
	}
	writeJSON(rw, http.StatusOK, map[string]any{"prompt": b.String()})
}
