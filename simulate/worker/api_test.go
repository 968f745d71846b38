package worker

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/tokenizer"
)

func TestCompletions_NonStreamReportsUsageAndCachedTokens(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	prompt := words("You are a careful assistant.", 60)
	tok := tokenize(t, c, w, map[string]any{"prompt": prompt})
	body := map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": 5}

	st, hdr, raw := post(t, c, w.URL()+"/v1/completions", body, map[string]string{"X-Request-Id": "abc"})
	if st != http.StatusOK {
		t.Fatalf("status %d: %s", st, raw)
	}
	first := decode[response](t, raw)
	if first.ID != "cmpl-abc-0" || first.Object != "text_completion" || first.Model != "sim-model" || hdr.Get("X-Request-Id") != "abc" {
		t.Fatalf("envelope %+v header %q", first, hdr.Get("X-Request-Id"))
	}
	if len(first.Choices) != 1 || first.Choices[0].Text == nil || *first.Choices[0].FinishReason != "length" {
		t.Fatalf("choices %+v", first.Choices)
	}
	if n := tokenizer.Count(*first.Choices[0].Text); n != 5 {
		t.Fatalf("text %q is %d tokens; want 5", *first.Choices[0].Text, n)
	}
	u := first.Usage
	if u.PromptTokens != tok.Count || u.CompletionTokens != 5 || u.TotalTokens != tok.Count+5 || u.PromptTokensDetails.CachedTokens != 0 {
		t.Fatalf("usage %+v; want prompt %d, 5 completion, nothing cached", u, tok.Count)
	}

	_, _, raw = post(t, c, w.URL()+"/v1/completions", body, nil)
	second := decode[response](t, raw)
	wantCached := (tok.Count - 1) / 16 * 16
	if second.Usage.PromptTokensDetails.CachedTokens != wantCached {
		t.Fatalf("cached %d; want %d", second.Usage.PromptTokensDetails.CachedTokens, wantCached)
	}
	if *second.Choices[0].Text != *first.Choices[0].Text {
		t.Fatalf("same prompt generated %q then %q; want deterministic text", *first.Choices[0].Text, *second.Choices[0].Text)
	}
}

func TestCompletions_StreamSendsOneEventPerTokenThenUsageAndDone(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	body := map[string]any{"prompt": words("stream me", 20), "max_tokens": 7, "stream": true, "stream_options": map[string]any{"include_usage": true}}
	st, hdr, raw := post(t, c, w.URL()+"/v1/completions", body, map[string]string{"X-Request-Id": "s1"})
	if st != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d content type %q: %s", st, hdr.Get("Content-Type"), raw)
	}
	evs := sseEvents(t, raw)
	if len(evs) != 7+2 || evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("%d events, last %q; want 7 tokens, usage, [DONE]", len(evs), evs[len(evs)-1])
	}
	for i, e := range evs[:7] {
		ch := decode[response](t, []byte(e))
		if ch.ID != "cmpl-s1-0" || len(ch.Choices) != 1 || ch.Choices[0].Text == nil || ch.Usage != nil {
			t.Fatalf("token event %d: %s", i, e)
		}
		fr := ch.Choices[0].FinishReason
		if (i == 6) != (fr != nil && *fr == "length") {
			t.Fatalf("event %d finish_reason %v", i, fr)
		}
	}
	usage := decode[response](t, []byte(evs[7]))
	if len(usage.Choices) != 0 || usage.Usage == nil || usage.Usage.CompletionTokens != 7 {
		t.Fatalf("usage event %s", evs[7])
	}
}

