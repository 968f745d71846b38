package engine

import (
	"slices"
	"testing"
	"time"

	"github.com/llbproject/llb/inventory"
)

// stepConfig is a small step-model engine with round costs: a step takes
// 10 ms + 1 ms per prefill token + 0.1 ms per decoding request, a budget of
// 16 tokens, blocks of 4 tokens.
func stepConfig() Config {
	c := testConfig()
	c.Scheduler = SchedStep
	c.MaxNumBatchedTokens = 16
	c.NumBlocks = 64
	c.Step = StepLatency{FixedUs: 10000, PrefillTokenUs: 1000, DecodeTokenUs: 100}
	return c
}

func ms(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

func TestStep_TimesPrefillChunksAndDecodeSteps(t *testing.T) {
	tests := []struct {
		name      string
		tokens    int
		out       int
		wantTTFT  time.Duration
		wantTotal time.Duration
	}{
		// One chunk of 10: 10 + 10 ms; two decode steps of 10.1 ms.
		{"prompt in one chunk", 10, 3, ms(20), ms(40.2)},
		// 20 tokens over a budget of 16: 26 ms, then 14 ms for the last 4.
		{"prompt in two chunks", 20, 1, ms(40), ms(40)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEngine(t, stepConfig())
			tk := submit(t, e, t0, Request{ID: "r", Tokens: seq(1, tt.tokens), MaxTokens: tt.out})
			p := runToEnd(t, e)[tk]
			if got := p.FirstTokenAt.Sub(t0); got != tt.wantTTFT {
				t.Fatalf("ttft %v; want %v", got, tt.wantTTFT)
			}
			if got := p.DoneAt.Sub(t0); got != tt.wantTotal {
				t.Fatalf("total %v; want %v", got, tt.wantTotal)
			}
		})
	}
}

// A prefill joining a decoding batch stretches the decodes' step: the
// decode's inter-token gap while b's 8-token prompt is computed is 10 + 8 +
// 0.1 ms instead of 10.1 ms. b waits for the step boundary to join.
func TestStep_APrefillStretchesTheDecodesInItsStep(t *testing.T) {
	e := newEngine(t, stepConfig())
	a := submit(t, e, t0, Request{ID: "a", Tokens: seq(1, 4), MaxTokens: 4})
	var tokens []time.Time
	var bAdmitted time.Time
	b := Ticket(0)
	for i := 0; i < 1000; i++ {
		at, ok := e.NextEventTime()
		if !ok {
			break
		}
		for _, p := range e.Advance(at, nil) {
			if p.Ticket == a && p.Generated > len(tokens) {
				tokens = append(tokens, at)
			}
			if p.Ticket == b && p.Admitted && bAdmitted.IsZero() {
				bAdmitted = p.AdmittedAt
			}
		}
		if len(tokens) == 1 && b == 0 {
			b = submit(t, e, at.Add(ms(1)), Request{ID: "b", Tokens: seq(100, 8), MaxTokens: 1})
		}
	}
	// a: prefill step 14 ms (first token), then steps of 10.1 (decode only)
	// or 18.1 (with b's prefill). b arrives 1 ms into a's first decode step
	// and joins the next one.
	gaps := []time.Duration{tokens[0].Sub(t0), tokens[1].Sub(tokens[0]), tokens[2].Sub(tokens[1]), tokens[3].Sub(tokens[2])}
	want := []time.Duration{ms(14), ms(10.1), ms(18.1), ms(10.1)}
	if !slices.Equal(gaps, want) {
		t.Fatalf("a's token gaps %v; want %v", gaps, want)
	}
	if want := tokens[1]; !bAdmitted.Equal(want) {
		t.Fatalf("b admitted at +%v; want the step boundary +%v", bAdmitted.Sub(t0), want.Sub(t0))
	}
}

// busy submits a decode-heavy request at t0 that keeps the engine stepping
// (its 4-token prefill ends at 14 ms, then 10.1 ms decode steps): requests
// submitted during a step join at the next boundary, together.
func busy(t *testing.T, e *Engine) Ticket {
	t.Helper()
	return submit(t, e, t0, Request{ID: "x", Tokens: seq(5000, 4), MaxTokens: 20})
}

// The token budget goes to the running batch first, in admission order,
// then to waiting requests in FIFO order: two 12-token prompts joining at
// 14 ms get 12 and 3 of the 15 tokens left after x's decode, and b its
// last 9 in the following step.
func TestStep_BudgetServesTheRunningBatchFirst(t *testing.T) {
	e := newEngine(t, stepConfig())
	busy(t, e)
	a := submit(t, e, t0.Add(ms(1)), Request{ID: "a", Tokens: seq(1, 12), MaxTokens: 1})
	b := submit(t, e, t0.Add(ms(1)), Request{ID: "b", Tokens: seq(100, 12), MaxTokens: 1})
	got := runToEnd(t, e)
	// Step 2 (14 ms): x decodes, a 12, b 3 → 10 + 15 + 0.1 = 25.1 ms.
	if ttft := got[a].FirstTokenAt.Sub(t0); ttft != ms(39.1) {
		t.Fatalf("a's first token at %v; want 39.1ms", ttft)
	}
	// Step 3 (39.1 ms; a finished with its first token): x decodes, b
	// computes its last 9 → 19.1 ms.
	if ttft := got[b].FirstTokenAt.Sub(t0); ttft != ms(58.2) {
		t.Fatalf("b's first token at %v; want 58.2ms", ttft)
	}
}

