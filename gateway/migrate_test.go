package gateway

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/rs/zerolog"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/internal/logfield"
	"github.com/llbproject/llb/rule"
)

// A vLLM-like streaming engine whose output can be continued: a prompt
// (or the messages) generates " t0 t1 t2 ...", and a prompt that already
// ends with " t0 ... t(k-1)" — a migration's continuation — generates from
// " tk" on. It honours max_tokens / max_completion_tokens (16 for a
// completion without), stream_options (include_usage,
// continuous_usage_stats), continue_final_message, and can die after a
// number of content events.
type contEngine struct {
	t    *testing.T
	name string
	srv  *fakeVLLM
	// dieAfter kills the connection after that many content events (<0:
	// never); hang keeps it open and silent instead. A test may change it
	// between requests while the server's goroutine of the last one is
	// still ending, hence atomic.
	dieAfter atomic.Int64
	hang     bool
	// finishThenDie sends every token and the finish chunk, then dies
	// before the usage chunk and [DONE].
	finishThenDie bool
	// tool streams a tool-call delta first.
	tool bool

	mu     sync.Mutex
	bodies []map[string]any
}

func newContEngine(t *testing.T, name string, dieAfter int) *contEngine {
	t.Helper()
	e := &contEngine{t: t, name: name, srv: newFakeVLLM(t)}
	e.dieAfter.Store(int64(dieAfter))
	e.srv.answer = e.serve
	return e
}

func (e *contEngine) addr() netip.AddrPort { return e.srv.addr() }

// got returns the bodies the engine received.
func (e *contEngine) got() []map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]map[string]any(nil), e.bodies...)
}

var doneTokensRE = regexp.MustCompile(`((?: t[0-9]+)*)$`)

func (e *contEngine) serve(w http.ResponseWriter, r *http.Request, raw []byte) {
	var b map[string]any
	if err := json.Unmarshal(raw, &b); err != nil {
		http.Error(w, err.Error(), 400)
		return
	}
	e.mu.Lock()
	e.bodies = append(e.bodies, b)
	e.mu.Unlock()
	chat := r.URL.Path == PathChatCompletions
	if kv, ok := b["kv_transfer_params"].(map[string]any); ok && kv["do_remote_decode"] == true {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"p","choices":[{"index":0,"text":"x","finish_reason":"length"}],"kv_transfer_params":{"remote_block_ids":[[1]],"remote_engine_id":"e"}}`)
		return
	}
	// What was already generated: the trailing " tK" words of the prompt
	// or of a continued final message.
	var text string
	if chat {
		msgs, _ := b["messages"].([]any)
		last, _ := msgs[len(msgs)-1].(map[string]any)
		if b["continue_final_message"] == true && last["role"] == "assistant" {
			if b["add_generation_prompt"] != false {
				http.Error(w, "continue_final_message needs add_generation_prompt false", 400)
				return
			}
			text, _ = last["content"].(string)
		}
	} else {
		text, _ = b["prompt"].(string)
	}
	done := strings.Count(doneTokensRE.FindString(text), " t")
	promptTokens := 10 + done
	maxTok := 16
	if chat {
		maxTok = 1000
	}
	for _, k := range []string{"max_tokens", "max_completion_tokens"} {
		if v, ok := b[k].(float64); ok {
			maxTok = int(v)
		}
	}
	so, _ := b["stream_options"].(map[string]any)
	usage, cont := so["include_usage"] == true, so["continuous_usage_stats"] == true
	id := fmt.Sprintf(`"cmpl-%s-%d"`, e.name, len(e.got()))
	created := 1000 + len(e.name)
	obj := "text_completion"
	if chat {
		obj = "chat.completion.chunk"
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	ev := func(choice string, produced int, withUsage bool) {
		u := ""
		if withUsage {
			u = fmt.Sprintf(`,"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}`, promptTokens, promptTokens+produced, produced)
		}
		fmt.Fprintf(w, `data: {"id":%s,"object":%q,"created":%d,"model":"m","choices":[%s]%s}`+"\n\n", id, obj, created, choice, u)
		fl.Flush()
	}
	if chat {
		ev(`{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}`, 0, cont)
	}
	if e.tool {
		ev(`{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":"}}]},"finish_reason":null}`, 0, cont)
	}
	dieAfter := int(e.dieAfter.Load())
	for i := 0; i < maxTok; i++ {
		if i == dieAfter {
			if e.hang {
				<-r.Context().Done()
			}
			panic(http.ErrAbortHandler)
		}
		piece := " t" + strconv.Itoa(done+i)
		fin := "null"
		if i == maxTok-1 {
			fin = `"length"`
		}
		if chat {
			ev(fmt.Sprintf(`{"index":0,"delta":{"content":%q},"logprobs":null,"finish_reason":%s}`, piece, fin), i+1, cont)
		} else {
			ev(fmt.Sprintf(`{"index":0,"text":%q,"logprobs":null,"finish_reason":%s}`, piece, fin), i+1, cont)
		}
	}
	if e.finishThenDie {
		panic(http.ErrAbortHandler)
	}
	if usage {
		fmt.Fprintf(w, `data: {"id":%s,"object":%q,"created":%d,"model":"m","choices":[],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d}}`+"\n\n", id, obj, created, promptTokens, promptTokens+maxTok, maxTok)
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

// migrationGateway starts a single-pool gateway over engines with a router
// that honours Avoid, and returns its URL, router and metrics.
func migrationGateway(t *testing.T, tune func(*rule.Compiled), deps Deps, engines ...*contEngine) (string, *fakeRouter, *metrics.Set) {
	t.Helper()
	var addrs []netip.AddrPort
	for _, e := range engines {
		addrs = append(addrs, e.addr())
	}
	cfg := singlePool(addrs...)
	if tune != nil {
		tune(cfg)
	}
	fr := newFakeRouter(firstAllowed(cfg))
	set := metrics.NewSet()
	deps.Router, deps.Metrics = fr, NewMetrics(set, "m")
	url, _ := startGateway(t, cfg, deps)
	return url, fr, set
}

// streamResult is what a client read from a stream.
type streamResult struct {
	events        []map[string]any // JSON events
	done          int              // [DONE] events
	err           error            // the read's error (nil: a clean end)
	text          string           // the content/text deltas joined
	roles         int              // chunks with a role
	finish        string           // the last finish_reason
	usage         map[string]any   // the final usage chunk's usage
	ids           map[string]bool
	perChunkUsage int
}

func readStream(t *testing.T, url, path, body string) streamResult {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	resp, err := testClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	res := streamResult{ids: map[string]bool{}}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		data := strings.TrimPrefix(line, "data: ")
		if data == "[DONE]" {
			res.done++
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %q: %v", data, err)
		}
		res.events = append(res.events, ev)
		res.ids[fmt.Sprint(ev["id"], "/", ev["created"], "/", ev["model"])] = true
		choices, _ := ev["choices"].([]any)
		if len(choices) == 0 {
			res.usage, _ = ev["usage"].(map[string]any)
			continue
		}
		if ev["usage"] != nil {
			res.perChunkUsage++
		}
		c := choices[0].(map[string]any)
		if d, ok := c["delta"].(map[string]any); ok {
			if d["role"] != nil {
				res.roles++
			}
			s, _ := d["content"].(string)
			res.text += s
		}
		if s, ok := c["text"].(string); ok {
			res.text += s
		}
		if f, ok := c["finish_reason"].(string); ok {
			res.finish = f
		}
	}
	res.err = sc.Err()
	return res
}

