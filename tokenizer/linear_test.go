package tokenizer_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llbproject/llb/tokenizer"
)

// One character repeated encodes in time linear in its length: the CPU
// time of 512 KB is about four times that of 128 KB (a quadratic merge or
// split would make it sixteen); BenchmarkEncodeOneRepeatedChar measures
// 1 MB on the real tokenizers. Every golden model is run, with
// and without a pre-tokenizer (gemma-mini's sentencepiece BPE sees the
// whole text as one word), on a letter, a space and a punctuation mark.
// CPU time (the fastest of five runs) is what a loaded machine inflates
// least; the bound, 11, is well clear of the linear ratio and of the
// quadratic one.
func TestEncode_OneRepeatedCharStaysLinear(t *testing.T) {
	if testing.Short() {
		t.Skip("encodes 7 MB")
	}
	for _, model := range []string{"qwen3-mini", "deepseek-style-mini", "o200k-mini", "gemma-mini", "mistral-mini"} {
		tok, err := tokenizer.LoadDir(filepath.Join("testdata", "golden", model))
		if err != nil {
			t.Fatal(err)
		}
		for _, ch := range []string{"a", " ", "!"} {
			t.Run(fmt.Sprintf("%s/%q", model, ch), func(t *testing.T) {
				cost := func(n int) time.Duration {
					text := strings.Repeat(ch, n)
					best := time.Duration(1 << 62)
					for range 5 {
						c0 := cpuNow()
						ids := tok.Encode(text, false, nil)
						best = min(best, cpuNow()-c0)
						if len(ids) == 0 {
							t.Fatal("no ids")
						}
					}
					return max(best, time.Microsecond)
				}
				small, large := cost(128<<10), cost(512<<10)
				ratio := float64(large) / float64(small)
				t.Logf("128 KB in %v, 512 KB in %v CPU: ratio %.1f", small, large, ratio)
				if ratio > 11 {
					t.Errorf("ratio %.1f; want about 4 (linear)", ratio)
				}
			})
		}
	}
}

// cpuNow is the process's user+system CPU time.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
