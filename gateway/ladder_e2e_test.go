package gateway

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llbproject/llb/actors"
	"github.com/llbproject/llb/inventory"
	"github.com/llbproject/llb/ladder"
	"github.com/llbproject/llb/rule"
	"github.com/llbproject/llb/tokenizer"
)

// ladderRouter is a synchronous stand-in for the router actor built on the
// real ladder: it keeps in-flight counts per endpoint, marks Avoid endpoints
// down for the decision, scores Tier-1.5 overlap against a per-endpoint set
// of held block keys, and releases load on Report/Finish. It lets gateway
// tests exercise real decisions end to end without the actor runtime.
type ladderRouter struct {
	mu      sync.Mutex
	r       *ladder.Router
	views   []ladder.EndpointView
	held    []map[uint64]bool // Tier-1.5 inventory per endpoint
	tickets map[uint64]*ladderTicket
	next    uint64
	picks   []int
}

type ladderTicket struct {
	t        actors.Ticket
	prefill  bool // prefill/single leg still held
	decode   bool
	finished bool
}

func newLadderRouter(t *testing.T, svc ladder.ServiceSpec, cfg *rule.Compiled) *ladderRouter {
	t.Helper()
	var eps []ladder.EndpointSpec
	for _, e := range cfg.Endpoints {
		eps = append(eps, ladder.EndpointSpec{Addr: e.Addr.String(), Role: e.Role()})
	}
	env := ladder.DefaultEnv()
	r, err := ladder.NewRouter(svc, eps, env, ladder.RouterConfig{})
	if err != nil {
		t.Fatal(err)
	}
	lr := &ladderRouter{r: r, views: make([]ladder.EndpointView, len(eps)), tickets: map[uint64]*ladderTicket{}}
	for range eps {
		lr.held = append(lr.held, map[uint64]bool{})
	}
	return lr
}

// Route implements actors.Router.
func (l *ladderRouter) Route(_ context.Context, rr *actors.RouteRequest) (actors.Route, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	snap := ladder.Snapshot{Endpoints: make([]ladder.EndpointView, len(l.views))}
	copy(snap.Endpoints, l.views)
	for i := range snap.Endpoints {
		snap.Endpoints[i].Down = rr.Avoid&(1<<uint(i)) != 0
		var overlap uint32
		for _, k := range rr.Chain {
			if !l.held[i][k] {
				break
			}
			overlap++
		}
		snap.Endpoints[i].Overlap = overlap
		snap.Endpoints[i].InventoryBlocks = uint32(len(l.held[i]))
	}
	req := rr.Req
	d, err := l.r.Decide(time.Unix(1_000_000, 0), &req, &snap)
	if err != nil {
		return actors.Route{}, err
	}
	if !d.Available() {
		return actors.Route{Decision: d}, nil
	}
	l.next++
	tk := &ladderTicket{t: actors.NewTicket(l, l.next, d.Prefill, d.Decode), prefill: true, decode: d.Decode >= 0}
	l.tickets[tk.t.ID] = tk
	l.views[d.Prefill].ActiveConns++
	if d.Decode >= 0 {
		l.views[d.Decode].ActiveConns++
	}
	l.picks = append(l.picks, d.Prefill)
	return actors.Route{Decision: d, Ticket: tk.t}, nil
}

// FirstByte implements actors.Ledger.
func (*ladderRouter) FirstByte(actors.Ticket) {}

// Pin implements actors.Ledger.
func (*ladderRouter) Pin(actors.Ticket, string) {}

// Report implements actors.Ledger.
func (l *ladderRouter) Report(o actors.Outcome) {
	l.mu.Lock()
	defer l.mu.Unlock()
	tk := l.tickets[o.Ticket.ID]
	if tk == nil {
		return
	}
	if o.Leg == actors.LegDecode {
		if tk.decode {
			tk.decode = false
			l.views[tk.t.Decode].ActiveConns--
		}
		return
	}
	if tk.prefill {
		tk.prefill = false
		l.views[tk.t.Prefill].ActiveConns--
	}
}

// Conclude implements actors.Ledger.
func (l *ladderRouter) Conclude(o actors.Outcome, res actors.Result) {
	l.Report(o)
	l.Finish(o.Ticket, res)
}

// Finish implements actors.Ledger.
func (l *ladderRouter) Finish(t actors.Ticket, _ actors.Result) {
	l.Report(actors.Outcome{Ticket: t, Leg: actors.LegSingle})
	l.Report(actors.Outcome{Ticket: t, Leg: actors.LegDecode})
	l.mu.Lock()
	defer l.mu.Unlock()
	if tk := l.tickets[t.ID]; tk != nil {
		tk.finished = true
	}
}

func (l *ladderRouter) inflight() uint32 {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n uint32
	for _, v := range l.views {
		n += v.ActiveConns
	}
	return n
}

