package tokenizer

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestEncode_SplitsIntoExpectedPieces(t *testing.T) {
	tests := []struct {
		name string
		give string
		want []string
	}{
		{"empty", "", nil},
		{"one short word", "hi", []string{"hi"}},
		{"space joins next word", "hi there", []string{"hi", " ther", "e"}},
		{"long word cut every four runes", "internationalization", []string{"inte", "rnat", "iona", "liza", "tion"}},
		{"punctuation alone", "a, b!", []string{"a", ",", " b", "!"}},
		{"newline and lone spaces", "a\n  b", []string{"a", "\n", " ", " b"}},
		{"special literal is one token", "<|im_start|>user\nhi<|im_end|>", []string{"<|im_start|>", "user", "\n", "hi", "<|im_end|>"}},
		{"unicode letters", " héllo", []string{" héll", "o"}},
		{"lone angle bracket", "a<b", []string{"a", "<", "b"}},
		{"digits are word runes", "x 12345", []string{"x", " 1234", "5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, got := EncodePieces(tt.give, false)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("pieces %q; want %q", got, tt.want)
			}
		})
	}
}

func TestEncode_IsDeterministicAndMatchesPieces(t *testing.T) {
	text := "The quick brown fox, jumping over <|im_end|> lazy dogs.\n"
	a := Encode(nil, text, true)
	b := Encode(nil, text, true)
	ids, pieces := EncodePieces(text, true)
	if !slices.Equal(a, b) || !slices.Equal(a, ids) {
		t.Fatalf("encodings differ: %v / %v / %v", a, b, ids)
	}
	if a[0] != BOS || pieces[0] != "<|endoftext|>" {
		t.Fatalf("first token %d %q; want BOS", a[0], pieces[0])
	}
	if !slices.Contains(a, IMEnd) {
		t.Fatalf("ids %v lack <|im_end|>", a)
	}
	if Count(text) != len(a)-1 {
		t.Fatalf("Count %d; want %d", Count(text), len(a)-1)
	}
	for i, id := range a {
		if _, special := SpecialText(id); !special && id >= FirstSpecialID {
			t.Fatalf("ordinary id %d at %d is in the special range", id, i)
		}
	}
	if strings.Join(pieces[1:], "") != text {
		t.Fatalf("pieces do not reassemble the text")
	}
}

// TestEncode_PrefixStable is the property the whole prefix cache relies on:
// a prompt's tokens start with its prefix's tokens, except at the cut piece.
func TestEncode_PrefixStable(t *testing.T) {
	alphabet := []rune("ab é1 ,.\n<|>im_start")
	rapid.Check(t, func(t *rapid.T) {
		runes := rapid.SliceOfN(rapid.SampledFrom(alphabet), 0, 80).Draw(t, "text")
		text := string(runes)
		cut := rapid.IntRange(0, len(runes)).Draw(t, "cut")
		prefix := string(runes[:cut])
		full := Encode(nil, text, false)
		pre := Encode(nil, prefix, false)
		// All but the last few prefix tokens must be shared: the cut can only
		// disturb the word (<= 1 piece plus one joined space) or a special
		// literal (up to 12 single-rune tokens) that straddles it.
		keep := len(pre) - 13
		if keep < 0 {
			keep = 0
		}
		if len(full) < keep || !slices.Equal(full[:keep], pre[:keep]) {
			t.Fatalf("tokens of %q do not start with those of its prefix %q", text, prefix)
		}
	})
}

func TestEncode_PrefixStableAtWordBoundary(t *testing.T) {
	prefix := "You are a helpful assistant. Answer briefly."
	full := prefix + "\n\nQuestion: why is the sky blue?"
	pre := Encode(nil, prefix, true)
	got := Encode(nil, full, true)
	if !slices.Equal(got[:len(pre)], pre) {
		t.Fatalf("full tokens %v do not start with prefix tokens %v", got, pre)
	}
}

