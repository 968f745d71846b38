package gateway

import (
	"bytes"
	"strconv"
)

// The event tracker of a migratable stream (migrate.go). It sees every
// event of the answer on its way to the client and keeps what a
// continuation needs: the generated text (as the JSON-escaped bytes of the
// content or text deltas), the tokens produced (the engine's usage per
// chunk), whether the answer finished, and whatever makes it impossible to
// continue (a tool call, reasoning text, an event it cannot read). It edits
// events only where the client must not see what llb asked for — usage
// the client did not ask for, deleted in place — and, on a leg that
// continues a migrated stream, rewrites each event into the client's
// stream: the first leg's id, created and model, no second role chunk,
// usage summed over the legs.
//
// Events are OpenAI SSE events, "data: <json>\n\n" (vLLM, SGLang and
// TensorRT-LLM write exactly that): an event is taken whole when its blank
// line has arrived, so one cut across two reads is carried to the next
// (the relay holds it back: a client cannot use half an event anyway).

// sseTrack follows one streamed answer. The zero value is not ready: see
// begin.
type sseTrack struct {
	// The client's request (from migration).
	chat            bool
	includeUsage    bool // the client asked for the final usage chunk
	continuousUsage bool // and for usage in every chunk
	strip           bool // llb asked for usage the client did not (first leg)
	// bound is the request's token bound (0: none).
	bound int64

	// The stream's identity, from the first leg's first event: the raw
	// JSON values of id, created and model, in ids.
	ids               []byte
	idEnd, createdEnd int
	haveIDs           bool
	object            string // "chat.completion.chunk" or "text_completion"
	text              []byte // the generated text, JSON-escaped, no quotes
	base              int64  // tokens produced by the legs before this one
	legTokens         int64  // this leg's completion_tokens (cumulative)
	legEvents         int64  // this leg's events with text
	legUsage          bool   // this leg reported usage
	promptTokens      int64  // the first leg's prompt_tokens
	legPrompt         int64  // this leg's prompt_tokens
	splice            bool   // this leg continues a migrated stream
	finished, done    bool   // a finish_reason, [DONE] went to the client
	usageSent         bool   // the final usage chunk went to the client
	finishReason      string // a finish llb writes itself ("": none)
	refusal           migrateRefusal
	out               []byte // a spliced leg's rewritten events
	edits             [8]edit
	nedits            int
	usageBuf          [112]byte
	head              chunkHead // the last event's start (ssechunk.go)
	// us, when set, is fed every whole event as the engine sent it (the
	// leg's usage is counted from the tracker's pass), but for skipS..skipE
	// of the event: a head it was proven not to need (scanEvent).
	us           *usageScanner
	skipS, skipE int
}

// edit replaces ev[s:e] with repl.
type edit struct {
	s, e int
	repl []byte
}

// begin prepares t for the answer to m's request.
func (t *sseTrack) begin(m *migration) {
	t.chat, t.includeUsage, t.continuousUsage = m.chat, m.includeUsage, m.continuousUsage
	t.object = "text_completion"
	if t.chat {
		t.object = "chat.completion.chunk"
	}
	switch {
	case m.maxCompletion >= 0 && t.chat:
		t.bound = m.maxCompletion
	case m.maxTokens >= 0:
		t.bound = m.maxTokens
	case !t.chat:
		t.bound = vllmDefaultMaxTokens
	}
}

// legCount is the tokens this leg produced: its usage, else one per event
// with text.
func (t *sseTrack) legCount() int64 {
	if t.legUsage {
		return t.legTokens
	}
	return t.legEvents
}

// nextLeg starts a leg that continues the stream.
func (t *sseTrack) nextLeg() {
	t.base += t.legCount()
	t.legTokens, t.legEvents, t.legUsage, t.legPrompt = 0, 0, false, 0
	t.splice, t.strip = true, false
}

// feed takes the bytes the relay read (after what it carried) and returns
// the bytes to send to the client and how many of data it used: data[used:]
// is the start of an event still incomplete, to be carried. Outside a
// spliced leg, out is data's own prefix (events edited in place).
func (t *sseTrack) feed(data []byte) (out []byte, used int) {
	w := 0
	if t.splice {
		t.out = t.out[:0]
	}
	i := 0
	for {
		j := bytes.Index(data[i:], sseEnd)
		if j < 0 {
			break
		}
		end := i + j + len(sseEnd)
		ev := data[i:end]
		t.nedits = 0
		drop := t.event(ev)
		if t.us != nil {
			t.scanEvent(ev) // before the edits overwrite it
		}
		switch {
		case t.splice:
			if !drop {
				t.out = applyEdits(t.out, ev, t.edits[:t.nedits])
			}
		case drop:
		case t.nedits == 0 && w == i:
			w = end
		default:
			// Deletions only: the write position never passes the read
			// position, and append moves overlapping bytes correctly.
			w = len(applyEdits(data[:w], ev, t.edits[:t.nedits]))
		}
		i = end
	}
	if t.splice {
		return t.out, i
	}
	return data[:w], i
}