// tokens renders " t<from> ... t<to-1>".
func tokens(from, to int) string {
	var b strings.Builder
	for i := from; i < to; i++ {
		b.WriteString(" t" + strconv.Itoa(i))
	}
	return b.String()
}

func migrationCount(set *metrics.Set, outcome string) float64 {
	var b strings.Builder
	set.WritePrometheus(&b)
	re := regexp.MustCompile(`llb_migrations_total\{service="m",outcome="` + outcome + `"\} (\S+)`)
	m := re.FindStringSubmatch(b.String())
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func TestMigration_ACompletionStreamGoesOnOnAnotherEndpoint(t *testing.T) {
	a, b := newContEngine(t, "a", 2), newContEngine(t, "b", -1)
	url, fr, set := migrationGateway(t, nil, Deps{}, a, b)
	res := readStream(t, url, PathCompletions, `{"model":"m","prompt":"p","max_tokens":6,"stream":true}`)
	if res.err != nil || res.done != 1 || res.text != tokens(0, 6) || res.finish != "length" {
		t.Fatalf("client read text %q finish %q [DONE]×%d err %v; want %q, length, one [DONE], a clean end", res.text, res.finish, res.done, res.err, tokens(0, 6))
	}
	if len(res.ids) != 1 || !res.ids["cmpl-a-1/1001/m"] {
		t.Errorf("ids %v; want every event with the first leg's id and created", res.ids)
	}
	if res.perChunkUsage != 0 || res.usage != nil {
		t.Errorf("%d chunks with usage, final usage %v; the client asked for none", res.perChunkUsage, res.usage)
	}
	got := b.got()
	if len(got) != 1 {
		t.Fatalf("b got %d requests; want the continuation", len(got))
	}
	if got[0]["prompt"] != "p"+tokens(0, 2) || got[0]["max_tokens"] != 4.0 {
		t.Errorf("continuation prompt %q max_tokens %v; want %q and 4", got[0]["prompt"], got[0]["max_tokens"], "p"+tokens(0, 2))
	}
	so, _ := got[0]["stream_options"].(map[string]any)
	if so["include_usage"] != true || so["continuous_usage_stats"] != true {
		t.Errorf("continuation stream_options %v; want usage in every chunk", so)
	}
	if so, _ := a.got()[0]["stream_options"].(map[string]any); so["continuous_usage_stats"] != true {
		t.Errorf("first leg stream_options %v; want usage in every chunk (max_tokens must be reduced)", so)
	}
	fr.checkTicketsClosed(t, 2)
	_, outcomes, _ := fr.snapshot()
	if len(outcomes) != 2 || outcomes[0].Failure != actors.FailReset || outcomes[1].Failure != actors.FailNone {
		t.Errorf("outcomes %+v; want the broken leg reset, then the continuation ok", outcomes)
	}
	if n := migrationCount(set, "migrated"); n != 1 {
		t.Errorf("llb_migrations_total{outcome=migrated} = %v; want 1", n)
	}
}

func TestMigration_AChatStreamContinuesTheAssistantMessageAndSumsUsage(t *testing.T) {
	a, b := newContEngine(t, "a", 3), newContEngine(t, "b", -1)
	url, _, _ := migrationGateway(t, nil, Deps{}, a, b)
	res := readStream(t, url, PathChatCompletions,
		`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":7,"stream":true,"stream_options":{"include_usage":true}}`)
	if res.err != nil || res.done != 1 || res.text != tokens(0, 7) || res.roles != 1 {
		t.Fatalf("client read text %q, %d role chunks, [DONE]×%d, err %v; want %q, one role chunk, one [DONE]", res.text, res.roles, res.done, res.err, tokens(0, 7))
	}
	if res.perChunkUsage != 0 {
		t.Errorf("%d chunks with usage; the client asked for the final chunk only", res.perChunkUsage)
	}
	if res.usage["completion_tokens"] != 7.0 || res.usage["prompt_tokens"] != 10.0 || res.usage["total_tokens"] != 17.0 {
		t.Errorf("final usage %v; want both legs: prompt 10, completion 7, total 17", res.usage)
	}
	if len(res.ids) != 1 {
		t.Errorf("ids %v; want one", res.ids)
	}
	got := b.got()[0]
	msgs, _ := got["messages"].([]any)
	last, _ := msgs[len(msgs)-1].(map[string]any)
	if len(msgs) != 2 || last["role"] != "assistant" || last["content"] != tokens(0, 3) ||
		got["continue_final_message"] != true || got["add_generation_prompt"] != false || got["max_completion_tokens"] != 4.0 {
		t.Errorf("continuation %v; want the partial assistant message continued, max_completion_tokens 4", got)
	}
}

func TestMigration_AClientsContinuedMessageGetsTheTextAppended(t *testing.T) {
	a, b := newContEngine(t, "a", 2), newContEngine(t, "b", -1)
	url, _, _ := migrationGateway(t, nil, Deps{}, a, b)
	res := readStream(t, url, PathChatCompletions,
		`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure:"}],"continue_final_message":true,"add_generation_prompt":false,"max_tokens":5,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}}`)
	if res.err != nil || res.text != tokens(0, 5) {
		t.Fatalf("client read %q err %v; want %q", res.text, res.err, tokens(0, 5))
	}
	if res.perChunkUsage == 0 || res.usage["completion_tokens"] != 5.0 {
		t.Errorf("per-chunk usage on %d chunks, final %v; want usage on every chunk and 5 tokens in all", res.perChunkUsage, res.usage)
	}
	last := b.got()[0]["messages"].([]any)[1].(map[string]any)
	if last["content"] != "Sure:"+tokens(0, 2) {
		t.Errorf("continued message %q; want the text appended to the client's", last["content"])
	}
}

func TestMigration_WhatCannotBeContinuedIsCutAndCounted(t *testing.T) {
	tests := []struct {
		name, path, body, why string
		tool                  bool
	}{
		{"n", PathCompletions, `{"prompt":"p","max_tokens":6,"n":2,"stream":true}`, "unsupported", false},
		{"logprobs", PathCompletions, `{"prompt":"p","max_tokens":6,"logprobs":1,"stream":true}`, "unsupported", false},
		{"echo", PathCompletions, `{"prompt":"p","max_tokens":6,"echo":true,"stream":true}`, "unsupported", false},
		{"json schema", PathChatCompletions, `{"messages":[{"role":"user","content":"q"}],"response_format":{"type":"json_schema","json_schema":{}},"stream":true}`, "unsupported", false},
		{"guided", PathCompletions, `{"prompt":"p","max_tokens":6,"guided_regex":"a+","stream":true}`, "unsupported", false},
		{"token prompt", PathCompletions, `{"prompt":[1,2,3],"max_tokens":6,"stream":true}`, "unsupported", false},
		{"tool call", PathChatCompletions, `{"messages":[{"role":"user","content":"q"}],"tools":[],"stream":true}`, "unsupported", true},
		{"best_of", PathCompletions, `{"prompt":"p","max_tokens":6,"best_of":2,"stream":true}`, "unsupported", false},
		{"beam search", PathCompletions, `{"prompt":"p","max_tokens":6,"use_beam_search":true,"stream":true}`, "unsupported", false},
		{"prompt_logprobs", PathChatCompletions, `{"messages":[{"role":"user","content":"q"}],"prompt_logprobs":1,"stream":true}`, "unsupported", false},
		{"n chat", PathChatCompletions, `{"messages":[{"role":"user","content":"q"}],"n":3,"stream":true}`, "unsupported", false},
		{"json object", PathChatCompletions, `{"messages":[{"role":"user","content":"q"}],"response_format":{"type":"json_object"},"stream":true}`, "unsupported", false},
		{"guided json", PathChatCompletions, `{"messages":[{"role":"user","content":"q"}],"guided_json":{"type":"object"},"stream":true}`, "unsupported", false},
		{"structured_outputs", PathChatCompletions, `{"messages":[{"role":"user","content":"q"}],"structured_outputs":{"choice":["a","b"]},"stream":true}`, "unsupported", false},
		{"forced tool", PathChatCompletions, `{"messages":[{"role":"user","content":"q"}],"tool_choice":"required","stream":true}`, "unsupported", false},
		{"sglang regex", PathCompletions, `{"prompt":"p","max_tokens":6,"regex":"a+","stream":true}`, "unsupported", false},
		{"sglang ebnf", PathChatCompletions, `{"messages":[{"role":"user","content":"q"}],"ebnf":"root ::= \"a\"","stream":true}`, "unsupported", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := newContEngine(t, "a", 2), newContEngine(t, "b", -1)
			a.tool = tt.tool
			url, fr, set := migrationGateway(t, nil, Deps{}, a, b)
			req, _ := http.NewRequest(http.MethodPost, url+tt.path, strings.NewReader(tt.body))
			resp, err := testClient(t).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil || strings.Contains(string(got), "[DONE]") {
				t.Errorf("read %q, err %v; want the stream cut", got, err)
			}
			if len(b.got()) != 0 {
				t.Errorf("the request went on to b: %v", b.got())
			}
			fr.checkTicketsClosed(t, 1)
			if n := migrationCount(set, tt.why); n != 1 {
				t.Errorf("llb_migrations_total{outcome=%s} = %v; want 1", tt.why, n)
			}
		})
	}
}