func TestChat_StreamAndWholeAgreeWithTokenize(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	msgs := []map[string]any{
		{"role": "system", "content": "Answer in one word."},
		{"role": "user", "content": []map[string]any{{"type": "text", "text": words("What now?", 30)}}},
	}
	tok := tokenize(t, c, w, map[string]any{"messages": msgs})
	st, _, raw := post(t, c, w.URL()+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 3}, map[string]string{"X-Request-Id": "c1"})
	if st != http.StatusOK {
		t.Fatalf("status %d: %s", st, raw)
	}
	whole := decode[response](t, raw)
	if whole.ID != "chatcmpl-c1-0" || whole.Object != "chat.completion" || whole.Choices[0].Message == nil ||
		whole.Choices[0].Message.Role != "assistant" || whole.Usage.PromptTokens != tok.Count {
		t.Fatalf("chat response %s; want prompt_tokens %d", raw, tok.Count)
	}

	st, _, raw = post(t, c, w.URL()+"/v1/chat/completions", map[string]any{"messages": msgs, "max_tokens": 3, "stream": true}, nil)
	if st != http.StatusOK {
		t.Fatalf("stream status %d", st)
	}
	evs := sseEvents(t, raw)
	if len(evs) != 1+3+1 {
		t.Fatalf("%d events; want role, 3 tokens, [DONE]", len(evs))
	}
	role := decode[response](t, []byte(evs[0]))
	if role.Object != "chat.completion.chunk" || role.Choices[0].Delta.Role != "assistant" {
		t.Fatalf("first chunk %s", evs[0])
	}
	var sb strings.Builder
	for _, e := range evs[1:4] {
		sb.WriteString(*decode[response](t, []byte(e)).Choices[0].Delta.Content)
	}
	if sb.String() != *whole.Choices[0].Message.Content {
		t.Fatalf("streamed %q; whole %q", sb.String(), *whole.Choices[0].Message.Content)
	}
}

func TestTokenize_BothFormsAndTokenStrs(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	tests := []struct {
		name string
		give map[string]any
		want []uint32
	}{
		{"prompt adds BOS by default", map[string]any{"prompt": "hi there"}, tokenizer.Encode(nil, "hi there", true)},
		{"prompt without special tokens", map[string]any{"prompt": "hi there", "add_special_tokens": false}, tokenizer.Encode(nil, "hi there", false)},
		{"messages add the generation prompt, no BOS", map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}}},
			tokenizer.Encode(nil, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", false)},
		{"messages without generation prompt", map[string]any{"messages": []map[string]any{{"role": "user", "content": "hi"}}, "add_generation_prompt": false},
			tokenizer.Encode(nil, "<|im_start|>user\nhi<|im_end|>\n", false)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tokenize(t, c, w, tt.give)
			if got.Count != len(tt.want) || !equalU32(got.Tokens, tt.want) || got.MaxModelLen != 4096 || got.TokenStrs != nil {
				t.Fatalf("got %+v; want tokens %v", got, tt.want)
			}
		})
	}
	withStrs := tokenize(t, c, w, map[string]any{"prompt": "a, b", "return_token_strs": true})
	if strings.Join(withStrs.TokenStrs, "|") != "<|endoftext|>|a|,| b" {
		t.Fatalf("token_strs %q", withStrs.TokenStrs)
	}
	_, _, raw := post(t, c, w.URL()+"/tokenize", map[string]any{"prompt": "x"}, nil)
	if !bytes.Contains(raw, []byte(`"token_strs":null`)) {
		t.Fatalf("body %s; want token_strs null", raw)
	}
}

