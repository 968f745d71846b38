package workload

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/tokenizer"
)

// excerpt is a small trace in the Mooncake format made for these tests
// (not a part of the published traces): 48 requests, conversations whose
// turns extend earlier turns' ids, every first block the same id.
const excerpt = "testdata/mooncake_excerpt.jsonl"

func readExcerpt(t *testing.T) *BlockTrace {
	t.Helper()
	f, err := os.Open(excerpt)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bt, err := ReadMooncake(f, "excerpt", 0)
	if err != nil {
		t.Fatal(err)
	}
	return bt
}

func TestReadMooncake_ReadsEveryLineWithOffsetsFromTheFirst(t *testing.T) {
	bt := readExcerpt(t)
	if len(bt.Requests) != 48 {
		t.Fatalf("got %d requests; want 48", len(bt.Requests))
	}
	first := bt.Requests[0]
	if first.At != 0 || first.InputTokens != 1567 || first.OutputTokens != 319 || !slices.Equal(first.HashIDs, []uint32{0, 1, 2, 3}) {
		t.Fatalf("first request %+v", first)
	}
	// The excerpt's timestamps run from 400 ms; offsets count from there.
	if got, want := bt.Requests[1].At, 900*time.Millisecond; got != want {
		t.Fatalf("second request at %v; want %v", got, want)
	}
	span := bt.Requests[47].At.Seconds()
	if got, want := bt.NativeRate(), 47/span; math.Abs(got-want) > 1e-12 {
		t.Fatalf("native rate %v; want %v", got, want)
	}
	f, err := os.Open(excerpt)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if head, err := ReadMooncake(f, "excerpt", 5); err != nil || len(head.Requests) != 5 {
		t.Fatalf("limit 5: %v requests, %v", len(head.Requests), err)
	}
}

func TestReadMooncake_RefusesLinesItCannotReplay(t *testing.T) {
	ok := `{"timestamp": 10, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}`
	tests := []struct {
		name, give, want string
	}{
		{"not json", ok + "\n{", "line 2"},
		{"no timestamp", `{"input_length": 600, "output_length": 5, "hash_ids": [0, 1]}`, "no timestamp"},
		{"time goes back", ok + "\n" + `{"timestamp": 9, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}`, "before the previous"},
		{"ids do not cover the prompt", `{"timestamp": 1, "input_length": 1025, "output_length": 5, "hash_ids": [0, 1]}`, "want 3"},
		{"no output", `{"timestamp": 1, "input_length": 600, "hash_ids": [0, 1]}`, "output_length"},
		{"one token", `{"timestamp": 1, "input_length": 1, "output_length": 5, "hash_ids": [0]}`, "input_length"},
		{"negative id", `{"timestamp": 1, "input_length": 600, "output_length": 5, "hash_ids": [0, -1]}`, "hash id -1"},
		{"id moves", ok + "\n" + `{"timestamp": 11, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}`, "position 0"},
		{"id after another parent", ok + "\n" + `{"timestamp": 11, "input_length": 600, "output_length": 5, "hash_ids": [7, 1]}`, "after 7"},
		{"empty", "\n\n", "no requests"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadMooncake(strings.NewReader(tt.give), "bad", 0)
			if !errors.Is(err, ErrTrace) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v; want ErrTrace naming %q", err, tt.want)
			}
		})
	}
}

func TestMooncake_PromptIsWhatTheWorkerTokenizes(t *testing.T) {
	bt := readExcerpt(t)
	tr, err := NewTrace(TraceConfig{Spec: Mooncake{Trace: bt}, Requests: len(bt.Requests), BlockSize: 16, KeepTokens: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range tr.Requests {
		var body struct {
			Prompt    string `json:"prompt"`
			MaxTokens int    `json:"max_tokens"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatal(err)
		}
		if got := tokenizer.Encode(nil, body.Prompt, true); !slices.Equal(got, r.Tokens) {
			t.Fatalf("request %d: the worker tokenizes the prompt into %d tokens that differ from the trace's %d", i, len(got), len(r.Tokens))
		}
		if r.PromptTokens != bt.Requests[i].InputTokens || body.MaxTokens != bt.Requests[i].OutputTokens || r.OutputTokens != body.MaxTokens {
			t.Fatalf("request %d: %d prompt tokens, max_tokens %d; want %d and %d", i, r.PromptTokens, body.MaxTokens, bt.Requests[i].InputTokens, bt.Requests[i].OutputTokens)
		}
	}
}

// sharedTokens is how many leading prompt tokens requests a and b have in
// common by their ids alone: whole 512-token blocks of equal ids, and of
// the first block one of them cuts short, the shorter cut.
func sharedTokens(a, b *BlockRequest) int {
	n := 0
	for k := 0; k < len(a.HashIDs) && k < len(b.HashIDs) && a.HashIDs[k] == b.HashIDs[k]; k++ {
		la := min(MooncakeBlockTokens, a.InputTokens-k*MooncakeBlockTokens)
		lb := min(MooncakeBlockTokens, b.InputTokens-k*MooncakeBlockTokens)
		n += min(la, lb)
		if min(la, lb) < MooncakeBlockTokens {
			break
		}
	}
	return n
}

// TestMooncake_EqualIDsAreEqualPrefixes checks the mapping differentially:
// the oracle, which hashes the rendered tokens, finds exactly the reuse the
// ids promise, in whole 16-token blocks and never the last token.
func TestMooncake_EqualIDsAreEqualPrefixes(t *testing.T) {
	bt := readExcerpt(t)
	tr, err := NewTrace(TraceConfig{Spec: Mooncake{Trace: bt}, Requests: len(bt.Requests), BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	reused := 0
	for i := range bt.Requests {
		best := 0
		for j := range i {
			best = max(best, sharedTokens(&bt.Requests[i], &bt.Requests[j]))
		}
		limit := (bt.Requests[i].InputTokens - 1) / 16
		want := min(best/16, limit) * 16
		if got := tr.Requests[i].ReusableTokens; got != want {
			t.Fatalf("request %d: the oracle reuses %d tokens; the ids promise %d", i, got, want)
		}
		reused += want
	}
	if reused == 0 {
		t.Fatal("the excerpt shares no prefix: the test checks nothing")
	}
}

func TestNewTrace_RecordedArrivalsKeepTheTraceShapeAtUnitRate(t *testing.T) {
	bt := readExcerpt(t)
	tr, err := NewTrace(TraceConfig{Spec: Mooncake{Trace: bt}, Requests: len(bt.Requests), BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	rate := bt.NativeRate()
	for i, r := range tr.Requests {
		if want := bt.Requests[i].At.Seconds() * rate; math.Abs(r.UnitAt-want) > 1e-9 {
			t.Fatalf("request %d at %v unit seconds; want %v", i, r.UnitAt, want)
		}
	}
	if got := tr.UnitDuration(); math.Abs(got-47) > 1e-9 {
		t.Fatalf("unit duration %v; want 47 (one request per unit second on average)", got)
	}
	if _, err := NewTrace(TraceConfig{Spec: Mooncake{Trace: bt}, Requests: 49, BlockSize: 16}); !errors.Is(err, ErrConfig) {
		t.Fatalf("49 requests of 48: %v; want ErrConfig", err)
	}
	if _, err := NewTrace(TraceConfig{Spec: Mooncake{}, Requests: 1, BlockSize: 16}); !errors.Is(err, ErrConfig) {
		t.Fatalf("no trace: %v; want ErrConfig", err)
	}
}
