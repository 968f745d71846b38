package tokenizer

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkEncode measures tokenizing English-like text, by length in words.
func BenchmarkEncode(b *testing.B) {
	for _, words := range []int{100, 2000, 8000} {
		var sb strings.Builder
		for i := range words {
			sb.WriteString(" ")
			sb.WriteString(Word(uint64(i) * 7919))
		}
		text := sb.String()
		b.Run(fmt.Sprintf("words=%d", words), func(b *testing.B) {
			dst := make([]uint32, 0, words+1)
			b.SetBytes(int64(len(text)))
			b.ReportAllocs()
			for b.Loop() {
				dst = Encode(dst[:0], text, true)
			}
		})
	}
}
