package workload

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/tokenizer"
)

func seeded(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, seed^0xabcdef)) }

// small specs keep the tests fast.
func specs() map[string]Spec {
	sp := SharedPrefix{Groups: 4, PromptsPerGroup: 3, SystemTokens: 64, QuestionTokens: 16, OutputTokens: 8, ZipfAlpha: 1}
	spChat := sp
	spChat.Chat = true
	mt := MultiTurn{Conversations: 3, Turns: 3, SystemTokens: 40, HistoryTokens: 30, QuestionTokens: 10, AnswerTokens: 12}
	mtHdr := mt
	mtHdr.HeaderSession = true
	hp := HotPrefix{Clients: 5, PrefixTokens: 80, SuffixTokens: 8, OutputTokens: 4, Sessions: true}
	return map[string]Spec{
		"shared prefix":         sp,
		"shared prefix chat":    spChat,
		"multi-turn user_id":    mt,
		"multi-turn header":     mtHdr,
		"hot prefix":            hp,
		"hot prefix chat":       HotPrefix{Clients: 5, PrefixTokens: 80, SuffixTokens: 8, OutputTokens: 4, Chat: true, Options: Options{Stream: true}},
		"mix of all three":      Mix{Parts: []Part{{Weight: 2, Spec: sp}, {Weight: 1, Spec: mt}, {Weight: 1, Spec: hp}}},
		"streaming shared chat": SharedPrefix{Groups: 2, SystemTokens: 32, QuestionTokens: 8, OutputTokens: 2, Chat: true, Options: Options{Stream: true, Model: "m"}},
	}
}

func TestGenerate_IsDeterministicForASeed(t *testing.T) {
	for name, spec := range specs() {
		t.Run(name, func(t *testing.T) {
			a, err := Generate(seeded(7), spec, Poisson{Rate: 20}, 16, 40)
			if err != nil {
				t.Fatal(err)
			}
			b, err := Generate(seeded(7), spec, Poisson{Rate: 20}, 16, 40)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(a, b) {
				t.Fatal("same seed gave different streams")
			}
			c, err := Generate(seeded(8), spec, Poisson{Rate: 20}, 16, 40)
			if err != nil {
				t.Fatal(err)
			}
			if reflect.DeepEqual(a, c) {
				t.Fatal("different seeds gave the same stream")
			}
			for i, r := range a {
				if r.Seq != i || (i > 0 && r.At < a[i-1].At) || !json.Valid(r.Body) || r.PromptTokens == 0 || r.ReusableTokens%16 != 0 {
					t.Fatalf("request %d malformed: %+v", i, r)
				}
			}
		})
	}
}