func equalU32(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAPI_RejectsBadInputInVLLMErrorShape(t *testing.T) {
	w := startWorker(t, func(c *Config) { c.MaxBodyBytes = 4096 })
	c := client(t)
	long := strings.Repeat("x ", 3000)
	tests := []struct {
		name       string
		path       string
		give       string
		wantStatus int
		wantIn     string
	}{
		{"malformed JSON", "/v1/completions", `{"prompt":`, 400, "malformed JSON"},
		{"not an object", "/v1/completions", `[1,2]`, 400, "JSON object"},
		{"missing prompt", "/v1/completions", `{"max_tokens":3}`, 400, "prompt is required"},
		{"empty prompt list", "/v1/completions", `{"prompt":[]}`, 400, "cannot be empty"},
		{"mixed prompt list", "/v1/completions", `{"prompt":["a",1]}`, 400, "only strings"},
		{"token id out of vocabulary", "/v1/completions", `{"prompt":[1,2,999999]}`, 400, "out of vocabulary"},
		{"negative token id", "/v1/completions", `{"prompt":[[1,-2]]}`, 400, "out of vocabulary"},
		{"max_tokens of the wrong type", "/v1/completions", `{"prompt":"a","max_tokens":"5"}`, 400, "max_tokens"},
		{"zero max_tokens", "/v1/completions", `{"prompt":"a","max_tokens":0}`, 400, "at least 1"},
		{"n above one", "/v1/completions", `{"prompt":"a","n":2}`, 400, "n must be 1"},
		{"stream_options without stream", "/v1/completions", `{"prompt":"a","stream_options":{"include_usage":true}}`, 400, "stream is true"},
		{"unknown model", "/v1/completions", `{"prompt":"a","model":"gpt-9"}`, 404, "does not exist"},
		{"longer than max_model_len", "/v1/completions", `{"prompt":"a b c","max_tokens":5000}`, 400, "max model len"},
		{"body too large", "/v1/completions", `{"prompt":"` + long + `"}`, 413, "larger than"},
		{"kv params not an object", "/v1/completions", `{"prompt":"a","kv_transfer_params":[1]}`, 400, "kv_transfer_params"},
		{"kv params with many prompts", "/v1/completions", `{"prompt":["a","b"],"kv_transfer_params":{"do_remote_decode":true}}`, 400, "split multi-prompt"},
		{"chat without messages", "/v1/chat/completions", `{"max_tokens":3}`, 400, "messages is required"},
		{"chat message without role", "/v1/chat/completions", `{"messages":[{"content":"hi"}]}`, 400, "role is required"},
		{"chat unknown part type", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"hologram"}]}]}`, 400, "unsupported content part"},
		{"chat conflicting template switches", "/v1/chat/completions", `{"messages":[{"role":"user","content":"a"}],"add_generation_prompt":true,"continue_final_message":true}`, 400, "cannot be combined"},
		{"tokenize both forms", "/tokenize", `{"prompt":"a","messages":[{"role":"user","content":"a"}]}`, 400, "either prompt or messages"},
		{"tokenize neither form", "/tokenize", `{}`, 400, "is required"},
		{"tokenize prompt not a string", "/tokenize", `{"prompt":5}`, 400, "prompt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, hdr, raw := post(t, c, w.URL()+tt.path, tt.give, nil)
			if st != tt.wantStatus {
				t.Fatalf("status %d; want %d (%s)", st, tt.wantStatus, raw)
			}
			if hdr.Get("Content-Type") != "application/json" {
				t.Fatalf("content type %q", hdr.Get("Content-Type"))
			}
			e := decode[apiErr](t, raw)
			if e.Error.Code != tt.wantStatus || e.Error.Type == "" || !strings.Contains(e.Error.Message, tt.wantIn) {
				t.Fatalf("error %+v; want code %d and message containing %q", e.Error, tt.wantStatus, tt.wantIn)
			}
		})
	}
	if st := w.Stats(); st.Running != 0 || st.Waiting != 0 || st.BlocksInUse != 0 {
		t.Fatalf("rejected requests left state behind: %+v", st)
	}
}

func TestCompletions_MultiPromptGivesOneChoicePerPrompt(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	tests := []struct {
		name string
		give any
	}{
		{"strings", []string{"first prompt here", "second one"}},
		{"token lists", [][]int{{1, 2, 3, 4, 5}, {6, 7, 8}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, _, raw := post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": tt.give, "max_tokens": 2}, nil)
			if st != http.StatusOK {
				t.Fatalf("status %d: %s", st, raw)
			}
			r := decode[response](t, raw)
			if len(r.Choices) != 2 || r.Choices[0].Index != 0 || r.Choices[1].Index != 1 || r.Usage.CompletionTokens != 4 {
				t.Fatalf("response %s", raw)
			}
		})
	}
}

func TestCompletions_EchoPrependsThePrompt(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	_, _, raw := post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": "Hello", "max_tokens": 1, "echo": true}, nil)
	r := decode[response](t, raw)
	if !strings.HasPrefix(*r.Choices[0].Text, "Hello ") {
		t.Fatalf("text %q; want the prompt first", *r.Choices[0].Text)
	}
}

// metricLine is the Prometheus text exposition line grammar we emit.
var metricLine = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (-?[0-9.e+-]+|\+Inf|NaN)$`)