// Prompt blocks are cached and published when the step that computes them
// ends, not at admission: of two same-prompt requests admitted in one step
// neither finds the other's blocks, and a third admitted after that step
// hits them; only one copy is cached.
func TestStep_PublishesBlocksWhenComputed(t *testing.T) {
	e := newEngine(t, stepConfig())
	busy(t, e)
	a := seq(1, 9) // 2 full blocks and a token
	first := submit(t, e, t0.Add(ms(1)), Request{ID: "first", Tokens: a, MaxTokens: 2})
	twin := submit(t, e, t0.Add(ms(1)), Request{ID: "twin", Tokens: a, MaxTokens: 2})
	e.Advance(t0.Add(ms(14)), nil) // both admitted at the 14 ms boundary
	if got := storedKeys(e.TakeEvents(nil)); len(got) != 1 {
		t.Fatalf("stored %v at admission; want only x's block", got)
	}
	e.Advance(t0.Add(ms(14+10+18+0.1)), nil) // that step ends
	want, _ := e.Hasher().AppendDigests(nil, a, inventory.ExtraKeys{})
	if got := storedKeys(e.TakeEvents(nil)); !slices.Equal(got, keysOf(want)) {
		t.Fatalf("stored %v after the prefill step; want %v once", got, keysOf(want))
	}
	late := submit(t, e, t0.Add(ms(43)), Request{ID: "late", Tokens: a, MaxTokens: 1})
	got := runToEnd(t, e)
	if got[first].CachedTokens != 0 || got[twin].CachedTokens != 0 || got[late].CachedTokens != 8 {
		t.Fatalf("cached tokens: first %d, twin %d, late %d; want 0, 0 and 8", got[first].CachedTokens, got[twin].CachedTokens, got[late].CachedTokens)
	}
	if n := e.Stats().CachedBlocks; n != 3 {
		t.Fatalf("%d cached blocks; want x's one and the prefix's two", n)
	}
}

// The batch limit holds in the step model: with max-num-seqs 2 the third
// request waits until one of the first two finishes.
func TestStep_BatchLimitQueuesTheRest(t *testing.T) {
	c := stepConfig()
	c.MaxNumSeqs = 2
	e := newEngine(t, c)
	busy(t, e)
	var tks []Ticket
	for i := range 2 {
		tks = append(tks, submit(t, e, t0.Add(ms(1)), Request{ID: "r", Tokens: seq(100*i+1, 4), MaxTokens: 2}))
	}
	e.Advance(t0.Add(ms(14)), nil)
	if st := e.Stats(); st.Running != 2 || st.Waiting != 1 {
		t.Fatalf("running %d waiting %d; want 2 and 1", st.Running, st.Waiting)
	}
	got := runToEnd(t, e)
	if got[tks[1]].AdmittedAt.Before(got[tks[0]].DoneAt) {
		t.Fatalf("the third admitted at %v, before the second finished at %v", got[tks[1]].AdmittedAt, got[tks[0]].DoneAt)
	}
}

func TestStep_AbortMidStepFreesEverything(t *testing.T) {
	e := newEngine(t, stepConfig())
	a := submit(t, e, t0, Request{ID: "a", Tokens: seq(1, 10), MaxTokens: 5})
	b := submit(t, e, t0, Request{ID: "b", Tokens: seq(100, 4), MaxTokens: 5})
	if err := e.Abort(t0.Add(ms(5)), a); err != nil {
		t.Fatal(err)
	}
	got := runToEnd(t, e)
	if got[a].Finish != FinishAbort || got[b].Finish != FinishLength || got[b].Generated != 5 {
		t.Fatalf("a %+v; b %+v", got[a], got[b])
	}
	if st := e.Stats(); st.BlocksInUse != 0 || st.Running != 0 {
		t.Fatalf("idle engine holds %+v", st)
	}
}

func TestConfig_RejectsABadStepModel(t *testing.T) {
	c := stepConfig()
	c.MaxNumBatchedTokens = 0
	c.Step.PrefillTokenUs = -1
	if err := c.Validate(); err == nil {
		t.Fatal("a zero budget and a negative cost validated")
	}
	c = stepConfig()
	c.Step = StepLatency{}
	if err := c.Validate(); err == nil {
		t.Fatal("a step that takes no time validated")
	}
	if _, err := ParseScheduler("vllm"); err == nil {
		t.Fatal(`ParseScheduler("vllm") accepted`)
	}
	if s, err := ParseScheduler("step"); err != nil || s != SchedStep || s.String() != "step" {
		t.Fatalf("ParseScheduler(step) = %v, %v", s, err)
	}
}
