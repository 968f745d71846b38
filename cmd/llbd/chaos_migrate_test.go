package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/llbproject/llb/simulate/worker"
)

// Request migration (issue 28) against worker processes: streams under
// way when one worker is SIGKILLed and another SIGSTOPped go on on the
// survivors, and each client reads one whole, well-formed stream — one
// role chunk (chat), its full token count, a finish_reason, exactly one
// [DONE], one id — whose text is exactly what an undisturbed worker
// generates for the same request (the simulated workers continue a prompt
// extended with their own output where it stopped). Streams that cannot
// be continued faithfully (echo, structured output) are cut and counted.
// The short run is part of make test; LLB_CHAOS_LONG=1 (make chaos) runs
// 200 streams per scenario.

// migrationLoad shapes one run.
type migrationLoad struct {
	streams     int // streams that must survive (but chats on trtllm)
	unsupported int // streams that cannot be continued
	maxTokens   int
	// engine is the rule's engine ("" is vllm): on trtllm a chat cannot
	// be continued (trtllm-serve has no continue_final_message and
	// refuses unknown fields), so its chats are cut like unsupported ones.
	engine string
}

// continuable reports whether stream i of the load can be continued.
func (l migrationLoad) continuable(i int, path string) bool {
	return i < l.streams && !(l.engine == "trtllm" && strings.Contains(path, "chat"))
}

// migStream is what one client read.
type migStream struct {
	chat, unsupported bool
	body              map[string]any
	text              string
	events            int // chunks with a token
	roles             int
	done              int
	finish            string
	ids               map[string]bool
	err               error
	status            int
	firstAddr         string // the endpoint that answered first (X-Llb-Route)
	usage             map[string]any
	ended             time.Time // when the client read the end of the body
}

// deathGrace is how long after a worker's death bytes it had already sent
// may still reach a client: a stream that ended within it finished on that
// worker before the death could touch it.
const deathGrace = time.Second

// migrationRequest builds stream i's body: chat and completions
// alternate; an unsupported one asks for one of the things that cannot be
// continued, in turn (completions: echo, best_of, logprobs, and on vLLM a
// guided regex; chat: a JSON schema or a JSON object).
func migrationRequest(i, maxTokens int, unsupported bool, engine string) (path string, body map[string]any) {
	prompt := fmt.Sprintf("%s Migration question %d: count from %d to %d.", chaosPrefixes[i%len(chaosPrefixes)], i, i, i+maxTokens)
	if i%2 == 1 {
		body = map[string]any{"model": "sim-model", "messages": []any{map[string]any{"role": "user", "content": prompt}},
			"max_tokens": maxTokens, "stream": true, "stream_options": map[string]any{"include_usage": true}}
		if unsupported {
			body["response_format"] = []map[string]any{
				{"type": "json_schema", "json_schema": map[string]any{"name": "x", "schema": map[string]any{}}},
				{"type": "json_object"},
			}[(i/2)%2]
		}
		return "/v1/chat/completions", body
	}
	body = map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": maxTokens, "stream": true}
	if unsupported {
		kinds := []func(){func() { body["echo"] = true }, func() { body["best_of"] = 2 }, func() { body["logprobs"] = 1 }}
		if engine == "" || engine == "vllm" {
			kinds = append(kinds, func() { body["guided_regex"] = "[a-z ]+" })
		}
		kinds[(i/2)%len(kinds)]()
	}
	return "/v1/completions", body
}

