package gateway

import "bytes"

// The one-pass reader of an event's JSON for the stream tracker
// (ssetrack.go). Every event of a followed stream goes through it, so it
// reads each byte once: it validates the payload as it walks it (the
// tracker refuses to continue a stream from an event it cannot read), and
// descends only into what a continuation needs — the choice, its delta, the
// usage — while every other value is validated and skipped. What it finds
// goes to a chunkInfo; nothing of the tracker changes before the whole
// payload was read and found valid.

// chunkInfo is what one event says. Spans are offsets in the event.
type chunkInfo struct {
	idS, idE, crS, crE, moS, moE int
	// usageS..usageE is the usage member (key to value), usageV its value's
	// start.
	usageS, usageE, usageV  int
	haveUsage, emptyChoices bool
	tokens, prompt          int64 // the usage's completion and prompt tokens
	haveTokens, havePrompt  bool
	engineError             bool
	c                       choiceInfo
}

// chunkHead is the start of the last event read, up to the end of the
// member before "choices", when every member there was one of id, object,
// created and model. An engine writes these the same way in every event of
// a stream, so an event that starts with the same bytes starts with the
// same valid members, and is read from there: only its choice and usage
// are walked.
type chunkHead struct {
	b                            []byte
	n                            int // members in b
	idS, idE, crS, crE, moS, moE int // offsets in b
	// neutral: b past its '{' leaves the usage scanner as it finds it
	// outside any string (usage.go), so a scanner can skip it.
	neutral bool
	// matchS..matchE: where the event read last started with b (matchE 0:
	// it did not).
	matchS, matchE int
}

// readChunk reads the JSON object at ev[p0:] (ev ends with the payload),
// from where head ends when it starts with head's bytes, and records its
// head for the next event. It reports false when the payload is not one
// valid JSON object, or its choices are not exactly one object with index
// 0 (the tracker cannot follow such a stream).
func readChunk(ev []byte, p0 int, ci *chunkInfo, head *chunkHead) bool {
	p := skipSpace(ev, p0)
	var w objWalk
	record := true
	head.matchS, head.matchE = 0, 0
	if len(head.b) > 0 && bytes.HasPrefix(ev[p:], head.b) {
		w = objWalk{b: ev, i: p + len(head.b), n: head.n}
		head.matchS, head.matchE = p, p+len(head.b)
		if head.idE > 0 {
			ci.idS, ci.idE = p+head.idS, p+head.idE
		}
		if head.crE > 0 {
			ci.crS, ci.crE = p+head.crS, p+head.crE
		}
		if head.moE > 0 {
			ci.moS, ci.moE = p+head.moS, p+head.moE
		}
		record = false
	} else {
		w = walkObject(ev, p)
	}
	headEnd, headN := 0, 0
	for {
		prev := w.i
		key, ks, vs, more := w.next()
		if !more {
			break
		}
		var end int
		ok := true
		switch string(key) {
		case "id":
			end, ok = scanValue(ev, vs)
			ci.idS, ci.idE = vs, end
		case "created":
			end, ok = scanValue(ev, vs)
			ci.crS, ci.crE = vs, end
		case "model":
			end, ok = scanValue(ev, vs)
			ci.moS, ci.moE = vs, end
		case "object":
			end, ok = scanValue(ev, vs)
		case "choices":
			if record && w.n > 1 {
				headEnd, headN = prev, w.n-1
			}
			record = false
			end, ok = ci.readChoices(ev, vs)
		case "usage":
			record = false
			if ev[vs] != '{' {
				end, ok = scanValue(ev, vs) // null: no usage
				break
			}
			end, ok = ci.readUsage(ev, vs)
			ci.haveUsage, ci.usageS, ci.usageE, ci.usageV = true, ks, end, vs
		case "error":
			record = false
			end, ok = scanValue(ev, vs)
			ci.engineError = ci.engineError || ok && !isNull(ev[vs:end])
		default:
			record = false
			end, ok = scanValue(ev, vs)
		}
		if !ok {
			return false
		}
		w.i = end
	}
	if w.err || skipSpace(ev, w.i) != len(ev) {
		return false
	}
	if headEnd > 0 {
		head.b = append(head.b[:0], ev[p:headEnd]...)
		head.n = headN
		var us usageScanner
		us.Write(head.b[1:])
		head.neutral = us.neutral()
		rel := func(s, e int) (int, int) {
			if e == 0 {
				return 0, 0
			}
			return s - p, e - p
		}
		head.idS, head.idE = rel(ci.idS, ci.idE)
		head.crS, head.crE = rel(ci.crS, ci.crE)
		head.moS, head.moE = rel(ci.moS, ci.moE)
	}
	return true
}

// readChoices reads the choices array at ev[vs]: empty, or one choice.
func (ci *chunkInfo) readChoices(ev []byte, vs int) (int, bool) {
	a := walkArray(ev, vs)
	n := 0
	for {
		es, more := a.next()
		if !more {
			break
		}
		n++
		if n > 1 || ev[es] != '{' {
			return es, false
		}
		end, ok := ci.readChoice(ev, es)
		if !ok {
			return end, false
		}
		a.i = end
	}
	ci.emptyChoices = n == 0
	return a.i, !a.err
}

