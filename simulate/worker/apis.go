package worker

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// The routes of vLLM's server beyond completions and chat: the Responses
// API (responses.go), Anthropic's Messages API (messages.go), the pooling
// APIs (pooling.go), audio transcription and translation (audio.go),
// /detokenize, and the LoRA adapter admin routes (lora.go). Each runs on
// the same engine as the generation endpoints — a request is one or more
// engine sequences, queued, batched and cached alike, its KV events
// published alike — and answers in its API's own shape.

// apiRoutes registers the routes on mux.
func (w *Worker) apiRoutes(mux *http.ServeMux) {
	if w.cfg.Dialect != DialectVLLM {
		return // SGLang's and TensorRT-LLM's servers are simulated for completions and chat
	}
	mux.HandleFunc("POST /v1/responses", w.dpFront(w.apiHandler("resp", w.parseResponses, (*genCtx).serveResponses)))
	mux.HandleFunc("GET /v1/responses/{id}", w.handleGetResponse)
	mux.HandleFunc("POST /v1/responses/{id}/cancel", w.handleCancelResponse)
	mux.HandleFunc("POST /v1/messages", w.dpFront(w.apiHandler("chatcmpl", w.parseMessages, (*genCtx).serveMessages)))
	mux.HandleFunc("POST /v1/messages/count_tokens", w.handleCountTokens)
	for _, p := range []struct {
		path string
		kind poolKind
	}{
		{"/v1/embeddings", poolEmbed}, {"/pooling", poolPooling}, {"/classify", poolClassify},
		{"/score", poolScore}, {"/v1/score", poolScore},
		{"/rerank", poolRerank}, {"/v1/rerank", poolRerank}, {"/v2/rerank", poolRerank},
	} {
		k := p.kind
		mux.HandleFunc("POST "+p.path, w.dpFront(w.apiHandler(k.idPrefix(),
			func(c *genCtx, body []byte) *reqError { return w.parsePooling(c, k, body) },
			(*genCtx).servePooling)))
	}
	mux.HandleFunc("POST /v1/audio/transcriptions", w.dpFront(w.audioHandler(false)))
	mux.HandleFunc("POST /v1/audio/translations", w.dpFront(w.audioHandler(true)))
	mux.HandleFunc("POST /detokenize", w.handleDetokenize)
	mux.HandleFunc("POST /v1/load_lora_adapter", w.handleLoadLoRA)
	mux.HandleFunc("POST /v1/unload_lora_adapter", w.handleUnloadLoRA)
}

// apiHandler serves one API: it reads the body, applies the injected
// fault, lets parse build the engine request (c.g, and whatever the API's
// answer needs), submits it and hands the running request to serve.
// prefix starts the API's ids ("resp", "chatcmpl", "embd", ...).
func (w *Worker) apiHandler(prefix string, parse func(c *genCtx, body []byte) *reqError, serve func(c *genCtx)) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		c, body, ok := w.begin(rw, r)
		if !ok {
			return
		}
		c.idBase = prefix + "-" + c.rid
		if rerr := parse(c, body); rerr != nil {
			w.met.rejected.Inc()
			w.writeReqError(rw, rerr)
			return
		}
		defer c.abortUnfinished()
		if rerr := c.submit(); rerr != nil {
			w.writeReqError(rw, rerr)
			return
		}
		serve(c)
	}
}

// begin reads a request's body and applies its fault; false when the
// request has been answered.
func (w *Worker) begin(rw http.ResponseWriter, r *http.Request) (*genCtx, []byte, bool) {
	rid := requestID(r)
	rw.Header().Set("X-Request-Id", rid)
	c := &genCtx{w: w, rw: rw, r: r, rid: rid, created: time.Now().Unix(), notify: make(chan struct{}, 1)}
	body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, w.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(rw, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", mbe.Limit))
			return nil, nil, false
		}
		writeError(rw, http.StatusBadRequest, "cannot read request body: "+err.Error())
		return nil, nil, false
	}
	c.fault = w.faults.decide()
	if c.fault.kind != faultNone {
		w.met.fault(c.fault.kind)
	}
	if !c.injectBefore() {
		return nil, nil, false
	}
	return c, body, true
}

// waitDone waits until every sequence is done; false when the request
// has been answered or abandoned (worker stopped, client gone).
func (c *genCtx) waitDone() bool {
	for {
		all, err := c.observe()
		if err != nil {
			writeError(c.rw, http.StatusServiceUnavailable, "worker stopped: "+err.Error())
			return false
		}
		if all {
			return true
		}
		if !c.next() {
			c.giveUp()
			return false
		}
	}
}

// streamPieces writes an SSE answer: open once the first token is out
// (as vLLM's generators start on the engine's first output), piece for
// every generated token of sequence 0, done at the end. It applies a
// mid-stream drop fault. false when the stream was cut.
func (c *genCtx) streamPieces(open func(), piece func(k int, text string), done func()) bool {
	rw := c.rw
	h := rw.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	rw.WriteHeader(http.StatusOK)
	c.flush()
	opened := false
	run := c.runs[0]
	for {
		all, err := c.observe()
		p, _ := run.tr.get()
		if !opened && (all || p.Generated > 0) {
			opened = true
			open()
		}
		for run.sent < p.Generated {
			text := outputPiece(run.seed, run.sent)
			piece(run.sent, text)
			run.sent++
			c.flush()
			c.wrote++
			if c.fault.kind == faultDrop && c.fault.mode == DropMidStream && c.wrote >= c.fault.dropAfter {
				dropConn(rw)
				return false
			}
		}
		if err != nil {
			panic(http.ErrAbortHandler) // headers are out: abort, as a proxy would
		}
		if all {
			break
		}
		if !c.next() {
			c.giveUp()
			return false
		}
	}
	done()
	c.flush()
	return true
}

// flush sends what was written.
func (c *genCtx) flush() {
	if f, ok := c.rw.(http.Flusher); ok {
		f.Flush()
	}
}

// writeEvent writes one named SSE event: "event: <name>\ndata: <json>\n\n",
// as vLLM's Responses and Messages streams do.
func (c *genCtx) writeEvent(name string, v any) {
	b := mustJSON(v)
	buf := make([]byte, 0, len(b)+len(name)+16)
	buf = append(buf, "event: "...)
	buf = append(buf, name...)
	buf = append(buf, "\ndata: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	_, _ = c.rw.Write(buf) // a client that went away shows up as a cancelled context
}
