package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/rule"
)

// sgRooms is the bootstrap rooms of fake SGLang workers: a prefill answers
// only once its decode joined its room; a decode answers once the
// prefill's KV is there (or 500 when it never comes).
type sgRooms struct {
	mu sync.Mutex
	m  map[string]*sgRoom
}

type sgRoom struct {
	joined, sent chan struct{}
	once         sync.Once
}

func (rs *sgRooms) get(id string) *sgRoom {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.m == nil {
		rs.m = map[string]*sgRoom{}
	}
	r := rs.m[id]
	if r == nil {
		r = &sgRoom{joined: make(chan struct{}), sent: make(chan struct{})}
		rs.m[id] = r
	}
	return r
}

// sgBootstrap is the triple a leg received.
type sgBootstrap struct {
	Host   string          `json:"bootstrap_host"`
	Port   int             `json:"bootstrap_port"`
	Room   json.Number     `json:"bootstrap_room"`
	Stream bool            `json:"stream"`
	Prompt json.RawMessage `json:"prompt"`
}

func bootstrapOf(t *testing.T, body []byte) sgBootstrap {
	t.Helper()
	var b sgBootstrap
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	if err := d.Decode(&b); err != nil {
		t.Fatalf("leg body %s: %v", body, err)
	}
	return b
}

// sgPrefill answers like an SGLang prefill worker.
func (rs *sgRooms) sgPrefill(t *testing.T) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, r *http.Request, body []byte) {
		room := rs.get(bootstrapOf(t, body).Room.String())
		select {
		case <-room.joined:
		case <-r.Context().Done():
			return
		case <-time.After(5 * time.Second):
			http.Error(w, `{"error":"no decode joined"}`, http.StatusInternalServerError)
			return
		}
		room.once.Do(func() { close(room.sent) })
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"p","choices":[{"index":0,"text":"x","finish_reason":"length"}],"usage":{"prompt_tokens":40,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":32}}}`)
	}
}

// sgDecode answers like an SGLang decode worker.
func (rs *sgRooms) sgDecode(t *testing.T) func(http.ResponseWriter, *http.Request, []byte) {
	return func(w http.ResponseWriter, r *http.Request, body []byte) {
		b := bootstrapOf(t, body)
		room := rs.get(b.Room.String())
		select {
		case <-room.joined:
		default:
			close(room.joined)
		}
		select {
		case <-room.sent:
		case <-r.Context().Done():
			return
		case <-time.After(2 * time.Second):
			http.Error(w, `{"error":"KV transfer failed"}`, http.StatusInternalServerError)
			return
		}
		if !b.Stream {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"id":"d","choices":[{"index":0,"text":"decoded","finish_reason":"stop"}],"usage":{"prompt_tokens":40,"completion_tokens":3}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range 3 {
			fmt.Fprintf(w, "data: {\"choices\":[{\"index\":0,\"text\":\"t%d\"}]}\n\n", i)
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}
}

// sgFleet is an SGLang P/D rule in front of fake workers.
type sgFleet struct {
	prefill, decode []*fakeVLLM
	rooms           *sgRooms
	cfg             *rule.Compiled
	router          *fakeRouter
	url             string
	set             *metrics.Set
}

// answerFn is a fake worker's answer.
type answerFn = func(http.ResponseWriter, *http.Request, []byte)

// newSGFleet starts np prefill and nd decode fakes; prefillAnswer and
// decodeAnswer replace the fake at their index (nil: SGLang's behaviour),
// a nil entry present in decodeAnswer is an address nothing listens on.
func newSGFleet(t *testing.T, np, nd int, prefillAnswer, decodeAnswer map[int]answerFn) *sgFleet {
	t.Helper()
	f := &sgFleet{rooms: &sgRooms{}, set: metrics.NewSet()}
	var pa, da []netip.AddrPort
	for i := range np {
		w := newFakeVLLM(t)
		w.answer = f.rooms.sgPrefill(t)
		if a := prefillAnswer[i]; a != nil {
			w.answer = a
		}
		f.prefill = append(f.prefill, w)
		pa = append(pa, w.addr())
	}
	for i := range nd {
		if a, ok := decodeAnswer[i]; ok && a == nil {
			f.decode = append(f.decode, nil)
			da = append(da, closedAddr(t))
			continue
		}
		w := newFakeVLLM(t)
		w.answer = f.rooms.sgDecode(t)
		if a := decodeAnswer[i]; a != nil {
			w.answer = a
		}
		f.decode = append(f.decode, w)
		da = append(da, w.addr())
	}
	f.cfg = pdPool(pa, da)
	f.cfg.Engine, f.cfg.BootstrapPort = rule.EngineSGLang, 9123
	f.router = newFakeRouter(pdAllowed(f.cfg))
	f.url, _ = startGateway(t, f.cfg, Deps{Router: f.router, Metrics: NewMetrics(f.set, "sg")})
	return f
}

func (f *sgFleet) metric(t *testing.T, name, labels string) string {
	t.Helper()
	var b bytes.Buffer
	f.set.WritePrometheus(&b)
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, name+"{") && strings.Contains(line, labels) {
			return line[strings.LastIndexByte(line, ' ')+1:]
		}
	}
	return ""
}