// readChoice reads the one choice at ev[cs].
func (ci *chunkInfo) readChoice(ev []byte, cs int) (int, bool) {
	c := &ci.c
	w := walkObject(ev, cs)
	for {
		key, _, vs, more := w.next()
		if !more {
			break
		}
		var end int
		var ok bool
		switch string(key) {
		case "delta":
			if ev[vs] == '{' {
				end, ok = ci.readDelta(ev, vs)
			} else {
				end, ok = scanValue(ev, vs)
			}
		case "index":
			end, ok = scanValue(ev, vs)
			ok = ok && string(ev[vs:end]) == "0"
		case "text":
			end, ok = scanValue(ev, vs)
			if ok && ev[vs] == '"' {
				c.text = ev[vs+1 : end-1]
			}
		case "finish_reason":
			end, ok = scanValue(ev, vs)
			c.finish = !isNull(ev[vs:end])
		default:
			end, ok = scanValue(ev, vs)
		}
		if !ok {
			return end, false
		}
		w.i = end
	}
	return w.i, !w.err
}

// readDelta reads a chat delta at ev[ds].
func (ci *chunkInfo) readDelta(ev []byte, ds int) (int, bool) {
	c := &ci.c
	w := walkObject(ev, ds)
	for {
		key, ks, vs, more := w.next()
		if !more {
			break
		}
		end, ok := scanValue(ev, vs)
		if !ok {
			return end, false
		}
		v := ev[vs:end]
		switch string(key) {
		case "role":
			c.role = true
			c.roleS, c.roleE = memberSpan(ev, ks, end)
		case "content":
			if v[0] == '"' {
				c.text = v[1 : len(v)-1]
			}
		case "tool_calls", "function_call":
			c.tool = c.tool || !isNull(v) && string(v) != "[]"
		case "reasoning_content", "reasoning":
			c.reasoning = c.reasoning || len(v) > 2 && v[0] == '"'
		}
		w.i = end
	}
	return w.i, !w.err
}

// readUsage reads the counts of the usage object at ev[us].
func (ci *chunkInfo) readUsage(ev []byte, us int) (int, bool) {
	w := walkObject(ev, us)
	for {
		key, _, vs, more := w.next()
		if !more {
			break
		}
		end, ok := scanValue(ev, vs)
		if !ok {
			return end, false
		}
		if v, ok := jsonCount(ev[vs:end]); ok {
			switch string(key) {
			case "completion_tokens":
				ci.tokens, ci.haveTokens = v, true
			case "prompt_tokens":
				ci.prompt, ci.havePrompt = v, true
			}
		}
		w.i = end
	}
	return w.i, !w.err
}

// objWalk validates an object member by member; the caller reads each
// value (validating it) and sets i past it.
type objWalk struct {
	b   []byte
	i   int // the next byte to read; past the '}' at the end
	n   int // members read
	err bool
}

// walkObject starts walking the object at b[i].
func walkObject(b []byte, i int) objWalk {
	if i >= len(b) || b[i] != '{' {
		return objWalk{b: b, i: i, err: true}
	}
	return objWalk{b: b, i: i + 1}
}

// next reads the next member up to its value: the key (decoded when it
// has escapes), where the member starts (its key's quote) and where its
// value starts. more is false at the end of the object or on an error
// (w.err).
func (w *objWalk) next() (key []byte, ks, vs int, more bool) {
	if w.err {
		return nil, 0, 0, false
	}
	b := w.b
	i := skipSpace(b, w.i)
	switch {
	case i >= len(b):
		w.err = true
		return nil, 0, 0, false
	case b[i] == '}':
		w.i = i + 1
		return nil, 0, 0, false
	case w.n > 0:
		if b[i] != ',' {
			w.err = true
			return nil, 0, 0, false
		}
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] != '"' {
		w.err = true
		return nil, 0, 0, false
	}
	kEnd, ok := scanString(b, i)
	if !ok {
		w.err = true
		return nil, 0, 0, false
	}
	key = b[i+1 : kEnd-1]
	if !plainString(key) {
		key = []byte(unquote(b[i:kEnd]))
	}
	j := skipSpace(b, kEnd)
	if j >= len(b) || b[j] != ':' {
		w.err = true
		return nil, 0, 0, false
	}
	vs = skipSpace(b, j+1)
	if vs >= len(b) {
		w.err = true
		return nil, 0, 0, false
	}
	w.n++
	return key, i, vs, true
}

// arrWalk validates an array element by element, as objWalk.
type arrWalk struct {
	b   []byte
	i   int
	n   int
	err bool
}

// walkArray starts walking the array at b[i].
func walkArray(b []byte, i int) arrWalk {
	if i >= len(b) || b[i] != '[' {
		return arrWalk{b: b, i: i, err: true}
	}
	return arrWalk{b: b, i: i + 1}
}

// next finds the next element's start; more is false at the end of the
// array or on an error (a.err).
func (a *arrWalk) next() (es int, more bool) {
	if a.err {
		return 0, false
	}
	b := a.b
	i := skipSpace(b, a.i)
	switch {
	case i >= len(b):
		a.err = true
		return 0, false
	case b[i] == ']':
		a.i = i + 1
		return 0, false
	case a.n > 0:
		if b[i] != ',' {
			a.err = true
			return 0, false
		}
		i = skipSpace(b, i+1)
	}
	if i >= len(b) || b[i] == ']' {
		a.err = true
		return 0, false
	}
	a.n++
	return i, true
}