func TestSharedPrefix_PromptsAreExactTokenLengthsAndGroupsShareTheirPrefix(t *testing.T) {
	spec := SharedPrefix{Groups: 1, PromptsPerGroup: 1, SystemTokens: 100, QuestionTokens: 20, OutputTokens: 5}
	reqs, err := Generate(seeded(1), spec, Constant{Rate: 10}, 16, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := 1 + 100 + 2 + 20 // BOS, system, blank line, question
	var body struct {
		Model     string `json:"model"`
		Prompt    string `json:"prompt"`
		MaxTokens int    `json:"max_tokens"`
		IgnoreEOS bool   `json:"ignore_eos"`
	}
	if err := json.Unmarshal(reqs[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if reqs[0].Path != PathCompletions || body.Model != "sim-model" || body.MaxTokens != 5 || !body.IgnoreEOS || reqs[0].OutputTokens != 5 {
		t.Fatalf("request %+v body %+v", reqs[0], body)
	}
	for i, r := range reqs {
		wantReuse := 0
		if i > 0 {
			wantReuse = (want - 1) / 16 * 16 // the same prompt again
		}
		if r.PromptTokens != want || r.ReusableTokens != wantReuse || r.At != time.Duration(i)*100*time.Millisecond {
			t.Fatalf("request %d: %d tokens, %d reusable at %v; want %d, %d at %v", i, r.PromptTokens, r.ReusableTokens, r.At, want, wantReuse, time.Duration(i)*100*time.Millisecond)
		}
	}
}

func TestSharedPrefix_ZipfSkewsGroupPopularity(t *testing.T) {
	tests := []struct {
		name      string
		alpha     float64
		wantFirst float64 // expected share of group 0 among 8 groups
	}{
		{"uniform", 0, 1.0 / 8},
		{"zipf 1.2", 1.2, 1 / (1 + 1/math.Pow(2, 1.2) + 1/math.Pow(3, 1.2) + 1/math.Pow(4, 1.2) + 1/math.Pow(5, 1.2) + 1/math.Pow(6, 1.2) + 1/math.Pow(7, 1.2) + 1/math.Pow(8, 1.2))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := SharedPrefix{Groups: 8, PromptsPerGroup: 2, SystemTokens: 16, QuestionTokens: 2, OutputTokens: 1, ZipfAlpha: tt.alpha}.Source(seeded(3))
			if err != nil {
				t.Fatal(err)
			}
			r := seeded(4)
			counts := make([]int, 8)
			const n = 4000
			for range n {
				it, err := src.Next(r)
				if err != nil {
					t.Fatal(err)
				}
				counts[it.Group]++
			}
			got := float64(counts[0]) / n
			if math.Abs(got-tt.wantFirst) > 0.03 {
				t.Fatalf("group 0 share %.3f; want %.3f (counts %v)", got, tt.wantFirst, counts)
			}
			if tt.alpha > 0 && counts[0] <= counts[7] {
				t.Fatalf("zipf did not favour the first group: %v", counts)
			}
		})
	}
}

func TestMultiTurn_ContextGrowsWithinAStickySession(t *testing.T) {
	for _, header := range []bool{false, true} {
		spec := MultiTurn{Conversations: 2, Turns: 4, SystemTokens: 48, HistoryTokens: 40, QuestionTokens: 10, AnswerTokens: 12, HeaderSession: header}
		reqs, err := Generate(seeded(5), spec, Poisson{Rate: 5}, 16, 30)
		if err != nil {
			t.Fatal(err)
		}
		last := map[int]Request{}
		for _, r := range reqs {
			var body struct {
				UserID   *string          `json:"user_id"`
				Messages []map[string]any `json:"messages"`
			}
			if err := json.Unmarshal(r.Body, &body); err != nil {
				t.Fatal(err)
			}
			if r.Path != PathChat || r.Session == "" {
				t.Fatalf("request %+v", r)
			}
			if header {
				if r.Header["X-Conversation-Id"] != r.Session || body.UserID != nil {
					t.Fatalf("header session: header %v user_id %v", r.Header, body.UserID)
				}
			} else if body.UserID == nil || *body.UserID != r.Session || r.Header != nil {
				t.Fatalf("body session: user_id %v header %v", body.UserID, r.Header)
			}
			if prev, ok := last[r.Group]; ok {
				if r.Session != prev.Session || r.PromptTokens <= prev.PromptTokens || len(body.Messages)%2 != 0 {
					t.Fatalf("conversation %d turn: %d tokens after %d, session %q after %q", r.Group, r.PromptTokens, prev.PromptTokens, r.Session, prev.Session)
				}
				// The previous turn's prompt is a prefix of this one.
				if want := (prev.PromptTokens - 1) / 16 * 16; r.ReusableTokens < want {
					t.Fatalf("conversation %d: %d reusable; want at least the previous prompt's %d", r.Group, r.ReusableTokens, want)
				}
			}
			last[r.Group] = r
		}
		if len(last) < 3 {
			t.Fatalf("%d conversations in 30 requests; finished ones must be replaced", len(last))
		}
	}
}

func TestHotPrefix_EveryRequestSharesThePreamble(t *testing.T) {
	reqs, err := Generate(seeded(9), HotPrefix{Clients: 7, PrefixTokens: 96, SuffixTokens: 10, OutputTokens: 2}, Poisson{Rate: 50}, 16, 20)
	if err != nil {
		t.Fatal(err)
	}
	clients := map[int]bool{}
	for i, r := range reqs[1:] {
		clients[r.Group] = true
		if r.ReusableTokens < 96 || r.Session != "" {
			t.Fatalf("request %d reuses %d tokens, session %q; want the 96-token preamble, no session", i+1, r.ReusableTokens, r.Session)
		}
	}
	if len(clients) < 4 {
		t.Fatalf("only %d clients in 20 requests", len(clients))
	}
}

func TestArrivals_RatesAndValidation(t *testing.T) {
	r := seeded(11)
	p := Poisson{Rate: 40}
	var sum time.Duration
	const n = 20000
	for range n {
		sum += p.Gap(r)
	}
	if mean := sum.Seconds() / n; math.Abs(mean-0.025)/0.025 > 0.03 {
		t.Fatalf("poisson mean gap %.5fs; want 0.025s", mean)
	}
	if g := (Constant{Rate: 4}).Gap(r); g != 250*time.Millisecond {
		t.Fatalf("constant gap %v; want 250ms", g)
	}
	for _, a := range []Arrivals{Poisson{}, Poisson{Rate: -1}, Poisson{Rate: math.Inf(1)}, Constant{Rate: math.NaN()}} {
		if err := a.Validate(); !errors.Is(err, ErrConfig) {
			t.Fatalf("%+v: %v; want ErrConfig", a, err)
		}
	}
}

func TestSpecs_RejectBadConfiguration(t *testing.T) {
	tests := []struct {
		name string
		give Spec
	}{
		{"negative groups", SharedPrefix{Groups: -1}},
		{"negative zipf alpha", SharedPrefix{ZipfAlpha: -0.5}},
		{"nan zipf alpha", SharedPrefix{ZipfAlpha: math.NaN()}},
		{"negative turns", MultiTurn{Turns: -2}},
		{"negative answer", MultiTurn{AnswerTokens: -1}},
		{"negative clients", HotPrefix{Clients: -3}},
		{"empty mix", Mix{}},
		{"zero weight", Mix{Parts: []Part{{Weight: 0, Spec: HotPrefix{}}}}},
		{"missing part spec", Mix{Parts: []Part{{Weight: 1}}}},
		{"bad part", Mix{Parts: []Part{{Weight: 1, Spec: HotPrefix{SuffixTokens: -1}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.give.Source(seeded(1)); !errors.Is(err, ErrConfig) {
				t.Fatalf("error %v; want ErrConfig", err)
			}
		})
	}
	if _, err := Generate(seeded(1), HotPrefix{}, Poisson{Rate: 1}, 0, 1); !errors.Is(err, ErrConfig) {
		t.Fatalf("block size 0: %v; want ErrConfig", err)
	}
	if _, err := Generate(seeded(1), HotPrefix{}, Poisson{Rate: 1}, 16, -1); !errors.Is(err, ErrConfig) {
		t.Fatalf("negative count: %v; want ErrConfig", err)
	}
}

func TestOracleHitRate_IsReusableOverPromptTokens(t *testing.T) {
	tests := []struct {
		name string
		give []Request
		want float64
	}{
		{"empty", nil, 0},
		{"half", []Request{{PromptTokens: 100, ReusableTokens: 0}, {PromptTokens: 100, ReusableTokens: 100}}, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := OracleHitRate(tt.give); got != tt.want {
				t.Fatalf("got %v; want %v", got, tt.want)
			}
		})
	}
}

func TestStream_KeepTokensCarriesThePrompt(t *testing.T) {
	r := seeded(2)
	src, err := HotPrefix{Clients: 2, PrefixTokens: 32, SuffixTokens: 4, OutputTokens: 1}.Source(r)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStream(src, Constant{Rate: 1}, 16)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := s.Next(r)
	if req.Tokens != nil {
		t.Fatal("tokens kept without KeepTokens")
	}
	s.KeepTokens = true
	req, _ = s.Next(r)
	if len(req.Tokens) != req.PromptTokens || req.Tokens[0] != tokenizer.BOS {
		t.Fatalf("%d tokens for a %d-token prompt", len(req.Tokens), req.PromptTokens)
	}
}

func TestLongDocQA_DocumentsRepeatWithTheirQuestions(t *testing.T) {
	spec := LongDocQA{Documents: 3, QuestionsPerDoc: 2, DocMinTokens: 500, DocMaxTokens: 900, QuestionTokens: 16, OutputTokens: 8}
	reqs, err := Generate(rand.New(rand.NewPCG(1, 2)), spec, Constant{Rate: 1}, 16, 40)
	if err != nil {
		t.Fatal(err)
	}
	lens := map[int]int{}
	for i, r := range reqs {
		if r.Workload != "long_doc_qa" || r.Group < 0 || r.Group >= 3 {
			t.Fatalf("request %d: workload %q group %d", i, r.Workload, r.Group)
		}
		if r.PromptTokens < 500 || r.PromptTokens > 1000 {
			t.Fatalf("request %d: %d prompt tokens outside the document bounds", i, r.PromptTokens)
		}
		if l, ok := lens[r.Group]; ok && (r.PromptTokens < l-40 || r.PromptTokens > l+40) {
			t.Fatalf("document %d changed length: %d then %d tokens", r.Group, l, r.PromptTokens)
		}
		lens[r.Group] = r.PromptTokens
	}
	// After the first request of each document, nearly the whole prompt is
	// reusable.
	if o := OracleHitRate(reqs[10:]); o < 0.9 {
		t.Fatalf("oracle hit rate %.3f; want the documents reused", o)
	}
	if err := (LongDocQA{DocMinTokens: 10, DocMaxTokens: 5}).Validate(); err == nil {
		t.Fatal("max below min validated")
	}
}