// On a TensorRT-LLM rule a chat stream cannot be continued (trtllm-serve
// has no continue_final_message and refuses unknown fields): it is cut and
// counted as "engine" without a continuation being sent; a completion moves
// with only the fields trtllm-serve declares.
func TestMigration_TheEngineDecidesWhatMoves(t *testing.T) {
	t.Run("trtllm chat is cut", func(t *testing.T) {
		a, b := newContEngine(t, "a", 2), newContEngine(t, "b", -1)
		var buf safeBuffer
		url, fr, set := migrationGateway(t, func(c *rule.Compiled) { c.Engine = rule.EngineTRTLLM }, Deps{Log: zerolog.New(&buf)}, a, b)
		res := readStream(t, url, PathChatCompletions, `{"messages":[{"role":"user","content":"q"}],"max_tokens":6,"stream":true}`)
		if res.err == nil || res.done != 0 {
			t.Errorf("read %q, [DONE]×%d, err %v; want the stream cut", res.text, res.done, res.err)
		}
		if len(b.got()) != 0 {
			t.Errorf("a continuation was sent: %v", b.got())
		}
		if _, ok := a.got()[0]["stream_options"]; ok {
			t.Errorf("the first leg asked for usage: %v", a.got()[0])
		}
		fr.checkTicketsClosed(t, 1)
		if n := migrationCount(set, "unsupported"); n != 1 {
			t.Errorf("llb_migrations_total{outcome=unsupported} = %v; want 1", n)
		}
		var cut string
		for _, l := range buf.lines(t, 1) {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil && m["message"] == "request" {
				cut, _ = m[logfield.MigrationCut].(string)
			}
		}
		if cut != "engine" {
			t.Errorf("migration_cut %q; want engine", cut)
		}
	})
	t.Run("trtllm completion moves", func(t *testing.T) {
		a, b := newContEngine(t, "a", 2), newContEngine(t, "b", -1)
		url, _, set := migrationGateway(t, func(c *rule.Compiled) { c.Engine = rule.EngineTRTLLM }, Deps{}, a, b)
		res := readStream(t, url, PathCompletions, `{"prompt":"p","max_tokens":5,"stream":true}`)
		if res.err != nil || res.text != tokens(0, 5) || res.done != 1 {
			t.Fatalf("read %q err %v; want %q and [DONE]", res.text, res.err, tokens(0, 5))
		}
		got := b.got()
		if len(got) != 1 || got[0]["prompt"] != "p"+tokens(0, 2) || got[0]["max_tokens"] != 3.0 {
			t.Fatalf("continuation %v; want the extended prompt and 3 tokens", got)
		}
		for k := range got[0] {
			if !strings.Contains(" model prompt max_tokens stream stream_options ", " "+k+" ") {
				t.Errorf("the continuation carries %q, which trtllm-serve refuses", k)
			}
		}
		if migrationCount(set, "migrated") != 1 {
			t.Errorf("migrated = %v; want 1", migrationCount(set, "migrated"))
		}
	})
}

