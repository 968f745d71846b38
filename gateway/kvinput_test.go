package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/tokenizer"
)

// fakeTokenizer returns one token per prompt byte (or per byte of the raw
// messages) and records what it was asked.
type fakeTokenizer struct {
	mu    sync.Mutex
	calls []tokenizer.Request
	err   error
	block bool // wait for ctx to end
}

func (f *fakeTokenizer) Tokenize(ctx context.Context, in tokenizer.Request, dst []uint32) ([]uint32, error) {
	f.mu.Lock()
	f.calls = append(f.calls, in)
	f.mu.Unlock()
	if f.block {
		<-ctx.Done()
		return dst, ctx.Err()
	}
	if f.err != nil {
		return dst, f.err
	}
	src := in.Prompt
	if len(in.Messages) > 0 {
		src = string(in.Messages)
	}
	for i := range src {
		dst = append(dst, uint32(src[i]))
	}
	return dst, nil
}

func testHasher(t *testing.T) inventory.ChainHasher {
	t.Helper()
	h, err := inventory.NewHasher(inventory.AlgoSHA256CBOR, 4, "0")
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestKVInput_Guards(t *testing.T) {
	tests := []struct {
		name  string
		kind  APIKind
		body  string
		tok   *fakeTokenizer
		noHsh bool
		pd    bool
		want  ladder.Reason
	}{
		{"tokenize error", KindCompletion, `{"model":"m","prompt":"hello world"}`, &fakeTokenizer{err: errors.New("boom")}, false, false, ladder.ReasonTokenize},
		{"tokenize deadline", KindCompletion, `{"model":"m","prompt":"hello world"}`, &fakeTokenizer{block: true}, false, false, ladder.ReasonTokenize},
		{"no tokenizer", KindCompletion, `{"model":"m","prompt":"hello world"}`, nil, false, false, ladder.ReasonTokenize},
		{"empty model", KindCompletion, `{"prompt":"hello world"}`, &fakeTokenizer{}, false, false, ladder.ReasonModelEmpty},
		{"empty prompt", KindCompletion, `{"model":"m","prompt":""}`, &fakeTokenizer{}, false, false, ladder.ReasonEmptyText},
		{"empty chat", KindChat, `{"model":"m","messages":[{"role":"user","content":""}]}`, &fakeTokenizer{}, false, false, ladder.ReasonEmptyText},
		{"multimodal chat", KindChat, `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]}]}`, &fakeTokenizer{}, false, false, ladder.ReasonHashContract},
		{"prompt embeds", KindCompletion, `{"model":"m","prompt_embeds":"AAA"}`, &fakeTokenizer{}, false, false, ladder.ReasonHashContract},
		{"multi-prompt P/D", KindCompletion, `{"model":"m","prompt":["a","b"]}`, &fakeTokenizer{}, false, true, ladder.ReasonHashContract},
		{"no hasher", KindCompletion, `{"model":"m","prompt":"abc"}`, &fakeTokenizer{}, true, false, ladder.ReasonHashContract},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hasher inventory.ChainHasher
			if !tt.noHsh {
				hasher = testHasher(t)
			}
			var tok tokenizer.Tokenizer
			if tt.tok != nil {
				tok = tt.tok
			}
			k := newKVInput(hasher, tok, 20*time.Millisecond)
			chain, in := k.compute(context.Background(), mustParse(t, tt.kind, tt.body), "", tt.pd)
			if in.Guard != tt.want || chain != nil {
				t.Errorf("got guard %v chain %v; want guard %v and no chain", in.Guard, chain, tt.want)
			}
			if !in.Guard.IsRuntimeGuard() {
				t.Errorf("guard %v is not one the runtime may pass", in.Guard)
			}
		})
	}
}

func TestKVInput_TokenPromptsAreHashedWithoutTokenizing(t *testing.T) {
	tok := &fakeTokenizer{}
	h := testHasher(t)
	k := newKVInput(h, tok, time.Second)
	chain, in := k.compute(context.Background(), mustParse(t, KindCompletion, `{"prompt":[1,2,3,4,5,6,7,8,9],"cache_salt":"s"}`), "lora-a", false)
	want := h.AppendBlockKeys(nil, []uint32{1, 2, 3, 4, 5, 6, 7, 8, 9}, inventory.ExtraKeys{LoRAName: "lora-a", CacheSalt: "s"})
	if !reflect.DeepEqual(chain, want) || len(chain) != 2 {
		t.Errorf("chain = %v; want %v (2 full blocks)", chain, want)
	}
	if in.Guard != ladder.ReasonNone || in.PromptBlocks != 2 || in.PromptTokens != 9 {
		t.Errorf("KV input = %+v; want 2 blocks, 9 tokens, no guard", in)
	}
	if len(tok.calls) != 0 {
		t.Errorf("tokenizer called %d times for a token-id prompt", len(tok.calls))
	}
}

