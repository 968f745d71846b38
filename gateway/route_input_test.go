package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

func mustParse(t *testing.T, kind APIKind, body string) *Request {
	t.Helper()
	r, err := ParseRequest(kind, []byte(body))
	if err != nil {
		t.Fatalf("ParseRequest(%s): %v", body, err)
	}
	return r
}

func buildInput(t *testing.T, cfg *rule.Compiled, kind APIKind, body string, hdr ...string) actors.RouteRequest {
	t.Helper()
	return buildInputLoRA(t, cfg, nil, kind, body, hdr...)
}

// buildInputLoRA is buildInput with the LoRA hook loraOf.
func buildInputLoRA(t *testing.T, cfg *rule.Compiled, loraOf func(string) string, kind APIKind, body string, hdr ...string) actors.RouteRequest {
	t.Helper()
	ri, err := newRouteInput(cfg, loraOf, nil)
	if err != nil {
		t.Fatal(err)
	}
	var hr fasthttp.Request
	hr.Header.SetMethod(http.MethodPost)
	hr.SetRequestURI("/v1/completions")
	for i := 0; i+1 < len(hdr); i += 2 {
		hr.Header.Set(hdr[i], hdr[i+1])
	}
	req := mustParse(t, kind, body)
	req.ConversationID = string(hr.Header.Peek(HeaderConversationID))
	var rr actors.RouteRequest
	ri.build(context.Background(), &hr, "192.0.2.1:4321", "192.0.2.1", req, &rr)
	return rr
}

func TestRouteInput_SessionKeyPriority(t *testing.T) {
	tests := []struct {
		name string
		body string
		conv string
		want string
	}{
		{"user_id", `{"prompt":"x","user_id":"u1","user":"u2"}`, "", "u1"},
		{"openai user as fallback", `{"prompt":"x","user":"u2"}`, "", "u2"},
		{"conversation header overrides", `{"prompt":"x","user_id":"u1"}`, "conv-9", "conv-9"},
		{"auto- conversation ids are not keys", `{"prompt":"x","user_id":"u1"}`, "auto-123", "u1"},
		{"none", `{"prompt":"x"}`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hdr []string
			if tt.conv != "" {
				hdr = []string{HeaderConversationID, tt.conv}
			}
			rr := buildInput(t, singlePool(closedAddr(t)), KindCompletion, tt.body, hdr...)
			if rr.Req.SessionKey != tt.want {
				t.Errorf("SessionKey = %q; want %q", rr.Req.SessionKey, tt.want)
			}
			if rr.Req.HasConvHash != (tt.conv != "") {
				t.Errorf("HasConvHash = %v with conversation %q", rr.Req.HasConvHash, tt.conv)
			}
		})
	}
}

func TestRouteInput_ChatPrefixHashIsStableAcrossTurns(t *testing.T) {
	cfg := singlePool(closedAddr(t))
	sys := `{"role":"system","content":"` + strings.Repeat("You are a helpful assistant. ", 3) + `"}`
	turn1 := `{"model":"m","messages":[` + sys + `,{"role":"user","content":"What is Go?"}]}`
	turn2 := `{"model":"m","messages":[` + sys + `,{"role":"user","content":"What is Go?"},{"role":"assistant","content":"A language."},{"role":"user","content":"Who made it?"}]}`
	other := `{"model":"m","messages":[{"role":"system","content":"Different."},{"role":"user","content":"What is Go?"}]}`
	a := buildInput(t, cfg, KindChat, turn1)
	b := buildInput(t, cfg, KindChat, turn2)
	c := buildInput(t, cfg, KindChat, other)
	if !a.Req.HasPrefixHash || a.Req.PrefixHash != b.Req.PrefixHash {
		t.Errorf("turn 1 and turn 2 of one chat hash differently (%x vs %x)", a.Req.PrefixHash, b.Req.PrefixHash)
	}
	if a.Req.PrefixHash == c.Req.PrefixHash {
		t.Errorf("chats with different system prompts share prefix hash %x", a.Req.PrefixHash)
	}
	if !strings.HasPrefix(string(b.Req.Prompt), string(a.Req.Prompt)) {
		t.Errorf("turn 2's trie prompt %q does not extend turn 1's %q", b.Req.Prompt, a.Req.Prompt)
	}
	if !strings.Contains(string(b.Req.Prompt), "Who made it?") {
		t.Errorf("trie prompt %q lacks the last message; it must render all messages", b.Req.Prompt)
	}
}