// readMigStream sends one streamed request and reads it whole; started
// is called after its third token event.
func readMigStream(c *http.Client, base, path string, body map[string]any, addrRE *regexp.Regexp, started func()) migStream {
	s := migStream{chat: strings.Contains(path, "chat"), body: body, ids: map[string]bool{}}
	raw, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	res, err := c.Do(req)
	if err != nil {
		s.err = err
		started()
		return s
	}
	defer res.Body.Close()
	s.status = res.StatusCode
	if m := addrRE.FindStringSubmatch(res.Header.Get("X-Llb-Route")); m != nil {
		s.firstAddr = m[1]
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	signalled := false
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			s.done++
			continue
		}
		var ev struct {
			ID      string         `json:"id"`
			Created int64          `json:"created"`
			Model   string         `json:"model"`
			Usage   map[string]any `json:"usage"`
			Choices []struct {
				Text  *string `json:"text"`
				Delta *struct {
					Role    *string `json:"role"`
					Content *string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			s.err = fmt.Errorf("event %q: %w", data, err)
			break
		}
		s.ids[fmt.Sprintf("%s/%d/%s", ev.ID, ev.Created, ev.Model)] = true
		if len(ev.Choices) == 0 {
			s.usage = ev.Usage
			continue
		}
		ch := ev.Choices[0]
		piece := ""
		switch {
		case ch.Text != nil:
			piece = *ch.Text
		case ch.Delta != nil && ch.Delta.Content != nil:
			piece = *ch.Delta.Content
		}
		if ch.Delta != nil && ch.Delta.Role != nil {
			s.roles++
		}
		if piece != "" {
			s.text += piece
			s.events++
		}
		if ch.FinishReason != nil {
			s.finish = *ch.FinishReason
		}
		if s.events == 3 && !signalled {
			signalled = true
			started()
		}
	}
	if !signalled {
		started()
	}
	if s.err == nil {
		s.err = sc.Err()
	}
	s.ended = time.Now()
	return s
}

// prefillAddrRE finds a single pool's answering endpoint in X-Llb-Route.
var prefillAddrRE = regexp.MustCompile(`prefill_addr=(\S+)`)

// expectedText asks the reference worker (undisturbed, the same model and
// tokenizer) for the whole answer to body.
func expectedText(t *testing.T, ref *worker.Worker, path string, body map[string]any) string {
	t.Helper()
	b := map[string]any{}
	for k, v := range body {
		b[k] = v
	}
	delete(b, "stream")
	delete(b, "stream_options")
	for _, k := range []string{"echo", "response_format", "best_of", "logprobs", "guided_regex"} {
		delete(b, k)
	}
	raw, _ := json.Marshal(b)
	res, err := http.Post(ref.URL()+path, "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	var v struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(out, &v); err != nil || len(v.Choices) == 0 {
		t.Fatalf("reference answer %s: %v", out, err)
	}
	return v.Choices[0].Text + v.Choices[0].Message.Content
}

// runMigrationChaos starts the load on f, SIGKILLs worker kill and
// SIGSTOPs worker stop once every stream is under way, and checks every
// stream; addrRE finds the answering endpoint in X-Llb-Route.
func runMigrationChaos(t *testing.T, f *pdFleet, load migrationLoad, kill, stop int, addrRE *regexp.Regexp) {
	t.Helper()
	refCfg := worker.DefaultConfig()
	refCfg.Name, refCfg.IP, refCfg.HTTPPort = "reference", f.net.ip(250), chaosHTTPPort
	refCfg.Engine.Latency.TimeScale = 0.01
	ref := startWorker(t, refCfg)

	total := load.streams + load.unsupported
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: total, DisableCompression: true}}
	defer c.CloseIdleConnections()
	streams := make([]migStream, total)
	var wg sync.WaitGroup
	var under atomic.Int32
	for i := range total {
		wg.Add(1)
		go func() {
			defer wg.Done()
			path, body := migrationRequest(i, load.maxTokens, i >= load.streams, load.engine)
			streams[i] = readMigStream(c, f.vip, path, body, addrRE, func() { under.Add(1) })
			streams[i].unsupported = !load.continuable(i, path)
		}()
	}
	waitUntil(t, "every stream under way", 60*time.Second, func() bool { return int(under.Load()) == total })
	killed, stopped := f.worker(kill), f.worker(stop)
	killed.kill()
	stopped.signal(syscall.SIGSTOP)
	t.Cleanup(func() { stopped.signal(syscall.SIGCONT) })
	frozenAt := time.Now()
	wg.Wait()
	t.Logf("every stream ended %s after the kill and the freeze", time.Since(frozenAt).Round(time.Millisecond))
	stopped.signal(syscall.SIGCONT)

	dead := map[string]bool{killed.addr(): true, stopped.addr(): true}
	var moved, cut, unsupportedOnDead, before int
	for i, s := range streams {
		path, _ := migrationRequest(i, load.maxTokens, i >= load.streams, load.engine)
		// A stream that ended whole within deathGrace of the kill and the
		// freeze had its answer before they touched it (a loaded machine
		// can take that long to get every stream under way).
		finishedBefore := s.err == nil && s.done == 1 && s.ended.Before(frozenAt.Add(deathGrace))
		onDead := dead[s.firstAddr] && !finishedBefore
		if finishedBefore {
			before++
		}
		if s.unsupported {
			if !onDead {
				continue
			}
			unsupportedOnDead++
			if s.err == nil || s.done != 0 {
				t.Errorf("stream %d (cannot be continued) on a dead worker: err %v, [DONE]×%d; want it cut", i, s.err, s.done)
			} else {
				cut++
			}
			continue
		}
		if onDead {
			moved++
		}
		want := expectedText(t, ref, path, s.body)
		switch {
		case s.err != nil || s.status != http.StatusOK:
			t.Errorf("stream %d (first on %s): status %d err %v after %d tokens", i, s.firstAddr, s.status, s.err, s.events)
		case s.events != load.maxTokens || s.finish == "" || s.done != 1 || len(s.ids) != 1:
			t.Errorf("stream %d (first on %s): %d tokens, finish %q, [DONE]×%d, ids %v; want %d tokens, a finish, one [DONE], one id",
				i, s.firstAddr, s.events, s.finish, s.done, s.ids, load.maxTokens)
		case s.chat && s.roles != 1:
			t.Errorf("stream %d: %d role chunks; want one", i, s.roles)
		case s.text != want:
			t.Errorf("stream %d (first on %s): text\n%q\nwant\n%q", i, s.firstAddr, s.text, want)
		case s.chat && (s.usage == nil || s.usage["completion_tokens"] != float64(load.maxTokens)):
			t.Errorf("stream %d: final usage %v; want %d completion tokens over every leg", i, s.usage, load.maxTokens)
		}
	}
	if moved == 0 {
		t.Errorf("no stream was on the killed or the frozen worker")
	}
	m := f.metrics()
	migrated, unsupported := m.sum("llb_migrations_total", `outcome="migrated"`), m.sum("llb_migrations_total", `outcome="unsupported"`)
	t.Logf("%d streams (%d finished before the kill), %d under way on the dead workers moved, %d migrations; %d that could not be continued were on them, %d cut, counted %v",
		total, before, moved, int(migrated), unsupportedOnDead, cut, unsupported)
	if int(migrated) < moved {
		t.Errorf("llb_migrations_total{outcome=migrated} = %v; want at least the %d streams moved", migrated, moved)
	}
	if int(unsupported) != cut {
		t.Errorf("llb_migrations_total{outcome=unsupported} = %v; want the %d streams cut", unsupported, cut)
	}
}

