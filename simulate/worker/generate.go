package worker

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/llbproject/llb/simulate/engine"
)

// seqRun is one engine request of an HTTP request.
type seqRun struct {
	p       prompt
	id      string
	seed    uint64
	offset  int // output tokens the prompt already holds (outputStart)
	tr      *tracker
	ticket  engine.Ticket
	sent    int  // tokens written to the client (stream)
	done    bool // final progress seen
	started time.Time
	ttftObs bool
}

// genCtx is one generation request in flight.
type genCtx struct {
	w       *Worker
	rw      http.ResponseWriter
	r       *http.Request
	g       *genRequest
	rid     string
	idBase  string
	created int64
	notify  chan struct{}
	runs    []*seqRun
	fault   faultDecision
	wrote   int        // tokens written (for mid-stream drops)
	room    *roomState // an SGLang prefill leg's bootstrap room
	ctxID   int64      // a TensorRT-LLM context_only leg's ctx_request_id
	api     any        // what another API's answer needs (apis.go)
}

// requestID returns the client's X-Request-Id or a fresh random one.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" {
		return id
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand never fails on Linux
	return hex.EncodeToString(b[:])
}

// handleGenerate serves /v1/completions (chat=false) and
// /v1/chat/completions (chat=true).
func (w *Worker) handleGenerate(chat bool) http.HandlerFunc {
	return func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			writeError(rw, http.StatusMethodNotAllowed, "use POST")
			return
		}
		rid := requestID(r)
		rw.Header().Set("X-Request-Id", rid)
		c := &genCtx{w: w, rw: rw, r: r, rid: rid, created: time.Now().Unix(), notify: make(chan struct{}, 1)}
		// Read the body first: until it is read, net/http cannot notice a
		// client that hangs up, and a stalled handler would never learn.
		body, err := io.ReadAll(http.MaxBytesReader(rw, r.Body, w.cfg.MaxBodyBytes))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				writeError(rw, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", mbe.Limit))
				return
			}
			writeError(rw, http.StatusBadRequest, "cannot read request body: "+err.Error())
			return
		}
		c.fault = w.faults.decide()
		if c.fault.kind != faultNone {
			w.met.fault(c.fault.kind)
		}
		if !c.injectBefore() {
			return
		}
		if w.cfg.Dialect == DialectTRTLLM {
			if rerr := trtStrict(body, chat); rerr != nil {
				w.met.rejected.Inc()
				w.met.strictRefused.Inc()
				w.writeReqError(rw, rerr)
				return
			}
		}
		var rerr *reqError
		if chat {
			c.g, rerr = w.parseChat(body)
			c.idBase = "chatcmpl-" + rid
		} else {
			c.g, rerr = w.parseCompletion(body)
			c.idBase = "cmpl-" + rid
		}
		if rerr != nil {
			w.met.rejected.Inc()
			w.writeReqError(rw, rerr)
			return
		}
		defer c.abortUnfinished()
		if rerr := c.submit(); rerr != nil {
			w.writeReqError(rw, rerr)
			return
		}
		if c.g.stream {
			c.serveStream()
		} else {
			c.serveWhole()
		}
	}
}

// injectBefore applies the fault decided for this request before it is
// parsed; false means the request has been answered (or dropped).
func (c *genCtx) injectBefore() bool {
	if c.fault.latency > 0 && !c.wait(c.fault.latency) {
		c.giveUp()
		return false
	}
	switch c.fault.kind {
	case faultDead:
		writeError(c.rw, http.StatusInternalServerError, "EngineCore encountered an issue (simulated dead engine)")
		return false
	case faultStall:
		c.wait(0)
		c.giveUp()
		return false
	case faultError:
		writeError(c.rw, c.fault.status, fmt.Sprintf("injected fault: status %d", c.fault.status))
		return false
	case faultDrop:
		if c.fault.mode == DropBeforeHeaders {
			dropConn(c.rw)
			return false
		}
	}
	return true
}

// wait blocks for d (0: until the client or the worker goes away); false
// when the client or the worker went away.
func (c *genCtx) wait(d time.Duration) bool {
	var timer <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timer = t.C
	}
	select {
	case <-timer:
		return true
	case <-c.r.Context().Done():
	case <-c.w.stopping:
	}
	return false
}

// giveUp ends a request that cannot complete: when the client left there is
// nobody to answer; when the worker is stopping the connection is aborted,
// so the client never mistakes a cut response for a whole one.
func (c *genCtx) giveUp() {
	if c.r.Context().Err() != nil {
		return
	}
	panic(http.ErrAbortHandler) // net/http closes the connection without logging
}

// dropConn closes the client connection abruptly.
func dropConn(rw http.ResponseWriter) {
	if hj, ok := rw.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close() // the point is to close it
			return
		}
	}
	panic(http.ErrAbortHandler) // net/http closes the connection without logging
}

