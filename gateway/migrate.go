package gateway

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"strconv"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/internal/logfield"
)

// Request migration: a stream survives its worker.
//
// When the upstream leg of a streamed answer breaks after the client got
// bytes — the connection reset or closed early (a killed worker), the
// endpoint taken out of service by its probe or breaker (the endpoint
// watch cuts the leg), or no byte for the stream idle bound (a frozen
// worker) — the request is sent again, to an endpoint the router chooses
// like for any request (avoiding the dead one), with what was already
// generated appended, and the new stream is spliced into the client's:
//
//   - completions: the prompt followed by the text so far;
//   - chat: the messages followed by the partial assistant message,
//     continued (continue_final_message true, add_generation_prompt false;
//     a client's own continue_final_message gets the text appended to its
//     final message);
//   - max_tokens / max_completion_tokens and min_tokens reduced by the
//     tokens already produced (a completion without max_tokens has its
//     engine's default, 16 for vLLM);
//   - the new leg's events carry the first leg's id, created and model, its
//     role chunk is dropped, and usage counts both legs (prompt tokens of
//     the first, completion tokens of all).
//
// Tokens are counted by the engine: a leg whose count is needed (a token
// bound to reduce, usage to sum) asks for usage in every chunk
// (stream_options include_usage and continuous_usage_stats, vLLM's and
// SGLang's spelling), and what the client did not ask for is taken out of
// what it receives (usage per chunk, the final usage chunk). An engine that
// sends no usage is counted one token per content event.
//
// What cannot be continued faithfully is cut as before, and counted: n or
// best_of above 1 and beam search, completion logprobs (text_offset would
// restart) and prompt_logprobs, structured output (response_format
// json_schema/json_object, guided_*, structured_outputs, SGLang's regex,
// ebnf and json_schema, a forced tool choice), echo, token-id or several
// prompts, a template llb cannot extend, a tool call or reasoning text
// being streamed, an event llb cannot read, an error the engine reported
// in the stream, a text over maxTrackedText, and what the rule's engine
// cannot take (migrate_engine.go). A request whose answering leg dies
// before any byte reached the client (streamed or not) is simply sent
// again (attempt.go, outcome "resent").
//
// The cost when nothing breaks: a tracked stream's events are each
// validated and walked once (no copy; an event cut across two reads is
// carried to the next read), the generated text is appended to a buffer
// the exchange keeps, and a request whose count is needed is sent with its
// stream_options rewritten (one copy of the body, into a buffer the
// exchange keeps) and has the usage it did not ask for deleted from each
// event in place.

// migrateRefusal is why a request cannot be continued on another endpoint.
type migrateRefusal uint8

// Refusals, in the order they are reported.
const (
	refNone        migrateRefusal = iota
	refN                          // n > 1
	refBestOf                     // best_of > 1, use_beam_search
	refLogprobs                   // completion logprobs, prompt_logprobs
	refStructured                 // response_format json_*, guided_*, structured_outputs, regex, ebnf, json_schema, forced tool_choice
	refEcho                       // echo
	refPromptForm                 // token-id prompts, several prompts, prompt_embeds
	refTemplate                   // add_generation_prompt false alone; a final message that is not text
	refToolCall                   // a tool call was being streamed
	refReasoning                  // reasoning text was streamed
	refUnreadable                 // an event llb could not read
	refEngineError                // the engine reported an error in the stream
	refTooLong                    // the text outgrew maxTrackedText
	refAPI                        // an API other than completions and chat
	refEngine                     // the rule's engine cannot take the continuation (migrate_engine.go)
)

var refusalNames = [...]string{"", "n", "best_of", "logprobs", "structured_output", "echo",
	"prompt_form", "template", "tool_call", "reasoning", "unreadable_stream", "engine_error", "too_long", "api", "engine"}

// maxTrackedText bounds the generated text a stream keeps for a
// continuation (about 64k tokens of English): a longer answer is no longer
// followed, and is cut if its worker dies. 100 streams hold at most 25 MiB.
const maxTrackedText = 256 << 10

// String returns the refusal's access-log name ("" for refNone).
func (r migrateRefusal) String() string {
	if int(r) < len(refusalNames) {
		return refusalNames[r]
	}
	return "refusal(?)"
}

