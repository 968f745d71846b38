package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// vLLM's other APIs under a SIGKILLed worker: Responses and Anthropic
// Messages streams, embeddings and reranking keep flowing through llbd while
// the worker holding a stored Responses chain dies and comes back empty. A
// request answers in full or fails cleanly (an error status, or a stream cut
// without its closing event); once the dead worker is excluded every request
// succeeds; the chain's next turn, while its holder is down and after it came
// back with its memory gone, is answered as vLLM answers a response it does
// not know (404), never with a hang or a gateway error.

// apiCall is one request of the mixed load: its path, body and the text a
// complete answer holds (for a stream, its closing event).
type apiCall struct{ path, body, done string }

var chaosAPICalls = []apiCall{
	{"/v1/responses", `{"model":"sim-model","input":"chaos","max_output_tokens":8,"stream":true,"store":false}`, "event: response.completed"},
	{"/v1/messages", `{"model":"sim-model","max_tokens":8,"stream":true,"messages":[{"role":"user","content":"chaos"}]}`, "event: message_stop"},
	{"/v1/embeddings", `{"model":"sim-model","input":["a","b"]}`, `"object":"embedding"`},
	{"/v1/rerank", `{"model":"sim-model","query":"q","documents":["a","b"]}`, `"relevance_score"`},
	{"/v1/responses", `{"model":"sim-model","input":"chaos","max_output_tokens":4,"store":false}`, `"status":"completed"`},
}

func TestChaos_VLLMsOtherAPIsSurviveAKilledWorker(t *testing.T) {
	f := startPDFleet(t, fleetSpec{single: 3, timeScale: 0.5})
	client := &http.Client{Timeout: 30 * time.Second}
	call := func(c apiCall) (int, string, string) {
		res, err := client.Post(f.vip+c.path, "application/json", strings.NewReader(c.body))
		if err != nil {
			return 0, err.Error(), ""
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b), res.Header.Get("X-Llb-Route")
	}
	// A stored chain of three turns, and its holder.
	prev, holder := "", -1
	for turn := range 3 {
		body := fmt.Sprintf(`{"model":"sim-model","input":"turn %d","max_output_tokens":2%s}`, turn, prevField(prev))
		code, out, route := call(apiCall{path: "/v1/responses", body: body})
		if code != 200 {
			t.Fatalf("turn %d: %d %s", turn, code, out)
		}
		ep := routeEndpoint(t, route)
		if holder >= 0 && ep != holder {
			t.Fatalf("turn %d on %d; the chain is held by %d", turn, ep, holder)
		}
		holder, prev = ep, responseID(t, out)
	}

	// The mixed load, four clients, until stop.
	var stop atomic.Bool
	var killedAt atomic.Int64
	var mu sync.Mutex
	var ok, clean, bad, afterExclusion int
	var excludedAt atomic.Int64
	var wg sync.WaitGroup
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := c; !stop.Load(); i++ {
				ac := chaosAPICalls[i%len(chaosAPICalls)]
				sent := time.Now().UnixNano()
				code, out, _ := call(ac)
				mu.Lock()
				switch {
				case code == 200 && strings.Contains(out, ac.done):
					ok++
				case code == 200 && strings.HasPrefix(ac.done, "event: ") && killedAt.Load() != 0:
					clean++ // a stream cut by the kill, without its closing event
				case code >= 400 && strings.Contains(out, `"error"`) && killedAt.Load() != 0:
					clean++
				default:
					bad++
					t.Errorf("%s: %d %.300s", ac.path, code, out)
				}
				if x := excludedAt.Load(); x != 0 && sent > x && !(code == 200 && strings.Contains(out, ac.done)) {
					afterExclusion++
					t.Errorf("%s sent after the dead worker was excluded: %d %.300s", ac.path, code, out)
				}
				mu.Unlock()
			}
		}()
	}
	time.Sleep(time.Second)
	w := f.worker(holder)
	killedAt.Store(time.Now().UnixNano())
	w.kill()
	f.waitEndpoints("the killed holder excluded", 10*time.Second, func(eps []endpointState) bool { return eps[holder].State != "active" })
	excludedAt.Store(time.Now().UnixNano())
	time.Sleep(2 * time.Second)

	// The chain's next turn while its holder is down: the pin went with
	// the endpoint, no other worker holds the response, and the one the
	// turn reaches answers as vLLM does.
	code, out, route := call(apiCall{path: "/v1/responses", body: fmt.Sprintf(`{"model":"sim-model","input":"turn 3","max_output_tokens":2%s}`, prevField(prev))})
	if code != http.StatusNotFound || !strings.Contains(out, "not found") || routeEndpoint(t, route) == holder {
		t.Errorf("the chain's turn with its holder down: %d %s (route %s); want vLLM's 404 from a live worker", code, out, route)
	}

	w.start()
	f.waitEndpoints("the holder back", 15*time.Second, func(eps []endpointState) bool { return eps[holder].State == "active" })
	time.Sleep(time.Second)
	stop.Store(true)
	wg.Wait()

	// Back, but its memory is gone: the response is unknown everywhere,
	// and the answer is vLLM's.
	code, out, _ = call(apiCall{path: "/v1/responses", body: fmt.Sprintf(`{"model":"sim-model","input":"turn 4","max_output_tokens":2%s}`, prevField(prev))})
	if code != http.StatusNotFound || !strings.Contains(out, "not found") {
		t.Errorf("the chain's turn after its holder restarted: %d %s; want vLLM's 404", code, out)
	}
	t.Logf("mixed load: %d complete, %d failed cleanly around the kill, %d bad, %d failures after the exclusion", ok, clean, bad, afterExclusion)
	if ok < 20 {
		t.Errorf("only %d requests completed", ok)
	}
}

func prevField(id string) string {
	if id == "" {
		return ""
	}
	return fmt.Sprintf(`,"previous_response_id":%q`, id)
}

// routeEndpoint is X-Llb-Route's endpoint.
func routeEndpoint(t *testing.T, route string) int {
	t.Helper()
	h := http.Header{}
	h.Set("X-Llb-Route", route)
	_, ep, _ := routeOf(t, h)
	return ep
}

// responseID is a Responses answer's id.
func responseID(t *testing.T, out string) string {
	t.Helper()
	i := strings.Index(out, `"id":"resp_`)
	if i < 0 {
		t.Fatalf("no response id in %s", out)
	}
	return out[i+6 : i+6+len("resp_")+32]
}