// scrape parses /metrics into "name{labels}" -> value, failing on any line
// that is not valid exposition text.
func scrape(t *testing.T, c *http.Client, w *Worker) map[string]float64 {
	t.Helper()
	st, raw := get(t, c, w.URL()+"/metrics")
	if st != http.StatusOK {
		t.Fatalf("metrics status %d", st)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		m := metricLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("unparsable metrics line %q", line)
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatalf("value in %q: %v", line, err)
		}
		out[m[1]+m[2]] = v
	}
	return out
}

// metric finds the first series of a family whose labels contain every
// given fragment.
func metric(t *testing.T, ms map[string]float64, name string, frags ...string) float64 {
	t.Helper()
	for k, v := range ms {
		if !strings.HasPrefix(k, name+"{") && k != name {
			continue
		}
		ok := true
		for _, f := range frags {
			ok = ok && strings.Contains(k, f)
		}
		if ok {
			return v
		}
	}
	t.Fatalf("no series %s with %v", name, frags)
	return 0
}

func TestMetrics_VLLMNamesAndValues(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	prompt := words("metrics", 40)
	n := tokenize(t, c, w, map[string]any{"prompt": prompt}).Count
	for range 2 {
		if st, _, raw := post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 2}, nil); st != 200 {
			t.Fatalf("status %d: %s", st, raw)
		}
	}
	ms := scrape(t, c, w)
	model := `model_name="sim-model"`
	checks := []struct {
		name  string
		frags []string
		want  float64
	}{
		{"vllm:num_requests_running", []string{model, `engine="0"`}, 0},
		{"vllm:num_requests_waiting", []string{model}, 0},
		{"vllm:kv_cache_usage_perc", []string{model}, 0},
		{"vllm:cache_config_info", []string{`block_size="16"`, `num_gpu_blocks="512"`, `enable_prefix_caching="True"`, `prefix_caching_hash_algo="sha256_cbor"`}, 1},
		{"vllm:prefix_cache_queries_total", []string{model}, float64(2 * n)},
		{"vllm:prefix_cache_hits_total", []string{model}, float64((n - 1) / 16 * 16)},
		{"vllm:request_success_total", []string{`finished_reason="length"`}, 2},
		{"vllm:time_to_first_token_seconds_count", []string{model}, 2},
		{"vllm:time_to_first_token_seconds_bucket", []string{`le="+Inf"`}, 2},
		{"vllm:e2e_request_latency_seconds_count", []string{model}, 2},
	}
	for _, ch := range checks {
		if got := metric(t, ms, ch.name, ch.frags...); got != ch.want {
			t.Fatalf("%s%v = %v; want %v", ch.name, ch.frags, got, ch.want)
		}
	}
}

