package gateway

import (
	"strconv"
	"testing"
)

// BenchmarkSSETrack is what following a stream for migration costs per
// event on its way to the client (no network): a vLLM chat chunk read,
// its text kept; with strip, the usage llb asked for deleted in place.
func BenchmarkSSETrack(b *testing.B) {
	const ev = `data: {"id":"chatcmpl-0123456789abcdef0123456789abcdef","object":"chat.completion.chunk","created":1700000000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]`
	for _, strip := range []bool{false, true} {
		b.Run("strip="+strconv.FormatBool(strip), func(b *testing.B) {
			src := []byte(ev + "}\n\n")
			if strip {
				src = []byte(ev + `,"usage":{"prompt_tokens":1000,"total_tokens":1001,"completion_tokens":1}}` + "\n\n")
			}
			buf := make([]byte, len(src))
			var m migration
			m.chat, m.maxTokens, m.maxCompletion, m.minTokens = true, 1<<30, -1, -1
			m.sse.begin(&m)
			m.sse.strip = strip
			b.SetBytes(int64(len(src)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%4096 == 0 {
					m.sse.text = m.sse.text[:0] // a stream of 4096 tokens
				}
				copy(buf, src)
				if out, used := m.sse.feed(buf); used != len(src) || len(out) == 0 {
					b.Fatal("event not taken")
				}
			}
		})
	}
}
