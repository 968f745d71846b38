package gateway

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/netip"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
)

// pdFleet is one P/D rule in front of fake prefill and decode workers.
type pdFleet struct {
	prefill []*fakeVLLM
	decode  *fakeVLLM
	cfg     *rule.Compiled
	router  *fakeRouter
	url     string
	set     *metrics.Set
}

// newPDFleet starts real prefill/decode backends (closed ports where
// closedPrefill says so) and a gateway whose router picks the first
// non-avoided prefill and the decode endpoint.
func newPDFleet(t *testing.T, closedPrefill []bool, tune func(*rule.Compiled)) *pdFleet {
	t.Helper()
	f := &pdFleet{decode: newFakeVLLM(t), set: metrics.NewSet()}
	var paddrs []netip.AddrPort
	for _, closed := range closedPrefill {
		if closed {
			f.prefill = append(f.prefill, nil)
			paddrs = append(paddrs, closedAddr(t))
			continue
		}
		p := newFakeVLLM(t)
		f.prefill = append(f.prefill, p)
		paddrs = append(paddrs, p.addr())
	}
	f.cfg = pdPool(paddrs, []netip.AddrPort{f.decode.addr()})
	if tune != nil {
		tune(f.cfg)
	}
	f.router = newFakeRouter(pdAllowed(f.cfg))
	f.url, _ = startGateway(t, f.cfg, Deps{Router: f.router, Metrics: NewMetrics(f.set, "pd")})
	return f
}

// pdAllowed is firstAllowed with the ladder's P/D rule: when no decode
// endpoint is left, the pool is unavailable (no rescue endpoint here).
func pdAllowed(cfg *rule.Compiled) func(*actors.RouteRequest, int) (actors.Route, error) {
	first := firstAllowed(cfg)
	return func(rr *actors.RouteRequest, n int) (actors.Route, error) {
		rt, err := first(rr, n)
		if err == nil && rt.Decision.Available() && rt.Decision.Decode < 0 {
			rt.Decision = decision(ladder.TierNone, -1, -1)
			rt.Decision.Unavailable = ladder.ReasonPDPoolUnavailable
		}
		return rt, err
	}
}

func (f *pdFleet) metric(t *testing.T, name string) string {
	t.Helper()
	var b bytes.Buffer
	f.set.WritePrometheus(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			return line[strings.LastIndexByte(line, ' ')+1:]
		}
	}
	return ""
}