// Migration outcomes (llb_migrations_total{outcome}).
const (
	// migrated: a broken stream went on on another endpoint.
	migMigrated = iota
	// resent: an answer that had sent nothing was sent again.
	migResent
	// unsupported: the request cannot be continued faithfully; cut.
	migUnsupported
	// limit: the request had used its migrations; cut.
	migLimit
	// failed: no endpoint took the continuation; cut.
	migFailed
	numMigOutcomes
)

var migOutcomeNames = [numMigOutcomes]string{"migrated", "resent", "unsupported", "limit", "failed"}

// vllmDefaultMaxTokens is vLLM's max_tokens of a completion that sends
// none (CompletionRequest.max_tokens = 16).
const vllmDefaultMaxTokens = 16

// migration is an exchange's migration state (pooled with it; reset by
// reset). Owned by the exchange's goroutine.
type migration struct {
	// left is how many more migrations or resends the request may make;
	// count how many it made (access log).
	left, count int
	// cut is why a broken stream was not continued (access log); why is
	// why the request's stream cannot be continued at all (refNone: it
	// can, or it is not a stream, or migration is off).
	cut string
	why migrateRefusal
	// track: the answer is a stream followed event by event (see sse.go).
	track bool
	// The client's own request, as parsed before any rewrite.
	chat            bool
	orig            []byte // the client's body
	includeUsage    bool   // stream_options.include_usage
	continuousUsage bool   // stream_options.continuous_usage_stats (with include_usage)
	maxTokens       int64  // max_tokens (-1: absent)
	maxCompletion   int64  // max_completion_tokens (-1: absent)
	minTokens       int64  // min_tokens (-1: absent)
	continueFinal   bool   // continue_final_message
	// inject: llb asked the engine for usage in every chunk that the
	// client did not ask for; it is deleted from what the client gets.
	inject bool
	// body is the rewritten body of a leg (kept across requests when small).
	body []byte

	sse sseTrack
}

// reset clears m for a new request, keeping small buffers.
func (m *migration) reset() {
	body, text, out, ids := m.body[:0], m.sse.text[:0], m.sse.out[:0], m.sse.ids[:0]
	if cap(body) > maxKeptBodyBuffer {
		body = nil
	}
	if cap(text) > maxKeptBodyBuffer {
		text = nil
	}
	if cap(out) > maxKeptBodyBuffer {
		out = nil
	}
	if cap(ids) > 1024 {
		ids = nil
	}
	*m = migration{body: body}
	m.sse.text, m.sse.out, m.sse.ids = text, out, ids
}

// prepare sets up x's migration state once the request is parsed: the
// limit, and for a stream that can be continued, its tracking and the
// first leg's body (with usage in every chunk when the count is needed).
func (x *exchange) prepareMigration() {
	m, req := &x.mig, &x.req
	m.left = x.h.migrationLimit
	if m.left == 0 || !req.Stream {
		return
	}
	if req.Kind != KindCompletion && req.Kind != KindChat {
		m.why = refAPI // their streams are other formats (Responses, Messages events)
		return
	}
	c := &req.Cont
	if m.why = c.refusal(); m.why == refNone && !continuablePrompt(req) {
		m.why = refPromptForm
		if req.Kind == KindChat {
			m.why = refTemplate
		}
	}
	if m.why != refNone {
		return
	}
	m.chat, m.maxTokens = req.Kind == KindChat, c.maxTokens
	if m.why = x.h.engine.refusal(m); m.why != refNone {
		return
	}
	m.track, m.orig = true, req.Body
	m.includeUsage, m.continuousUsage = c.includeUsage, c.includeUsage && c.continuousUsage
	m.maxCompletion, m.minTokens = c.maxCompletionTokens, c.minTokens
	m.continueFinal = c.continueFinal
	m.sse.begin(m)
	need := !m.chat || m.maxTokens >= 0 || m.maxCompletion >= 0 || m.minTokens > 0 || m.includeUsage
	if !need || m.continuousUsage {
		return
	}
	b, err := m.withUsage(m.body[:0], req.Body, nil)
	if err != nil { // unreachable: the body parsed as an object
		m.track = false
		return
	}
	m.body, m.inject, m.sse.strip = b, true, true
	req.Body = b
}

