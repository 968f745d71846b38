package worker

import (
	"encoding/json"
	"io"
	"net/http"
)

// serveStream writes SSE events as tokens appear.
func (c *genCtx) serveStream() {
	rw := c.rw
	h := rw.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	rw.WriteHeader(http.StatusOK)
	flusher, _ := rw.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	// The head goes out at once (Starlette's StreamingResponse sends it
	// before the body); the body starts with the engine's first output,
	// its first token: vLLM's stream generators write the chat role chunk
	// (and an echo of the prompt) on their first iteration over the
	// engine's results, not on admission. A proxy that reads the first
	// body byte as "the prefill is over" (llb's queued-prefill count) sees
	// what it would see in front of vLLM.
	flush()
	opened := false
	open := func() {
		opened = true
		if c.g.chat {
			for i, run := range c.runs {
				empty := ""
				ch := choice{Index: i, Delta: &chatDelta{Role: "assistant", Content: &empty}}
				c.event(ch, nil, c.chunkUsage(run))
			}
		} else if c.g.echo {
			for i, run := range c.runs {
				text := run.p.text
				c.event(choice{Index: i, Text: &text}, nil, c.chunkUsage(run))
			}
		}
	}
	for {
		all, err := c.observe()
		if !opened && (all || c.generated()) {
			open()
		}
		for i, run := range c.runs {
			p, _ := run.tr.get()
			for run.sent < p.Generated {
				piece := outputPiece(run.seed, run.offset+run.sent)
				run.sent++
				ch := choice{Index: i}
				if c.g.chat {
					ch.Delta = &chatDelta{Content: &piece}
				} else {
					ch.Text = &piece
				}
				var kv json.RawMessage
				if run.sent == p.Generated && p.Done {
					fr := p.Finish.String()
					ch.FinishReason = &fr
					if p.Remote != nil && c.w.cfg.Dialect == DialectVLLM {
						kv = c.w.transferParams(p.Remote, c.queueWait(run, p))
					}
				}
				c.event(ch, kv, c.chunkUsage(run))
				flush()
				c.wrote++
				if c.fault.kind == faultDrop && c.fault.mode == DropMidStream && c.wrote >= c.fault.dropAfter {
					dropConn(rw)
					return
				}
			}
		}
		if err != nil {
			panic(http.ErrAbortHandler) // headers are out: abort the connection, as a proxy would
		}
		if all {
			break
		}
		if !c.next() {
			c.giveUp()
			return
		}
	}
	if c.g.includeUsage {
		u := c.w.newUsage()
		for _, run := range c.runs {
			p, _ := run.tr.get()
			c.addUsage(u, run, p)
		}
		resp := c.base(true)
		resp.Choices = []choice{}
		resp.Usage = u
		c.writeData(resp)
	}
	_, _ = io.WriteString(rw, "data: [DONE]\n\n")
	flush()
}

// generated reports whether some run has produced a token.
func (c *genCtx) generated() bool {
	for _, run := range c.runs {
		if p, _ := run.tr.get(); p.Generated > 0 {
			return true
		}
	}
	return false
}

// base is the response envelope.
func (c *genCtx) base(chunk bool) response {
	obj := "text_completion"
	if c.g.chat {
		obj = "chat.completion"
		if chunk {
			obj = "chat.completion.chunk"
		}
	}
	return response{ID: c.idBase + "-0", Object: obj, Created: c.created, Model: c.g.model}
}

// event writes one streamed choice (with u, the usage so far, when the
// client asked for usage in every chunk).
func (c *genCtx) event(ch choice, kv json.RawMessage, u *usage) {
	resp := c.base(true)
	resp.Choices = []choice{ch}
	resp.KVTransferParams = kv
	resp.Usage = u
	c.writeData(resp)
}

// chunkUsage is a run's usage so far for a chunk, as vLLM's
// continuous_usage_stats reports it (no prompt details); nil unless asked.
func (c *genCtx) chunkUsage(run *seqRun) *usage {
	if !c.g.continuousUsage {
		return nil
	}
	n := len(run.p.tokens)
	return &usage{PromptTokens: n, CompletionTokens: run.sent, TotalTokens: n + run.sent}
}

// writeData writes one SSE data event.
func (c *genCtx) writeData(v any) {
	b, _ := json.Marshal(v) // our own structs: cannot fail
	buf := make([]byte, 0, len(b)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	buf = append(buf, "\n\n"...)
	_, _ = c.rw.Write(buf) // a client that went away shows up as a cancelled context
}
