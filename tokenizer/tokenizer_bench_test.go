package tokenizer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/simulate/worker"
	"github.com/llbproject/llb/tokenizer"
)

// Benchmarks (make tokenizer-bench runs them on the real Qwen3 and Llama 3
// files from tools/tokenizer-parity; without them, make bench uses the
// small golden tokenizer): an 8k-token chat request tokenized and hashed
// in process beside the same request through a simulated worker's
// /tokenize, and the heap a loaded tokenizer holds.

// benchModel is a tokenizer directory to measure, in a fixed order.
type benchModel struct{ name, dir string }

// benchModels are the tokenizers to measure: with make tokenizer-bench,
// every model of the chat parity run (its tokenizer and chat template);
// otherwise the small golden tokenizer.
func benchModels(b *testing.B) []benchModel {
	b.Helper()
	root := os.Getenv("LLB_TOKENIZER_PARITY")
	if root == "" {
		return []benchModel{{"qwen3-mini", filepath.Join("testdata", "golden", "qwen3-mini")}}
	}
	var out []benchModel
	for _, m := range parityModels {
		if m.chat {
			out = append(out, benchModel{m.name, m.dir(b, root)})
		}
	}
	return out
}

var benchWords = strings.Fields(`the a of to and in is that for it as with was on be by this are from at or an
have not but which they their can all more one has will about would there been other when so what
routing cache prefix token block worker engine request latency throughput memory scheduler batch
kernel attention decode prefill session tenant replica cluster shard gossip inventory mirror hash`)

var benchCode = []string{
	"func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {\n\tctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)\n\tdefer cancel()\n",
	"for i := 0; i < len(xs); i++ {\n\t\tif xs[i] > best {\n\t\t\tbest, at = xs[i], i\n\t\t}\n\t}\n",
	"def score(prefix: list[int], blocks: dict[int, int]) -> float:\n    return sum(1 for b in prefix if b in blocks) / max(len(prefix), 1)\n",
	"SELECT user_id, count(*) AS n FROM requests WHERE ts > now() - interval '1 hour' GROUP BY 1 ORDER BY n DESC;\n",
}

// benchChat is a chat request of about tokens tokens (for tok): system
// prompt (unless the template refuses one, as Gemma 2's), earlier turns
// with code, a long last user turn.
func benchChat(r *rand.Rand, tok *tokenizer.Encoder, tokens int) (json.RawMessage, string) {
	type msg struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	para := func(n int) string {
		var sb strings.Builder
		for i := range n {
			w := benchWords[r.IntN(len(benchWords))]
			if i%12 == 0 {
				w = strings.ToUpper(w[:1]) + w[1:]
			}
			sb.WriteString(w)
			switch {
			case i%17 == 16:
				sb.WriteString(". ")
			case i%41 == 40:
				fmt.Fprintf(&sb, " %d.%d%% ", r.IntN(1000), r.IntN(100))
			default:
				sb.WriteByte(' ')
			}
			if i%97 == 96 {
				sb.WriteString("\n\n" + benchCode[r.IntN(len(benchCode))] + "\n")
			}
		}
		return sb.String()
	}
	msgs := []msg{{"system", "You are a helpful assistant for an LLM load balancer. " + para(120)}}
	if strings.Contains(tok.Config().ChatTemplate, "System role not supported") {
		msgs[0].Role = "user"
		msgs = append(msgs, msg{"assistant", para(40)})
	}
	render := func() string {
		var sb strings.Builder
		for _, m := range msgs {
			sb.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
		}
		return sb.String() + "<|im_start|>assistant\n"
	}
	for len(tok.Encode(render(), false, nil)) < tokens || msgs[len(msgs)-1].Role != "user" {
		role := "user"
		if msgs[len(msgs)-1].Role == "user" {
			role = "assistant"
		}
		msgs = append(msgs, msg{role, para(400)})
	}
	raw, _ := json.Marshal(msgs)
	return raw, render()
}

// processCPU is the process's user+system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// percentiles reports p50 and p99 of ds in µs.
func percentiles(b *testing.B, ds []time.Duration) {
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(ds[len(ds)*99/100].Nanoseconds())/1e3, "p99-µs")
}