// submit builds and queues the engine requests of every prompt.
func (c *genCtx) submit() *reqError {
	w, g := c.w, c.g
	var remote *engine.RemotePrefill
	remoteDecode := false
	if rerr := c.dialectLegs(&remote, &remoteDecode); rerr != nil {
		return rerr
	}
	if g.kv != nil {
		rec := newReceipt(c.rid, g.kv)
		switch {
		case g.kv.DoRemotePrefill && w.cfg.Engine.KVRole.AcceptsRemotePrefill():
			remote = w.pull(c.r.Context(), g.kv, &rec)
		case g.kv.DoRemotePrefill:
			remote = &engine.RemotePrefill{} // not honoured: the engine counts it
		case g.kv.DoRemoteDecode:
			remoteDecode = true
		}
		w.met.kvParamsReceived.Inc()
		w.receipts.add(rec)
	}
	hasher := w.eng.Hasher()
	for i, p := range g.prompts {
		req := engine.Request{
			ID:            c.idBase + "-" + strconv.Itoa(i),
			Tokens:        p.tokens,
			MaxTokens:     g.maxTokens,
			Extra:         p.extra,
			LoRAID:        g.loraID,
			RemoteDecode:  remoteDecode,
			RemotePrefill: remote,
		}
		if remote == nil || !w.cfg.Engine.KVRole.AcceptsRemotePrefill() {
			d, err := hasher.AppendDigests(nil, p.tokens, p.extra)
			if err != nil {
				return badRequest("cannot hash prompt %d: %v", i, err)
			}
			req.Digests = d
		}
		run := &seqRun{p: p, id: req.ID, tr: &tracker{notify: c.notify}, started: time.Now()}
		if p.text != "" {
			run.seed, run.offset = outputStart(p, func(s string) []uint32 { return w.encodeText(s, p.addSpecial) })
		} else {
			run.seed = outputSeed(p.tokens)
		}
		t, err := w.drv.submit(c.r.Context(), req, run.tr)
		if err != nil {
			w.met.rejected.Inc()
			switch {
			case errors.Is(err, engine.ErrInvalidRequest):
				return badRequest("%s", strings.TrimPrefix(err.Error(), "submit "+strconv.Quote(req.ID)+": "))
			case errors.Is(err, engine.ErrQueueFull):
				return &reqError{status: http.StatusServiceUnavailable, msg: "the waiting queue is full; retry later"}
			default:
				return &reqError{status: http.StatusServiceUnavailable, msg: "worker unavailable: " + err.Error()}
			}
		}
		run.ticket = t
		c.runs = append(c.runs, run)
	}
	return nil
}

// dialectLegs plays an SGLang or TensorRT-LLM P/D leg: a prefill leg
// (remoteDecode, one output token) waits for its decode to join the
// bootstrap room first; a decode leg (remote) joins the room, or reads the
// context leg's encoded_opaque_state, and pulls the prompt's KV.
func (c *genCtx) dialectLegs(remote **engine.RemotePrefill, remoteDecode *bool) *reqError {
	w, g := c.w, c.g
	role := w.cfg.Engine.KVRole
	switch {
	case g.boot != nil && role == engine.KVNone:
		g.boot = nil // a server without disaggregation ignores the triple
	case g.boot != nil && w.ownsBootstrap(g.boot):
		room, err := w.awaitJoin(c.r.Context(), g.boot)
		if err != nil {
			return &reqError{status: http.StatusServiceUnavailable, msg: "prefill: " + err.Error()}
		}
		c.room, *remoteDecode, g.maxTokens = room, true, 1
	case g.boot != nil:
		kv, err := w.joinAndWait(c.r.Context(), g.boot)
		if err != nil {
			w.met.pullFailures.Inc()
			return &reqError{status: http.StatusInternalServerError, msg: "decode: KV transfer from the prefill failed: " + err.Error()}
		}
		g.kv = kv
	case g.disagg != nil && g.disagg.RequestType == trtContextOnly:
		*remoteDecode, g.maxTokens = true, 1
		c.ctxID = w.ctxIDs.Add(1)
	case g.disagg != nil && g.disagg.RequestType == trtGenerationOnly:
		kv, rerr := kvFromOpaque(g.disagg.EncodedOpaqueState)
		if rerr != nil {
			return rerr
		}
		g.kv = kv
	}
	return nil
}

// ownsBootstrap reports whether t names this worker's own bootstrap server
// (it is the pair's prefill).
func (w *Worker) ownsBootstrap(t *bootstrapTriple) bool {
	return w.bootLn != nil && t.Port == w.bootstrapPort() && (t.Host == w.cfg.IP || t.Host == "localhost" && w.cfg.IP == "127.0.0.1")
}