// continuablePrompt reports whether req's prompt can be extended with
// text: a chat, or a completion with one text prompt.
func continuablePrompt(req *Request) bool {
	if req.Kind == KindChat {
		return !req.Cont.noGenPrompt || req.Cont.continueFinal
	}
	return (req.Form == PromptText || req.Form == PromptTexts) && len(req.Texts) == 1 && !req.PromptEmbeds
}

// usageOptions asks for usage in every chunk.
const usageOptions = `{"include_usage":true,"continuous_usage_stats":true}`

// withUsage appends to dst body with its stream_options replaced by
// usageOptions and, when edit is not nil, every member edit names
// replaced by its value (nil: dropped) and the members it names that body
// lacks appended.
func (m *migration) withUsage(dst, body []byte, edit func(key string) (val []byte, ok bool)) ([]byte, error) {
	ed := objectEditor{out: append(dst, '{'), first: true}
	var seen [8]string
	n := 0
	it := memberIter{doc: body}
	for it.next() {
		if string(it.m.key) == "stream_options" {
			continue
		}
		if edit != nil {
			k := string(it.m.key)
			if v, ok := edit(k); ok {
				if v != nil && n < len(seen) {
					seen[n] = k
					n++
					ed.add(k, v)
				}
				continue
			}
		}
		ed.copyMember(body, &it.m)
	}
	if it.err != nil {
		return nil, it.err
	}
	ed.add("stream_options", []byte(usageOptions))
	if edit != nil {
		for _, k := range editKeys {
			if v, ok := edit(k); ok && v != nil && !contains(seen[:n], k) {
				ed.add(k, v)
			}
		}
	}
	return ed.bytes(), nil
}

// editKeys are the members a continuation may add to a body.
var editKeys = [...]string{"prompt", "messages", "max_tokens", "max_completion_tokens", "min_tokens",
	"continue_final_message", "add_generation_prompt"}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// produced is how many tokens the client received so far.
func (m *migration) produced() int64 { return m.sse.base + m.sse.legCount() }

// continuation builds the body that continues the stream: the client's
// body with the generated text appended to the prompt or the messages, the
// token bounds reduced, usage in every chunk. ok is false when the prompt
// cannot be extended (refTemplate).
func (m *migration) continuation(eng engineRules) (body []byte, why migrateRefusal) {
	done := m.produced()
	var prompt, messages []byte
	it := memberIter{doc: m.orig}
	for it.next() {
		switch string(it.m.key) {
		case "prompt":
			prompt = it.m.val
		case "messages":
			messages = it.m.val
		}
	}
	var ext []byte
	var err error
	if m.chat {
		ext, err = extendMessages(messages, m.sse.text, m.continueFinal)
	} else {
		ext, err = extendPrompt(prompt, m.sse.text)
	}
	if err != nil {
		return nil, refTemplate
	}
	var nums [3][24]byte
	reduce := func(i int, v int64, floor int64) []byte {
		return strconv.AppendInt(nums[i][:0], max(v-done, floor), 10)
	}
	maxTokens := m.maxTokens
	if !m.chat && maxTokens < 0 && eng.completionMaxTokens > 0 {
		maxTokens = eng.completionMaxTokens
	}
	edit := func(key string) ([]byte, bool) {
		switch key {
		case "prompt":
			if !m.chat {
				return ext, true
			}
		case "messages":
			if m.chat {
				return ext, true
			}
		case "max_tokens":
			if maxTokens >= 0 {
				return reduce(0, maxTokens, 1), true
			}
		case "max_completion_tokens":
			if m.maxCompletion >= 0 {
				return reduce(1, m.maxCompletion, 1), true
			}
		case "min_tokens":
			if m.minTokens >= 0 {
				return reduce(2, m.minTokens, 0), true
			}
		case "continue_final_message":
			if m.chat {
				return []byte("true"), true
			}
		case "add_generation_prompt":
			if m.chat && eng.genPromptField {
				return []byte("false"), true
			}
		case "kv_transfer_params":
			return nil, true // a dialect sets its own
		}
		return nil, false
	}
	// A fresh buffer: the request parsed from it shares its bytes, and the
	// router may read the routing input of a leg after it ended.
	b, err := m.withUsage(make([]byte, 0, len(m.orig)+len(m.sse.text)+160), m.orig, edit)
	if err != nil {
		return nil, refTemplate
	}
	return b, refNone
}