// legOutcomes are the outcomes reported for one ticket, by leg.
func legOutcomes(outs []actors.Outcome, ticket uint64) map[actors.Leg]actors.Outcome {
	m := map[actors.Leg]actors.Outcome{}
	for _, o := range outs {
		if o.Ticket.ID == ticket {
			m[o.Leg] = o
		}
	}
	return m
}

func TestSGLangPD_DualDispatchAnswersWithTheDecode(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run("stream="+strconv.FormatBool(stream), func(t *testing.T) {
			f := newSGFleet(t, 1, 1, nil, nil)
			body := `{"model":"m","prompt":"hello","max_tokens":3,"bootstrap_room":7,"stream":` + strconv.FormatBool(stream) + `}`
			resp, got := post(t, testClient(t), f.url+PathCompletions, body)
			want := `"text":"decoded"`
			if stream {
				want = `"text":"t2"`
			}
			if resp.StatusCode != 200 || !strings.Contains(string(got), want) {
				t.Fatalf("got %d %s; want the decode's answer", resp.StatusCode, got)
			}
			p, d := f.prefill[0].requests(), f.decode[0].requests()
			if len(p) != 1 || len(d) != 1 || !bytes.Equal(p[0].Body, d[0].Body) {
				t.Fatalf("prefill got %d, decode %d requests; want one each with one body", len(p), len(d))
			}
			b := bootstrapOf(t, p[0].Body)
			room, err := strconv.ParseUint(b.Room.String(), 10, 64)
			if b.Host != "127.0.0.1" || b.Port != 9123 || err != nil || room > 1<<63-1 || room == 7 {
				t.Errorf("bootstrap %+v; want the prefill's host, the rule's port 9123 and a fresh room", b)
			}
			// The client's other members go as they are, once each.
			m := members(t, string(p[0].Body))
			for k, v := range members(t, body) {
				if k != "bootstrap_room" && m[k] != v {
					t.Errorf("member %s = %s; want the client's %s", k, m[k], v)
				}
			}
			if n := strings.Count(string(p[0].Body), `"bootstrap_room"`); n != 1 {
				t.Errorf("%d bootstrap_room members; want 1", n)
			}
			route := resp.Header.Get(HeaderRoute)
			if !strings.Contains(route, " engine=sglang") || !strings.Contains(route, "decode_addr="+f.decode[0].addr().String()) {
				t.Errorf("X-Llb-Route %q; want the engine and the decode", route)
			}
			f.router.checkTicketsClosed(t, 1)
			_, outs, fin := f.router.snapshot()
			lo := legOutcomes(outs, 1)
			if pre := lo[actors.LegPrefill]; pre.Status != 200 || pre.Failure != actors.FailNone || pre.TTFT == 0 {
				t.Errorf("prefill outcome %+v; want its 200 with a TTFT", pre)
			}
			if dec := lo[actors.LegDecode]; dec.Status != 200 || dec.Failure != actors.FailNone || !fin[1].OK {
				t.Errorf("decode outcome %+v, result %+v; want a 200 that finished OK", dec, fin[1])
			}
		})
	}
}