func TestPD_NonStreamingRunsBothLegs(t *testing.T) {
	f := newPDFleet(t, []bool{false}, nil)
	body := `{"model":"m","prompt":"hello","max_tokens":20,"max_completion_tokens":20,"min_tokens":2,"temperature":0.5,"stream":false}`
	resp, got := post(t, testClient(t), f.url+PathCompletions, body, "Authorization", "Bearer k")
	if resp.StatusCode != 200 || !strings.Contains(string(got), `"text":"hello"`) {
		t.Fatalf("got %d %s; want the decode's answer", resp.StatusCode, got)
	}
	p, d := f.prefill[0].requests(), f.decode.requests()
	if len(p) != 1 || len(d) != 1 {
		t.Fatalf("prefill got %d, decode %d requests; want 1 each", len(p), len(d))
	}

	// Prefill leg: the contract rewrite.
	pm := members(t, string(p[0].Body))
	wantP := map[string]string{"model": `"m"`, "prompt": `"hello"`, "temperature": "0.5",
		"kv_transfer_params": prefillKVParams, "stream": "false", "max_tokens": "1", "max_completion_tokens": "1"}
	if !mapsEqual(pm, wantP) {
		t.Errorf("prefill body members = %v; want %v", pm, wantP)
	}
	// Decode leg: the original body plus exactly the prefill's params.
	dm := members(t, string(d[0].Body))
	if dm["kv_transfer_params"] != f.prefill[0].kvParams {
		t.Errorf("decode kv_transfer_params = %s; want the prefill's %s", dm["kv_transfer_params"], f.prefill[0].kvParams)
	}
	delete(dm, "kv_transfer_params")
	if !mapsEqual(dm, members(t, body)) {
		t.Errorf("decode body members = %v; want the client's %s", dm, body)
	}
	// One request id, LoxiLB's form, on both legs.
	id := p[0].Header.Get(HeaderRequestID)
	re := regexp.MustCompile(`^___prefill_addr_` + regexp.QuoteMeta(f.prefill[0].addr().String()) + `___decode_addr_` + regexp.QuoteMeta(f.decode.addr().String()) + `___[0-9a-f-]{36}___$`)
	if !re.MatchString(id) || d[0].Header.Get(HeaderRequestID) != id {
		t.Errorf("request ids prefill %q decode %q; want one id matching %s", id, d[0].Header.Get(HeaderRequestID), re)
	}
	if p[0].Header.Get("Authorization") != "Bearer k" || d[0].Header.Get("Authorization") != "Bearer k" {
		t.Error("Authorization was not sent on both legs")
	}
	wantRoute := "prefill_addr=" + f.prefill[0].addr().String() + " decode_addr=" + f.decode.addr().String() + " retries=0"
	if r := resp.Header.Get(HeaderRoute); !strings.HasPrefix(r, "tier=2 prefill=0 decode=1") || !strings.HasSuffix(r, wantRoute) {
		t.Errorf("%s = %q", HeaderRoute, r)
	}

	f.router.checkTicketsClosed(t, 1)
	_, outcomes, fin := f.router.snapshot()
	if len(outcomes) != 2 || outcomes[0].Leg != actors.LegPrefill || outcomes[0].Status != 200 ||
		outcomes[1].Leg != actors.LegDecode || outcomes[1].Status != 200 || outcomes[1].Failure != actors.FailNone {
		t.Errorf("outcomes = %+v; want prefill 200 then decode 200", outcomes)
	}
	if !fin[1].OK {
		t.Error("ticket not finished OK")
	}
	for name, want := range map[string]string{"loxilb_ai_pd_requests_total": "1", "loxilb_ai_pd_kv_params_found_total": "1",
		"loxilb_ai_pd_kv_params_missing_total": "0", "loxilb_ai_pd_prefill_duration_seconds_count": "1", "loxilb_ai_pd_decode_ttft_seconds_count": "1"} {
		if got := f.metric(t, name); got != want {
			t.Errorf("%s = %q; want %s", name, got, want)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

func TestPD_StreamsTheDecodeAsIs(t *testing.T) {
	// Without migration: a migratable stream asks for usage in every
	// chunk (migrate_test.go).
	f := newPDFleet(t, []bool{false}, func(c *rule.Compiled) { c.MigrationLimit = 0 })
	f.decode.events = 5
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":64}`
	req, _ := http.NewRequest(http.MethodPost, f.url+PathChatCompletions, strings.NewReader(body))
	resp, err := testClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	events, err := sseEvents(t, resp.Body)
	resp.Body.Close()
	if err != nil || len(events) != 6 || events[5] != "[DONE]" {
		t.Errorf("events = %q, %v; want 5 chunks and [DONE]", events, err)
	}
	pm := members(t, string(f.prefill[0].requests()[0].Body))
	if _, ok := pm["stream_options"]; ok || pm["stream"] != "false" || pm["max_completion_tokens"] != "1" {
		t.Errorf("prefill body %v; want stream false, no stream_options, max_completion_tokens 1", pm)
	}
	dm := members(t, string(f.decode.requests()[0].Body))
	if dm["stream"] != "true" || dm["stream_options"] != `{"include_usage":true}` || dm["max_completion_tokens"] != "64" {
		t.Errorf("decode body %v; want the client's stream, stream_options and max_completion_tokens", dm)
	}
	if f.prefill[0].requests()[0].Path != PathChatCompletions || f.decode.requests()[0].Path != PathChatCompletions {
		t.Error("legs did not use the client's path")
	}
	f.router.checkTicketsClosed(t, 1)
}

func TestPD_DecodeWithoutParamsWhenPrefillReturnsNone(t *testing.T) {
	f := newPDFleet(t, []bool{false}, nil)
	f.prefill[0].kvParams = ""
	resp, _ := post(t, testClient(t), f.url+PathCompletions, `{"model":"m","prompt":"p","kv_transfer_params":{"client":"stale"}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if dm := members(t, string(f.decode.requests()[0].Body)); dm["kv_transfer_params"] != "" {
		t.Errorf("decode body kept kv_transfer_params %s; want it removed", dm["kv_transfer_params"])
	}
	f.router.checkTicketsClosed(t, 1)
	if got := f.metric(t, "loxilb_ai_pd_kv_params_missing_total"); got != "1" {
		t.Errorf("missing counter = %q; want 1", got)
	}
}

func TestPD_PrefillFailureRetriesOnceOnAnotherPrefill(t *testing.T) {
	tests := []struct {
		name        string
		closed      []bool
		wantStatus  int
		wantTickets int
	}{
		{"second prefill serves", []bool{true, false}, 200, 2},
		{"only one retry", []bool{true, true, false}, 502, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newPDFleet(t, tt.closed, nil)
			resp, body := post(t, testClient(t), f.url+PathCompletions, `{"model":"m","prompt":"p"}`)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("got %d %s; want %d", resp.StatusCode, body, tt.wantStatus)
			}
			f.router.checkTicketsClosed(t, tt.wantTickets)
			routes, outcomes, _ := f.router.snapshot()
			if routes[1].Avoid != 1 {
				t.Errorf("retry Avoid = %b; want the dead prefill (bit 0)", routes[1].Avoid)
			}
			if outcomes[0].Leg != actors.LegPrefill || outcomes[0].Failure != actors.FailConnect {
				t.Errorf("first outcome %+v; want a prefill connect failure", outcomes[0])
			}
			if tt.wantStatus == 502 {
				if e := decodeError(t, body); e.Error.Code != CodeBackendUnreachable {
					t.Errorf("code %s; want %s", e.Error.Code, CodeBackendUnreachable)
				}
				if n := len(f.decode.requests()); n != 0 {
					t.Errorf("decode got %d requests after prefill failures", n)
				}
				return
			}
			d := f.decode.requests()[0]
			if id := d.Header.Get(HeaderRequestID); !strings.Contains(id, "___prefill_addr_"+f.prefill[1].addr().String()+"___") {
				t.Errorf("decode request id %q does not name the retried prefill", id)
			}
			if got := f.metric(t, "loxilb_pd_connect_failover_total"); got != "1" {
				t.Errorf("failover counter = %q; want 1", got)
			}
		})
	}
}

func TestPD_PrefillErrorStatusIsRelayed(t *testing.T) {
	f := newPDFleet(t, []bool{false}, nil)
	f.prefill[0].answer = func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"message":"prompt too long","type":"BadRequestError","param":null,"code":400}}`)
	}
	resp, body := post(t, testClient(t), f.url+PathCompletions, `{"model":"m","prompt":"p"}`)
	if resp.StatusCode != 400 || !strings.Contains(string(body), "prompt too long") || resp.Header.Get(HeaderRoute) == "" {
		t.Errorf("got %d %s; want the prefill's 400 relayed with a route header", resp.StatusCode, body)
	}
	if n := len(f.decode.requests()); n != 0 {
		t.Errorf("decode got %d requests", n)
	}
	f.router.checkTicketsClosed(t, 1)
	_, outcomes, fin := f.router.snapshot()
	if len(outcomes) != 1 || outcomes[0].Status != 400 || fin[1].OK {
		t.Errorf("outcomes %+v finish %+v; want one prefill 400, not OK", outcomes, fin[1])
	}
}

func TestPD_PrefillTimeoutIs504(t *testing.T) {
	f := newPDFleet(t, []bool{false}, func(c *rule.Compiled) { c.Timeouts.Prefill = 50 * time.Millisecond })
	f.prefill[0].answer = func(_ http.ResponseWriter, r *http.Request, _ []byte) { <-r.Context().Done() }
	resp, body := post(t, testClient(t), f.url+PathCompletions, `{"model":"m","prompt":"p"}`)
	if e := decodeError(t, body); resp.StatusCode != 504 || e.Error.Code != CodePrefillTimeout {
		t.Errorf("got %d %s; want 504 %s", resp.StatusCode, e.Error.Code, CodePrefillTimeout)
	}
	f.router.checkTicketsClosed(t, 1)
	_, outcomes, _ := f.router.snapshot()
	if len(outcomes) != 1 || outcomes[0].Failure != actors.FailTimeout {
		t.Errorf("outcomes = %+v; want a prefill timeout", outcomes)
	}
}

func TestPD_DecodeDeathBeforeFirstByteIs502(t *testing.T) {
	tests := []struct {
		name         string
		answer       func(http.ResponseWriter, *http.Request, []byte)
		closedDecode bool
		wantZeroEOF  string
	}{
		{"clean empty 200", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(200)
			w.(http.Flusher).Flush()
		}, false, "1"},
		{"reset after headers", abortAfter("", true), false, "0"},
		{"reset before headers", abortAfter("", false), false, "0"},
		// A refused connection with no other decode endpoint: the retry
		// finds no pair, and the client gets the decode's failure.
		{"refused, no other decode", nil, true, "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newPDFleet(t, []bool{false}, nil)
			f.decode.answer = tt.answer
			if tt.closedDecode {
				f.decode.srv.Close()
			}
			resp, body := post(t, testClient(t), f.url+PathCompletions, `{"model":"m","prompt":"p","stream":true}`)
			if e := decodeError(t, body); resp.StatusCode != 502 || e.Error.Code != CodeDecodeDied {
				t.Errorf("got %d %s; want 502 %s", resp.StatusCode, e.Error.Code, CodeDecodeDied)
			}
			f.router.checkTicketsClosed(t, 1)
			_, outcomes, _ := f.router.snapshot()
			if len(outcomes) != 2 || outcomes[1].Leg != actors.LegDecode || outcomes[1].Failure == actors.FailNone {
				t.Errorf("outcomes = %+v; want a failed decode leg", outcomes)
			}
			if got := f.metric(t, "loxilb_pd_decode_ep_died_total"); got != "1" {
				t.Errorf("decode died counter = %q; want 1", got)
			}
			if got := f.metric(t, "loxilb_pd_decode_zero_byte_eof_total"); got != tt.wantZeroEOF {
				t.Errorf("zero-byte EOF counter = %q; want %s", got, tt.wantZeroEOF)
			}
		})
	}
}