// extendPrompt returns a completion prompt (a string, or an array of one
// string) with text (JSON-escaped, no quotes) appended, as one string.
func extendPrompt(prompt, text []byte) ([]byte, error) {
	lit := prompt
	if len(lit) > 0 && lit[0] == '[' {
		lit = nil
		_ = forEachElement(prompt, func(i int, v []byte) error {
			if i == 0 {
				lit = v
			}
			return nil
		})
	}
	if len(lit) < 2 || lit[0] != '"' {
		return nil, errNotObject
	}
	out := make([]byte, 0, len(lit)+len(text))
	out = append(out, lit[:len(lit)-1]...)
	out = append(out, text...)
	return append(out, '"'), nil
}

// extendMessages returns the chat messages with the partial assistant
// message text (JSON-escaped, no quotes) after them, or appended to the
// final message when the client continued it itself.
func extendMessages(messages, text []byte, continueFinal bool) ([]byte, error) {
	if len(messages) < 2 || messages[0] != '[' || messages[len(messages)-1] != ']' {
		return nil, errNotObject
	}
	if !continueFinal {
		out := make([]byte, 0, len(messages)+len(text)+40)
		out = append(out, messages[:len(messages)-1]...)
		if len(skipSpaceBytes(messages[1:len(messages)-1])) > 0 {
			out = append(out, ',')
		}
		out = append(out, `{"role":"assistant","content":"`...)
		out = append(out, text...)
		return append(out, `"}]`...), nil
	}
	// The client's final message is the one being continued: append to
	// its string content.
	var last []byte
	_ = forEachElement(messages, func(_ int, v []byte) error {
		last = v
		return nil
	})
	if len(last) == 0 || last[0] != '{' {
		return nil, errNotObject
	}
	var content []byte
	cstart := 0
	it := memberIter{doc: last}
	for it.next() {
		if string(it.m.key) == "content" {
			content, cstart = it.m.val, it.m.end-len(it.m.val)
		}
	}
	if len(content) < 2 || content[0] != '"' {
		return nil, errNotObject
	}
	lstart := cap(messages) - cap(last) // last is a sub-slice of messages
	out := make([]byte, 0, len(messages)+len(text))
	out = append(out, messages[:lstart+cstart+len(content)-1]...)
	out = append(out, text...)
	return append(out, messages[lstart+cstart+len(content)-1:]...), nil
}

// skipSpaceBytes returns b without leading JSON whitespace.
func skipSpaceBytes(b []byte) []byte { return b[skipSpace(b, 0):] }