// abortUnfinished cancels engine requests the handler leaves behind
// (client gone, connection dropped, worker stopping), and fails an SGLang
// prefill's room so its decode stops waiting.
func (c *genCtx) abortUnfinished() {
	if c.room != nil {
		c.room.finish(nil)
	}
	for _, run := range c.runs {
		if !run.done {
			c.w.drv.abort(run.ticket)
		}
	}
}

// next waits for progress; false when the client or worker went away (the
// caller just returns; deferred aborts clean up).
func (c *genCtx) next() bool {
	select {
	case <-c.notify:
		return true
	case <-c.r.Context().Done():
		return false
	case <-c.w.stopping:
		return false
	}
}

// observe reads every run's progress and records metrics; it reports
// whether all runs are done and the first error.
func (c *genCtx) observe() (all bool, err error) {
	all = true
	for _, run := range c.runs {
		p, rerr := run.tr.get()
		if rerr != nil && err == nil {
			err = rerr
		}
		if !p.FirstTokenAt.IsZero() && !run.ttftObs {
			run.ttftObs = true
			c.w.met.ttft.Update(p.FirstTokenAt.Sub(run.started).Seconds())
		}
		if p.Done && !run.done {
			run.done = true
			c.w.met.e2e.Update(p.DoneAt.Sub(run.started).Seconds())
			if c.room != nil && p.Remote != nil {
				c.room.finish(p.Remote) // the decode reads these blocks
			}
		}
		all = all && run.done
	}
	return all, err
}

// serveWhole waits for every sequence and writes one JSON response.
func (c *genCtx) serveWhole() {
	for {
		all, err := c.observe()
		if err != nil {
			writeError(c.rw, http.StatusServiceUnavailable, "worker stopped: "+err.Error())
			return
		}
		if all {
			break
		}
		if !c.next() {
			c.giveUp()
			return
		}
	}
	resp := c.base(false)
	u := c.w.newUsage()
	for i, run := range c.runs {
		p, _ := run.tr.get()
		text := c.text(run, 0, p.Generated)
		if c.g.echo && !c.g.chat {
			text = run.p.text + text
		}
		fr := p.Finish.String()
		ch := choice{Index: i, FinishReason: &fr}
		if c.g.chat {
			ch.Message = &chatDelta{Role: "assistant", Content: &text}
		} else {
			ch.Text = &text
		}
		resp.Choices = append(resp.Choices, ch)
		c.addUsage(u, run, p)
		switch {
		case p.Remote == nil:
		case c.g.disagg != nil:
			ch := &resp.Choices[len(resp.Choices)-1]
			ch.DisaggregatedParams = c.w.contextParams(p.Remote, int(run.seed%1000), c.ctxID)
		case c.w.cfg.Dialect == DialectVLLM:
			resp.KVTransferParams = c.w.transferParams(p.Remote, c.queueWait(run, p))
		}
	}
	resp.Usage = u
	if c.fault.kind == faultDrop && c.fault.mode == DropMidStream {
		body, _ := json.Marshal(resp) // our own struct: cannot fail
		c.rw.Header().Set("Content-Type", "application/json")
		c.rw.WriteHeader(http.StatusOK)
		_, _ = c.rw.Write(body[:len(body)/2])
		if f, ok := c.rw.(http.Flusher); ok {
			f.Flush()
		}
		dropConn(c.rw)
		return
	}
	writeJSON(c.rw, http.StatusOK, resp)
}

// text is the generated text of tokens [from, to) of a run.
func (c *genCtx) text(run *seqRun, from, to int) string {
	var sb strings.Builder
	for k := from; k < to; k++ {
		sb.WriteString(outputPiece(run.seed, run.offset+k))
	}
	return sb.String()
}

// queueWaitKey is the simulator-only queue-wait field of usage and of a
// prefill's kv_transfer_params (Config.ReportQueueWait).
const queueWaitKey = "llbsim_queue_wait_s"

// queueWait is a run's engine queue wait in seconds: admission minus
// submission (0 while waiting), plus the prefill leg's carried wait on a
// decode leg.
func (c *genCtx) queueWait(run *seqRun, p engine.Progress) float64 {
	var s float64
	if p.Admitted {
		s = p.AdmittedAt.Sub(run.started).Seconds()
	}
	if kv := c.g.kv; kv != nil && kv.DoRemotePrefill && kv.QueueWait != nil {
		s += *kv.QueueWait
	}
	return s
}

// addUsage accumulates one run into u (the queue wait as the longest run's).
func (c *genCtx) addUsage(u *usage, run *seqRun, p engine.Progress) {
	if c.w.cfg.ReportQueueWait {
		if q := c.queueWait(run, p); u.QueueWait == nil || q > *u.QueueWait {
			u.QueueWait = &q
		}
	}
	u.PromptTokens += len(run.p.tokens)
	u.CompletionTokens += p.Generated
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	if u.PromptTokensDetails != nil {
		u.PromptTokensDetails.CachedTokens += p.CachedTokens
	}
}