// scanEvent feeds ev to the usage scanner. An event that starts with the
// head of the one before (chunkHead) is fed without it when the head is
// neutral and the scanner is outside any string at its '{': the head then
// leaves the scanner as it found it, so only the bytes after it are walked
// twice.
func (t *sseTrack) scanEvent(ev []byte) {
	if t.skipE == 0 {
		t.us.Write(ev)
		return
	}
	t.us.Write(ev[:t.skipS+1])
	if t.us.inStr {
		t.us.Write(ev[t.skipS+1:])
		return
	}
	t.us.Write(ev[t.skipE:])
}

// sseEnd ends an event.
var sseEnd = []byte("\n\n")

// applyEdits appends ev with its edits (sorted by position) applied to
// dst; an edit overlapping the one before it is skipped.
func applyEdits(dst, ev []byte, edits []edit) []byte {
	prev := 0
	for _, e := range edits {
		if e.s < prev {
			continue
		}
		dst = append(dst, ev[prev:e.s]...)
		dst = append(dst, e.repl...)
		prev = e.e
	}
	return append(dst, ev[prev:]...)
}

// event reads one whole event, records what it says and the edits it
// needs (t.edits); it reports whether the client must not see it at all.
func (t *sseTrack) event(ev []byte) (drop bool) {
	t.skipS, t.skipE = 0, 0
	p0, p1, ok := ssePayload(ev)
	if !ok {
		t.refuse(refUnreadable)
		return false
	}
	if string(ev[p0:p1]) == "[DONE]" {
		t.done = true
		return false
	}
	var ci chunkInfo
	if !readChunk(ev[:p1], p0, &ci, &t.head) {
		t.refuse(refUnreadable)
		return false
	}
	if t.head.matchE > 0 && t.head.neutral {
		t.skipS, t.skipE = t.head.matchS, t.head.matchE
	}
	if ci.engineError {
		t.refuse(refEngineError)
	}
	if ci.haveTokens {
		t.legTokens, t.legUsage = ci.tokens, true
	}
	if ci.havePrompt {
		t.legPrompt = ci.prompt
		if !t.splice && t.promptTokens == 0 {
			t.promptTokens = ci.prompt
		}
	}
	idS, idE, crS, crE, moS, moE := ci.idS, ci.idE, ci.crS, ci.crE, ci.moS, ci.moE
	usageS, usageE, usageV, haveUsage := ci.usageS, ci.usageE, ci.usageV, ci.haveUsage
	c := &ci.c
	if !t.haveIDs && !t.splice && idE > 0 {
		t.haveIDs = true
		t.ids = append(append(append(t.ids[:0], ev[idS:idE]...), ev[crS:crE]...), ev[moS:moE]...)
		t.idEnd, t.createdEnd = idE-idS, idE-idS+crE-crS
	}
	if c.text != nil {
		if len(t.text)+len(c.text) > maxTrackedText {
			t.refuse(refTooLong)
			t.text = nil
		} else if t.refusal != refTooLong {
			t.text = append(t.text, c.text...)
		}
		if len(c.text) > 0 {
			t.legEvents++
		}
	}
	if c.tool {
		t.refuse(refToolCall)
	}
	if c.reasoning {
		t.refuse(refReasoning)
	}
	if c.finish {
		t.finished = true
	}
	final := ci.emptyChoices && haveUsage // the final usage chunk
	if t.splice {
		if c.role && len(c.text) == 0 && !c.finish && !c.tool {
			return true // the continuation's role chunk
		}
		if final && !t.includeUsage {
			return true
		}
		if t.haveIDs {
			t.add(idS, idE, t.ids[:t.idEnd])
			t.add(crS, crE, t.ids[t.idEnd:t.createdEnd])
			t.add(moS, moE, t.ids[t.createdEnd:])
		}
		if c.role {
			t.add(c.roleS, c.roleE, nil)
		}
		if haveUsage {
			if final || t.continuousUsage {
				t.add(usageV, usageE, t.summedUsage())
			} else {
				s, e := memberSpan(ev, usageS, usageE)
				t.add(s, e, nil)
			}
		}
		t.usageSent = t.usageSent || final
		return false
	}
	if final {
		if t.strip && !t.includeUsage {
			return true
		}
		t.usageSent = true
		return false
	}
	if haveUsage && t.strip {
		s, e := memberSpan(ev, usageS, usageE)
		t.add(s, e, nil)
	}
	return false
}