func TestMigration_TheLimitBoundsTheMoves(t *testing.T) {
	a, b, c := newContEngine(t, "a", 2), newContEngine(t, "b", 1), newContEngine(t, "c", -1)
	url, fr, set := migrationGateway(t, func(cfg *rule.Compiled) { cfg.MigrationLimit = 1 }, Deps{}, a, b, c)
	req, _ := http.NewRequest(http.MethodPost, url+PathCompletions, strings.NewReader(`{"prompt":"p","max_tokens":6,"stream":true}`))
	resp, err := testClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || !strings.Contains(string(got), `" t2"`) || strings.Contains(string(got), `" t3"`) {
		t.Errorf("read %q, err %v; want t0..t2 then a cut", got, err)
	}
	if len(c.got()) != 0 {
		t.Error("a second migration was made")
	}
	fr.checkTicketsClosed(t, 2)
	if migrationCount(set, "migrated") != 1 || migrationCount(set, "limit") != 1 {
		t.Errorf("migrated %v, limit %v; want 1 and 1", migrationCount(set, "migrated"), migrationCount(set, "limit"))
	}
}

func TestMigration_AnAnswerThatSentNothingIsSentAgain(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprint("stream=", stream), func(t *testing.T) {
			a := newContEngine(t, "a", 0)
			b := newFakeVLLM(t)
			addrs := []netip.AddrPort{a.addr(), b.addr()}
			cfg := singlePool(addrs...)
			fr := newFakeRouter(firstAllowed(cfg))
			set := metrics.NewSet()
			url, _ := startGateway(t, cfg, Deps{Router: fr, Metrics: NewMetrics(set, "m")})
			resp, body := post(t, testClient(t), url+PathCompletions, fmt.Sprintf(`{"prompt":"p","max_tokens":4,"stream":%v}`, stream))
			if resp.StatusCode != 200 {
				t.Fatalf("status %d %s; want 200 from the second endpoint", resp.StatusCode, body)
			}
			if migrationCount(set, "resent") != 1 {
				t.Errorf("resent = %v; want 1", migrationCount(set, "resent"))
			}
			fr.checkTicketsClosed(t, 2)
		})
	}
}