func TestRouteInput_PrefixHashCoversLeadingSpanAndContext(t *testing.T) {
	base := singlePool(closedAddr(t))
	long := strings.Repeat("a", 300)
	h := func(cfg *rule.Compiled, body string) uint64 {
		return buildInput(t, cfg, KindCompletion, body).Req.PrefixHash
	}
	lvl2, noSalt := *base, *base
	lvl2.PrefixHash.Level = 2
	noSalt.PrefixHash.Flags = prefixFlagLoRA
	tests := []struct {
		name     string
		cfg1, c2 *rule.Compiled
		a, b     string
		wantSame bool
	}{
		{"same leading 256 bytes at level 1", base, base, `{"model":"m","prompt":"` + long + `X"}`, `{"model":"m","prompt":"` + long + `Y"}`, true},
		{"level 2 sees byte 300", &lvl2, &lvl2, `{"model":"m","prompt":"` + long + `X"}`, `{"model":"m","prompt":"` + long + `Y"}`, false},
		{"model is part of the key", base, base, `{"model":"m1","prompt":"p"}`, `{"model":"m2","prompt":"p"}`, false},
		{"cache_salt is part of the key", base, base, `{"model":"m","prompt":"p","cache_salt":"a"}`, `{"model":"m","prompt":"p","cache_salt":"b"}`, false},
		{"flags without bit 3 ignore cache_salt", &noSalt, &noSalt, `{"model":"m","prompt":"p","cache_salt":"a"}`, `{"model":"m","prompt":"p","cache_salt":"b"}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := h(tt.cfg1, tt.a) == h(tt.c2, tt.b); got != tt.wantSame {
				t.Errorf("same hash = %v; want %v", got, tt.wantSame)
			}
		})
	}
}

func TestRouteInput_LoRAHookChangesPrefixHash(t *testing.T) {
	cfg := singlePool(closedAddr(t))
	plain := buildInput(t, cfg, KindCompletion, `{"model":"sql-lora","prompt":"p"}`).Req.PrefixHash
	loraOf := func(m string) string {
		if m == "sql-lora" {
			return "sql-lora"
		}
		return ""
	}
	withLoRA := buildInputLoRA(t, cfg, loraOf, KindCompletion, `{"model":"sql-lora","prompt":"p"}`).Req.PrefixHash
	if plain == withLoRA {
		t.Errorf("a LoRA adapter did not change the prefix hash (%x)", plain)
	}
	want := ladder.PrefixHash(&ladder.PrefixKey{Model: "sql-lora", Prefix: []byte("p"), LoRA: "sql-lora"})
	if withLoRA != want {
		t.Errorf("prefix hash = %x; want ladder.PrefixHash %x", withLoRA, want)
	}
}

func TestRouteInput_TokenPromptsRenderAsLittleEndianIDs(t *testing.T) {
	rr := buildInput(t, singlePool(closedAddr(t)), KindCompletion, `{"prompt":[[258,1],[9]]}`)
	want := make([]byte, 8)
	binary.LittleEndian.PutUint32(want, 258)
	binary.LittleEndian.PutUint32(want[4:], 1)
	if string(rr.Req.Prompt) != string(want) {
		t.Errorf("Prompt = %v; want the first prompt's ids %v", rr.Req.Prompt, want)
	}
}

func TestRouteInput_ClientKeySources(t *testing.T) {
	tests := []struct {
		name   string
		source string
		setup  func(r *http.Request)
		want   string
	}{
		{"client ip by default", "", func(*http.Request) {}, "192.0.2.1"},
		{"header", "X-Tenant", func(r *http.Request) { r.Header.Set("X-Tenant", "t1") }, "t1"},
		{"cookie", "cookie:sid", func(r *http.Request) { r.AddCookie(&http.Cookie{Name: "sid", Value: "c1"}) }, "c1"},
		{"query", "query:k", func(r *http.Request) { r.URL.RawQuery = "k=q1" }, "q1"},
		{"basic auth", "basic-auth", func(r *http.Request) { r.SetBasicAuth("alice", "pw") }, "alice"},
		{"basic auth, malformed", "basic-auth", func(r *http.Request) { r.Header.Set("Authorization", "Basic !!") }, "192.0.2.1"},
		{"missing value falls back to ip", "X-Tenant", func(*http.Request) {}, "192.0.2.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := singlePool(closedAddr(t))
			cfg.SessionHeaderName = tt.source
			ri, err := newRouteInput(cfg, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequest(http.MethodGet, "/health", nil)
			tt.setup(r)
			var in fasthttp.Request
			if err := in.Read(bufio.NewReader(strings.NewReader(rawRequest(t, r)))); err != nil {
				t.Fatal(err)
			}
			var rr actors.RouteRequest
			ri.buildBasic(&in, "192.0.2.1:4321", "192.0.2.1", &rr)
			if rr.Req.ClientKey != tt.want {
				t.Errorf("ClientKey = %q; want %q", rr.Req.ClientKey, tt.want)
			}
			if rr.Req.ClientHash != ladder.XXH64String("192.0.2.1:4321", 0) {
				t.Errorf("ClientHash = %x; want XXH64 of the client ip:port", rr.Req.ClientHash)
			}
		})
	}
}

func TestParseSessionHeader_RejectsMalformedSources(t *testing.T) {
	for _, give := range []string{"cookie:", "query:", "bad header", "a:b"} {
		if _, err := parseSessionHeader(give); err == nil {
			t.Errorf("parseSessionHeader(%q) = nil; want an error", give)
		}
	}
}

// rawRequest renders r as it goes on the wire (HTTP/1.1).
func rawRequest(t *testing.T, r *http.Request) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.Write(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
