package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/rule/ruletest"
)

// ---------------------------------------------------------------------------
// A fake actors.Router for unit tests.

// fakeRouter answers Route with decide and records everything the gateway
// tells it through the tickets it issues (it is their actors.Ledger, or
// ledger when set). Safe for concurrent use.
type fakeRouter struct {
	decide func(rr *actors.RouteRequest, n int) (actors.Route, error)
	ledger actors.Ledger // nil: the fakeRouter itself

	mu       sync.Mutex
	routes   []actors.RouteRequest
	outcomes []actors.Outcome
	finishes map[uint64]actors.Result
	dupes    int
	nextID   uint64
	finished chan uint64 // one value per Finish call
	firsts   []uint64    // FirstByte calls, by ticket ID
	pins     []fakePin   // Pin calls
}

// FirstByte implements actors.Ledger.
func (f *fakeRouter) FirstByte(t actors.Ticket) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.firsts = append(f.firsts, t.ID)
}

// Pin implements actors.Ledger.
func (f *fakeRouter) Pin(t actors.Ticket, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pins = append(f.pins, fakePin{ticket: t.ID, key: key})
}

// fakePin is one Pin call.
type fakePin struct {
	ticket uint64
	key    string
}

func newFakeRouter(decide func(rr *actors.RouteRequest, n int) (actors.Route, error)) *fakeRouter {
	return &fakeRouter{decide: decide, finishes: map[uint64]actors.Result{}, finished: make(chan uint64, 1024)}
}

// Route implements actors.Router.
func (f *fakeRouter) Route(ctx context.Context, rr *actors.RouteRequest) (actors.Route, error) {
	f.mu.Lock()
	f.routes = append(f.routes, *rr)
	n := len(f.routes) - 1
	f.nextID++
	id := f.nextID
	f.mu.Unlock()
	rt, err := f.decide(rr, n)
	if err != nil {
		return rt, err
	}
	if rt.Decision.Available() {
		var l actors.Ledger = f
		if f.ledger != nil {
			l = f.ledger
		}
		rt.Ticket = actors.NewTicket(l, id, rt.Decision.Prefill, rt.Decision.Decode)
	}
	return rt, nil
}

// Report implements actors.Ledger.
func (f *fakeRouter) Report(o actors.Outcome) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.outcomes = append(f.outcomes, o)
}

// Conclude implements actors.Ledger.
func (f *fakeRouter) Conclude(o actors.Outcome, res actors.Result) {
	f.Report(o)
	f.Finish(o.Ticket, res)
}

// Finish implements actors.Ledger.
func (f *fakeRouter) Finish(t actors.Ticket, res actors.Result) {
	f.mu.Lock()
	if _, ok := f.finishes[t.ID]; ok {
		f.dupes++
	}
	f.finishes[t.ID] = res
	f.mu.Unlock()
	f.finished <- t.ID
}

// waitFinished waits until n Finish calls happened in total.
func (f *fakeRouter) waitFinished(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		f.mu.Lock()
		got := len(f.finishes) + f.dupes
		f.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-f.finished:
		case <-deadline:
			t.Fatalf("waited for %d Finish calls; got %d", n, got)
		}
	}
}

func (f *fakeRouter) snapshot() ([]actors.RouteRequest, []actors.Outcome, map[uint64]actors.Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fin := make(map[uint64]actors.Result, len(f.finishes))
	for k, v := range f.finishes {
		fin[k] = v
	}
	return append([]actors.RouteRequest(nil), f.routes...), append([]actors.Outcome(nil), f.outcomes...), fin
}

// checkTicketsClosed asserts every admitted ticket was finished exactly once.
func (f *fakeRouter) checkTicketsClosed(t *testing.T, wantTickets int) {
	t.Helper()
	f.waitFinished(t, wantTickets)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dupes != 0 {
		t.Errorf("%d tickets finished more than once", f.dupes)
	}
	if len(f.finishes) != wantTickets {
		t.Errorf("finished %d tickets; want %d", len(f.finishes), wantTickets)
	}
}

// decision builds an admitted decision.
func decision(tier ladder.Tier, prefill, decode int) ladder.Decision {
	return ladder.Decision{Prefill: prefill, Decode: decode, Tier: tier, ParkOn: -1}
}

// fixedRoute always answers d.
func fixedRoute(d ladder.Decision) func(*actors.RouteRequest, int) (actors.Route, error) {
	return func(*actors.RouteRequest, int) (actors.Route, error) { return actors.Route{Decision: d}, nil }
}

// firstAllowed picks the lowest endpoint index of role not in rr.Avoid
// (prefill role for pd, with decode = the first decode endpoint).
func firstAllowed(cfg *rule.Compiled) func(*actors.RouteRequest, int) (actors.Route, error) {
	return func(rr *actors.RouteRequest, _ int) (actors.Route, error) {
		d := decision(ladder.Tier2, -1, -1)
		for i, ep := range cfg.Endpoints {
			if rr.Avoid&(1<<uint(i)) != 0 {
				continue
			}
			switch {
			case ep.Role() == ladder.RoleDecode:
				if d.Decode < 0 {
					d.Decode = i
				}
			case d.Prefill < 0:
				d.Prefill = i
			}
		}
		if d.Prefill < 0 {
			d = decision(ladder.TierNone, -1, -1)
			d.Unavailable = ladder.ReasonNoHealthyBackend
		}
		if !cfg.Spec.PDDisagg {
			d.Decode = -1
		}
		return actors.Route{Decision: d}, nil
	}
}