func TestMigration_AnEndpointTakenOutOrSilentMovesItsStreams(t *testing.T) {
	for _, how := range []string{"endpoint down", "idle bound"} {
		t.Run(how, func(t *testing.T) {
			a, b := newContEngine(t, "a", 2), newContEngine(t, "b", -1)
			a.hang = true
			watch := NewEndpointWatch()
			url, _, set := migrationGateway(t, func(c *rule.Compiled) {
				if how == "idle bound" {
					c.Timeouts.StreamIdle = 200 * time.Millisecond
				}
			}, Deps{Watch: watch}, a, b)
			if how == "endpoint down" {
				go func() {
					for len(a.got()) == 0 {
						time.Sleep(10 * time.Millisecond)
					}
					time.Sleep(200 * time.Millisecond)
					watch.EndpointDown(0)
				}()
			}
			start := time.Now()
			res := readStream(t, url, PathCompletions, `{"prompt":"p","max_tokens":5,"stream":true}`)
			if res.err != nil || res.text != tokens(0, 5) || res.done != 1 {
				t.Fatalf("read %q err %v; want %q and [DONE]", res.text, res.err, tokens(0, 5))
			}
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("took %s", took)
			}
			if migrationCount(set, "migrated") != 1 {
				t.Errorf("migrated = %v; want 1", migrationCount(set, "migrated"))
			}
		})
	}
}

