package peers

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func mustNew(t *testing.T, k Kind, n int) Policy {
	t.Helper()
	p, err := New(k, n, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// text is a prompt of groups: a shared head of 400 characters per group
// and a 40-character question.
func text(group, question int) []byte {
	head := strings.Repeat(string(rune('a'+group)), 400)
	return []byte(head + strings.Repeat(string(rune('A'+question%26)), 40))
}

func chain(n int, base uint64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = base + uint64(i)
	}
	return out
}

func TestNew_RejectsUnknownPoliciesAndEmptyFleets(t *testing.T) {
	if _, err := New("nginx", 2, 1, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("unknown policy: %v", err)
	}
	if _, err := New(Dynamo, 0, 1, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("no endpoints: %v", err)
	}
	for _, k := range Kinds() {
		if _, err := New(k, 3, 1, nil); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
}

// Dynamo's cost: the worker holding 10 of 12 blocks wins while idle; once
// the prefill queued on it outweighs the 10 blocks it saves, an idle
// worker wins.
func TestDynamo_WeighsCachedBlocksAgainstQueuedPrefill(t *testing.T) {
	p := mustNew(t, Dynamo, 2)
	req := func(id int) *Request {
		return &Request{ID: id, Chain: chain(12, 1000), PromptTokens: 192, OutputTokens: 16, BlockSize: 16}
	}
	eps := []Endpoint{{Overlap: 10}, {Overlap: 0}}
	// cost0 = (0 + 32)/16 + (12+1) = 15; cost1 = 192/16 + 13 = 25.
	if got := p.Pick(t0, req(1), eps); got != 0 {
		t.Fatalf("idle: picked %d; want 0, the holder", got)
	}
	// Request 1 is still prefilling on 0 (32 tokens) and holds 13 blocks:
	// cost0 = (32+32)/16 + 13 (shared chain) + 1 + 1 = 19; cost1 = 25.
	if got := p.Pick(t0, req(2), eps); got != 0 {
		t.Fatalf("one in prefill: picked %d; want 0", got)
	}
	// A long unrelated prefill (512 tokens) queued on 0 tips it:
	// cost0 = (64+512+32)/16 + 15 = 53; cost1 = 25.
	p.(*dynamo).prefill[0] += 512
	if got := p.Pick(t0, req(4), eps); got != 1 {
		t.Fatalf("after a queued prefill elsewhere: picked %d", got)
	}
}

func TestDynamo_FreesPrefillAtTheFirstTokenAndBlocksAtTheEnd(t *testing.T) {
	r := &Request{ID: 7, Chain: chain(4, 1), PromptTokens: 70, OutputTokens: 10, BlockSize: 16}
	dd := mustNew(t, Dynamo, 1).(*dynamo)
	dd.Pick(t0, r, []Endpoint{{Overlap: 1}})
	if dd.prefill[0] != 54 || len(dd.blocks[0]) != 4 || dd.private[0] != 1 {
		t.Fatalf("after pick: prefill %v, blocks %d, private %d", dd.prefill[0], len(dd.blocks[0]), dd.private[0])
	}
	dd.FirstToken(t0, 7)
	dd.FirstToken(t0, 7) // idempotent
	if dd.prefill[0] != 0 {
		t.Fatalf("prefill %v after the first token", dd.prefill[0])
	}
	dd.Done(t0, 7)
	if len(dd.blocks[0]) != 0 || dd.private[0] != 0 || len(dd.reqs) != 0 {
		t.Fatalf("state left after done: %+v", dd)
	}
}

// llm-d: 3·prefix + 2·(1−kv) + 2·queue. A full prefix match (3) beats an
// empty queue elsewhere (2) until the holder is the only pod queueing and
// the other is emptier on KV too.
func TestLLMD_ScoresPrefixKVAndQueue(t *testing.T) {
	tests := []struct {
		name string
		give []Endpoint
		want int
	}{
		{"prefix wins on equal load", []Endpoint{{Overlap: 0}, {Overlap: 8}}, 1},
		{"half the prefix loses to an idle pod", []Endpoint{{Overlap: 4, Waiting: 5, KVUsage: 0.9}, {Overlap: 0, Waiting: 0, KVUsage: 0.1}}, 1},
		{"full prefix beats queue", []Endpoint{{Overlap: 8, Waiting: 5, KVUsage: 0.5}, {Overlap: 0, Waiting: 0, KVUsage: 0.5}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustNew(t, LLMD, 2)
			if got := p.Pick(t0, &Request{ID: 1, Chain: chain(8, 1), PromptTokens: 128, BlockSize: 16}, tt.give); got != tt.want {
				t.Fatalf("picked %d; want %d", got, tt.want)
			}
		})
	}
}

// A routed request's blocks count for its pod at once (speculative index)
// and for 2 s only.
func TestLLMD_IndexesRoutedBlocksSpeculatively(t *testing.T) {
	p := mustNew(t, LLMD, 2)
	r := func(id int) *Request { return &Request{ID: id, Chain: chain(8, 1), PromptTokens: 128, BlockSize: 16} }
	eps := []Endpoint{{Waiting: 1}, {Waiting: 0}}
	first := p.Pick(t0, r(1), eps)
	if first != 1 {
		t.Fatalf("first pick %d; want the emptier pod 1", first)
	}
	// No KV event yet, pod 1 now queues more: the speculative prefix (3)
	// still outweighs the queue (2).
	eps = []Endpoint{{Waiting: 0}, {Waiting: 3}}
	if got := p.Pick(t0.Add(time.Second), r(2), eps); got != 1 {
		t.Fatalf("within 2 s: picked %d; want 1", got)
	}
	if got := p.Pick(t0.Add(5*time.Second), r(3), eps); got != 0 {
		t.Fatalf("after 2 s: picked %d; want 0", got)
	}
}

// SGLang: same text to the same worker while balanced; a new text to the
// smallest tree; an imbalance of more than 64 (and 1.5×) to the least
// loaded.
func TestSGLang_AffinitySmallestTreeAndImbalance(t *testing.T) {
	p := mustNew(t, SGLang, 2)
	eps := make([]Endpoint, 2)
	a := p.Pick(t0, &Request{ID: 1, Text: text(0, 0)}, eps)
	if got := p.Pick(t0, &Request{ID: 2, Text: text(0, 1)}, eps); got != a {
		t.Fatalf("same group went to %d; want %d", got, a)
	}
	if got := p.Pick(t0, &Request{ID: 3, Text: text(1, 0)}, eps); got == a {
		t.Fatalf("a new group went to the bigger tree %d", got)
	}
	for id := 10; id < 80; id++ { // pile 70 requests of group 0 on a
		p.Pick(t0, &Request{ID: id, Text: text(0, id)}, eps)
	}
	if got := p.Pick(t0, &Request{ID: 99, Text: text(0, 3)}, eps); got == a {
		t.Fatalf("imbalanced by 70: picked %d; want the least loaded", got)
	}
	for id := 10; id < 80; id++ {
		p.Done(t0, id)
	}
	if got := p.Pick(t0, &Request{ID: 100, Text: text(0, 4)}, eps); got != a {
		t.Fatalf("balanced again: picked %d; want %d", got, a)
	}
}

// AIBrix: the best-matching pod unless its running count is above mean +
// 2σ; an imbalance above 16 goes to the fewest running.
func TestAIBrix_MatchBoundedByMeanPlusTwoSigma(t *testing.T) {
	p := mustNew(t, AIBrix, 3)
	eps := make([]Endpoint, 3)
	home := p.Pick(t0, &Request{ID: 1, Text: text(0, 0)}, eps)
	for id := 2; id < 8; id++ {
		if got := p.Pick(t0, &Request{ID: id, Text: text(0, id)}, eps); got != home && id < 4 {
			t.Fatalf("request %d of the group went to %d; want home %d", id, got, home)
		}
	}
	// With home far above mean + 2σ the group spreads; with an imbalance
	// above 16 the fewest running wins whatever matches.
	a := mustNew(t, AIBrix, 2)
	two := make([]Endpoint, 2)
	for id := 1; id <= 18; id++ {
		a.Pick(t0, &Request{ID: id, Text: text(1+id%3, id)}, two)
	}
	got := a.Pick(t0, &Request{ID: 50, Text: text(0, 9)}, two)
	if loads := a.(*aibrix).load.load; loads[got] > loads[1-got]+1 {
		t.Fatalf("picked the busier pod %d (loads %v)", got, loads)
	}
}

// KubeAI: the key's home until load+1 > 1.25·(total+1)/n, then the next
// endpoint clockwise.
func TestKubeAI_BoundedLoadWalk(t *testing.T) {
	p := mustNew(t, KubeAI, 2)
	eps := make([]Endpoint, 2)
	home := p.Pick(t0, &Request{ID: 1, Text: text(0, 0)}, eps)
	// total 1: home has 1; 1+1 ≤ 1.25·2/2 = 1.25? no → walk.
	if got := p.Pick(t0, &Request{ID: 2, Text: text(0, 1)}, eps); got == home {
		t.Fatalf("second concurrent request stayed home %d", got)
	}
	p.Done(t0, 1)
	p.Done(t0, 2)
	if got := p.Pick(t0, &Request{ID: 3, Text: text(0, 2)}, eps); got != home {
		t.Fatalf("idle again: %d; want home %d", got, home)
	}
}

// The same inputs give the same picks (ties broken by the seed).
func TestPolicies_AreDeterministicForASeed(t *testing.T) {
	for _, k := range Kinds() {
		run := func() []int {
			p, _ := New(k, 4, 9, []string{"a", "b", "c", "d"})
			var out []int
			for id := range 200 {
				eps := []Endpoint{{Overlap: id % 3}, {Overlap: id % 5, Waiting: id % 2}, {}, {KVUsage: 0.5}}
				w := p.Pick(t0.Add(time.Duration(id)*time.Millisecond), &Request{ID: id, Text: text(id%7, id), Chain: chain(10, uint64(id%7)*100), PromptTokens: 170, OutputTokens: 8, BlockSize: 16}, eps)
				out = append(out, w)
				if id%3 == 0 {
					p.FirstToken(t0, id-1)
					p.Done(t0, id-2)
				}
			}
			return out
		}
		a, b := run(), run()
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("%s: pick %d differs between runs", k, i)
			}
		}
	}
}
