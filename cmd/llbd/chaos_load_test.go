package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Chaos load: client populations, and the classification of every answer
// into one outcome, so that a test can count them and assert that none hung.

// Outcomes of one client request. Those in defects must never happen.
const (
	outOK = "ok" // 2xx, complete (a stream ended with [DONE] after every token)
	// A stream that had sent bytes and was cut: the client saw a broken
	// stream (no [DONE]), which is what must happen when its worker dies.
	outStreamCut = "stream_cut"
	// A non-streaming 2xx whose body was cut.
	outBodyCut = "body_cut"
	// The connection was refused (nothing listening: a stopped daemon).
	outRefused = "refused"
	// The connection closed or reset before any response byte.
	outClosed = "closed_before_response"
	// The client's timeout fired: neither a response nor a close came
	// within the configured bounds.
	outHung = "hung"
	// A stream that ended with [DONE] without all its tokens: a fake end.
	outFakeDone = "fake_done"
	// A stream that ended cleanly (EOF) without [DONE]: a client cannot tell
	// it from a complete one.
	outCleanEOF = "stream_eof_without_done"
	// A 2xx body that does not parse or lacks its tokens.
	outBadBody = "bad_body"
)

// defects are outcomes no chaos may cause.
var defects = []string{outHung, outFakeDone, outCleanEOF, outBadBody}

// tally counts outcomes; safe for concurrent use.
type tally struct {
	mu      sync.Mutex
	sent    int
	out     map[string]int
	detail  map[string]string // first example per outcome
	retried int               // 2xx answers after at least one re-route
	tiers   map[string]int    // routing tier of 2xx answers
	// streaming counts the streams under way (at least one event received)
	// per decode endpoint address.
	streaming map[string]int
}

func newTally() *tally {
	return &tally{out: map[string]int{}, detail: map[string]string{}, tiers: map[string]int{}, streaming: map[string]int{}}
}

// streamingOn is how many streams served by decode endpoint addr are under
// way: they received at least one event and have not ended.
func (t *tally) streamingOn(addr string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.streaming[addr]
}

// streamStarted records a stream under way on the decode endpoint its
// route header names; the returned func records its end.
func (t *tally) streamStarted(h http.Header) func() {
	addr := decodeAddrRE.FindStringSubmatch(h.Get("X-Llb-Route"))
	if t == nil || addr == nil {
		return func() {}
	}
	t.mu.Lock()
	t.streaming[addr[1]]++
	t.mu.Unlock()
	return func() {
		t.mu.Lock()
		t.streaming[addr[1]]--
		t.mu.Unlock()
	}
}

var decodeAddrRE = regexp.MustCompile(`decode_addr=(\S+)`)

func (t *tally) add(outcome, detail string, h http.Header) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent++
	t.out[outcome]++
	if _, ok := t.detail[outcome]; !ok {
		t.detail[outcome] = detail
	}
	if outcome == outOK && h != nil {
		route := h.Get("X-Llb-Route")
		if strings.Contains(route, "retries=") && !strings.Contains(route, "retries=0") {
			t.retried++
		}
		if m := routeRE.FindStringSubmatch(route); m != nil {
			t.tiers[m[1]]++
		}
	}
}

// get returns the count of one outcome.
func (t *tally) get(outcome string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.out[outcome]
}

// tier returns how many 2xx answers the given tier routed ("1.5", "2", ...).
func (t *tally) tier(name string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tiers[name]
}

// retriedOK is how many 2xx answers needed a re-route first.
func (t *tally) retriedOK() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.retried
}

// merge adds o's counts to t (o must be idle).
func (t *tally) merge(o *tally) {
	o.mu.Lock()
	defer o.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent += o.sent
	t.retried += o.retried
	for k, v := range o.out {
		t.out[k] += v
		if _, ok := t.detail[k]; !ok {
			t.detail[k] = o.detail[k]
		}
	}
	for k, v := range o.tiers {
		t.tiers[k] += v
	}
}

// total is the number of requests sent.
func (t *tally) total() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sent
}

// String is the report line: sent, then every outcome.
func (t *tally) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := make([]string, 0, len(t.out))
	for k := range t.out {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	fmt.Fprintf(&b, "sent=%d", t.sent)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%d", k, t.out[k])
	}
	fmt.Fprintf(&b, " hung=%d retried_ok=%d tiers=%v", t.out[outHung], t.retried, t.tiers)
	return b.String()
}

// check fails the test on any defect and on any outcome outside allowed,
// and checks that every request was accounted for.
func (t *tally) check(tb testing.TB, allowed ...string) {
	tb.Helper()
	t.mu.Lock()
	defer t.mu.Unlock()
	ok := map[string]bool{}
	for _, a := range allowed {
		ok[a] = true
	}
	n := 0
	for k, v := range t.out {
		n += v
		if !ok[k] {
			tb.Errorf("%d requests ended %s (e.g. %s); allowed: %v", v, k, t.detail[k], allowed)
		}
	}
	for _, d := range defects {
		if t.out[d] != 0 && ok[d] {
			tb.Errorf("%d requests ended %s (e.g. %s)", t.out[d], d, t.detail[d])
		}
	}
	if n != t.sent {
		tb.Errorf("outcomes %d for %d requests sent", n, t.sent)
	}
}

// loadSpec shapes a client population.
type loadSpec struct {
	clients int
	// maxTokens per request; streams must deliver exactly that many events.
	maxTokens int
	// stream makes every other request stream (false: none stream).
	stream bool
	// sessions sends X-Conversation-Id on every third request (Tier 0).
	sessions bool
	// hungAfter is the client's bound: past it a request counts as hung.
	// It must exceed every configured llbd timeout a request can wait out.
	hungAfter time.Duration
}