// add records an edit, keeping t.edits sorted by position. A span not
// found (e <= s) is skipped.
func (t *sseTrack) add(s, e int, repl []byte) {
	if e <= s || t.nedits == len(t.edits) {
		return
	}
	i := t.nedits
	for i > 0 && t.edits[i-1].s > s {
		t.edits[i] = t.edits[i-1]
		i--
	}
	t.edits[i] = edit{s: s, e: e, repl: repl}
	t.nedits++
}

// idle reports whether following the stream no longer serves anything:
// it cannot be continued, and no event needs an edit.
func (t *sseTrack) idle() bool { return t.refusal != refNone && !t.strip && !t.splice }

// refuse records the first reason the stream cannot be continued.
func (t *sseTrack) refuse(r migrateRefusal) {
	if t.refusal == refNone {
		t.refusal = r
	}
}

// choiceInfo is what an event's choice says.
type choiceInfo struct {
	text         []byte // content or text delta, JSON-escaped; nil: none
	role         bool   // a role member (its span: roleS, roleE, comma included)
	roleS, roleE int
	tool         bool // a tool-call delta
	reasoning    bool // a reasoning delta
	finish       bool // a finish_reason
}

// summedUsage renders the usage of every leg so far: the first leg's
// prompt tokens, every leg's completion tokens.
func (t *sseTrack) summedUsage() []byte {
	p := t.promptTokens
	if p == 0 && t.legPrompt > t.base {
		p = t.legPrompt - t.base // the first leg reported none
	}
	c := t.base + t.legCount()
	b := append(t.usageBuf[:0], `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, p, 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, p+c, 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, c, 10)
	return append(b, '}')
}

// appendEnd appends the end of a stream whose last leg broke after its
// last token: the finish llb decided (finishReason), the usage chunk the
// client asked for and has not had, and [DONE].
func (t *sseTrack) appendEnd(dst []byte) []byte {
	head := func(dst []byte) []byte {
		dst = append(dst, `data: {"id":`...)
		dst = append(dst, t.ids[:t.idEnd]...)
		dst = append(dst, `,"object":"`...)
		dst = append(dst, t.object...)
		dst = append(dst, `","created":`...)
		dst = append(dst, t.ids[t.idEnd:t.createdEnd]...)
		dst = append(dst, `,"model":`...)
		return append(dst, t.ids[t.createdEnd:]...)
	}
	if t.haveIDs && t.finishReason != "" && !t.finished {
		dst = head(dst)
		if t.chat {
			dst = append(dst, `,"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"`...)
		} else {
			dst = append(dst, `,"choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"`...)
		}
		dst = append(dst, t.finishReason...)
		dst = append(dst, `"}]`...)
		if t.continuousUsage {
			dst = append(dst, `,"usage":`...)
			dst = append(dst, t.summedUsage()...)
		}
		dst = append(dst, "}\n\n"...)
		t.finished = true
	}
	if t.haveIDs && t.includeUsage && !t.usageSent {
		dst = head(dst)
		dst = append(dst, `,"choices":[],"usage":`...)
		dst = append(dst, t.summedUsage()...)
		dst = append(dst, "}\n\n"...)
		t.usageSent = true
	}
	t.done = true
	return append(dst, "data: [DONE]\n\n"...)
}

// ssePayload finds the data of an event: its one "data:" line (an
// optional space after the colon; comment and other field lines are
// ignored). ok is false for an event with several data lines or none.
func ssePayload(ev []byte) (p0, p1 int, ok bool) {
	found := false
	for i := 0; i < len(ev); {
		nl := bytes.IndexByte(ev[i:], '\n')
		if nl < 0 {
			nl = len(ev) - i
		}
		line := ev[i : i+nl]
		if bytes.HasPrefix(line, []byte("data:")) {
			if found {
				return 0, 0, false
			}
			found = true
			p0, p1 = i+5, i+nl
			if p0 < p1 && ev[p0] == ' ' {
				p0++
			}
			if p1 > p0 && ev[p1-1] == '\r' {
				p1--
			}
		}
		i += nl + 1
	}
	return p0, p1, found
}

// memberSpan widens a member's span [s, e) of ev to one adjacent comma, so
// that deleting it leaves valid JSON.
func memberSpan(ev []byte, s, e int) (int, int) {
	if k := skipSpace(ev, e); k < len(ev) && ev[k] == ',' {
		return s, k + 1
	}
	k := s - 1
	for k >= 0 && (ev[k] == ' ' || ev[k] == '\t' || ev[k] == '\n' || ev[k] == '\r') {
		k--
	}
	if k >= 0 && ev[k] == ',' {
		return k, e
	}
	return s, e
}

// jsonCount reads a non-negative JSON integer.
func jsonCount(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
