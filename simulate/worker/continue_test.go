package worker

import (
	"net/http"
	"strings"
	"testing"
)

// streamText reads a streamed answer's text and its per-chunk usage.
func streamText(t *testing.T, raw []byte) (text string, usages []usage, finish string) {
	t.Helper()
	for _, e := range sseEvents(t, raw) {
		if e == "[DONE]" {
			continue
		}
		ch := decode[response](t, []byte(e))
		if ch.Usage != nil {
			usages = append(usages, *ch.Usage)
		}
		if len(ch.Choices) == 0 {
			continue
		}
		c := ch.Choices[0]
		if c.Text != nil {
			text += *c.Text
		}
		if c.Delta != nil && c.Delta.Content != nil {
			text += *c.Delta.Content
		}
		if c.FinishReason != nil {
			finish = *c.FinishReason
		}
	}
	return text, usages, finish
}

// A request that carries the first k tokens a prompt generated — the
// prompt extended with them (completions), or the partial assistant
// message continued (chat) — generates exactly the rest: a migrated
// stream's two legs read as one worker's answer.
func TestContinuation_APromptExtendedWithItsOutputGoesOnWhereItStopped(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	const n, k = 12, 5
	prompt := words("continue me", 30)
	for _, chat := range []bool{false, true} {
		name := "completion"
		if chat {
			name = "chat"
		}
		t.Run(name, func(t *testing.T) {
			path := "/v1/completions"
			first := map[string]any{"prompt": prompt, "max_tokens": n, "stream": true}
			if chat {
				path = "/v1/chat/completions"
				first = map[string]any{"messages": []any{map[string]any{"role": "user", "content": prompt}}, "max_tokens": n, "stream": true}
			}
			st, _, raw := post(t, c, w.URL()+path, first, nil)
			if st != http.StatusOK {
				t.Fatalf("%d %s", st, raw)
			}
			whole, _, _ := streamText(t, raw)
			words := strings.Fields(whole)
			if len(words) != n {
				t.Fatalf("generated %q: %d words; want %d", whole, len(words), n)
			}
			head := " " + strings.Join(words[:k], " ")
			next := map[string]any{"prompt": prompt + head, "max_tokens": n - k, "stream": true,
				"stream_options": map[string]any{"include_usage": true, "continuous_usage_stats": true}}
			if chat {
				next = map[string]any{"messages": []any{map[string]any{"role": "user", "content": prompt}, map[string]any{"role": "assistant", "content": head}},
					"continue_final_message": true, "add_generation_prompt": false, "max_tokens": n - k, "stream": true,
					"stream_options": map[string]any{"include_usage": true, "continuous_usage_stats": true}}
			}
			st, _, raw = post(t, c, w.URL()+path, next, nil)
			if st != http.StatusOK {
				t.Fatalf("%d %s", st, raw)
			}
			rest, usages, finish := streamText(t, raw)
			if head+rest != whole || finish != "length" {
				t.Errorf("continuation %q (finish %q); want %q after %q", rest, finish, strings.TrimPrefix(whole, head), head)
			}
			// Usage in every chunk, counting this leg's tokens; then the
			// final usage chunk.
			last := usages[len(usages)-1]
			if len(usages) < n-k+1 || last.CompletionTokens != n-k || usages[len(usages)-2].CompletionTokens != n-k {
				t.Errorf("usages %+v; want one per chunk up to %d tokens, then the final one", usages, n-k)
			}
		})
	}
}

// A prompt that merely ends with output-like words is not taken for a
// continuation.
func TestContinuation_AnOrdinaryPromptIsNotAContinuation(t *testing.T) {
	p := prompt{text: "hello" + outputPieces[0] + outputPieces[1], tokens: []uint32{1, 2, 3}}
	seed, k := outputStart(p, func(s string) []uint32 { return []uint32{uint32(len(s))} })
	if k != 0 || seed != outputSeed(p.tokens) {
		t.Errorf("outputStart = %d, %d; want the prompt's own seed and 0", seed, k)
	}
}