func TestSGLangPD_APrefillFailureCutsTheDecodeAndRetriesThePair(t *testing.T) {
	tests := []struct {
		name    string
		prefill func(http.ResponseWriter, *http.Request, []byte)
	}{
		{"reset", abortAfter("", false)},
		{"500", func(w http.ResponseWriter, _ *http.Request, _ []byte) {
			http.Error(w, `{"error":"boom"}`, http.StatusInternalServerError)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newSGFleet(t, 2, 1, map[int]answerFn{0: tt.prefill}, nil)
			start := time.Now()
			resp, got := post(t, testClient(t), f.url+PathCompletions, `{"model":"m","prompt":"hello","max_tokens":3}`)
			if resp.StatusCode != 200 || !strings.Contains(string(got), `"decoded"`) {
				t.Fatalf("got %d %s; want the second pair's answer", resp.StatusCode, got)
			}
			// The first decode leg was cut at once, not left to its own
			// 2 s wait for KV that never came.
			if el := time.Since(start); el > 1500*time.Millisecond {
				t.Errorf("took %v; the first decode leg was not cut", el)
			}
			// The first decode leg may have been cut before it was sent.
			if n := len(f.decode[0].requests()); len(f.prefill[1].requests()) != 1 || n < 1 || n > 2 {
				t.Errorf("second prefill got %d, decode %d requests; want 1 and 1 or 2", len(f.prefill[1].requests()), n)
			}
			if route := resp.Header.Get(HeaderRoute); !strings.Contains(route, "prefill_addr="+f.prefill[1].addr().String()) {
				t.Errorf("route %q; want prefill 1", route)
			}
			f.router.checkTicketsClosed(t, 2)
			routes, outs, _ := f.router.snapshot()
			if len(routes) != 2 || routes[1].Avoid != 1 {
				t.Errorf("routes %d, avoid %v; want a retry avoiding prefill 0", len(routes), avoidMasks(routes))
			}
			lo := legOutcomes(outs, 1)
			if lo[actors.LegDecode].Failure != actors.FailClientGone {
				t.Errorf("cut decode outcome %+v; want neutral (not the decode's fault)", lo[actors.LegDecode])
			}
			if pre := lo[actors.LegPrefill]; pre.Failure == actors.FailNone && pre.Status < 500 {
				t.Errorf("failed prefill outcome %+v; want its failure reported", pre)
			}
			if got := f.metric(t, "llb_pd_pair_cuts_total", `leg="decode"`); got != "1" {
				t.Errorf("decode legs cut = %q; want 1", got)
			}
		})
	}
}

func TestSGLangPD_AnOriginClientErrorIsRelayedVerbatim(t *testing.T) {
	const msg = `{"object":"error","message":"The input (9000 tokens) is longer than the model's context length (8192 tokens).","type":"BadRequestError","param":null,"code":400}`
	tooLong := func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, msg)
	}
	for _, side := range []string{"prefill", "decode", "both"} {
		t.Run(side, func(t *testing.T) {
			pa, da := map[int]answerFn{}, map[int]answerFn{}
			if side != "decode" {
				pa[0] = tooLong
			}
			if side != "prefill" {
				da[0] = tooLong
			}
			f := newSGFleet(t, 2, 1, pa, da)
			resp, got := post(t, testClient(t), f.url+PathCompletions, `{"model":"m","prompt":"long","max_tokens":3}`)
			if resp.StatusCode != 400 || string(got) != msg {
				t.Fatalf("got %d %s; want the engine's 400 verbatim", resp.StatusCode, got)
			}
			if n := len(f.prefill[1].requests()); n != 0 {
				t.Errorf("the second prefill got %d requests; a 400 is not retried", n)
			}
			f.router.checkTicketsClosed(t, 1)
		})
	}
}

func TestSGLangPD_ADecodeThatNeverAnswersIsRetriedAndThePrefillCut(t *testing.T) {
	// Decode 0 refuses the connection: the pair goes again with decode 1.
	f := newSGFleet(t, 1, 2, nil, map[int]answerFn{0: nil})
	resp, got := post(t, testClient(t), f.url+PathCompletions, `{"model":"m","prompt":"hello","max_tokens":3}`)
	if resp.StatusCode != 200 || !strings.Contains(string(got), `"decoded"`) {
		t.Fatalf("got %d %s; want the second pair's answer", resp.StatusCode, got)
	}
	f.router.checkTicketsClosed(t, 2)
	routes, outs, _ := f.router.snapshot()
	if len(routes) != 2 || routes[1].Avoid != 1<<1 {
		t.Errorf("avoid masks %v; want the retry to avoid decode 1", avoidMasks(routes))
	}
	if pre := legOutcomes(outs, 1)[actors.LegPrefill]; pre.Failure != actors.FailClientGone {
		t.Errorf("first prefill outcome %+v; want it cut, neutral", pre)
	}
	// The first prefill leg may have been cut before it was sent.
	if n := len(f.prefill[0].requests()); n < 1 || n > 2 {
		t.Errorf("prefill got %d requests; want one per pair at most", n)
	}
}

func TestSGLangPD_ADecode5xxBeforeAnyByteRetriesThePair(t *testing.T) {
	transferFailed := func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		http.Error(w, `{"error":"KV transfer failed"}`, http.StatusInternalServerError)
	}
	f := newSGFleet(t, 1, 2, nil, map[int]answerFn{0: transferFailed})
	resp, got := post(t, testClient(t), f.url+PathCompletions, `{"model":"m","prompt":"hello","max_tokens":3}`)
	if resp.StatusCode != 200 || !strings.Contains(string(got), `"decoded"`) {
		t.Fatalf("got %d %s; want the second pair's answer", resp.StatusCode, got)
	}
	f.router.checkTicketsClosed(t, 2)
	_, outs, _ := f.router.snapshot()
	if dec := legOutcomes(outs, 1)[actors.LegDecode]; dec.Status != 500 {
		t.Errorf("first decode outcome %+v; want its 500 reported (origin 5xx)", dec)
	}
}