func (l *ladderRouter) pickCounts() map[int]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[int]int{}
	for _, p := range l.picks {
		out[p]++
	}
	return out
}

func TestCHWBL_SamePrefixStaysOnOneWorkerUntilItsBound(t *testing.T) {
	var bes []*fakeVLLM
	var addrs []netip.AddrPort
	release := make(chan struct{})
	for range 3 {
		be := newFakeVLLM(t)
		be.answer = func(w http.ResponseWriter, r *http.Request, body []byte) {
			if strings.Contains(string(body), `"hold":true`) {
				select {
				case <-release:
				case <-r.Context().Done():
				}
			}
			_, _ = w.Write([]byte(`{"ok":true}`))
		}
		bes = append(bes, be)
		addrs = append(addrs, be.addr())
	}
	cfg := singlePool(addrs...)
	lr := newLadderRouter(t, ladder.ServiceSpec{Name: "chwbl", Selector: ladder.SelCHWBL}, cfg)
	url, _ := startGateway(t, cfg, Deps{Router: lr})
	c := testClient(t)
	system := strings.Repeat("You are a meticulous assistant for the docs team. ", 8)

	// Sequential same-prefix requests: one worker takes them all.
	for i := range 12 {
		resp, _ := post(t, c, url+PathCompletions, fmt.Sprintf(`{"model":"m","prompt":%q}`, system+fmt.Sprintf("question %d", i)))
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: status %d", i, resp.StatusCode)
		}
	}
	counts := lr.pickCounts()
	if len(counts) != 1 {
		t.Fatalf("same-prefix requests went to %v; want one worker", counts)
	}
	var home int
	for ep := range counts {
		home = ep
	}

	// Concurrent same-prefix requests held open: past the bound they spill.
	var wg sync.WaitGroup
	const held = 9
	for i := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _ := post(t, c, url+PathCompletions, fmt.Sprintf(`{"model":"m","hold":true,"prompt":%q}`, system+fmt.Sprintf("held %d", i)))
			if resp.StatusCode != 200 {
				t.Errorf("held request %d: status %d", i, resp.StatusCode)
			}
		}()
	}
	deadline := time.Now().Add(10 * time.Second)
	for lr.inflight() < held {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d held requests arrived", lr.inflight(), held)
		}
		<-time.After(2 * time.Millisecond)
	}
	counts = lr.pickCounts()
	close(release)
	wg.Wait()
	if len(counts) < 2 {
		t.Errorf("with %d concurrent same-prefix requests all stayed on %d (%v); want a spill past the CHWBL bound", held, home, counts)
	}
	if counts[home] <= 12 {
		t.Errorf("the home worker took no held request (%v); it should hold affinity up to its bound", counts)
	}
	if n := lr.inflight(); n != 0 {
		t.Errorf("%d in-flight counts leaked after every request finished", n)
	}
}

func TestTier15_RoutesToTheWorkerHoldingThePromptBlocks(t *testing.T) {
	var addrs []netip.AddrPort
	for range 3 {
		addrs = append(addrs, newFakeVLLM(t).addr())
	}
	cfg := singlePool(addrs...)
	cfg.Spec.KVExactMode = ladder.KVSinglePool
	hasher := testHasher(t)
	lr := newLadderRouter(t, ladder.ServiceSpec{Name: "kv", Selector: ladder.SelRR, KVExactMode: ladder.KVSinglePool, KVBlockSize: 4}, cfg)
	tok := &fakeTokenizer{}
	url, _ := startGateway(t, cfg, Deps{Router: lr, Hasher: hasher, Tokenizer: tok})

	prompt := strings.Repeat("shared preamble text ", 10) // 210 bytes → 52 blocks of 4
	toks, _ := tok.Tokenize(context.Background(), tokenizer.Request{Model: "m", Prompt: prompt}, nil)
	for _, k := range hasher.AppendBlockKeys(nil, toks, inventory.ExtraKeys{}) {
		lr.held[2][k] = true // endpoint 2's mirror holds the prompt
	}
	resp, _ := post(t, testClient(t), url+PathCompletions, fmt.Sprintf(`{"model":"m","prompt":%q}`, prompt))
	if r := resp.Header.Get(HeaderRoute); resp.StatusCode != 200 || !strings.HasPrefix(r, "tier=1.5 prefill=2") {
		t.Errorf("got %d route %q; want Tier 1.5 to endpoint 2", resp.StatusCode, r)
	}
	// A different salt changes every block key: no overlap, the selector decides.
	resp, _ = post(t, testClient(t), url+PathCompletions, fmt.Sprintf(`{"model":"m","prompt":%q,"cache_salt":"tenant-b"}`, prompt))
	if r := resp.Header.Get(HeaderRoute); !strings.HasPrefix(r, "tier=sel") {
		t.Errorf("salted request route %q; want a Tier-1.5 miss", r)
	}
}