func TestEncode_AboutFourCharsPerToken(t *testing.T) {
	text := strings.Repeat("Large language models keep a prefix cache of key and value tensors, "+
		"so routing requests that share a preamble to the same worker skips recomputation. ", 20)
	ratio := float64(len(text)) / float64(Count(text))
	if ratio < 3 || ratio > 5 {
		t.Fatalf("%.2f chars/token; want about 4", ratio)
	}
}

func TestWord_IsOneTokenWithLeadingSpace(t *testing.T) {
	for k := range uint64(NumWords) {
		w := Word(k)
		if n := Count(" " + w); n != 1 {
			t.Fatalf("word %d %q is %d tokens; want 1", k, w, n)
		}
	}
}

func TestParseMessages_RejectsBadShapes(t *testing.T) {
	tests := []struct {
		name string
		give string
	}{
		{"missing", ``},
		{"null", `null`},
		{"not an array", `{"role":"user"}`},
		{"empty", `[]`},
		{"no role", `[{"content":"hi"}]`},
		{"number content", `[{"role":"user","content":5}]`},
		{"unknown part", `[{"role":"user","content":[{"type":"hologram"}]}]`},
		{"text part without text", `[{"role":"user","content":[{"type":"text"}]}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseMessages(json.RawMessage(tt.give))
			if !errors.Is(err, ErrInvalidChat) {
				t.Fatalf("error %v; want ErrInvalidChat", err)
			}
		})
	}
}

func TestRenderChat_TemplateOverAllMessages(t *testing.T) {
	msgs, err := ParseMessages(json.RawMessage(`[
		{"role":"system","content":"Be brief."},
		{"role":"user","content":[{"type":"text","text":"Look: "},{"type":"image_url","image_url":{"url":"http://x/a.png"}}]},
		{"role":"assistant","content":null,"tool_calls":[{"id":"c1"}]},
		{"role":"user","content":"And now?"}]`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := RenderChat(msgs, ChatOptions{AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nBe brief.<|im_end|>\n" +
		"<|im_start|>user\nLook: <|vision_start|><|image_pad|><|vision_end|><|im_end|>\n" +
		"<|im_start|>assistant\n\n<tool_call>\n[{\"id\":\"c1\"}]\n</tool_call><|im_end|>\n" +
		"<|im_start|>user\nAnd now?<|im_end|>\n<|im_start|>assistant\n"
	if got.Text != want {
		t.Fatalf("rendered\n%q\nwant\n%q", got.Text, want)
	}
	if len(got.MM) != 1 {
		t.Fatalf("mm %v; want one identifier", got.MM)
	}
	ids := Encode(nil, got.Text, false)
	if n := countID(ids, ImagePad); n != 1 {
		t.Fatalf("%d image pads; want 1", n)
	}
}

func TestRenderChat_Options(t *testing.T) {
	msgs := []Message{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "Sure"}}
	tests := []struct {
		name    string
		give    ChatOptions
		want    string
		wantErr bool
	}{
		{"no generation prompt", ChatOptions{}, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nSure<|im_end|>\n", false},
		{"continue final", ChatOptions{ContinueFinalMessage: true}, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nSure", false},
		{"tools section", ChatOptions{Tools: json.RawMessage(`[{"type":"function"}]`)},
			"<|im_start|>system\n# Tools\n[{\"type\":\"function\"}]<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nSure<|im_end|>\n", false},
		{"both switches", ChatOptions{AddGenerationPrompt: true, ContinueFinalMessage: true}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RenderChat(msgs, tt.give)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v; wantErr %v", err, tt.wantErr)
			}
			if got.Text != tt.want {
				t.Fatalf("rendered %q; want %q", got.Text, tt.want)
			}
		})
	}
}

func countID(ids []uint32, id uint32) int {
	n := 0
	for _, x := range ids {
		if x == id {
			n++
		}
	}
	return n
}
