package gateway

import (
	"reflect"
	"testing"
)

// chunkPrimer is the event read before each case: its head (id, object,
// created, model) is what the cases' events reuse.
const chunkPrimer = `data: {"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}`

// readChunkFresh reads ev's payload with no head known.
func readChunkFresh(ev string) (chunkInfo, bool) {
	var ci chunkInfo
	var head chunkHead
	ok := readChunk([]byte(ev), len("data: "), &ci, &head)
	return ci, ok
}

// An event read from a known head says exactly what it says read alone:
// the same validity, spans, text, usage and flags, whatever follows the
// head.
func TestReadChunk_AKnownHeadReadsAsAFreshRead(t *testing.T) {
	const h = `data: {"id":"c1","object":"chat.completion.chunk","created":7,"model":"m"`
	tests := []struct {
		name, ev string
		ok       bool
	}{
		{"content", h + `,"choices":[{"index":0,"delta":{"content":" b\"c"},"logprobs":null,"finish_reason":null}]}`, true},
		{"finish and usage", h + `,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2}}`, true},
		{"final usage", h + `,"choices":[],"usage":{"prompt_tokens":3,"total_tokens":5,"completion_tokens":2}}`, true},
		{"role", h + `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}`, true},
		{"tool call", h + `,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]},"finish_reason":null}]}`, true},
		{"reasoning", h + `,"choices":[{"index":0,"delta":{"reasoning_content":"hm"},"finish_reason":null}]}`, true},
		{"engine error", h + `,"choices":[],"error":{"message":"x"}}`, true},
		{"escaped key", h + `,"choices":[{"index":0,"delta":{"cont\u0065nt":"q"},"finish_reason":null}]}`, true},
		{"trailing space", h + `,"choices":[{"index":0,"delta":{"content":"q"}}]}  `, true},
		{"second choice", h + `,"choices":[{"index":0,"delta":{"content":"q"}},{"index":1,"delta":{"content":"r"}}]}`, false},
		{"index 1", h + `,"choices":[{"index":1,"delta":{"content":"q"}}]}`, false},
		{"choices null", h + `,"choices":null}`, false},
		{"unclosed", h + `,"choices":[{"index":0,"delta":{"content":"q"}}]`, false},
		{"trailing garbage", h + `,"choices":[{"index":0,"delta":{"content":"q"}}]}x`, false},
		{"bad string", h + `,"choices":[{"index":0,"delta":{"content":"q` + "\x01" + `"}}]}`, false},
		{"missing comma", h + ` "choices":[]}`, false},
		{"trailing comma", h + `,"choices":[],}`, false},
		{"head only", h, false},
		{"another head", `data: {"id":"c2","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"z"}}]}`, true},
		{"usage first", `data: {"usage":{"completion_tokens":4},"id":"c1","choices":[{"index":0,"text":"t"}]}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, wantOK := readChunkFresh(tt.ev)
			if wantOK != tt.ok {
				t.Fatalf("read alone: ok %v; want %v", wantOK, tt.ok)
			}
			var head chunkHead
			var prime chunkInfo
			if !readChunk([]byte(chunkPrimer), len("data: "), &prime, &head) || len(head.b) == 0 {
				t.Fatalf("the primer left no head (%q)", head.b)
			}
			var got chunkInfo
			ok := readChunk([]byte(tt.ev), len("data: "), &got, &head)
			if ok != wantOK {
				t.Fatalf("read from the head: ok %v; want %v", ok, wantOK)
			}
			if !ok {
				return
			}
			if string(got.c.text) != string(want.c.text) {
				t.Errorf("text %q; want %q", got.c.text, want.c.text)
			}
			got.c.text, want.c.text = nil, nil
			if !reflect.DeepEqual(got, want) {
				t.Errorf("read from the head: %+v\nread alone: %+v", got, want)
			}
			if ok != validJSON([]byte(tt.ev[len("data: "):])) {
				t.Errorf("ok %v for a payload validJSON says is %v", ok, !ok)
			}
		})
	}
}

// What readChunk takes is valid JSON, and a known head never changes the
// verdict.
func FuzzReadChunk(f *testing.F) {
	f.Add(`{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[{"index":0,"delta":{"content":"q"}}]}`)
	f.Add(`{"id":"c1","object":"chat.completion.chunk","created":7,"model":"m","choices":[],"usage":{"completion_tokens":1}}`)
	f.Add(`{"choices":[{"index":0,"text":"t","finish_reason":"length"}]}`)
	f.Fuzz(func(t *testing.T, payload string) {
		ev := "data: " + payload
		_, fresh := readChunkFresh(ev)
		if fresh && !validJSON([]byte(payload)) {
			t.Fatalf("took %q, which is not valid JSON", payload)
		}
		var head chunkHead
		var prime chunkInfo
		readChunk([]byte(chunkPrimer), len("data: "), &prime, &head)
		var got chunkInfo
		if ok := readChunk([]byte(ev), len("data: "), &got, &head); ok != fresh {
			t.Fatalf("%q: %v from the head, %v alone", payload, ok, fresh)
		}
	})
}