func TestMigration_AStreamBrokenAfterItsLastTokenIsEndedByLLB(t *testing.T) {
	a, b := newContEngine(t, "a", -1), newContEngine(t, "b", -1)
	a.finishThenDie = true
	url, _, _ := migrationGateway(t, nil, Deps{}, a, b)
	res := readStream(t, url, PathChatCompletions,
		`{"messages":[{"role":"user","content":"q"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`)
	if res.err != nil || res.done != 1 || res.text != tokens(0, 3) || res.usage["completion_tokens"] != 3.0 {
		t.Fatalf("read %q usage %v [DONE]×%d err %v; want the text, the usage chunk and [DONE]", res.text, res.usage, res.done, res.err)
	}
	if len(b.got()) != 0 {
		t.Error("a finished stream was sent on")
	}
}

func TestMigration_APDDecodeIsReplacedByANewPair(t *testing.T) {
	p1, p2 := newContEngine(t, "p1", -1), newContEngine(t, "p2", -1)
	d1, d2 := newContEngine(t, "d1", 2), newContEngine(t, "d2", -1)
	cfg := pdPool([]netip.AddrPort{p1.addr(), p2.addr()}, []netip.AddrPort{d1.addr(), d2.addr()})
	fr := newFakeRouter(pdAllowed(cfg))
	set := metrics.NewSet()
	url, _ := startGateway(t, cfg, Deps{Router: fr, Metrics: NewMetrics(set, "m")})
	res := readStream(t, url, PathCompletions, `{"prompt":"p","max_tokens":6,"stream":true}`)
	if res.err != nil || res.text != tokens(0, 6) || res.done != 1 {
		t.Fatalf("read %q err %v; want %q", res.text, res.err, tokens(0, 6))
	}
	if len(d2.got()) != 1 || d2.got()[0]["prompt"] != "p"+tokens(0, 2) {
		t.Errorf("second decode got %v; want the extended prompt", d2.got())
	}
	// The new pair's prefill saw the extended prompt too (avoid masks the
	// dead decode only: the first prefill may serve again).
	var prefills []string
	for _, p := range []*contEngine{p1, p2} {
		for _, g := range p.got() {
			prefills = append(prefills, fmt.Sprint(g["prompt"]))
		}
	}
	if len(prefills) != 2 || prefills[len(prefills)-1] != "p"+tokens(0, 2) && prefills[0] != "p"+tokens(0, 2) {
		t.Errorf("prefill prompts %q; want the original then the extended one", prefills)
	}
	fr.checkTicketsClosed(t, 2)
}

// A stream's events cut anywhere across reads are tracked, edited and
// spliced exactly as whole ones.
func TestSSETrack_EventsCutAcrossReadsAreHandledWhole(t *testing.T) {
	leg1 := `data: {"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":{"prompt_tokens":4,"total_tokens":4,"completion_tokens":0}}` + "\n\n" +
		`data: {"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" x\"y"},"finish_reason":null}],"usage":{"prompt_tokens":4,"total_tokens":5,"completion_tokens":1}}` + "\n\n"
	leg2 := `data: {"id":"b","object":"chat.completion.chunk","created":2,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":{"prompt_tokens":5,"total_tokens":5,"completion_tokens":0}}` + "\n\n" +
		`data: {"id":"b","object":"chat.completion.chunk","created":2,"model":"m","choices":[{"index":0,"delta":{"content":" z"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"total_tokens":6,"completion_tokens":1}}` + "\n\n" +
		`data: {"id":"b","object":"chat.completion.chunk","created":2,"model":"m","choices":[],"usage":{"prompt_tokens":5,"total_tokens":6,"completion_tokens":1}}` + "\n\n" +
		"data: [DONE]\n\n"
	want := `data: {"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n" +
		`data: {"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" x\"y"},"finish_reason":null}]}` + "\n\n" +
		`data: {"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" z"},"finish_reason":"stop"}]}` + "\n\n" +
		`data: {"id":"a","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":4,"total_tokens":6,"completion_tokens":2}}` + "\n\n" +
		"data: [DONE]\n\n"
	for _, step := range []int{1, 2, 3, 7, 64, 1 << 20} {
		var m migration
		m.chat, m.includeUsage, m.maxTokens, m.maxCompletion, m.minTokens = true, true, -1, -1, -1
		m.sse.begin(&m)
		m.sse.strip = true
		var got []byte
		feed := func(stream string) {
			buf := make([]byte, 0, 1<<16)
			for i := 0; i < len(stream); i += step {
				buf = append(buf, stream[i:min(i+step, len(stream))]...)
				out, used := m.sse.feed(buf)
				got = append(got, out...)
				buf = append(buf[:0], buf[used:]...)
			}
			if len(buf) != 0 {
				t.Fatalf("step %d: %q left over", step, buf)
			}
		}
		feed(leg1)
		if string(m.sse.text) != ` x\"y` || m.sse.legCount() != 1 || m.sse.promptTokens != 4 {
			t.Fatalf("step %d: text %q count %d prompt %d; want ` x\\\"y`, 1, 4", step, m.sse.text, m.sse.legCount(), m.sse.promptTokens)
		}
		m.sse.nextLeg()
		feed(leg2)
		if string(got) != want {
			t.Errorf("step %d: client got\n%s\nwant\n%s", step, got, want)
		}
		if !m.sse.done || !m.sse.finished || m.sse.refusal != refNone {
			t.Errorf("step %d: done %v finished %v refusal %v", step, m.sse.done, m.sse.finished, m.sse.refusal)
		}
	}
}

