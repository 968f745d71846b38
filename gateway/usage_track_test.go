package gateway

import (
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// trackScan relays stream through a tracker that feeds the usage scanner,
// as relayStream.WriteTo does: reads cut at cuts, an event carried until it
// is whole, what is still carried at the end fed as it is.
func trackScan(stream string, cuts []int) *usageScanner {
	var m migration
	m.chat, m.includeUsage, m.maxTokens, m.maxCompletion, m.minTokens = true, false, -1, -1, -1
	m.sse.begin(&m)
	m.sse.strip = true
	var us usageScanner
	buf := make([]byte, 0, len(stream))
	prev := 0
	for _, c := range append(cuts, len(stream)) {
		buf = append(buf, stream[prev:c]...)
		prev = c
		m.sse.us = &us
		_, used := m.sse.feed(buf)
		buf = append(buf[:0], buf[used:]...)
		_ = us.Usage() // the truth check asks between reads
	}
	us.Write(buf)
	return &us
}

// randomStream writes events like an engine's, and some no engine writes:
// heads that are not neutral (a model named "content", an id that is an
// object with usage keys, an escaped id), texts holding keys, usage in
// every chunk or only the last, unreadable events, an unterminated string.
func randomStream(r *rand.Rand) string {
	heads := []string{
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m"`,
		`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"content"`,
		`{"id":{"prompt_tokens":7},"model":"m"`,
		`{"id":"a\"b","created":12,"model":"m"`,
		`{"id":"cmpl-2","object":"text_completion","created":1700000000,"model":"cached_tokens"`,
		`{"model":"m","created":3`,
		`{"id":"x","model":"prompt_tokens"`,
	}
	texts := []string{`" tok"`, `"\"cached_tokens\":5"`, `"content"`, `""`, `"a\\\"b"`, `"prompt_tokens"`}
	head := heads[r.Intn(len(heads))]
	var b strings.Builder
	n := 1 + r.Intn(12)
	for i := 0; i < n; i++ {
		if r.Intn(6) == 0 {
			head = heads[r.Intn(len(heads))]
		}
		switch r.Intn(14) {
		case 0:
			b.WriteString("data: {\"id\":\"unterminated\n\n")
			continue
		case 1:
			b.WriteString("data: [DONE]\n\n")
			continue
		case 2:
			b.WriteString(": comment\ndata: " + head + `,"choices":[]}` + "\n\n")
			continue
		case 3:
			b.WriteString("data: " + head + `,"choices":[{"index":0,"delta":{"content":` + texts[r.Intn(len(texts))] + "}}]\n\n") // no closing brace: unreadable
			continue
		}
		b.WriteString("data: ")
		b.WriteString(head)
		if r.Intn(2) == 0 {
			b.WriteString(`,"choices":[{"index":0,"delta":{"content":` + texts[r.Intn(len(texts))] + `},"logprobs":null,"finish_reason":null}]`)
		} else {
			b.WriteString(`,"choices":[{"index":0,"text":` + texts[r.Intn(len(texts))] + `,"logprobs":{"content":[]},"finish_reason":null}]`)
		}
		if r.Intn(2) == 0 {
			b.WriteString(`,"usage":{"prompt_tokens":` + strconv.Itoa(r.Intn(5000)) + `,"total_tokens":9,"completion_tokens":` + strconv.Itoa(r.Intn(300)))
			if r.Intn(2) == 0 {
				b.WriteString(`,"prompt_tokens_details":{"cached_tokens":` + strconv.Itoa(r.Intn(5000)) + `}`)
			}
			b.WriteString(`}`)
		}
		b.WriteString("}\n\n")
	}
	if r.Intn(3) == 0 {
		b.WriteString(`data: {"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":12`) // cut mid-event
	}
	return b.String()
}

func FuzzTrackedUsage_EqualsTheScanner(f *testing.F) {
	for i := int64(0); i < 16; i++ {
		f.Add(i, 3)
	}
	f.Fuzz(func(t *testing.T, seed int64, ncuts int) {
		r := rand.New(rand.NewSource(seed))
		stream := randomStream(r)
		cuts := make([]int, 0, 8)
		for i := 0; i < ncuts%8; i++ {
			cuts = append(cuts, r.Intn(len(stream)+1))
		}
		sort.Ints(cuts)
		want := scanUsage([]byte(stream))
		us := trackScan(stream, cuts)
		if got := us.Usage(); got != want {
			t.Fatalf("cuts %v of\n%s\ntracked %+v; scanner %+v", cuts, stream, got, want)
		}
	})
}

// A vLLM stream's events, after the first, are scanned without their head,
// and the counts are the scanner's.
func TestTrackedUsage_SkipsTheRepeatedHead(t *testing.T) {
	ev := `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":80,"total_tokens":81,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":64}}}` + "\n\n"
	stream := strings.Repeat(ev, 5) + "data: [DONE]\n\n"
	if got, want := trackScan(stream, []int{10, len(ev) + 3, 3 * len(ev)}).Usage(), scanUsage([]byte(stream)); got != want || !got.Reported || got.CachedTokens != 64 || got.CompletionTokens != 1 {
		t.Fatalf("tracked %+v; scanner %+v", got, want)
	}
	var m migration
	m.chat, m.maxTokens, m.maxCompletion, m.minTokens = true, -1, -1, -1
	m.sse.begin(&m)
	var us usageScanner
	m.sse.us = &us
	for i := range 5 {
		if _, used := m.sse.feed([]byte(ev)); used != len(ev) {
			t.Fatalf("event %d: used %d of %d", i, used, len(ev))
		}
		if skipped := m.sse.skipE > 0; skipped != (i > 0) {
			t.Fatalf("event %d: head skipped %v", i, skipped)
		}
	}
}

// BenchmarkTrackedUsage is the tracker and the usage scanner on a vLLM
// chat stream with usage in every chunk (what migration asks for), one
// event per read: the scanner walking every byte beside the tracker
// (apart), and fed by the tracker, without the heads the events repeat
// (fed).
func BenchmarkTrackedUsage(b *testing.B) {
	ev := `data: {"id":"chatcmpl-8f3a2c1e9b7d4a60","object":"chat.completion.chunk","created":1733580000,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":80,"total_tokens":81,"completion_tokens":1}}` + "\n\n"
	for _, fed := range []bool{false, true} {
		name := "apart"
		if fed {
			name = "fed"
		}
		b.Run(name, func(b *testing.B) {
			var m migration
			m.chat, m.maxTokens, m.maxCompletion, m.minTokens = true, -1, -1, -1
			m.sse.begin(&m)
			m.sse.strip = true
			var us usageScanner
			buf := make([]byte, len(ev))
			b.SetBytes(int64(len(ev)))
			b.ReportAllocs()
			for b.Loop() {
				copy(buf, ev) // the tracker deletes the usage in place
				if fed {
					m.sse.us = &us
				} else {
					us.Write(buf)
				}
				if _, used := m.sse.feed(buf); used != len(ev) {
					b.Fatal(used)
				}
			}
			if m.sse.skipE == 0 {
				b.Fatal("no head skipped")
			}
			if us.Usage().CompletionTokens != 1 {
				b.Fatal(us.Usage())
			}
		})
	}
}