func TestKVInput_TokenizesWithTheRequestsOwnForm(t *testing.T) {
	tok := &fakeTokenizer{}
	k := newKVInput(testHasher(t), tok, time.Second)
	chatBody := `{"model":"m","messages":[{"role":"user","content":"hello there"}],"chat_template_kwargs":{"x":1},` +
		`"add_generation_prompt":false,"continue_final_message":true,"tools":[],"chat_template":"{{x}}","add_special_tokens":true}`
	chain, in := k.compute(context.Background(), mustParse(t, KindChat, chatBody), "", true)
	if in.Guard != ladder.ReasonNone || len(chain) == 0 {
		t.Fatalf("chat: guard %v chain %d; want a chain", in.Guard, len(chain))
	}
	_, _ = k.compute(context.Background(), mustParse(t, KindCompletion, `{"model":"m","prompt":"hello","add_special_tokens":false}`), "", false)
	if len(tok.calls) != 2 {
		t.Fatalf("tokenizer calls = %d; want 2", len(tok.calls))
	}
	chat, comp := tok.calls[0], tok.calls[1]
	if chat.Model != "m" || string(chat.Messages) != `[{"role":"user","content":"hello there"}]` || chat.Prompt != "" ||
		string(chat.ChatTemplateKwargs) != `{"x":1}` || string(chat.Tools) != "[]" || chat.ChatTemplate != "{{x}}" ||
		chat.AddGenerationPrompt == nil || *chat.AddGenerationPrompt || !chat.ContinueFinalMessage ||
		chat.AddSpecialTokens == nil || !*chat.AddSpecialTokens {
		t.Errorf("chat tokenize request = %+v", chat)
	}
	if err := chat.Validate(); err != nil {
		t.Errorf("chat tokenize request invalid: %v", err)
	}
	if comp.Prompt != "hello" || comp.Messages != nil || comp.AddSpecialTokens == nil || *comp.AddSpecialTokens {
		t.Errorf("completion tokenize request = %+v", comp)
	}
}

// TestKVInput_EngineTokenizeOverHTTP drives the real inventory client
// against an HTTP /tokenize that answers like vLLM.
func TestKVInput_EngineTokenizeOverHTTP(t *testing.T) {
	var mu sync.Mutex
	var bodies []map[string]json.RawMessage
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/tokenize" {
			http.NotFound(w, r)
			return
		}
		var body map[string]json.RawMessage
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		bodies = append(bodies, body)
		mu.Unlock()
		_, _ = io.WriteString(w, `{"count":8,"max_model_len":4096,"tokens":[1,2,3,4,5,6,7,8],"token_strs":null}`)
	}))
	t.Cleanup(srv.Close)
	rt, err := tokenizer.NewRemote(tokenizer.RemoteConfig{BaseURL: srv.URL, CacheBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	h := testHasher(t)
	k := newKVInput(h, rt, time.Second)
	chain, in := k.compute(context.Background(), mustParse(t, KindChat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`), "", false)
	want := h.AppendBlockKeys(nil, []uint32{1, 2, 3, 4, 5, 6, 7, 8}, inventory.ExtraKeys{})
	if in.Guard != ladder.ReasonNone || !reflect.DeepEqual(chain, want) {
		t.Errorf("chain %v guard %v; want %v", chain, in.Guard, want)
	}
	if len(bodies) != 1 || string(bodies[0]["messages"]) != `[{"role":"user","content":"hi"}]` || bodies[0]["prompt"] != nil {
		t.Errorf("/tokenize bodies = %v; want the chat form with the client's messages", bodies)
	}
	srv.Close()
	_, in = k.compute(context.Background(), mustParse(t, KindCompletion, `{"model":"m","prompt":"p"}`), "", false)
	if in.Guard != ladder.ReasonTokenize {
		t.Errorf("guard with the engine down = %v; want tokenize", in.Guard)
	}
}