func TestContinuation_BodiesExtendThePromptAndReduceTheBounds(t *testing.T) {
	// absent marks a member the continuation must not carry.
	const absent = "<absent>"
	tests := []struct {
		name, engine, body string
		chat               bool
		text               string
		produced           int64
		want               map[string]string
	}{
		{"completion", "", `{"model":"m","prompt":"a \"q\"","max_tokens":10,"min_tokens":4,"stream":true,"stream_options":{"include_usage":false}}`, false, ` b\n`, 3,
			map[string]string{"prompt": `"a \"q\" b\n"`, "max_tokens": "7", "min_tokens": "1", "stream_options": usageOptions, "stream": "true"}},
		{"completion default bound", "", `{"prompt":["x"],"stream":true}`, false, ` y`, 5,
			map[string]string{"prompt": `"x y"`, "max_tokens": "11"}},
		{"chat", "", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":9,"max_completion_tokens":8,"stream":true}`, true, `ok`, 2,
			map[string]string{"messages": `[{"role":"user","content":"hi"},{"role":"assistant","content":"ok"}]`, "max_tokens": "7", "max_completion_tokens": "6",
				"continue_final_message": "true", "add_generation_prompt": "false"}},
		{"chat continued", "", `{"messages":[{"role":"assistant","content":"So"}],"continue_final_message":true,"add_generation_prompt":false,"stream":true}`, true, ` far`, 2,
			map[string]string{"messages": `[{"role":"assistant","content":"So far"}]`, "continue_final_message": "true", "add_generation_prompt": "false"}},
		// SGLang's chat request has continue_final_message and no
		// add_generation_prompt; its completions default to 16 tokens.
		{"sglang chat", rule.EngineSGLang, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":9,"stream":true}`, true, `ok`, 2,
			map[string]string{"max_tokens": "7", "continue_final_message": "true", "add_generation_prompt": absent}},
		{"sglang completion default bound", rule.EngineSGLang, `{"prompt":"x","stream":true}`, false, ` y`, 5,
			map[string]string{"prompt": `"x y"`, "max_tokens": "11"}},
		// trtllm-serve refuses unknown fields: a completion's continuation
		// carries only fields its CompletionRequest declares.
		{"trtllm completion", rule.EngineTRTLLM, `{"prompt":"x","max_tokens":10,"stream":true}`, false, ` y`, 4,
			map[string]string{"prompt": `"x y"`, "max_tokens": "6", "continue_final_message": absent, "add_generation_prompt": absent, "min_tokens": absent}},
		// llama.cpp has no default bound on a completion and prefills a
		// final assistant message itself.
		{"llamacpp completion unbounded", rule.EngineLlamaCPP, `{"prompt":"x","stream":true}`, false, ` y`, 5,
			map[string]string{"prompt": `"x y"`, "max_tokens": absent}},
		{"llamacpp chat", rule.EngineLlamaCPP, `{"messages":[{"role":"user","content":"hi"}],"stream":true}`, true, `ok`, 2,
			map[string]string{"messages": `[{"role":"user","content":"hi"},{"role":"assistant","content":"ok"}]`, "add_generation_prompt": absent}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := preparedForMigration(t, tt.engine, tt.body, tt.chat)
			m := &x.mig
			if !m.track {
				t.Fatalf("not tracked (why %v)", m.why)
			}
			m.sse.text, m.sse.legUsage, m.sse.legTokens = []byte(tt.text), true, tt.produced
			body, why := m.continuation(x.h.engine)
			if why != refNone {
				t.Fatalf("refused: %v", why)
			}
			got := members(t, string(body))
			for k, v := range tt.want {
				g, ok := got[k]
				if !ok {
					g = absent
				}
				if g != v {
					t.Errorf("%s = %s; want %s (body %s)", k, g, v, body)
				}
			}
		})
	}
}

