package gateway

import (
	"bytes"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

// Frozen workers (SIGSTOP, a hung GPU) accept the request and never answer.
// Without timeoutMemberData a streamed decode leg waits DecodeTimeout for
// its first event and is then sent to another pair; a leg whose endpoint is
// taken out (probe, breaker) before it answered is sent elsewhere at once; a
// stream that goes silent is cut after StreamIdleTimeout (issue 13).

// frozen answers nothing until the request is cancelled.
func frozen(w http.ResponseWriter, r *http.Request, _ []byte) { <-r.Context().Done() }

func TestPD_AFrozenDecodeIsLeftAfterTheDecodeTimeoutAndTheRequestRetried(t *testing.T) {
	prefill := newFakeVLLM(t)
	stuck, live := newFakeVLLM(t), newFakeVLLM(t)
	stuck.answer = frozen
	cfg := pdPool([]netip.AddrPort{prefill.addr()}, []netip.AddrPort{stuck.addr(), live.addr()})
	cfg.Timeouts.Decode = 200 * time.Millisecond
	router := newFakeRouter(pdAllowed(cfg))
	url, _ := startGateway(t, cfg, Deps{Router: router, Metrics: NewMetrics(metrics.NewSet(), "pd")})
	start := time.Now()
	resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"p","stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("got %d %s; want 200 from the second decode", resp.StatusCode, body)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("took %s; want about the 200 ms decode bound", took)
	}
	router.checkTicketsClosed(t, 2)
	routes, outcomes, _ := router.snapshot()
	if len(routes) != 2 || routes[1].Avoid != 1<<1 {
		t.Fatalf("routes %+v; want a retry avoiding the frozen decode (bit 1)", routes)
	}
	if o := outcomes[1]; o.Leg != actors.LegDecode || o.Failure != actors.FailTimeout {
		t.Errorf("frozen decode outcome %+v; want a decode timeout (the breaker counts it)", o)
	}
	if events, err := sseEvents(t, bytes.NewReader(body)); err != nil || len(events) != 4 || events[3] != "[DONE]" {
		t.Errorf("stream %q (%v); want 3 events and [DONE]", events, err)
	}
}

func TestPD_AFrozenDecodeWithNoOtherPairIs504DecodeTimeout(t *testing.T) {
	f := newPDFleet(t, []bool{false}, func(c *rule.Compiled) { c.Timeouts.Decode = 100 * time.Millisecond })
	f.decode.answer = frozen
	resp, body := post(t, testClient(t), f.url+PathCompletions, `{"model":"m","prompt":"p","stream":true}`)
	if e := decodeError(t, body); resp.StatusCode != 504 || e.Error.Code != CodeDecodeTimeout {
		t.Fatalf("got %d %s; want 504 %s", resp.StatusCode, body, CodeDecodeTimeout)
	}
}

func TestSinglePool_ALegToAnEndpointTakenOutIsRetriedElsewhere(t *testing.T) {
	stuck, live := newFakeVLLM(t), newFakeVLLM(t)
	arrived := make(chan struct{}, 1)
	stuck.answer = func(w http.ResponseWriter, r *http.Request, b []byte) {
		arrived <- struct{}{}
		frozen(w, r, b)
	}
	cfg := singlePool(stuck.addr(), live.addr())
	router := newFakeRouter(firstAllowed(cfg))
	watch := NewEndpointWatch()
	url, _ := startGateway(t, cfg, Deps{Router: router, Watch: watch})
	type answer struct {
		status int
		body   []byte
	}
	done := make(chan answer, 1)
	go func() {
		// Not streamed: its first byte would come only with the whole
		// answer, so only the endpoint watch can end the wait.
		resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"p"}`)
		done <- answer{resp.StatusCode, body}
	}()
	<-arrived
	watch.EndpointDown(1) // another endpoint: nothing happens
	select {
	case a := <-done:
		t.Fatalf("answered %d %s before its endpoint went down", a.status, a.body)
	case <-time.After(100 * time.Millisecond):
	}
	watch.EndpointDown(0) // the probe failed: the leg is cancelled, the request retried
	a := <-done
	if a.status != 200 {
		t.Fatalf("got %d %s; want 200 from endpoint 1", a.status, a.body)
	}
	router.checkTicketsClosed(t, 2)
	routes, _, _ := router.snapshot()
	if len(routes) != 2 || routes[1].Avoid != 1 {
		t.Fatalf("routes %+v; want a retry avoiding endpoint 0", routes)
	}
}

func TestSinglePool_AStreamThatGoesSilentIsCutAfterTheIdleBound(t *testing.T) {
	be := newFakeVLLM(t)
	be.answer = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		_, _ = io.WriteString(w, "data: {\"x\":1}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // then frozen
	}
	cfg := singlePool(be.addr())
	cfg.Timeouts.StreamIdle = 150 * time.Millisecond
	cfg.MigrationLimit = 0 // otherwise the stream goes on elsewhere (migrate_test.go)
	fr := newFakeRouter(fixedRoute(decision(ladder.TierSelector, 0, -1)))
	url, _ := startGateway(t, cfg, Deps{Router: fr})
	req, _ := http.NewRequest(http.MethodPost, url+PathCompletions, strings.NewReader(`{"model":"m","prompt":"p","stream":true}`))
	start := time.Now()
	resp, err := testClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || resp.StatusCode != 200 || !strings.Contains(string(got), `{"x":1}`) {
		t.Errorf("status %d read %q err %v; want a 200 stream cut after its first event", resp.StatusCode, got, err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("cut after %s; want about the 150 ms idle bound", took)
	}
	fr.checkTicketsClosed(t, 1)
	_, outcomes, _ := fr.snapshot()
	if outcomes[0].Failure != actors.FailTimeout {
		t.Errorf("outcome %+v; want FailTimeout", outcomes[0])
	}
}

// A decode worker that froze after its response headers, before its first
// event, is a first-byte timeout too: retried on another pair.
func TestPD_ADecodeFrozenAfterItsHeadersIsRetried(t *testing.T) {
	prefill := newFakeVLLM(t)
	stuck, live := newFakeVLLM(t), newFakeVLLM(t)
	stuck.answer = func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}
	cfg := pdPool([]netip.AddrPort{prefill.addr()}, []netip.AddrPort{stuck.addr(), live.addr()})
	cfg.Timeouts.Decode = 200 * time.Millisecond
	router := newFakeRouter(pdAllowed(cfg))
	url, _ := startGateway(t, cfg, Deps{Router: router, Metrics: NewMetrics(metrics.NewSet(), "pd")})
	resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"p","stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("got %d %s; want 200 from the second decode", resp.StatusCode, body)
	}
	router.checkTicketsClosed(t, 2)
}