// ---------------------------------------------------------------------------
// A vLLM-like backend over real HTTP.

// backendReq is one request a fake backend received.
type backendReq struct {
	Path   string
	Header http.Header
	Body   []byte
}

// fakeVLLM is an httptest server that answers like vLLM's OpenAI server.
type fakeVLLM struct {
	t   *testing.T
	srv *httptest.Server
	// answer, when set, replaces the default behaviour for generation paths.
	answer func(w http.ResponseWriter, r *http.Request, body []byte)
	// kvParams is what a prefill (do_remote_decode:true) request returns as
	// kv_transfer_params (raw JSON); "" returns none.
	kvParams string
	// events is how many SSE chunks a streaming answer sends before [DONE].
	events int

	mu   sync.Mutex
	reqs []backendReq
	got  chan backendReq
}

func newFakeVLLM(t *testing.T) *fakeVLLM {
	t.Helper()
	f := &fakeVLLM{t: t, events: 3, got: make(chan backendReq, 256),
		kvParams: `{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[[1,2,3]],"remote_engine_id":"eng-1","remote_request_id":"p-1","remote_host":"10.0.0.9","remote_port":5600,"tp_size":1}`}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeVLLM) addr() netip.AddrPort {
	return netip.MustParseAddrPort(f.srv.Listener.Addr().String())
}

func (f *fakeVLLM) requests() []backendReq {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]backendReq(nil), f.reqs...)
}

func (f *fakeVLLM) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	br := backendReq{Path: r.URL.Path, Header: r.Header.Clone(), Body: body}
	f.mu.Lock()
	f.reqs = append(f.reqs, br)
	f.mu.Unlock()
	f.got <- br
	switch r.URL.Path {
	case PathHealth:
		w.WriteHeader(http.StatusOK)
		return
	case PathModels:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"object":"list","data":[{"id":"m1","object":"model"}]}`)
		return
	case PathCompletions, PathChatCompletions:
	default:
		http.NotFound(w, r)
		return
	}
	if f.answer != nil {
		f.answer(w, r, body)
		return
	}
	var req struct {
		Stream bool `json:"stream"`
		KV     *struct {
			DoRemoteDecode bool `json:"do_remote_decode"`
		} `json:"kv_transfer_params"`
	}
	_ = json.Unmarshal(body, &req)
	if req.KV != nil && req.KV.DoRemoteDecode {
		w.Header().Set("Content-Type", "application/json")
		kv := ""
		if f.kvParams != "" {
			kv = `,"kv_transfer_params":` + f.kvParams
		}
		_, _ = io.WriteString(w, `{"id":"cmpl-p","object":"text_completion","choices":[{"index":0,"text":"x","finish_reason":"length"}]`+kv+`}`)
		return
	}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"cmpl-1","object":"text_completion","choices":[{"index":0,"text":"hello","finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	for i := range f.events {
		fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"t%d\"}]}\n\n", i)
		fl.Flush()
	}
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

// serveTCP serves fn on every connection to a loopback listener (closed at
// cleanup) and returns its address.
func serveTCP(t *testing.T, fn func(net.Conn)) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); fn(c) }()
		}
	}()
	return netip.MustParseAddrPort(ln.Addr().String())
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	return a
}

// ---------------------------------------------------------------------------
// Gateway under test.

// singlePool is the compiled round-robin rule over addrs, listening on a
// free port of 127.0.0.1.
func singlePool(addrs ...netip.AddrPort) *rule.Compiled {
	c := ruletest.SinglePool(addrs...)
	c.Port = 0
	return c
}

// pdPool is the compiled P/D rule, listening on a free port of 127.0.0.1.
func pdPool(prefill []netip.AddrPort, decode []netip.AddrPort) *rule.Compiled {
	c := ruletest.PD(prefill, decode)
	c.Port = 0
	return c
}

// startGateway starts a listener for c with the default options and
// returns its base URL.
func startGateway(t *testing.T, c *rule.Compiled, deps Deps) (string, *Listener) {
	t.Helper()
	return startGatewayWith(t, c, Options{}, deps)
}

// startGatewayWith starts a listener for c with opts.
func startGatewayWith(t *testing.T, c *rule.Compiled, opts Options, deps Deps) (string, *Listener) {
	t.Helper()
	h, err := NewHandler(c, opts, deps)
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	l := NewListener(h)
	if err := l.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return "http://" + l.Addr().String(), l
}

// testClient returns a client with its own transport, closed at cleanup.
func testClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{DisableCompression: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 20 * time.Second}
}

func post(t *testing.T, c *http.Client, url, body string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading response: %v", err)
	}
	return resp, b
}

// errorBody is the OpenAI error shape.
type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    string  `json:"code"`
	} `json:"error"`
}

func decodeError(t *testing.T, b []byte) errorBody {
	t.Helper()
	var e errorBody
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("error body %q is not JSON: %v", b, err)
	}
	if e.Error.Message == "" || e.Error.Code == "" || e.Error.Type == "" {
		t.Fatalf("error body %q lacks message/type/code", b)
	}
	return e
}

// sseEvents reads SSE data lines until EOF.
func sseEvents(t *testing.T, r io.Reader) ([]string, error) {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, line)
		}
	}
	return out, sc.Err()
}

// The real runtime satisfies the contract the gateway is written against.
var (
	_ actors.Router = (*actors.Service)(nil)
	_ actors.Ledger = (*actors.Service)(nil)
)