func BenchmarkTokenize8kChat(b *testing.B) {
	hasher, err := inventory.NewHasher(inventory.AlgoSHA256CBOR, 16, "0")
	if err != nil {
		b.Fatal(err)
	}
	w, err := worker.Start(func() worker.Config {
		c := worker.DefaultConfig()
		c.Name, c.IP, c.HTTPPort = "bench", "127.0.0.61", 0
		return c
	}())
	if err != nil {
		b.Fatal(err)
	}
	defer w.Stop(context.Background())
	remote, err := tokenizer.NewRemote(tokenizer.RemoteConfig{BaseURL: w.URL(), CacheBytes: -1, Timeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	for _, bm := range benchModels(b) {
		name, dir := bm.name, bm.dir
		tok, err := tokenizer.LoadDir(dir)
		if err != nil {
			b.Fatal(err)
		}
		reg := tokenizer.NewRegistry()
		if _, err := reg.Wait(dir); err != nil {
			b.Fatal(err)
		}
		local, err := tokenizer.NewLocal(tokenizer.LocalConfig{Dir: dir, Remote: remote, Registry: reg, CheckInterval: -1})
		if err != nil {
			b.Fatal(err)
		}
		r := rand.New(rand.NewPCG(8, 8))
		messages, _ := benchChat(r, tok, 8192)
		// The chat is rendered by the model's template in process when
		// the template is verified (qwen3, llama3: yes; the mini: yes).
		localReq := tokenizer.Request{Model: name, Messages: messages}
		remoteReq := tokenizer.Request{Messages: messages} // the worker serves one model
		ids, err := local.Tokenize(context.Background(), localReq, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tok.RenderChat("", localReq, time.Now()); err != nil {
			b.Fatalf("%s: the bench chat does not render: %v", name, err)
		}
		n := len(ids)
		b.Logf("%s: chat path %s, %d tokens", name, tokenizer.ChatPath(tok), n)
		run := func(b *testing.B, t tokenizer.Tokenizer, req tokenizer.Request) {
			dst := make([]uint32, 0, 16384)
			keys := make([]uint64, 0, 1024)
			ds := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			c0 := processCPU()
			for range b.N {
				start := time.Now()
				ids, err := t.Tokenize(context.Background(), req, dst[:0])
				if err != nil {
					b.Fatal(err)
				}
				keys = hasher.AppendBlockKeys(keys[:0], ids, inventory.ExtraKeys{})
				ds = append(ds, time.Since(start))
			}
			b.StopTimer()
			// The process's CPU per request (GC included): what a loaded
			// machine inflates least.
			b.ReportMetric(float64(processCPU()-c0)/float64(b.N)/1e3, "cpu-µs/op")
			percentiles(b, ds)
			b.ReportMetric(float64(len(keys)), "blocks")
		}
		b.Run(fmt.Sprintf("path=local/model=%s/tokens=%d", name, n), func(b *testing.B) { run(b, local, localReq) })
		b.Run(fmt.Sprintf("path=local-fresh/model=%s/tokens=%d", name, n), func(b *testing.B) {
			// A new last paragraph every time: fewer word-cache hits.
			fresh := make([]tokenizer.Request, 64)
			for i := range fresh {
				msgs, _ := benchChat(rand.New(rand.NewPCG(uint64(i), 9)), tok, 8192)
				fresh[i] = tokenizer.Request{Model: name, Messages: msgs}
			}
			dst := make([]uint32, 0, 16384)
			ds := make([]time.Duration, 0, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				start := time.Now()
				ids, err := local.Tokenize(context.Background(), fresh[i%len(fresh)], dst[:0])
				if err != nil {
					b.Fatal(err)
				}
				_ = hasher.AppendBlockKeys(nil, ids, inventory.ExtraKeys{})
				ds = append(ds, time.Since(start))
			}
			b.StopTimer()
			percentiles(b, ds)
		})
		b.Run(fmt.Sprintf("path=remote-sim/model=%s/tokens=%d", name, n), func(b *testing.B) { run(b, remote, remoteReq) })
	}
}

// BenchmarkTokenizerLoad reports the time to load a tokenizer directory
// and the heap it keeps (MB/tokenizer, after GC, with a warm word cache).
func BenchmarkTokenizerLoad(b *testing.B) {
	for _, bm := range benchModels(b) {
		name, dir := bm.name, bm.dir
		b.Run("model="+name, func(b *testing.B) {
			var keep []*tokenizer.Encoder
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			for range b.N {
				tok, err := tokenizer.LoadDir(dir)
				if err != nil {
					b.Fatal(err)
				}
				keep = append(keep, tok)
			}
			b.StopTimer()
			_, text := benchChat(rand.New(rand.NewPCG(1, 1)), keep[0], 8192)
			for _, tok := range keep {
				tok.Encode(text, true, nil)
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(len(keep))/(1<<20), "MB/tokenizer")
			runtime.KeepAlive(keep)
		})
	}
}

// BenchmarkRenderChat8k is the chat-template half of the local path: the
// request's JSON parsed, preprocessed and rendered, without encoding.
func BenchmarkRenderChat8k(b *testing.B) {
	for _, bm := range benchModels(b) {
		name, dir := bm.name, bm.dir
		tok, err := tokenizer.LoadDir(dir)
		if err != nil {
			b.Fatal(err)
		}
		messages, _ := benchChat(rand.New(rand.NewPCG(8, 8)), tok, 8192)
		req := tokenizer.Request{Messages: messages}
		now := time.Now()
		b.Run("model="+name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(messages)))
			for range b.N {
				if _, err := tok.RenderChat("", req, now); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodeOneRepeatedChar encodes one character repeated to 256 KB
// and to 1 MB: the time per byte stays flat when the encode is linear
// (no pre-tokenizer split, no cache: one word for the BPE to merge).
func BenchmarkEncodeOneRepeatedChar(b *testing.B) {
	for _, bm := range benchModels(b) {
		tok, err := tokenizer.LoadDir(bm.dir)
		if err != nil {
			b.Fatal(err)
		}
		for _, ch := range []string{"a", " ", "!"} {
			for _, size := range []int{256 << 10, 1 << 20} {
				text := strings.Repeat(ch, size)
				b.Run(fmt.Sprintf("model=%s/char=%q/bytes=%d", bm.name, ch, size), func(b *testing.B) {
					b.SetBytes(int64(size))
					b.ReportAllocs()
					c0 := processCPU()
					for b.Loop() {
						_ = tok.Encode(text, false, nil)
					}
					// CPU time is what a loaded machine does not inflate.
					b.ReportMetric(float64(processCPU()-c0)/float64(b.N)/float64(size), "cpu-ns/B")
				})
			}
		}
	}
}
