package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// BenchmarkWorker_Completion measures the simulator's own cost per request
// over real HTTP (latency model scaled to almost nothing): parse, tokenize,
// hash, schedule, publish events, answer. Prompts are distinct, so every
// request stores (and, once the cache is full, evicts) blocks.
func BenchmarkWorker_Completion(b *testing.B) {
	for _, words := range []int{100, 2000} {
		for _, stream := range []bool{false, true} {
			b.Run(fmt.Sprintf("prompt_words=%d/stream=%v/output=16", words, stream), func(b *testing.B) {
				c := testConfig()
				c.Engine.Latency.TimeScale = 1e-6
				c.Engine.NumBlocks = 4096
				w, err := Start(c)
				if err != nil {
					b.Fatal(err)
				}
				defer func() {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					defer cancel()
					_ = w.Stop(ctx)
				}()
				tr := &http.Transport{Proxy: nil}
				defer tr.CloseIdleConnections()
				cl := &http.Client{Transport: tr}
				i := 0
				b.ReportAllocs()
				for b.Loop() {
					body, _ := json.Marshal(map[string]any{"prompt": words_(i, words), "max_tokens": 16, "stream": stream})
					resp, err := cl.Post(w.URL()+"/v1/completions", "application/json", bytes.NewReader(body))
					if err != nil {
						b.Fatal(err)
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						b.Fatalf("status %d", resp.StatusCode)
					}
					i++
				}
			})
		}
	}
}

// words_ is a distinct prompt of n words for request i.
func words_(i, n int) string { return words(fmt.Sprintf("request %d:", i), n) }