func TestPD_DecodeRefusingTheConnectionIsRetriedOnAnotherDecode(t *testing.T) {
	tests := []struct {
		name        string
		closed      []bool // per decode endpoint
		retries     int    // Options.MaxConnectRetries
		wantStatus  int
		wantTickets int
	}{
		{"second decode serves", []bool{true, false}, 0, 200, 2},
		{"retries disabled", []bool{true, false}, -1, 502, 1},
		{"every decode refuses", []bool{true, true, false}, 1, 502, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefill := newFakeVLLM(t)
			var daddrs []netip.AddrPort
			var live *fakeVLLM
			for _, closed := range tt.closed {
				if closed {
					daddrs = append(daddrs, closedAddr(t))
					continue
				}
				live = newFakeVLLM(t)
				daddrs = append(daddrs, live.addr())
			}
			cfg := pdPool([]netip.AddrPort{prefill.addr()}, daddrs)
			router := newFakeRouter(pdAllowed(cfg))
			set := metrics.NewSet()
			url, _ := startGatewayWith(t, cfg, Options{MaxConnectRetries: tt.retries}, Deps{Router: router, Metrics: NewMetrics(set, "pd")})
			resp, body := post(t, testClient(t), url+PathCompletions, `{"model":"m","prompt":"p","stream":true}`)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("got %d %s; want %d", resp.StatusCode, body, tt.wantStatus)
			}
			router.checkTicketsClosed(t, tt.wantTickets)
			routes, outcomes, _ := router.snapshot()
			if outcomes[1].Leg != actors.LegDecode || outcomes[1].Failure != actors.FailConnect {
				t.Errorf("second outcome %+v; want a decode connect failure", outcomes[1])
			}
			if tt.wantStatus != 200 {
				if e := decodeError(t, body); e.Error.Code != CodeDecodeDied {
					t.Errorf("code %s; want %s", e.Error.Code, CodeDecodeDied)
				}
				return
			}
			if len(routes) != 2 || routes[1].Avoid != 1<<1 {
				t.Fatalf("routes %+v; want a retry avoiding the refusing decode (bit 1)", routes)
			}
			if events, err := sseEvents(t, bytes.NewReader(body)); err != nil || len(events) != 4 || events[3] != "[DONE]" {
				t.Errorf("stream %q (%v); want 3 events and [DONE] from the second decode", events, err)
			}
			// The exchange ran again whole: two prefill legs, one decode leg
			// on the endpoint that answered.
			if p, d := len(prefill.requests()), len(live.requests()); p != 2 || d != 1 {
				t.Errorf("prefill legs %d, decode legs %d; want 2 and 1", p, d)
			}
		})
	}
}