func TestBootstrapBody(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"adds the triple", `{"prompt":"a","stream":true}`, `{"prompt":"a","stream":true,"bootstrap_host":"10.0.0.1","bootstrap_port":8998,"bootstrap_room":42}`},
		{"replaces the client's", `{"bootstrap_room":1,"prompt":"a","bootstrap_host":"x","bootstrap_port":null}`, `{"prompt":"a","bootstrap_host":"10.0.0.1","bootstrap_port":8998,"bootstrap_room":42}`},
		{"empty object", `{}`, `{"bootstrap_host":"10.0.0.1","bootstrap_port":8998,"bootstrap_room":42}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := BootstrapBody([]byte(tt.body), "10.0.0.1", 8998, 42)
			if err != nil || string(got) != tt.want {
				t.Fatalf("BootstrapBody(%s) = %s, %v; want %s", tt.body, got, err, tt.want)
			}
		})
	}
}

func TestBootstrapHostAndRoom(t *testing.T) {
	for addr, want := range map[string]string{"10.1.2.3:8000": "10.1.2.3", "[fd00::7]:8000": "[fd00::7]"} {
		if got := bootstrapHost(addr); got != want {
			t.Errorf("bootstrapHost(%s) = %s; want %s", addr, got, want)
		}
	}
	seen := map[uint64]bool{}
	for range 1000 {
		r := newBootstrapRoom()
		if r > 1<<63-1 || seen[r] {
			t.Fatalf("room %d: out of int64 range or drawn twice", r)
		}
		seen[r] = true
	}
}

func TestSGLangPD_AClientThatLeavesCancelsBothLegs(t *testing.T) {
	gone := make(chan string, 2)
	hang := func(leg string) answerFn {
		return func(_ http.ResponseWriter, r *http.Request, _ []byte) {
			<-r.Context().Done() // the gateway must cancel us
			gone <- leg
		}
	}
	f := newSGFleet(t, 1, 1, map[int]answerFn{0: hang("prefill")}, map[int]answerFn{0: hang("decode")})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url+PathCompletions, strings.NewReader(`{"model":"m","prompt":"p","stream":true}`))
	go func() {
		time.Sleep(400 * time.Millisecond) // past the departure watch's start
		cancel()
	}()
	if resp, err := testClient(t).Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("got %d; want the request cancelled", resp.StatusCode)
	}
	for range 2 {
		select {
		case <-gone:
		case <-time.After(10 * time.Second):
			t.Fatal("a leg was not cancelled after the client left")
		}
	}
	f.router.checkTicketsClosed(t, 1)
	_, outs, _ := f.router.snapshot()
	for leg, o := range legOutcomes(outs, 1) {
		if o.Failure != actors.FailClientGone {
			t.Errorf("%v outcome %+v; want FailClientGone (no health penalty)", leg, o)
		}
	}
}

// TestSGLangPD_ConcurrentPairsWithFailingPrefills: many pairs at once, one
// prefill failing every other request: every client gets an answer, every
// ticket is finished exactly once, after both its legs were reported.
func TestSGLangPD_ConcurrentPairsWithFailingPrefills(t *testing.T) {
	var n atomic.Int64
	f := newSGFleet(t, 2, 2, nil, nil)
	// Both fakes share one room registry: the fleet's.
	f.prefill[0].answer = func(w http.ResponseWriter, r *http.Request, body []byte) {
		if n.Add(1)%2 == 0 {
			http.Error(w, `{"error":"boom"}`, http.StatusInternalServerError)
			return
		}
		f.rooms.sgPrefill(t)(w, r, body)
	}
	const reqs = 40
	var wg sync.WaitGroup
	errs := make(chan string, reqs)
	for i := range reqs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"m","prompt":"p%d","max_tokens":3,"stream":%v}`, i, i%2 == 0)
			resp, got := post(t, testClient(t), f.url+PathCompletions, body)
			if resp.StatusCode != 200 || !strings.Contains(string(got), "decoded") && !strings.Contains(string(got), "t2") {
				errs <- fmt.Sprintf("request %d: %d %s", i, resp.StatusCode, got)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	_, outs, fin := f.router.snapshot()
	f.router.checkTicketsClosed(t, len(fin))
	for id := range fin {
		pre, dec := -1, -1
		for i, o := range outs {
			switch {
			case o.Ticket.ID != id:
			case o.Leg == actors.LegPrefill:
				pre = i
			case o.Leg == actors.LegDecode:
				dec = i
			}
		}
		if pre < 0 || dec < pre {
			t.Errorf("ticket %d: prefill reported at %d, decode concluded at %d; want the prefill first", id, pre, dec)
		}
	}
}
