package gateway

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"
)

func TestParseRequest_CompletionPromptForms(t *testing.T) {
	tests := []struct {
		name       string
		give       string
		wantForm   PromptForm
		wantTexts  []string
		wantTokens [][]uint32
	}{
		{"string", `{"model":"m","prompt":"hello"}`, PromptText, []string{"hello"}, nil},
		{"escaped string", `{"prompt":"a\nb\u00e9"}`, PromptText, []string{"a\nbé"}, nil},
		{"array of strings", `{"prompt":["a","b"]}`, PromptTexts, []string{"a", "b"}, nil},
		{"token ids", `{"prompt":[1,2,4294967295]}`, PromptTokens, nil, [][]uint32{{1, 2, 4294967295}}},
		{"token id arrays", `{"prompt":[[1,2],[3]]}`, PromptTokenLists, nil, [][]uint32{{1, 2}, {3}}},
		{"embeds only", `{"prompt_embeds":"AAAA"}`, PromptNone, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRequest(KindCompletion, []byte(tt.give))
			if err != nil {
				t.Fatalf("ParseRequest: %v", err)
			}
			if r.Form != tt.wantForm || !reflect.DeepEqual(r.Texts, tt.wantTexts) || !reflect.DeepEqual(r.Tokens, tt.wantTokens) {
				t.Errorf("got form %v texts %q tokens %v; want %v %q %v", r.Form, r.Texts, r.Tokens, tt.wantForm, tt.wantTexts, tt.wantTokens)
			}
		})
	}
}

func TestParseRequest_ReadsRoutingFields(t *testing.T) {
	body := `{"model":"llama","prompt":"p","stream":true,"stream_options":{"include_usage":true},` +
		`"max_tokens":5,"max_completion_tokens":7,"user_id":"u1","user":"u2","cache_salt":"s","Model":"ignored"}`
	r, err := ParseRequest(KindCompletion, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if r.Model != "llama" || !r.Stream || r.UserID != "u1" || r.User != "u2" || r.CacheSalt != "s" || !r.HasMaxCompletionTokens {
		t.Errorf("got %+v", r)
	}
	if string(r.Body) != body {
		t.Errorf("Body = %s; want the exact client bytes", r.Body)
	}
	if got := r.SessionUser(); got != "u1" {
		t.Errorf("SessionUser() = %q; want user_id u1", got)
	}
	r.UserID = ""
	if got := r.SessionUser(); got != "u2" {
		t.Errorf("SessionUser() without user_id = %q; want OpenAI user u2", got)
	}
}

func TestParseRequest_AcceptsWhatVLLMAccepts(t *testing.T) {
	tests := []struct {
		give       string
		wantStream bool
	}{
		{`{"prompt":"x","stream":"yes","max_tokens":1e1}`, true},
		{`{"prompt":"x","stream":"False","max_tokens":10.0}`, false},
		{`{"prompt":"x","stream":1,"max_completion_tokens":null}`, true},
		{`{"prompt":"x","stream":null,"min_tokens":0}`, false},
	}
	for _, tt := range tests {
		r, err := ParseRequest(KindCompletion, []byte(tt.give))
		if err != nil {
			t.Errorf("ParseRequest(%s): %v", tt.give, err)
			continue
		}
		if r.Stream != tt.wantStream {
			t.Errorf("ParseRequest(%s).Stream = %v; want %v", tt.give, r.Stream, tt.wantStream)
		}
	}
}

func TestParseRequest_ChatMessages(t *testing.T) {
	body := `{"model":"m","messages":[{"role":"system","content":"be brief"},` +
		`{"role":"user","content":[{"type":"text","text":"look: "},{"type":"image_url","image_url":{"url":"http://x/a.png"}}]},` +
		`{"role":"assistant","content":null,"tool_calls":[]}],"tools":[{"type":"function"}],"add_generation_prompt":true}`
	r, err := ParseRequest(KindChat, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := []ChatMessage{
		{Role: "system", Text: "be brief"},
		{Role: "user", Text: `look: [image_url:{"url":"http://x/a.png"}]`, Media: true},
		{Role: "assistant"},
	}
	if !reflect.DeepEqual(r.Messages, want) {
		t.Errorf("messages = %+v; want %+v", r.Messages, want)
	}
	if string(r.Tools) != `[{"type":"function"}]` || string(r.AddGenerationPrompt) != "true" {
		t.Errorf("template inputs not kept: tools %s agp %s", r.Tools, r.AddGenerationPrompt)
	}
	if !strings.HasPrefix(string(r.RawMessages), `[{"role":"system"`) {
		t.Errorf("RawMessages = %s", r.RawMessages)
	}
}

func TestParseRequest_RejectsBadInputWithTheFieldNamed(t *testing.T) {
	tests := []struct {
		name      string
		kind      APIKind
		give      string
		wantCode  string
		wantParam string
	}{
		{"malformed JSON", KindCompletion, `{"prompt":`, CodeInvalidJSON, ""},
		{"not an object", KindCompletion, `["prompt"]`, CodeInvalidJSON, ""},
		{"model not a string", KindCompletion, `{"model":5,"prompt":"x"}`, CodeInvalidField, "model"},
		{"stream not a bool", KindCompletion, `{"stream":"maybe","prompt":"x"}`, CodeInvalidField, "stream"},
		{"stream a number other than 0/1", KindCompletion, `{"stream":2,"prompt":"x"}`, CodeInvalidField, "stream"},
		{"negative max_tokens", KindCompletion, `{"max_tokens":-1,"prompt":"x"}`, CodeInvalidField, "max_tokens"},
		{"fractional max_tokens", KindCompletion, `{"max_tokens":1.5,"prompt":"x"}`, CodeInvalidField, "max_tokens"},
		{"stream_options not an object", KindCompletion, `{"stream_options":1,"prompt":"x"}`, CodeInvalidField, "stream_options"},
		{"user_id not a string", KindCompletion, `{"user_id":{},"prompt":"x"}`, CodeInvalidField, "user_id"},
		{"missing prompt", KindCompletion, `{"model":"m"}`, CodeMissingField, "prompt"},
		{"empty prompt array", KindCompletion, `{"prompt":[]}`, CodeInvalidField, "prompt"},
		{"mixed prompt array", KindCompletion, `{"prompt":["a",1]}`, CodeInvalidField, "prompt"},
		{"negative token id", KindCompletion, `{"prompt":[1,-2]}`, CodeInvalidField, "prompt"},
		{"token id too big", KindCompletion, `{"prompt":[4294967296]}`, CodeInvalidField, "prompt"},
		{"empty token list", KindCompletion, `{"prompt":[[1],[]]}`, CodeInvalidField, "prompt"},
		{"prompt object", KindCompletion, `{"prompt":{}}`, CodeInvalidField, "prompt"},
		{"missing messages", KindChat, `{"model":"m"}`, CodeMissingField, "messages"},
		{"empty messages", KindChat, `{"messages":[]}`, CodeInvalidField, "messages"},
		{"messages not array", KindChat, `{"messages":"hi"}`, CodeInvalidField, "messages"},
		{"message without role", KindChat, `{"messages":[{"content":"x"}]}`, CodeInvalidField, "messages[0].role"},
		{"content of wrong type", KindChat, `{"messages":[{"role":"user","content":5}]}`, CodeInvalidField, "messages[0].content"},
		{"text part not a string", KindChat, `{"messages":[{"role":"user","content":[{"type":"text","text":1}]}]}`, CodeInvalidField, "messages[0].content"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRequest(tt.kind, []byte(tt.give))
			var ce *ClientError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v; want a *ClientError", err)
			}
			if ce.Status != http.StatusBadRequest || ce.Code != tt.wantCode || ce.Param != tt.wantParam || ce.Type != "invalid_request_error" {
				t.Errorf("got %d %s param %q type %s; want 400 %s param %q", ce.Status, ce.Code, ce.Param, ce.Type, tt.wantCode, tt.wantParam)
			}
		})
	}
}