func TestPD_DecodeMidStreamDeathAbortsTheClient(t *testing.T) {
	f := newPDFleet(t, []bool{false}, nil)
	f.decode.answer = abortAfter("data: {\"x\":1}\n\n", true)
	req, _ := http.NewRequest(http.MethodPost, f.url+PathCompletions, strings.NewReader(`{"model":"m","prompt":"p","stream":true}`))
	resp, err := testClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || resp.StatusCode != 200 {
		t.Errorf("status %d read %q err %v; want a 200 cut short", resp.StatusCode, got, err)
	}
	f.router.checkTicketsClosed(t, 1)
	_, outcomes, fin := f.router.snapshot()
	if outcomes[len(outcomes)-1].Failure != actors.FailReset || fin[1].OK {
		t.Errorf("outcomes %+v finish %+v; want decode FailReset and not OK", outcomes, fin[1])
	}
}

func TestPD_ClientLeavingDuringPrefillCancelsIt(t *testing.T) {
	f := newPDFleet(t, []bool{false}, nil)
	inPrefill, prefillGone := make(chan struct{}), make(chan struct{})
	f.prefill[0].answer = func(_ http.ResponseWriter, r *http.Request, _ []byte) {
		close(inPrefill)
		<-r.Context().Done()
		close(prefillGone)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+PathCompletions, strings.NewReader(`{"model":"m","prompt":"p"}`))
		resp, err := testClient(t).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	<-inPrefill
	cancel()
	<-errc
	select {
	case <-prefillGone:
	case <-time.After(10 * time.Second):
		t.Fatal("the prefill leg was not cancelled")
	}
	f.router.checkTicketsClosed(t, 1)
	_, outcomes, _ := f.router.snapshot()
	if len(outcomes) != 1 || outcomes[0].Failure != actors.FailClientGone {
		t.Errorf("outcomes = %+v; want the prefill reported client-gone", outcomes)
	}
	if n := len(f.decode.requests()); n != 0 {
		t.Errorf("decode got %d requests after the client left", n)
	}
}