func TestAdmin_HealthModelsResetAndUnknownRoutes(t *testing.T) {
	w := startWorker(t, func(c *Config) { c.LoRAs = []string{"sql-lora"} })
	c := client(t)
	if st, body := get(t, c, w.URL()+"/health"); st != 200 || len(body) != 0 {
		t.Fatalf("health %d %q; want 200 empty", st, body)
	}
	st, raw := get(t, c, w.URL()+"/v1/models")
	var models struct {
		Data []modelCard `json:"data"`
	}
	if err := json.Unmarshal(raw, &models); err != nil || st != 200 || len(models.Data) != 2 || models.Data[1].ID != "sql-lora" || *models.Data[1].Parent != "sim-model" {
		t.Fatalf("models %d %s", st, raw)
	}
	body := map[string]any{"prompt": words("reset", 40), "max_tokens": 1}
	post(t, c, w.URL()+"/v1/completions", body, nil)
	if st, _, raw := post(t, c, w.URL()+"/reset_prefix_cache", "", nil); st != 200 {
		t.Fatalf("reset %d %s", st, raw)
	}
	_, _, raw = post(t, c, w.URL()+"/v1/completions", body, nil)
	if got := decode[response](t, raw).Usage.PromptTokensDetails.CachedTokens; got != 0 {
		t.Fatalf("cached %d after reset; want 0", got)
	}
	if st, raw := get(t, c, w.URL()+"/nope"); st != 404 || decode[apiErr](t, raw).Error.Code != 404 {
		t.Fatalf("unknown route %d %s", st, raw)
	}
	if st, _ := get(t, c, w.URL()+"/v1/completions"); st != 405 {
		t.Fatalf("GET completions %d; want 405", st)
	}
}

func TestCompletions_MultiPromptStreamInterleavesChoices(t *testing.T) {
	w := startWorker(t, nil)
	c := client(t)
	st, _, raw := post(t, c, w.URL()+"/v1/completions", map[string]any{"prompt": []string{"one prompt", "another prompt here"}, "max_tokens": 3, "stream": true}, nil)
	if st != http.StatusOK {
		t.Fatalf("status %d %s", st, raw)
	}
	evs := sseEvents(t, raw)
	perChoice := map[int]int{}
	finished := map[int]bool{}
	for _, e := range evs[:len(evs)-1] {
		ch := decode[response](t, []byte(e)).Choices[0]
		if finished[ch.Index] {
			t.Fatalf("choice %d has events after its finish", ch.Index)
		}
		perChoice[ch.Index]++
		finished[ch.Index] = ch.FinishReason != nil
	}
	if perChoice[0] != 3 || perChoice[1] != 3 || !finished[0] || !finished[1] || evs[len(evs)-1] != "[DONE]" {
		t.Fatalf("events per choice %v finished %v", perChoice, finished)
	}
}

// vLLM writes a stream's first chunk (the chat role chunk) on the first
// engine output, its first token, not on admission: a proxy that reads the
// first body byte as the end of the prefill (llb's queued-prefill count)
// must see the same here. With a 3 s prefill the head arrives at once and
// the body only with the first token.
func TestChat_StreamBodyStartsWithTheFirstToken(t *testing.T) {
	w := startWorker(t, func(c *Config) {
		c.Engine.Latency.TimeScale = 1
		c.Engine.Latency.PrefillOverhead = 3 * time.Second
	})
	body, _ := json.Marshal(map[string]any{
		"messages": []map[string]any{{"role": "user", "content": "Hello?"}}, "max_tokens": 2, "stream": true,
	})
	req, err := http.NewRequest(http.MethodPost, w.URL()+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := client(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if head := time.Since(start); resp.StatusCode != http.StatusOK || head > 2*time.Second {
		t.Fatalf("status %d after %v; want the head at once", resp.StatusCode, head)
	}
	first := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	if got := time.Since(start); got < 2*time.Second {
		t.Fatalf("first body byte after %v; want it with the first token, after the 3 s prefill", got)
	}
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	evs := sseEvents(t, append(first, rest...))
	if len(evs) != 1+2+1 || decode[response](t, []byte(evs[0])).Choices[0].Delta.Role != "assistant" {
		t.Fatalf("events %q; want role, 2 tokens, [DONE]", evs)
	}
}
