package workload

import (
	"fmt"
	"testing"
)

// BenchmarkStream_Next measures one generated request (tokenizing the
// prompt for the oracle included), by prompt size.
func BenchmarkStream_Next(b *testing.B) {
	for _, sys := range []int{256, 2048, 6000} {
		b.Run(fmt.Sprintf("shared_prefix/system=%d", sys), func(b *testing.B) {
			r := seeded(1)
			src, err := SharedPrefix{Groups: 150, PromptsPerGroup: 5, SystemTokens: sys, QuestionTokens: 128, OutputTokens: 256, ZipfAlpha: 0.9}.Source(r)
			if err != nil {
				b.Fatal(err)
			}
			s, err := NewStream(src, Poisson{Rate: 10}, 16)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := s.Next(r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
