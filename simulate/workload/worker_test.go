package workload_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llbproject/llb/simulate/worker"
	"github.com/llbproject/llb/simulate/workload"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestWorkload_OracleIsWhatOneUnboundedWorkerHits sends generated streams,
// one request at a time, to a single simulated worker whose cache never
// evicts: it must report exactly the generator's prompt length and exactly
// the oracle's reusable tokens as cached. This ties the generators' token
// accounting to the worker's tokenizer, template and prefix cache.
func TestWorkload_OracleIsWhatOneUnboundedWorkerHits(t *testing.T) {
	cfg := worker.DefaultConfig()
	cfg.KVEvents = false
	cfg.Engine.NumBlocks = 200000
	cfg.Engine.Latency.TimeScale = 0.001
	w, err := worker.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	}()
	tr := &http.Transport{Proxy: nil}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}

	sp := workload.SharedPrefix{Groups: 3, PromptsPerGroup: 2, SystemTokens: 120, QuestionTokens: 20, OutputTokens: 3, ZipfAlpha: 0.8}
	specs := map[string]workload.Spec{
		"shared prefix":      sp,
		"shared prefix chat": workload.SharedPrefix{Groups: 3, PromptsPerGroup: 2, SystemTokens: 120, QuestionTokens: 20, OutputTokens: 3, Chat: true},
		"multi-turn":         workload.MultiTurn{Conversations: 2, Turns: 4, SystemTokens: 50, HistoryTokens: 60, QuestionTokens: 12, AnswerTokens: 10, HeaderSession: true},
		"hot prefix stream":  workload.HotPrefix{Clients: 4, PrefixTokens: 100, SuffixTokens: 9, OutputTokens: 2, Options: workload.Options{Stream: true}},
		"mix":                workload.Mix{Parts: []workload.Part{{Weight: 1, Spec: sp}, {Weight: 1, Spec: workload.HotPrefix{Clients: 2, PrefixTokens: 70, SuffixTokens: 5, OutputTokens: 2, Chat: true}}}},
	}
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			reset(t, c, w)
			reqs, err := workload.Generate(rand.New(rand.NewPCG(42, 43)), spec, workload.Poisson{Rate: 100}, 16, 25)
			if err != nil {
				t.Fatal(err)
			}
			hits := 0
			for _, r := range reqs {
				prompt, cached := send(t, c, w.URL(), r)
				if prompt != r.PromptTokens || cached != r.ReusableTokens {
					t.Fatalf("request %d (%s group %d): worker saw %d prompt tokens, %d cached; generator says %d and %d",
						r.Seq, r.Workload, r.Group, prompt, cached, r.PromptTokens, r.ReusableTokens)
				}
				hits += cached
			}
			if hits == 0 {
				t.Fatal("no request reused anything: the test proves nothing")
			}
		})
	}
}

func reset(t *testing.T, c *http.Client, w *worker.Worker) {
	t.Helper()
	resp, err := c.Post(w.URL()+"/reset_prefix_cache", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("reset: %d", resp.StatusCode)
	}
}

type usageBody struct {
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		PromptTokensDetails struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// send posts a generated request and returns the worker's usage.
func send(t *testing.T, c *http.Client, base string, r workload.Request) (prompt, cached int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+r.Path, bytes.NewReader(r.Body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range r.Header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("request %d: %d %s %v", r.Seq, resp.StatusCode, raw, err)
	}
	var u usageBody
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok || data == "[DONE]" {
				continue
			}
			var ev usageBody
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				t.Fatal(err)
			}
			if ev.Usage != nil {
				u = ev
			}
		}
	} else if err := json.Unmarshal(raw, &u); err != nil {
		t.Fatal(err)
	}
	if u.Usage == nil {
		t.Fatalf("request %d: no usage in %s", r.Seq, raw)
	}
	return u.Usage.PromptTokens, u.Usage.PromptTokensDetails.CachedTokens
}
