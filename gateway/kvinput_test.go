package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
)

// fakeTokenizer returns one token per prompt byte (or per message byte) and
// records what it was asked.
type fakeTokenizer struct {
	mu    sync.Mutex
	calls []TokenizeInput
	err   error
	block bool // wait for ctx to end
}

func (f *fakeTokenizer) Tokenize(ctx context.Context, in *TokenizeInput) ([]uint32, error) {
	f.mu.Lock()
	f.calls = append(f.calls, *in)
	f.mu.Unlock()
	if f.block {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if f.err != nil {
		return nil, f.err
	}
	src := in.Prompt
	if in.IsChat() {
		src = string(in.Messages)
	}
	out := make([]uint32, len(src))
	for i := range src {
		out[i] = uint32(src[i])
	}
	return out, nil
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
			k := &kvInput{timeout: 20 * time.Millisecond}
			if !tt.noHsh {
				k.hasher = testHasher(t)
			}
			if tt.tok != nil {
				k.tokenizer = tt.tok
			}
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
	k := &kvInput{hasher: h, tokenizer: tok, timeout: time.Second}
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
	k := &kvInput{hasher: testHasher(t), tokenizer: tok, timeout: time.Second}
	chatBody := `{"model":"m","messages":[{"role":"user","content":"hello there"}],"chat_template_kwargs":{"x":1},"add_generation_prompt":false,"tools":[]}`
	chain, in := k.compute(context.Background(), mustParse(t, KindChat, chatBody), "", true)
	if in.Guard != ladder.ReasonNone || len(chain) == 0 {
		t.Fatalf("chat: guard %v chain %d; want a chain", in.Guard, len(chain))
	}
	_, _ = k.compute(context.Background(), mustParse(t, KindCompletion, `{"model":"m","prompt":"hello","add_special_tokens":false}`), "", false)
	if len(tok.calls) != 2 {
		t.Fatalf("tokenizer calls = %d; want 2", len(tok.calls))
	}
	var chat map[string]json.RawMessage
	if err := json.Unmarshal(tok.calls[0].AppendJSON(nil), &chat); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"model", "messages", "chat_template_kwargs", "add_generation_prompt", "tools"} {
		if _, ok := chat[k]; !ok {
			t.Errorf("chat /tokenize body lacks %q: %s", k, tok.calls[0].AppendJSON(nil))
		}
	}
	if _, ok := chat["prompt"]; ok {
		t.Errorf("chat /tokenize body has a prompt")
	}
	var comp map[string]json.RawMessage
	if err := json.Unmarshal(tok.calls[1].AppendJSON(nil), &comp); err != nil {
		t.Fatal(err)
	}
	if string(comp["prompt"]) != `"hello"` || string(comp["add_special_tokens"]) != "false" || comp["messages"] != nil {
		t.Errorf("completion /tokenize body = %s", tok.calls[1].AppendJSON(nil))
	}
}