// migrationTimeScale slows the workers (a token every 60 ms) so that every
// stream is still under way when the last one starts, even on a loaded
// machine where starting them all takes more than a second.
const migrationTimeScale = 5

// migrationEnv bounds a silent stream at 10 s (the probe excludes a frozen
// worker within about 3 s first).
var migrationEnv = []string{"LLB_PD_IDLE_TIMEOUT_SEC=10", "LOXILB_KV_COLDSTART_SEED_N=0"}

func TestChaos_StreamsSurviveAKilledAndAFrozenWorker(t *testing.T) {
	f := startPDFleet(t, fleetSpec{single: 4, timeScale: migrationTimeScale, env: migrationEnv,
		rule: map[string]any{"max_stream_duration_sec": 120}})
	runMigrationChaos(t, f, migrationLoad{streams: soak(24, 200), unsupported: soak(8, 24), maxTokens: soak(48, 96)}, 0, 1, prefillAddrRE)
}

func TestChaos_PDStreamsSurviveAKilledAndAFrozenDecode(t *testing.T) {
	f := startPDFleet(t, fleetSpec{prefill: 2, decode: 3, timeScale: migrationTimeScale, env: migrationEnv,
		rule: map[string]any{"max_stream_duration_sec": 120}})
	runMigrationChaos(t, f, migrationLoad{streams: soak(24, 200), unsupported: soak(8, 24), maxTokens: soak(48, 96)}, 2, 3, decodeAddrRE)
}

// The same on SGLang's and TensorRT-LLM's P/D: a stream whose decode
// worker dies or freezes goes on on another pair, both legs again in the
// engine's protocol (a fresh bootstrap room; a fresh context leg), but
// TensorRT-LLM's chats, which it cannot continue, are cut and counted.
func TestChaos_EnginePDStreamsSurviveAKilledAndAFrozenDecode(t *testing.T) {
	for _, engine := range []string{"sglang", "trtllm"} {
		t.Run(engine, func(t *testing.T) {
			f := startPDFleet(t, fleetSpec{prefill: 2, decode: 3, timeScale: migrationTimeScale, env: migrationEnv, dialect: engine,
				rule: map[string]any{"max_stream_duration_sec": 120}})
			runMigrationChaos(t, f, migrationLoad{streams: soak(24, 200), unsupported: soak(8, 24), maxTokens: soak(48, 96), engine: engine}, 2, 3, decodeAddrRE)
		})
	}
}

// The engine decides what can move: on TensorRT-LLM workers (which refuse
// unknown fields) the completions survive the kill and the freeze with
// continuations carrying only fields trtllm-serve declares, and the chats,
// which it cannot continue, are cut and counted; on SGLang workers both
// survive.
func TestChaos_EngineStreamsSurviveAKilledAndAFrozenWorker(t *testing.T) {
	for _, engine := range []string{"trtllm", "sglang"} {
		t.Run(engine, func(t *testing.T) {
			f := startPDFleet(t, fleetSpec{single: 4, timeScale: migrationTimeScale, env: migrationEnv, dialect: engine,
				rule: map[string]any{"max_stream_duration_sec": 120}})
			runMigrationChaos(t, f, migrationLoad{streams: soak(24, 200), unsupported: soak(8, 24), maxTokens: soak(48, 96), engine: engine}, 0, 1, prefillAddrRE)
		})
	}
}