// A request whose continuation the rule's engine would refuse or not
// honour is not followed: it is cut when its worker dies, as "engine".
func TestContinuation_WhatTheEngineCannotTakeIsNotFollowed(t *testing.T) {
	tests := []struct {
		engine, body string
		chat         bool
		want         migrateRefusal
	}{
		{rule.EngineTRTLLM, `{"messages":[{"role":"user","content":"hi"}],"max_tokens":9,"stream":true}`, true, refEngine},
		{rule.EngineTRTLLM, `{"prompt":"x","stream":true}`, false, refEngine},
		{rule.EngineTRTLLM, `{"prompt":"x","max_tokens":4,"stream":true}`, false, refNone},
		{rule.EngineVLLM, `{"messages":[{"role":"user","content":"hi"}],"stream":true}`, true, refNone},
		{rule.EngineSGLang, `{"messages":[{"role":"user","content":"hi"}],"stream":true}`, true, refNone},
		{rule.EngineLlamaCPP, `{"prompt":"x","stream":true}`, false, refNone},
	}
	for _, tt := range tests {
		t.Run(tt.engine+"/"+tt.body, func(t *testing.T) {
			x := preparedForMigration(t, tt.engine, tt.body, tt.chat)
			if x.mig.why != tt.want || x.mig.track != (tt.want == refNone) {
				t.Errorf("why %v, tracked %v; want %v", x.mig.why, x.mig.track, tt.want)
			}
			if tt.want != refNone && string(x.req.Body) != tt.body {
				t.Errorf("first leg body %s; want the client's untouched", x.req.Body)
			}
		})
	}
}

func TestMigration_TheAccessLogCountsMovesAndNamesCuts(t *testing.T) {
	a, b := newContEngine(t, "a", 2), newContEngine(t, "b", -1)
	var buf safeBuffer
	url, fr, _ := migrationGateway(t, nil, Deps{Log: zerolog.New(&buf)}, a, b)
	res := readStream(t, url, PathCompletions, `{"prompt":"p","max_tokens":4,"stream":true}`)
	if res.err != nil || res.text != tokens(0, 4) {
		t.Fatalf("read %q err %v", res.text, res.err)
	}
	a.dieAfter.Store(1)
	b.dieAfter.Store(1)
	req, _ := http.NewRequest(http.MethodPost, url+PathCompletions, strings.NewReader(`{"prompt":"p","max_tokens":4,"echo":true,"stream":true}`))
	if resp, err := testClient(t).Do(req); err == nil {
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	fr.checkTicketsClosed(t, 3)
	var access []map[string]any
	for _, l := range buf.lines(t, 2) {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) == nil && m["message"] == "request" {
			access = append(access, m)
		}
	}
	if len(access) != 2 || access[0][logfield.Migrations] != 1.0 || access[1][logfield.MigrationCut] != "echo" {
		t.Errorf("access lines %v; want migrations 1, then migration_cut echo", access)
	}
}

func TestSSETrack_ALongAnswerIsNoLongerFollowed(t *testing.T) {
	var m migration
	m.maxTokens, m.maxCompletion, m.minTokens = -1, -1, -1
	m.sse.begin(&m)
	ev := []byte(`data: {"id":"a","created":1,"model":"m","choices":[{"index":0,"text":"` + strings.Repeat("x", 4096) + `"}]}` + "\n\n")
	for i := 0; i < maxTrackedText/4096+1; i++ {
		if out, used := m.sse.feed(append([]byte(nil), ev...)); used != len(ev) || len(out) != len(ev) {
			t.Fatalf("event %d: used %d, out %d; want it relayed as is", i, used, len(out))
		}
	}
	if m.sse.refusal != refTooLong || m.sse.text != nil || !m.sse.idle() {
		t.Errorf("refusal %v, %d bytes kept, idle %v; want too_long, nothing kept, idle", m.sse.refusal, len(m.sse.text), m.sse.idle())
	}
}

// preparedForMigration is an exchange of body (a chat or a completion) on a
// rule of engine, its migration prepared.
func preparedForMigration(t *testing.T, engine, body string, chat bool) *exchange {
	t.Helper()
	kind := KindCompletion
	if chat {
		kind = KindChat
	}
	req, err := ParseRequest(kind, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	x := &exchange{h: &Handler{migrationLimit: 3, engine: engineRulesFor(engine)}, req: *req}
	x.prepareMigration()
	return x
}
