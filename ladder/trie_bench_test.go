package ladder

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

func BenchmarkTrieMatch(b *testing.B) {
	// An 8k-token prompt is about 32 KiB of text.
	rng := rand.New(rand.NewPCG(1, 1))
	words := []string{"the ", "model ", "routes ", "tokens ", "to ", "cached ", "blocks ", "quickly "}
	var buf bytes.Buffer
	for buf.Len() < 32<<10 {
		buf.WriteString(words[rng.IntN(len(words))])
	}
	prompt := buf.Bytes()[:32<<10]
	for _, entries := range []int{1, 1024, 8192} {
		b.Run(fmt.Sprintf("prompt=32KiB/entries=%d", entries), func(b *testing.B) {
			tr := NewTrie(TrieConfig{MaxBytes: 256 << 20})
			// Other entries share the first 4 KiB and diverge after it.
			for i := 1; i < entries; i++ {
				p := append([]byte(nil), prompt[:4096]...)
				p = append(p, fmt.Sprintf("variant %d %x", i, rng.Uint64())...)
				tr.Insert(p, i%8)
			}
			tr.Insert(prompt, 1) // last, so the LRU cap cannot have evicted it
			b.SetBytes(int64(len(prompt)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, m, ok := tr.Match(prompt); !ok || m != len(prompt) {
					b.Fatalf("match %d ok %v", m, ok)
				}
			}
		})
	}
}

func BenchmarkTrieInsert(b *testing.B) {
	base := bytes.Repeat([]byte("system prompt shared by many requests. "), 100)
	tr := NewTrie(TrieConfig{})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := append(base[:len(base):len(base)], fmt.Sprintf("user turn %d", i)...)
		tr.Insert(p, i%8)
	}
}