func TestReadBody_EnforcesTheLimit(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		chunked    bool
		wantStatus int
	}{
		{"under the limit", strings.Repeat("a", 10), false, 0},
		{"exactly the limit", strings.Repeat("a", 16), false, 0},
		{"declared too large", strings.Repeat("a", 17), false, http.StatusRequestEntityTooLarge},
		{"chunked too large", strings.Repeat("a", 17), true, http.StatusRequestEntityTooLarge},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(tt.body))
			if tt.chunked {
				r.ContentLength = -1
			}
			b, _, ce := readBody(httptest.NewRecorder(), r, 16, nil, time.Time{})
			switch {
			case tt.wantStatus == 0 && ce != nil:
				t.Fatalf("readBody: %v", ce)
			case tt.wantStatus == 0 && string(b) != tt.body:
				t.Errorf("body = %q; want %q", b, tt.body)
			case tt.wantStatus != 0 && (ce == nil || ce.Status != tt.wantStatus || ce.Code != CodeBodyTooLarge):
				t.Errorf("err = %v; want %d %s", ce, tt.wantStatus, CodeBodyTooLarge)
			}
		})
	}
}

// The h2c body reader takes the budget as the body arrives: a declared
// length at most h2cFirstReservation before the first bytes, then the
// rest; an unknown length by doubling; a body that outgrows the budget is
// refused 503 with what it had reserved still to release.
func TestReadBody_ReservesAsTheBodyArrives(t *testing.T) {
	tests := []struct {
		name         string
		size         int
		chunked      bool
		budget       int64
		wantReserved int64
		wantCode     string
	}{
		{"small declared", 100, false, 1 << 20, 101, ""},
		{"large declared", 300 << 10, false, 1 << 20, 300<<10 + 1, ""},
		{"unknown length doubles", 3000, true, 1 << 20, 4096, ""},
		{"declared over the room left", 300 << 10, false, 200 << 10, h2cFirstReservation, CodeBodyBufferFull},
		{"unknown length over the room left", 300 << 10, true, 200 << 10, 128 << 10, CodeBodyBufferFull},
		{"no room even to start", 100, false, 50, 0, CodeBodyBufferFull},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := strings.Repeat("b", tt.size)
			r := httptest.NewRequest(http.MethodPost, "/v1/completions", strings.NewReader(body))
			if tt.chunked {
				r.ContentLength = -1
			}
			bud := NewBodyBudget(tt.budget, nil)
			got, reserved, ce := readBody(httptest.NewRecorder(), r, 1<<20, bud, time.Time{})
			if reserved != tt.wantReserved || bud.Reserved() != reserved {
				t.Errorf("reserved %d (budget %d); want %d", reserved, bud.Reserved(), tt.wantReserved)
			}
			switch {
			case tt.wantCode == "" && (ce != nil || string(got) != body):
				t.Errorf("err %v, %d bytes; want the %d-byte body", ce, len(got), len(body))
			case tt.wantCode != "" && (ce == nil || ce.Code != tt.wantCode || ce.Status != http.StatusServiceUnavailable):
				t.Errorf("err %v; want 503 %s", ce, tt.wantCode)
			}
		})
	}
}

