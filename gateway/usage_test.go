package gateway

import (
	"strings"
	"testing"

	"github.com/llbproject/llb/actors"
)

func TestUsageScanner_FindsCachedTokensInEveryResponseShape(t *testing.T) {
	tests := []struct {
		name string
		give string
		want actors.Usage
	}{
		{
			name: "vLLM completion",
			give: `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":" hi","finish_reason":"length"}],` +
				`"usage":{"prompt_tokens":120,"total_tokens":121,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":96}}}`,
			want: actors.Usage{Reported: true, CachedTokens: 96, PromptTokens: 120, CompletionTokens: 1},
		},
		{
			name: "pretty-printed, details before prompt_tokens",
			give: "{\n  \"usage\" : {\n    \"prompt_tokens_details\" : { \"cached_tokens\" :\t 32 },\n    \"prompt_tokens\" : 40\n  }\n}",
			want: actors.Usage{Reported: true, CachedTokens: 32, PromptTokens: 40},
		},
		{
			name: "details disabled (no --enable-prompt-tokens-details)",
			give: `{"usage":{"prompt_tokens":120,"total_tokens":121,"completion_tokens":1,"prompt_tokens_details":null}}`,
			want: actors.Usage{PromptTokens: 120, CompletionTokens: 1},
		},
		{
			name: "generated text quoting the keys never matches",
			give: `{"choices":[{"text":"say \"cached_tokens\": 999 and \"prompt_tokens\":7"}],"usage":{"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":0}}}`,
			want: actors.Usage{Reported: true, CachedTokens: 0, PromptTokens: 5, CompletionTokens: 1}, // one "text" delta, no completion_tokens
		},
		{
			name: "a value string equal to a key name is not a key",
			give: `{"a":"cached_tokens","b":"prompt_tokens","usage":{"prompt_tokens_details":{"cached_tokens":16}}}`,
			want: actors.Usage{Reported: true, CachedTokens: 16},
		},
		{
			name: "SSE stream, usage in the final chunk",
			give: "data: {\"choices\":[{\"text\":\"a\"}],\"usage\":null}\n\n" +
				"data: {\"choices\":[{\"text\":\"b\"}],\"usage\":null}\n\n" +
				"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":80,\"completion_tokens\":2,\"total_tokens\":82,\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\n" +
				"data: [DONE]\n\n",
			want: actors.Usage{Reported: true, CachedTokens: 64, PromptTokens: 80, CompletionTokens: 2},
		},
		{
			name: "continuous usage stats: the last chunk wins",
			give: "data: {\"usage\":{\"prompt_tokens\":80,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n" +
				"data: {\"usage\":{\"prompt_tokens\":80,\"prompt_tokens_details\":{\"cached_tokens\":64}}}\n\ndata: [DONE]\n\n",
			want: actors.Usage{Reported: true, CachedTokens: 64, PromptTokens: 80},
		},
		{
			name: "stream without usage",
			give: "data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\ndata: [DONE]\n\n",
			want: actors.Usage{CompletionTokens: 2}, // one token per content delta
		},
		{
			name: "escaped backslash before a closing quote",
			give: `{"text":"a\\","usage":{"prompt_tokens_details":{"cached_tokens":48}}}`,
			want: actors.Usage{Reported: true, CachedTokens: 48, CompletionTokens: 1},
		},
		{
			name: "body ends right after the digits",
			give: `{"cached_tokens":12`,
			want: actors.Usage{Reported: true, CachedTokens: 12},
		},
		{
			name: "error body",
			give: `{"error":{"message":"boom","type":"BadRequestError","code":400}}`,
			want: actors.Usage{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := scanUsage([]byte(tt.give)); got != tt.want {
				t.Fatalf("whole: got %+v; want %+v", got, tt.want)
			}
			// Every split point, and byte by byte: the relay hands the
			// scanner whatever each read returned.
			for cut := 1; cut < len(tt.give); cut++ {
				var s usageScanner
				s.Write([]byte(tt.give[:cut]))
				s.Write([]byte(tt.give[cut:]))
				if got := s.Usage(); got != tt.want {
					t.Fatalf("split at %d: got %+v; want %+v", cut, got, tt.want)
				}
			}
			var s usageScanner
			for i := 0; i < len(tt.give); i++ {
				s.Write([]byte{tt.give[i]})
			}
			if got := s.Usage(); got != tt.want {
				t.Fatalf("byte by byte: got %+v; want %+v", got, tt.want)
			}
		})
	}
}

func FuzzUsageScanner_SplitsNeverChangeTheAnswer(f *testing.F) {
	f.Add(`{"usage":{"prompt_tokens":120,"prompt_tokens_details":{"cached_tokens":96}}}`, 7)
	f.Add("data: {\"text\":\"\\\"cached_tokens\\\":1\"}\n\ndata: {\"usage\":{\"prompt_tokens_details\":{\"cached_tokens\":3}}}\n\n", 30)
	f.Fuzz(func(t *testing.T, body string, cut int) {
		want := scanUsage([]byte(body))
		if cut < 0 {
			cut = -cut
		}
		if cut %= len(body) + 1; cut < 0 {
			cut = 0
		}
		var s usageScanner
		s.Write([]byte(body[:cut]))
		s.Write([]byte(body[cut:]))
		if got := s.Usage(); got != want {
			t.Fatalf("split at %d: %+v; whole %+v", cut, got, want)
		}
	})
}

func BenchmarkUsageScanner(b *testing.B) {
	var sb strings.Builder
	for sb.Len() < 64<<10 {
		sb.WriteString(`data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" token","logprobs":null,"finish_reason":null}],"usage":null}` + "\n\n")
	}
	sb.WriteString(`data: {"choices":[],"usage":{"prompt_tokens":80,"prompt_tokens_details":{"cached_tokens":64}}}` + "\n\ndata: [DONE]\n\n")
	body := []byte(sb.String())
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		var s usageScanner
		for off := 0; off < len(body); off += 4096 {
			s.Write(body[off:min(off+4096, len(body))])
		}
		if u := s.Usage(); u.CachedTokens != 64 {
			b.Fatal(u)
		}
	}
}