// chaosPrefixes are shared system prompts, long enough (several 16-token
// blocks) for Tier 1.5 to score them.
var chaosPrefixes = func() []string {
	out := make([]string, 4)
	for i := range out {
		out[i] = strings.Repeat(fmt.Sprintf("System prompt %d of the chaos suite: answer briefly and plainly. ", i), 8)
	}
	return out
}()

// loadClient is an HTTP client for one load run.
func loadClient(clients int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: clients, DisableCompression: true, IdleConnTimeout: 30 * time.Second,
	}}
}

// runLoad runs spec.clients sequential clients against base until stop is
// closed, then waits for every request in flight to end, and returns the
// tally.
func runLoad(base string, spec loadSpec, stop <-chan struct{}) *tally {
	return runLoadInto(base, spec, stop, newTally())
}

// runLoadInto is runLoad counting into t (which the caller may read while
// the load runs).
func runLoadInto(base string, spec loadSpec, stop <-chan struct{}, t *tally) *tally {
	c := loadClient(spec.clients)
	defer c.CloseIdleConnections()
	var wg sync.WaitGroup
	for i := 0; i < spec.clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				oneRequest(c, base, spec, i*1_000_000+n, t)
			}
		}()
	}
	wg.Wait()
	return t
}

// oneRequest sends request number n and records its outcome.
func oneRequest(c *http.Client, base string, spec loadSpec, n int, t *tally) {
	stream := spec.stream && n%2 == 0
	prompt := fmt.Sprintf("%s Question %d: what is %d plus %d?", chaosPrefixes[n%len(chaosPrefixes)], n, n, n+1)
	body, _ := json.Marshal(map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": spec.maxTokens, "stream": stream})
	ctx, cancel := context.WithTimeout(context.Background(), spec.hungAfter)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if spec.sessions && n%3 == 0 {
		req.Header.Set("X-Conversation-Id", "chaos-"+strconv.Itoa(n%17))
	}
	outcome, detail, h := classify(c, req, stream, spec.maxTokens, t)
	t.add(outcome, detail, h)
}

// ask sends one completion request and classifies its answer.
func ask(c *http.Client, base, prompt string, maxTokens int, stream bool, hungAfter time.Duration) (outcome, detail string, h http.Header) {
	body, _ := json.Marshal(map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": maxTokens, "stream": stream})
	ctx, cancel := context.WithTimeout(context.Background(), hungAfter)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return classify(c, req, stream, maxTokens, nil)
}

// cancelableRequest is a request with its timeout's cancel func.
type cancelableRequest struct {
	*http.Request
	cancel context.CancelFunc
}

// streamRequest builds a streaming completion request bounded like the
// load's (25 s: past it, the request hung).
func streamRequest(t *testing.T, base, prompt string, maxTokens int) cancelableRequest {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"model": "sim-model", "prompt": prompt, "max_tokens": maxTokens, "stream": true})
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", bytes.NewReader(body))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	return cancelableRequest{req, cancel}
}

// classify sends req and reads the whole answer; live, when not nil,
// tracks the stream while it is under way.
func classify(c *http.Client, req *http.Request, stream bool, maxTokens int, live *tally) (outcome, detail string, h http.Header) {
	ctx := req.Context()
	res, err := c.Do(req)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return outHung, err.Error(), nil
		case errorsIsRefused(err):
			return outRefused, err.Error(), nil
		}
		return outClosed, err.Error(), nil
	}
	defer res.Body.Close()
	h = res.Header
	if res.StatusCode/100 != 2 {
		b, err := io.ReadAll(res.Body)
		if err != nil {
			if ctx.Err() != nil {
				return outHung, "error body: " + err.Error(), h
			}
			return fmt.Sprintf("http_%d_cut", res.StatusCode), err.Error(), h
		}
		var e struct {
			Error struct {
				Code string `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		return fmt.Sprintf("http_%d_%s", res.StatusCode, e.Error.Code), strings.TrimSpace(string(b)), h
	}
	if stream {
		sc := bufio.NewScanner(res.Body)
		events, done := 0, false
		ended := func() {}
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "data: [DONE]"):
				done = true
			case strings.HasPrefix(line, "data: {"):
				events++
				if events == 1 {
					ended = live.streamStarted(h)
				}
			}
		}
		ended()
		err := sc.Err()
		switch {
		case ctx.Err() != nil:
			return outHung, fmt.Sprintf("stream after %d events: %v", events, err), h
		case done && events == maxTokens && err == nil:
			return outOK, "", h
		case done:
			return outFakeDone, fmt.Sprintf("[DONE] after %d of %d events (err %v)", events, maxTokens, err), h
		case err != nil:
			return outStreamCut, fmt.Sprintf("after %d events: %v", events, err), h
		}
		return outCleanEOF, fmt.Sprintf("clean EOF after %d events", events), h
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		if ctx.Err() != nil {
			return outHung, "body: " + err.Error(), h
		}
		return outBodyCut, err.Error(), h
	}
	var v struct {
		Usage struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(b, &v); err != nil || v.Usage.CompletionTokens != maxTokens {
		return outBadBody, fmt.Sprintf("%v: %.200s", err, b), h
	}
	return outOK, "", h
}

// errorsIsRefused reports a connection refused by the peer.
func errorsIsRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