func FuzzParseRequest(f *testing.F) {
	for _, s := range []string{`{"prompt":"x"}`, `{"messages":[{"role":"user","content":"hi"}]}`, `{"prompt":[[1,2]]}`, `{`, `[]`} {
		f.Add([]byte(s), false)
		f.Add([]byte(s), true)
	}
	f.Fuzz(func(t *testing.T, body []byte, chat bool) {
		kind := KindCompletion
		if chat {
			kind = KindChat
		}
		r, err := ParseRequest(kind, body)
		if err != nil {
			var ce *ClientError
			if !errors.As(err, &ce) || ce.Status != http.StatusBadRequest {
				t.Fatalf("err = %v; want a 400 *ClientError", err)
			}
			return
		}
		if _, err := PrefillBody(r.Body); err != nil {
			t.Fatalf("PrefillBody of an accepted body: %v", err)
		}
		renderPrompt(r)
	})
}

// A body the request owns for good is not copied into its prompt strings;
// one the server may reuse is.
func TestParse_AnOwnedBodySharesItsBytesWithThePrompts(t *testing.T) {
	tests := []struct {
		name  string
		kind  APIKind
		body  string
		owned bool
		want  bool // the prompt text shares the body's bytes
	}{
		{"owned completion", KindCompletion, `{"model":"m","prompt":"a long prompt"}`, true, true},
		{"reused completion", KindCompletion, `{"model":"m","prompt":"a long prompt"}`, false, false},
		{"owned completion with escapes", KindCompletion, `{"model":"m","prompt":"a\nlong prompt"}`, true, false},
		{"owned prompt array", KindCompletion, `{"model":"m","prompt":["a long prompt","b"]}`, true, true},
		{"owned chat string", KindChat, `{"model":"m","messages":[{"role":"user","content":"a long prompt"}]}`, true, true},
		{"reused chat string", KindChat, `{"model":"m","messages":[{"role":"user","content":"a long prompt"}]}`, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.body)
			var r Request
			if err := r.parse(tt.kind, body, tt.owned); err != nil {
				t.Fatal(err)
			}
			text := ""
			if tt.kind == KindChat {
				text = r.Messages[0].Text
			} else {
				text = r.Texts[0]
			}
			p := uintptr(unsafe.Pointer(unsafe.StringData(text)))
			start := uintptr(unsafe.Pointer(&body[0]))
			if got := p >= start && p < start+uintptr(len(body)); got != tt.want {
				t.Errorf("prompt %q shares the body: %v; want %v", text, got, tt.want)
			}
			if text != "a long prompt" && text != "a\nlong prompt" {
				t.Errorf("prompt %q", text)
			}
		})
	}
}

// A pooled exchange keeps no reference to its last request's body or
// prompts, and only small buffers.
func TestExchange_ResetForgetsTheBodyAndLargeBuffers(t *testing.T) {
	body := []byte(`{"model":"m","prompt":"` + strings.Repeat("p", 1<<20) + `"}`)
	x := &exchange{}
	if err := x.req.parse(KindCompletion, body, true); err != nil {
		t.Fatal(err)
	}
	x.iovArr = [2][]byte{[]byte("head"), body}
	x.iov = x.iovArr[:]
	x.sides().preBody = make([]byte, 0, 1<<20)
	x.scratch = make([]byte, 0, 1<<20)
	texts := x.req.Texts[:1]
	x.reset()
	if x.req.Body != nil || len(x.req.Texts) != 0 || texts[0] != "" || x.iovArr[1] != nil || x.side.preBody != nil || x.scratch != nil {
		t.Errorf("after reset: body %d bytes, texts %q (storage %d bytes), iov %d bytes, preBody cap %d, scratch cap %d",
			len(x.req.Body), x.req.Texts, len(texts[0]), len(x.iovArr[1]), cap(x.side.preBody), cap(x.scratch))
	}
}
