package gateway

import (
	"bytes"

	"github.com/llbproject/llb/actors"
)

// The response observer of the cache-truth check: it finds the engine's
// usage.prompt_tokens and usage.prompt_tokens_details.cached_tokens in a
// response body as the bytes pass to the client — a whole JSON answer, an
// SSE stream whose final chunk carries usage (stream_options.include_usage),
// or a P/D prefill leg's JSON — without copying, buffering or changing
// anything the client receives. It depends on nothing but bytes, so any data
// plane (net/http today) can feed it from its relay loop.
//
// It is a small state machine over JSON text: it tracks whether it is inside
// a string (so a generated text that happens to contain the words can never
// match: inside a JSON string a quote is always escaped), recognises the two
// keys when a string that is a key closes, then reads the integer after the
// colon. In vLLM's answers these keys appear only in usage (and as
// input_tokens_details.cached_tokens in the Responses API, which means the
// same). The last value seen wins: vLLM's continuous_usage_stats repeats
// usage in every chunk, the final one counting the whole prompt.
//
// It also reads usage.completion_tokens, and counts the "content" and
// "text" keys it passes (one per choice in each chunk of a stream): a
// stream whose engine sends no usage chunk (the client did not ask for
// stream_options.include_usage, and vLLM was not started with
// --enable-force-include-usage) is charged one completion token per
// content delta, which is what vLLM streams by default.

// usageScanner observes one response body. The zero value is ready.
type usageScanner struct {
	st      usState
	inStr   bool
	escaped bool
	// key capture: the current string's first bytes while outside a value
	// we already know is not a key of interest.
	key    [len(keyCompletionTokens)]byte
	keyLen int
	keyBad bool
	field  usageField
	num    uint64

	cached, prompt, completion        uint32
	haveCached, havePrompt, haveCompl bool
	// deltas counts "content"/"text" keys (content deltas of a stream).
	deltas uint32
}

type usState uint8

const (
	usText     usState = iota // outside any key of interest
	usAfterKey                // after a key of interest: wait for ':'
	usColon                   // after the colon: wait for the first digit
	usNumber                  // reading digits
)

type usageField uint8

const (
	fieldNone usageField = iota
	fieldCached
	fieldPrompt
	fieldCompletion
	fieldDelta
)

const (
	keyCachedTokens     = "cached_tokens"
	keyPromptTokens     = "prompt_tokens"
	keyCompletionTokens = "completion_tokens"
)

// Write observes p, the next bytes of the body. It never fails and never
// retains p.
func (s *usageScanner) Write(p []byte) {
	for i := 0; i < len(p); i++ {
		if s.inStr && s.keyBad && !s.escaped {
			// A string that can no longer be a key: jump to its next quote
			// or backslash (both found with IndexByte's vector loop).
			q := bytes.IndexByte(p[i:], '"')
			if q < 0 {
				q = len(p) - i
			}
			if b := bytes.IndexByte(p[i:i+q], '\\'); b >= 0 {
				q = b
			}
			if i += q; i == len(p) {
				return
			}
		} else if !s.inStr && s.st == usText {
			q := bytes.IndexByte(p[i:], '"')
			if q < 0 {
				return
			}
			i += q
			// A string that closes within p and has no escape is matched
			// whole, as the byte loop below would end it: most of an
			// event's strings, each found with two IndexByte calls
			// instead of a turn of the loop per byte.
			if e := bytes.IndexByte(p[i+1:], '"'); e >= 0 {
				if str := p[i+1 : i+1+e]; bytes.IndexByte(str, '\\') < 0 {
					s.keyLen = copy(s.key[:], str)
					s.keyBad = len(str) > len(s.key)
					s.closeString()
					i += e + 1 // the closing quote
					continue
				}
			}
		}
		c := p[i]
		if s.inStr {
			switch {
			case s.escaped:
				s.escaped = false
				s.keyBad = true
			case c == '\\':
				s.escaped = true
			case c == '"':
				s.inStr = false
				s.closeString()
			case s.keyLen < len(s.key):
				s.key[s.keyLen] = c
				s.keyLen++
			default:
				s.keyBad = true
			}
			continue
		}
		switch s.st {
		case usAfterKey:
			switch c {
			case ' ', '\t', '\r', '\n':
				continue
			case ':':
				if s.field == fieldDelta {
					s.deltas++
					s.st, s.field = usText, fieldNone
					continue
				}
				s.st = usColon
				continue
			}
			s.st = usText
		case usColon:
			switch {
			case c == ' ' || c == '\t' || c == '\r' || c == '\n':
				continue
			case c >= '0' && c <= '9':
				s.st, s.num = usNumber, uint64(c-'0')
				continue
			}
			s.st = usText
		case usNumber:
			if c >= '0' && c <= '9' {
				s.num = min(s.num*10+uint64(c-'0'), 1<<32-1)
				continue
			}
			s.commit()
		}
		if c == '"' {
			s.inStr, s.keyLen, s.keyBad = true, 0, false
		}
	}
}

// closeString checks whether the string that just closed is a key of
// interest.
func (s *usageScanner) closeString() {
	s.field = fieldNone
	if s.keyBad {
		return
	}
	switch string(s.key[:s.keyLen]) {
	case keyCachedTokens:
		s.field = fieldCached
	case keyPromptTokens:
		s.field = fieldPrompt
	case keyCompletionTokens:
		s.field = fieldCompletion
	case "content", "text":
		s.field = fieldDelta
	default:
		return
	}
	s.st = usAfterKey
}

// commit stores the number just read.
func (s *usageScanner) commit() {
	switch s.field {
	case fieldCached:
		s.cached, s.haveCached = uint32(s.num), true
	case fieldPrompt:
		s.prompt, s.havePrompt = uint32(s.num), true
	case fieldCompletion:
		s.completion, s.haveCompl = uint32(s.num), true
	}
	s.st, s.field = usText, fieldNone
}

// Usage is what the body carried so far. Reported is false unless
// cached_tokens was seen (vLLM without --enable-prompt-tokens-details sends
// prompt_tokens_details: null).
func (s *usageScanner) Usage() actors.Usage {
	if s.st == usNumber {
		s.commit() // a body that ends right after the digits
	}
	u := actors.Usage{Reported: s.haveCached, CachedTokens: s.cached}
	if s.havePrompt {
		u.PromptTokens = s.prompt
	}
	u.CompletionTokens = s.deltas
	if s.haveCompl {
		u.CompletionTokens = s.completion
	}
	return u
}

// scanUsage observes a whole body (the P/D prefill leg, read whole).
func scanUsage(body []byte) actors.Usage {
	var s usageScanner
	s.Write(body)
	return s.Usage()
}