// migrate continues x's stream on another endpoint after its leg broke
// with err (io.EOF: the body ended before the stream did). It ends the
// broken leg; it reports whether a new leg now feeds the stream (s.lg,
// s.body), the stream was completed (done), or neither (the caller cuts
// the client connection).
func (s *relayStream) migrate(err error) (ok, done bool) {
	x := s.x
	m := &x.mig
	defer func() {
		if p := recover(); p != nil {
			buf := make([]byte, 16<<10)
			buf = buf[:runtime.Stack(buf, false)]
			x.h.log.Error().Str(logfield.Panic, fmt.Sprint(p)).Bytes(logfield.Stack, buf).Msg("panic migrating a stream; the stream is cut")
			ok, done = false, false
		}
	}()
	fail, cause := actors.FailReset, causeReset
	switch {
	case err != io.EOF:
		fail, cause = s.lg.failure(err)
	case m.sse.finished:
		fail = actors.FailNone // the engine ended the body after the last token
	}
	switch cause {
	case causeClient, causeCut, causeDeadline:
		return false, false // not the worker's doing
	}
	s.endLeg(fail)
	x.unwatch()
	if err != io.EOF {
		x.detail = err.Error()
	}
	t := &m.sse
	if t.finished {
		// Everything was generated; only the end was lost.
		return false, true
	}
	if t.bound > 0 && m.produced() >= t.bound {
		// The stream broke right after its last token, before its finish.
		t.finishReason = "length"
		return false, true
	}
	if why := t.refusal; why != refNone {
		x.h.met.migration(migUnsupported)
		m.cut = why.String()
		return false, false
	}
	if m.left == 0 {
		x.h.met.migration(migLimit)
		m.cut = "limit"
		return false, false
	}
	body, why := m.continuation(x.h.engine)
	if why != refNone {
		x.h.met.migration(migUnsupported)
		m.cut = why.String()
		return false, false
	}
	if perr := x.req.parse(x.req.Kind, body, true); perr != nil {
		x.h.met.migration(migFailed)
		m.cut = "continuation_invalid"
		return false, false
	}
	avoid := x.rr.Avoid
	if s.lg.ep >= 0 && s.lg.ep < 32 {
		avoid |= 1 << uint(s.lg.ep)
	}
	t.nextLeg()
	x.following = true
	for m.left > 0 {
		m.left--
		rr := &actors.RouteRequest{}
		x.h.input.build(x.ctx, x.in, x.remote, x.ip, &x.req, rr)
		x.tag(rr)
		rr.Avoid = avoid
		x.rr = rr
		if !x.route() {
			break
		}
		a := x.run()
		if a.follow {
			m.count++
			x.h.met.migration(migMigrated)
			if e := x.h.log.Debug(); e.Enabled() {
				e.Int(logfield.Migrations, m.count).Int64("produced", t.base).Str(logfield.LLBRoute, x.decision.String()).Msg("stream migrated")
			}
			return true, false
		}
		if !a.retry {
			break
		}
		if a.failedEP >= 0 && a.failedEP < 32 {
			avoid |= 1 << uint(a.failedEP)
		}
	}
	x.h.met.migration(migFailed)
	m.cut = "failed"
	return false, false
}

// cutUntracked counts a stream that broke with err and that migration did
// not follow because its request cannot be continued.
func (s *relayStream) cutUntracked(err error) {
	x := s.x
	m := &x.mig
	why := m.why
	if why == refNone {
		why = m.sse.refusal // a stream that stopped being followed
	}
	if why == refNone || m.cut != "" {
		return
	}
	if _, cause := s.lg.failure(err); !cause.workerFault() {
		return
	}
	m.cut = why.String()
	x.h.met.migration(migUnsupported)
}

// follow takes lg, a leg that continues a migrated stream and whose head
// is in the exchange side's legHead, as the stream's upstream: the relay goes on reading its
// body. A leg that did not answer a 2xx event stream is ended (a 5xx asks
// for another endpoint).
func (x *exchange) follow(lg leg, ttfb time.Duration) attempt {
	hd := &x.sides().legHead
	status := hd.StatusCode()
	if status/100 != 2 || !isEventStream(hd.ContentType()) {
		lg.end(false)
		x.unwatch()
		x.conclude(actors.Outcome{Leg: lg.kind, Status: status, TTFB: ttfb, Duration: time.Since(lg.start)}, actors.Result{})
		x.detail = "the continuation was answered " + strconv.Itoa(status) + " " + string(hd.ContentType())
		return attempt{retry: status >= 500, failedEP: lg.ep}
	}
	if !x.watched.stream() {
		lg.end(false)
		x.unwatch()
		return x.legFailed(&lg, actors.FailTimeout, causeDown, nil)
	}
	s := &x.relay
	s.lg, s.ttfb, s.status, s.ended = lg, ttfb, status, false
	s.decode = lg.kind == actors.LegDecode
	s.scan, s.firstByte = false, time.Time{}
	s.body.reset(lg.c, hd, false)
	return attempt{follow: true}
}

// contInput is what the request parser reads for migration: the fields
// that make an answer impossible to continue elsewhere (one bit each, so
// that the last of duplicate keys decides, as for every field), the
// client's stream_options and token bounds, its template switches.
type contInput struct {
	refuse                         contFields
	includeUsage, continuousUsage  bool
	maxTokens, maxCompletionTokens int64 // -1: absent or null
	minTokens                      int64 // -1: absent or null
	continueFinal, noGenPrompt     bool
}

// contFields are request fields set to values that cannot be continued.
type contFields uint32