func TestPD_MultiPromptIsServedWholeByTheDecode(t *testing.T) {
	f := newPDFleet(t, []bool{false}, nil)
	body := `{"model":"m","prompt":["a","b"]}`
	resp, _ := post(t, testClient(t), f.url+PathCompletions, body)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if n := len(f.prefill[0].requests()); n != 0 {
		t.Errorf("prefill got %d requests; a multi-prompt request must not share one prefill", n)
	}
	if d := f.decode.requests(); len(d) != 1 || string(d[0].Body) != body {
		t.Errorf("decode requests %v; want the original body once", d)
	}
	f.router.checkTicketsClosed(t, 1)
	routes, outcomes, _ := f.router.snapshot()
	if routes[0].Req.KV.Guard != ladder.ReasonNone && routes[0].Chain != nil {
		t.Errorf("multi-prompt request carried a chain")
	}
	if len(outcomes) != 1 || outcomes[0].Leg != actors.LegDecode {
		t.Errorf("outcomes = %+v; want one decode leg", outcomes)
	}
}

func TestPD_RescueDecisionIsServedAsOneLeg(t *testing.T) {
	rescue := newFakeVLLM(t)
	f := newPDFleet(t, []bool{false}, func(c *rule.Compiled) {
		c.Endpoints = append(c.Endpoints, rule.CompiledEndpoint{Addr: rescue.addr(), Spec: ladder.EndpointSpec{Addr: rescue.addr().String(), Weight: 1}})
	})
	d := decision(ladder.TierRescue, 2, -1)
	d.Flags = ladder.FlagRescue
	f.router.decide = fixedRoute(d)
	req, _ := http.NewRequest(http.MethodPost, f.url+PathCompletions, strings.NewReader(`{"model":"m","prompt":"p","stream":true}`))
	resp, err := testClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	events, _ := sseEvents(t, bufio.NewReader(resp.Body))
	resp.Body.Close()
	if len(events) != 4 || len(rescue.requests()) != 1 || len(f.decode.requests()) != 0 || len(f.prefill[0].requests()) != 0 {
		t.Errorf("events %d rescue %d decode %d prefill %d; want the rescue endpoint alone to stream",
			len(events), len(rescue.requests()), len(f.decode.requests()), len(f.prefill[0].requests()))
	}
	if !strings.Contains(resp.Header.Get(HeaderRoute), "tier=rescue") {
		t.Errorf("%s = %q", HeaderRoute, resp.Header.Get(HeaderRoute))
	}
	f.router.checkTicketsClosed(t, 1)
}