const (
	cfN contFields = 1 << iota
	cfBestOf
	cfBeamSearch
	cfLogprobs
	cfPromptLogprobs
	cfEcho
	cfResponseFormat
	cfGuidedJSON
	cfGuidedRegex
	cfGuidedChoice
	cfGuidedGrammar
	cfStructuredOutputs
	cfToolChoice
	cfRegex      // SGLang's regex
	cfEBNF       // SGLang's ebnf
	cfJSONSchema // SGLang's json_schema
)

// set records whether field f holds a value that cannot be continued.
func (c *contInput) set(f contFields, bad bool) {
	if bad {
		c.refuse |= f
	} else {
		c.refuse &^= f
	}
}

// refusal is the first reason the request's fields give.
func (c *contInput) refusal() migrateRefusal {
	f := c.refuse
	switch {
	case f == 0:
		return refNone
	case f&cfN != 0:
		return refN
	case f&(cfBestOf|cfBeamSearch) != 0:
		return refBestOf
	case f&(cfLogprobs|cfPromptLogprobs) != 0:
		return refLogprobs
	case f&cfEcho != 0:
		return refEcho
	}
	return refStructured
}

// contField returns the bit of a field that can make a request impossible
// to continue (0: none).
func contField(key string) contFields {
	switch key {
	case "n":
		return cfN
	case "best_of":
		return cfBestOf
	case "use_beam_search":
		return cfBeamSearch
	case "logprobs":
		return cfLogprobs
	case "prompt_logprobs":
		return cfPromptLogprobs
	case "echo":
		return cfEcho
	case "response_format":
		return cfResponseFormat
	case "guided_json":
		return cfGuidedJSON
	case "guided_regex":
		return cfGuidedRegex
	case "guided_choice":
		return cfGuidedChoice
	case "guided_grammar":
		return cfGuidedGrammar
	case "structured_outputs":
		return cfStructuredOutputs
	case "tool_choice":
		return cfToolChoice
	case "regex":
		return cfRegex
	case "ebnf":
		return cfEBNF
	case "json_schema":
		return cfJSONSchema
	}
	return 0
}

// readField records a field contField named: whether its value m.val
// cannot be continued.
func (c *contInput) readField(f contFields, kind APIKind, m *member) {
	v := m.val
	var bad bool
	switch f {
	case cfN, cfBestOf:
		n, err := decodeCount(m)
		bad = err != nil || n > 1
	case cfBeamSearch, cfEcho:
		_ = decodeBool(m, &bad)
	case cfLogprobs:
		// A completion's logprobs carry text_offset, which a continuation
		// restarts; a chat's are per token and go on.
		bad = kind == KindCompletion && !isNull(v)
	case cfResponseFormat:
		bad = structuredFormat(v)
	case cfToolChoice:
		// "required" and a named function are structured output.
		bad = string(v) == `"required"` || len(v) > 0 && v[0] == '{'
	default:
		bad = !isNull(v)
	}
	c.set(f, bad)
}

// structuredFormat reports whether a response_format asks for structured
// output (any type but "text").
func structuredFormat(v []byte) bool {
	if len(v) == 0 || v[0] != '{' {
		return false
	}
	typ, err := topLevelValue(v, "type")
	return err != nil || typ != nil && string(typ) != `"text"`
}

// readStreamOptions reads stream_options (an object, or null).
func (c *contInput) readStreamOptions(v []byte) {
	c.includeUsage, c.continuousUsage = false, false
	if len(v) == 0 || v[0] != '{' {
		return
	}
	it := memberIter{doc: v}
	for it.next() {
		switch string(it.m.key) {
		case "include_usage":
			_ = decodeBool(&it.m, &c.includeUsage)
		case "continuous_usage_stats":
			_ = decodeBool(&it.m, &c.continuousUsage)
		}
	}
}

// completionBound is the most completion tokens the request may produce
// as far as its body says: max_completion_tokens, else max_tokens, else
// for a completion vLLM's default of 16; 0 when it sets none (a chat
// completion may run to the context length).
func (c *contInput) completionBound(kind APIKind) uint32 {
	n := c.maxCompletionTokens
	if n < 0 {
		n = c.maxTokens
	}
	if n < 0 && kind == KindCompletion {
		n = vllmDefaultMaxTokens
	}
	return uint32(min(max(n, 0), math.MaxUint32))
}
